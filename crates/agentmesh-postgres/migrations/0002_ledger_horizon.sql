-- Pages by sequence without a lock on the writers: every entry names the
-- transaction that wrote it, and a page reads entries in the order (txid, seq)
-- only below the oldest transaction still running, where that order never
-- changes again (see ledger.rs).
ALTER TABLE mesh_event_ledger ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX idx_mesh_event_ledger_horizon ON mesh_event_ledger (mesh_id, txid, seq);
