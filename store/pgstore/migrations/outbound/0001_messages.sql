-- The durable queue of messages the gateway sends to its partners (AS2 and
-- AS4), see package outbound. Submit, leases and the due times the store
-- sets itself use the database clock.
CREATE TABLE outbound_messages (
    id              text        PRIMARY KEY,
    partner         text        NOT NULL,
    protocol        text        NOT NULL,
    -- the AS2 Message-ID or the eb:MessageId, fixed when queued
    message_id      text        NOT NULL,
    idempotency_key text        NOT NULL DEFAULT '',
    source          text        NOT NULL DEFAULT '',
    content_type    text        NOT NULL DEFAULT '',
    filename        text        NOT NULL DEFAULT '',
    subject         text        NOT NULL DEFAULT '',
    service         text        NOT NULL DEFAULT '',
    action          text        NOT NULL DEFAULT '',
    conversation_id text        NOT NULL DEFAULT '',
    -- the payload: its chunks in outbound_chunks under this id
    payload         text        NOT NULL UNIQUE,
    size            bigint      NOT NULL,
    sha256          text        NOT NULL,
    state           text        NOT NULL
        CHECK (state IN ('queued', 'awaiting-mdn', 'delivered', 'failed', 'cancelled')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt    timestamptz NOT NULL,
    last_error      text        NOT NULL DEFAULT '',
    reason          text        NOT NULL DEFAULT '',
    -- the digests of the transmissions made (a JSON array of strings)
    sent            jsonb       NOT NULL DEFAULT '[]',
    -- the final MDN, receipt or error signal (NULL: none)
    evidence        jsonb,
    -- the fencing token of the worker holding the message (empty: none)
    lease_token     text        NOT NULL DEFAULT '',
    leased_until    timestamptz,
    created         timestamptz NOT NULL,
    updated         timestamptz NOT NULL
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

-- Payloads in chunks, each written in its own statement while the
-- submission is read, so that no payload is held in memory.
CREATE TABLE outbound_chunks (
    payload text        NOT NULL,
    seq     integer     NOT NULL,
    data    bytea       NOT NULL,
    written timestamptz NOT NULL,
    PRIMARY KEY (payload, seq)
);

-- Payloads being written: a row from the first chunk until the message is
-- committed (in the same transaction that inserts the message). A row left
-- behind by a crash is an orphan: its chunks are removed once nothing was
-- written to it for a while (PurgeOrphanPayloads).
CREATE TABLE outbound_uploads (
    payload text        PRIMARY KEY,
    started timestamptz NOT NULL
);
