-- In-flight holds of acknowledged tasks: one per task of a mesh.
CREATE TABLE mesh_inflight_hold (
    mesh_id TEXT COLLATE "C" NOT NULL,
    task_id TEXT COLLATE "C" NOT NULL,
    hold_reason TEXT NOT NULL,
    held_at TEXT COLLATE "C" NOT NULL,
    first_idle_since_ack TEXT COLLATE "C",
    read_failure_count BIGINT NOT NULL DEFAULT 0,
    updated_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, task_id)
);
CREATE INDEX idx_mesh_inflight_hold_mesh_held ON mesh_inflight_hold (mesh_id, held_at, task_id);
