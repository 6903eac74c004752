-- The durable queue of replies the gateway posts itself (AS2 asynchronous
-- MDNs). Leases use the database clock.
CREATE TABLE outbox_deliveries (
    id           text        PRIMARY KEY,
    partner      text        NOT NULL DEFAULT '',
    message_id   text        NOT NULL DEFAULT '',
    url          text        NOT NULL,
    -- the HTTP header as a JSON object (name → values)
    header       jsonb       NOT NULL DEFAULT '{}',
    body         bytea       NOT NULL,
    state        text        NOT NULL CHECK (state IN ('pending', 'delivered', 'gave-up')),
    attempts     integer     NOT NULL DEFAULT 0,
    next_attempt timestamptz NOT NULL,
    leased_until timestamptz,
    last_error   text        NOT NULL DEFAULT '',
    created      timestamptz NOT NULL,
    updated      timestamptz NOT NULL
);

CREATE INDEX outbox_deliveries_due ON outbox_deliveries (next_attempt) WHERE state = 'pending';
