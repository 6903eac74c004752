-- Purge (outbound.retention) walks the final messages oldest Updated first
-- and stops at the bound: its cost is the batch's, not the queue's.
CREATE INDEX outbound_messages_final_updated ON outbound_messages (updated, id)
    WHERE state IN ('delivered', 'failed', 'cancelled');
