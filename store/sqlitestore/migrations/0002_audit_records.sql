-- One row per audit.Record. recorded_at is Unix microseconds.
CREATE TABLE audit_records (
    id              INTEGER PRIMARY KEY,
    recorded_at     INTEGER NOT NULL,
    step            TEXT    NOT NULL,
    partner         TEXT    NOT NULL DEFAULT '',
    protocol        TEXT    NOT NULL DEFAULT '',
    message_id      TEXT    NOT NULL DEFAULT '',
    dedup_key       TEXT    NOT NULL DEFAULT '',
    interchange_key TEXT    NOT NULL DEFAULT '',
    reference       TEXT    NOT NULL DEFAULT '',
    decision        TEXT    NOT NULL DEFAULT '',
    payload_sha256  TEXT    NOT NULL DEFAULT '',
    disposition     TEXT    NOT NULL DEFAULT '',
    error           TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX audit_records_key ON audit_records (dedup_key);
CREATE INDEX audit_records_message ON audit_records (partner, message_id);
