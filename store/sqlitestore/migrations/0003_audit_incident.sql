-- The incident reference quoted in a negative reply (audit.Record.Incident),
-- so that the operator finds a partner's "GW-7K3QX9" with its detail.
ALTER TABLE audit_records ADD COLUMN incident TEXT NOT NULL DEFAULT '';

CREATE INDEX audit_records_incident ON audit_records (incident) WHERE incident <> '';
