-- Assigned work in one index instead of three.
--
-- A claim inserts its task into every index on assigned rows and a completion
-- deletes it from every one, so each of them is one more page in the WAL per
-- transaction. Assigned rows are few (one per working session), so one covering
-- index serves every read of them: a session's assignment is a seek on
-- (mesh_id, assigned_session_id); a node's load and a provider's count read the
-- mesh's assigned entries; the lease reaper reads all of them (it runs every few
-- seconds, over at most one entry per working session) instead of a range of a
-- lease-ordered index.
DROP INDEX IF EXISTS idx_mesh_queue_assigned_node;
DROP INDEX IF EXISTS idx_mesh_queue_assigned_session;
DROP INDEX IF EXISTS idx_mesh_queue_lease;
CREATE INDEX idx_mesh_queue_assigned
    ON mesh_queue(mesh_id, assigned_session_id, assigned_node_id, assigned_provider_type, lease_expires_ms, id)
    WHERE status = 'assigned';
