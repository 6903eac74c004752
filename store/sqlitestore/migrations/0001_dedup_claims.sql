-- Claims of the exactly-once core. Times are Unix milliseconds read from
-- SQLite's own clock. One row per transport key.
CREATE TABLE dedup_claims (
    key            TEXT    PRIMARY KEY,
    state          TEXT    NOT NULL CHECK (state IN ('claimed', 'accepted', 'abandoned')),
    token          TEXT    NOT NULL,
    payload_sha256 TEXT    NOT NULL DEFAULT '',
    -- when the current claim began; reset by every new claim
    first_seen     INTEGER NOT NULL,
    lease_until    INTEGER NOT NULL,
    accepted_at    INTEGER,
    abandoned_at   INTEGER,
    -- the reply bytes sent, stored at accept
    reply          BLOB,
    -- how many claims the key has seen, and the state the latest one took
    -- the row over from (NULL for a new key)
    claims         INTEGER NOT NULL DEFAULT 1,
    taken_from     TEXT
);

CREATE INDEX dedup_claims_expire ON dedup_claims (first_seen) WHERE state <> 'claimed';
