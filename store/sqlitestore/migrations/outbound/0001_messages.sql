-- The durable queue of messages the gateway sends to its partners (AS2 and
-- AS4), see package outbound. Times are Unix milliseconds; Submit, leases
-- and the due times the store sets itself use SQLite's clock.
CREATE TABLE outbound_messages (
    id              TEXT    PRIMARY KEY,
    partner         TEXT    NOT NULL,
    protocol        TEXT    NOT NULL,
    -- the AS2 Message-ID or the eb:MessageId, fixed when queued
    message_id      TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL DEFAULT '',
    source          TEXT    NOT NULL DEFAULT '',
    content_type    TEXT    NOT NULL DEFAULT '',
    filename        TEXT    NOT NULL DEFAULT '',
    subject         TEXT    NOT NULL DEFAULT '',
    service         TEXT    NOT NULL DEFAULT '',
    action          TEXT    NOT NULL DEFAULT '',
    conversation_id TEXT    NOT NULL DEFAULT '',
    -- the payload: its chunks in outbound_chunks under this id
    payload         TEXT    NOT NULL UNIQUE,
    size            INTEGER NOT NULL,
    sha256          TEXT    NOT NULL,
    state           TEXT    NOT NULL
        CHECK (state IN ('queued', 'awaiting-mdn', 'delivered', 'failed', 'cancelled')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt    INTEGER NOT NULL,
    last_error      TEXT    NOT NULL DEFAULT '',
    reason          TEXT    NOT NULL DEFAULT '',
    -- JSON array of the digests of the transmissions made
    sent            TEXT    NOT NULL DEFAULT '[]',
    -- JSON object of the final MDN, receipt or error signal (NULL: none)
    evidence        TEXT,
    -- the fencing token of the worker holding the message (empty: none)
    lease_token     TEXT    NOT NULL DEFAULT '',
    leased_until    INTEGER NOT NULL DEFAULT 0,
    created         INTEGER NOT NULL,
    updated         INTEGER NOT NULL
);

-- A submission's idempotency key names one message per partner.
CREATE UNIQUE INDEX outbound_messages_key ON outbound_messages (partner, idempotency_key)
    WHERE idempotency_key <> '';
-- An MDN or receipt finds its message by the partner and the transport id.
CREATE UNIQUE INDEX outbound_messages_message_id ON outbound_messages (partner, message_id);
-- Lease walks the messages that can be due in due order and stops at the
-- first not yet due: its cost does not grow with the messages waiting.
CREATE INDEX outbound_messages_due ON outbound_messages (next_attempt, id)
    WHERE state IN ('queued', 'awaiting-mdn');
-- List, newest first, for all partners or one.
CREATE INDEX outbound_messages_created ON outbound_messages (created, id);
CREATE INDEX outbound_messages_partner_created ON outbound_messages (partner, created, id);

-- Payloads in chunks, written one short transaction at a time while the
-- submission is read, so that no payload is held in memory and the
-- database's write lock is never held for a whole file.
CREATE TABLE outbound_chunks (
    payload TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    data    BLOB    NOT NULL,
    written INTEGER NOT NULL,
    PRIMARY KEY (payload, seq)
);

-- Payloads being written: a row from the first chunk until the message is
-- committed (in the same transaction that inserts the message). A row left
-- behind by a crash is an orphan: its chunks are removed once nothing was
-- written to it for a while (PurgeOrphanPayloads).
CREATE TABLE outbound_uploads (
    payload TEXT    PRIMARY KEY,
    started INTEGER NOT NULL
);
