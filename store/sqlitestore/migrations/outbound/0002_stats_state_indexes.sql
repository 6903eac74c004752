-- Stats (the /metrics scrape, the console's outbound pages) counts the
-- messages per partner, protocol and state: from this covering index,
-- without reading the rows, whose created comes after the evidence (an MDN
-- or receipt of kilobytes on every delivered message). About 3 times
-- faster with 100,000 messages; still one pass over the index.
CREATE INDEX outbound_messages_stats ON outbound_messages (partner, protocol, state, created);
-- List of one state (the console's tabs, the API's state=), newest first:
-- a page costs the same however many messages of other states are newer.
CREATE INDEX outbound_messages_state_created ON outbound_messages (state, created, id);
