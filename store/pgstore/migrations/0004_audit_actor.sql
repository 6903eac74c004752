-- Who took an operator action in the console (audit.Record.Actor).
ALTER TABLE audit_records ADD COLUMN actor text NOT NULL DEFAULT '';
