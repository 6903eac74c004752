-- The durable queue of replies the gateway posts itself (AS2 asynchronous
-- MDNs). Times are Unix milliseconds; leases use SQLite's clock.
CREATE TABLE outbox_deliveries (
    id           TEXT    PRIMARY KEY,
    partner      TEXT    NOT NULL DEFAULT '',
    message_id   TEXT    NOT NULL DEFAULT '',
    url          TEXT    NOT NULL,
    -- JSON object of the HTTP header (name → values)
    header       TEXT    NOT NULL DEFAULT '{}',
    body         BLOB    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'gave-up')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_attempt INTEGER NOT NULL,
    leased_until INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT    NOT NULL DEFAULT '',
    created      INTEGER NOT NULL,
    updated      INTEGER NOT NULL
);

CREATE INDEX outbox_deliveries_due ON outbox_deliveries (next_attempt) WHERE state = 'pending';
