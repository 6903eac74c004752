-- The business interchange ledger, one row per interchange key (partner,
-- standard, sender, recipient, reference, date, message type). Times come
-- from the database clock (now()).
CREATE TABLE ledger_interchanges (
    key            text        PRIMARY KEY,
    partner        text        NOT NULL DEFAULT '',
    standard       text        NOT NULL DEFAULT '',
    sender         text        NOT NULL DEFAULT '',
    recipient      text        NOT NULL DEFAULT '',
    reference      text        NOT NULL DEFAULT '',
    date           text        NOT NULL DEFAULT '',
    type           text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('claimed', 'accepted', 'abandoned')),
    token          text        NOT NULL,
    payload_sha256 text        NOT NULL DEFAULT '',
    -- when the current claim began (reset by every new claim), and when the
    -- latest delivery of it arrived
    first_seen     timestamptz NOT NULL,
    last_seen      timestamptz NOT NULL,
    lease_until    timestamptz NOT NULL,
    -- the dedup window the interchange was claimed with; 0 = unique forever
    window_us      bigint      NOT NULL DEFAULT 0,
    -- deliveries answered as duplicates after the first
    retries        integer     NOT NULL DEFAULT 0,
    -- the transport message ids that carried it, oldest first
    message_ids    text[]      NOT NULL DEFAULT '{}',
    accepted_at    timestamptz,
    abandoned_at   timestamptz,
    claims         integer     NOT NULL DEFAULT 1,
    taken_from     text
);

CREATE INDEX ledger_interchanges_reference ON ledger_interchanges (reference);
CREATE INDEX ledger_interchanges_partner ON ledger_interchanges (partner, last_seen);
CREATE INDEX ledger_interchanges_last_seen ON ledger_interchanges (last_seen);
CREATE INDEX ledger_interchanges_message_ids ON ledger_interchanges USING gin (message_ids);
-- ExpiredInterchanges: finished rows with a window, by last seen.
CREATE INDEX ledger_interchanges_expire ON ledger_interchanges (last_seen)
    WHERE state <> 'claimed' AND window_us > 0;
