-- Claims of the exactly-once core, one row per transport key. Times come
-- from the database clock (now()).
CREATE TABLE dedup_claims (
    key            text        PRIMARY KEY,
    state          text        NOT NULL CHECK (state IN ('claimed', 'accepted', 'abandoned')),
    token          text        NOT NULL,
    payload_sha256 text        NOT NULL DEFAULT '',
    -- when the current claim began; reset by every new claim
    first_seen     timestamptz NOT NULL,
    lease_until    timestamptz NOT NULL,
    accepted_at    timestamptz,
    abandoned_at   timestamptz,
    -- the reply bytes sent, stored at accept
    reply          bytea,
    -- how many claims the key has seen, and the state the latest one took
    -- the row over from (NULL for a new key)
    claims         integer     NOT NULL DEFAULT 1,
    taken_from     text
);

CREATE INDEX dedup_claims_expire ON dedup_claims (first_seen) WHERE state <> 'claimed';
