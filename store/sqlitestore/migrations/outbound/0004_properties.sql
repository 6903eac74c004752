-- AS4 part properties of a message's payload (outbound.Message.Properties):
-- the JSON array of {"name", "value"} in the order they are sent, '' for
-- none (every message queued before this migration).
ALTER TABLE outbound_messages ADD COLUMN properties TEXT NOT NULL DEFAULT '';
