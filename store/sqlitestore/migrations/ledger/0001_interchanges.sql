-- The business interchange ledger, one row per interchange key (partner,
-- standard, sender, recipient, reference, date, message type). Times are
-- Unix milliseconds read from SQLite's own clock.
CREATE TABLE ledger_interchanges (
    key            TEXT    PRIMARY KEY,
    partner        TEXT    NOT NULL DEFAULT '',
    standard       TEXT    NOT NULL DEFAULT '',
    sender         TEXT    NOT NULL DEFAULT '',
    recipient      TEXT    NOT NULL DEFAULT '',
    reference      TEXT    NOT NULL DEFAULT '',
    date           TEXT    NOT NULL DEFAULT '',
    type           TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL CHECK (state IN ('claimed', 'accepted', 'abandoned')),
    token          TEXT    NOT NULL,
    payload_sha256 TEXT    NOT NULL DEFAULT '',
    -- when the current claim began (reset by every new claim), and when the
    -- latest delivery of it arrived
    first_seen     INTEGER NOT NULL,
    last_seen      INTEGER NOT NULL,
    lease_until    INTEGER NOT NULL,
    -- the dedup window the interchange was claimed with; 0 = unique forever
    window_ms      INTEGER NOT NULL DEFAULT 0,
    -- deliveries answered as duplicates after the first
    retries        INTEGER NOT NULL DEFAULT 0,
    -- JSON array of the transport message ids that carried it, oldest first
    message_ids    TEXT    NOT NULL DEFAULT '[]',
    accepted_at    INTEGER,
    abandoned_at   INTEGER,
    claims         INTEGER NOT NULL DEFAULT 1,
    taken_from     TEXT
);

CREATE INDEX ledger_interchanges_reference ON ledger_interchanges (reference);
CREATE INDEX ledger_interchanges_partner ON ledger_interchanges (partner, last_seen);
CREATE INDEX ledger_interchanges_last_seen ON ledger_interchanges (last_seen);
-- ExpiredInterchanges: finished rows with a window, by last seen.
CREATE INDEX ledger_interchanges_expire ON ledger_interchanges (last_seen)
    WHERE state <> 'claimed' AND window_ms > 0;
