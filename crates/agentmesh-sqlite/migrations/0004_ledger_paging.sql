-- The ledger's read paths, with as few indexes as they need: every index is one
-- more page written by every append.
--
-- (mesh_id, timestamp, id) is exactly the slice order, so a slice page seeks to its
-- cursor and costs the same anywhere in the ledger; it also serves time-ordered
-- reads, which makes the original's (mesh_id, timestamp) index redundant. Nothing
-- reads by session, so the original's session index goes too. Kind filters keep
-- theirs.
CREATE INDEX idx_mesh_event_ledger_slice ON mesh_event_ledger(mesh_id, timestamp, id);
DROP INDEX IF EXISTS idx_mesh_event_ledger_mesh_time;
DROP INDEX IF EXISTS idx_mesh_event_ledger_session;
