-- The audit records of a transport key are found through the first 12
-- characters of the key instead of the whole key: the key is random (a hash),
-- so every exchange writes a leaf of this index of its own in each of its
-- transactions, and entries of a sixth of the size split those leaves (three
-- pages written by SQLite's rebalance) a sixth as often. Queries match the
-- prefix and then the key (AuditSink.ByKey, Query).
DROP INDEX audit_records_key;

CREATE INDEX audit_records_key_prefix ON audit_records (substr(dedup_key, 1, 12));
