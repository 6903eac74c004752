-- List of one state (the console's tabs, the API's state=), newest first:
-- a page costs the same however many messages of other states are newer.
CREATE INDEX outbound_messages_state_created ON outbound_messages (state, created, id);
