-- Interchanges a later claim replaced (the reference reused after its
-- window, or a drifted payload accepted as new): the accepted row is copied
-- here by a trigger, in the statement (and so the transaction) of the
-- replacing claim, so that no crash can lose it. The purge archives these
-- rows to archive_dir like expired ones, then deletes them.
CREATE TABLE ledger_history (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    key            TEXT    NOT NULL,
    partner        TEXT    NOT NULL DEFAULT '',
    standard       TEXT    NOT NULL DEFAULT '',
    sender         TEXT    NOT NULL DEFAULT '',
    recipient      TEXT    NOT NULL DEFAULT '',
    reference      TEXT    NOT NULL DEFAULT '',
    date           TEXT    NOT NULL DEFAULT '',
    type           TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL,
    payload_sha256 TEXT    NOT NULL DEFAULT '',
    first_seen     INTEGER NOT NULL,
    last_seen      INTEGER NOT NULL,
    window_ms      INTEGER NOT NULL DEFAULT 0,
    retries        INTEGER NOT NULL DEFAULT 0,
    message_ids    TEXT    NOT NULL DEFAULT '[]',
    accepted_at    INTEGER,
    -- when the replacing claim took the row (its first seen)
    replaced_at    INTEGER NOT NULL
);

CREATE INDEX ledger_history_key ON ledger_history (key);
CREATE INDEX ledger_history_reference ON ledger_history (reference);
CREATE INDEX ledger_history_last_seen ON ledger_history (last_seen);

CREATE TRIGGER ledger_interchanges_keep_replaced AFTER UPDATE ON ledger_interchanges
FOR EACH ROW WHEN OLD.state = 'accepted' AND NEW.state = 'claimed'
BEGIN
    INSERT INTO ledger_history (key, partner, standard, sender, recipient, reference, date, type, state,
        payload_sha256, first_seen, last_seen, window_ms, retries, message_ids, accepted_at, replaced_at)
    VALUES (OLD.key, OLD.partner, OLD.standard, OLD.sender, OLD.recipient, OLD.reference, OLD.date, OLD.type,
        OLD.state, OLD.payload_sha256, OLD.first_seen, OLD.last_seen, OLD.window_ms, OLD.retries, OLD.message_ids,
        OLD.accepted_at, NEW.first_seen);
END;
