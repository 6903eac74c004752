-- One row per audit.Record.
CREATE TABLE audit_records (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recorded_at     timestamptz NOT NULL,
    step            text        NOT NULL,
    partner         text        NOT NULL DEFAULT '',
    protocol        text        NOT NULL DEFAULT '',
    message_id      text        NOT NULL DEFAULT '',
    dedup_key       text        NOT NULL DEFAULT '',
    interchange_key text        NOT NULL DEFAULT '',
    reference       text        NOT NULL DEFAULT '',
    decision        text        NOT NULL DEFAULT '',
    payload_sha256  text        NOT NULL DEFAULT '',
    disposition     text        NOT NULL DEFAULT '',
    error           text        NOT NULL DEFAULT ''
);

CREATE INDEX audit_records_key ON audit_records (dedup_key);
CREATE INDEX audit_records_message ON audit_records (partner, message_id);
