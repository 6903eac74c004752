-- Interchanges a later claim replaced (the reference reused after its
-- window, or a drifted payload accepted as new): the accepted row is copied
-- here by a trigger, in the statement (and so the transaction) of the
-- replacing claim, so that no crash can lose it. The purge archives these
-- rows to archive_dir like expired ones, then deletes them.
CREATE TABLE ledger_history (
    id             bigserial   PRIMARY KEY,
    key            text        NOT NULL,
    partner        text        NOT NULL DEFAULT '',
    standard       text        NOT NULL DEFAULT '',
    sender         text        NOT NULL DEFAULT '',
    recipient      text        NOT NULL DEFAULT '',
    reference      text        NOT NULL DEFAULT '',
    date           text        NOT NULL DEFAULT '',
    type           text        NOT NULL DEFAULT '',
    state          text        NOT NULL,
    payload_sha256 text        NOT NULL DEFAULT '',
    first_seen     timestamptz NOT NULL,
    last_seen      timestamptz NOT NULL,
    window_us      bigint      NOT NULL DEFAULT 0,
    retries        integer     NOT NULL DEFAULT 0,
    message_ids    text[]      NOT NULL DEFAULT '{}',
    accepted_at    timestamptz,
    -- when the replacing claim took the row (its first seen)
    replaced_at    timestamptz NOT NULL
);

CREATE INDEX ledger_history_key ON ledger_history (key);
CREATE INDEX ledger_history_reference ON ledger_history (reference);
CREATE INDEX ledger_history_last_seen ON ledger_history (last_seen);

-- search_path is fixed to this schema (the migration's), whatever the
-- session's search_path is when the trigger fires.
CREATE FUNCTION ledger_keep_replaced() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO ledger_history (key, partner, standard, sender, recipient, reference, date, type, state,
        payload_sha256, first_seen, last_seen, window_us, retries, message_ids, accepted_at, replaced_at)
    VALUES (OLD.key, OLD.partner, OLD.standard, OLD.sender, OLD.recipient, OLD.reference, OLD.date, OLD.type,
        OLD.state, OLD.payload_sha256, OLD.first_seen, OLD.last_seen, OLD.window_us, OLD.retries, OLD.message_ids,
        OLD.accepted_at, NEW.first_seen);
    RETURN NULL;
END
$$;

CREATE TRIGGER ledger_interchanges_keep_replaced AFTER UPDATE ON ledger_interchanges
FOR EACH ROW WHEN (OLD.state = 'accepted' AND NEW.state = 'claimed')
EXECUTE FUNCTION ledger_keep_replaced();
