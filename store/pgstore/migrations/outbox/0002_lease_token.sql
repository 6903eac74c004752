-- The fencing token of a delivery's lease: Renew, Release and the outcome
-- of an attempt (delivered, retry, gave-up) must present it, so that a
-- worker whose lease ran out and was taken over by another cannot record
-- over the new holder's attempt. Empty when not leased.
ALTER TABLE outbox_deliveries ADD COLUMN lease_token text NOT NULL DEFAULT '';
