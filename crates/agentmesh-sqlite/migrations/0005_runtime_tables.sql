-- Completion fingerprints are looked up by (mesh, fingerprint) and swept by
-- expiry. The table becomes clustered on (mesh_id, fingerprint): the same string in
-- two meshes is two rows, never one mesh's record replacing the other's; a record
-- writes one B-tree plus the expiry index, and the sweep walks that index instead
-- of scanning the table. Rows are copied over unchanged.
CREATE TABLE mesh_completion_fingerprints_next (
    fingerprint TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    mesh_id TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (mesh_id, fingerprint)
) WITHOUT ROWID;
INSERT INTO mesh_completion_fingerprints_next (fingerprint, expires_at, mesh_id)
    SELECT fingerprint, expires_at, mesh_id FROM mesh_completion_fingerprints;
DROP TABLE mesh_completion_fingerprints;
DROP INDEX IF EXISTS idx_mesh_completion_fingerprints_mesh;
ALTER TABLE mesh_completion_fingerprints_next RENAME TO mesh_completion_fingerprints;
CREATE INDEX idx_mesh_completion_fingerprints_expires ON mesh_completion_fingerprints(expires_at);

-- Stale direct dispatches are found by age.
CREATE INDEX IF NOT EXISTS idx_direct_dispatches_mesh_status_time
    ON mesh_direct_dispatches(mesh_id, status, dispatched_at);
