-- In-flight holds of acknowledged tasks, in the original's shape (a database a
-- later original wrote has the table already, and keeps it).
CREATE TABLE IF NOT EXISTS mesh_inflight_hold (
    task_id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    hold_reason TEXT NOT NULL,
    held_at TEXT NOT NULL,
    first_idle_since_ack TEXT,
    read_failure_count INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_mesh_inflight_hold_mesh
    ON mesh_inflight_hold(mesh_id, held_at, task_id);
