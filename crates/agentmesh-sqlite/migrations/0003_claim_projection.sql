-- Projected columns of mesh_queue, so a claim selects through indexes instead of
-- decoding every pending payload. The payload stays the source of truth; these
-- columns are rewritten from it on every write (see tasks.rs, `Projection`).
--
--   priority_rank  high 2, normal 1, low 0
--   deps_unmet     dependencies not (yet) completed, kept current by the store
--   blocked        a blockedReason is set
--   parked         a parked record is set
--   hold           0 claimable as far as the task itself goes, 1 dependencies or
--                  block, 2 parked, 9 payload unreadable (never claimed)
--   readonly       may run beside other work on a busy node
--   required_tags  JSON array of required capability tags, NULL when none
--   not_before_ms  the notBefore gate in epoch milliseconds
--   epoch          the fencing epoch (dispatchNonce)
--   lease_expires_ms  when an assignment's lease runs out
--   mission_id     the mission the task belongs to (progress is counted from it)

ALTER TABLE mesh_queue ADD COLUMN priority_rank INTEGER NOT NULL DEFAULT 1;
ALTER TABLE mesh_queue ADD COLUMN deps_unmet INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_queue ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_queue ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_queue ADD COLUMN hold INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_queue ADD COLUMN readonly INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_queue ADD COLUMN task_mode TEXT;
ALTER TABLE mesh_queue ADD COLUMN required_tags TEXT;
ALTER TABLE mesh_queue ADD COLUMN not_before_ms INTEGER;
ALTER TABLE mesh_queue ADD COLUMN assigned_provider_type TEXT;
ALTER TABLE mesh_queue ADD COLUMN dispatch_ts TEXT;
ALTER TABLE mesh_queue ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_queue ADD COLUMN lease_expires_ms INTEGER;
ALTER TABLE mesh_queue ADD COLUMN mission_id TEXT;

-- Dependency edges, projected from payload.dependsOn: task_id depends on depends_on_id.
CREATE TABLE mesh_task_deps (
    mesh_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    depends_on_id TEXT NOT NULL,
    PRIMARY KEY (mesh_id, task_id, depends_on_id)
) WITHOUT ROWID;
CREATE INDEX idx_mesh_task_deps_target ON mesh_task_deps(mesh_id, depends_on_id);

-- Claim candidates, one index per tier, in claim order.
CREATE INDEX idx_mesh_queue_claim_open
    ON mesh_queue(mesh_id, hold, priority_rank DESC, created_at)
    WHERE status = 'pending' AND target_session_id IS NULL AND target_node_id IS NULL;
CREATE INDEX idx_mesh_queue_claim_open_readonly
    ON mesh_queue(mesh_id, hold, priority_rank DESC, created_at)
    WHERE status = 'pending' AND readonly = 1 AND target_session_id IS NULL AND target_node_id IS NULL;
CREATE INDEX idx_mesh_queue_claim_node
    ON mesh_queue(mesh_id, target_node_id, hold, priority_rank DESC, created_at)
    WHERE status = 'pending' AND target_session_id IS NULL AND target_node_id IS NOT NULL;
CREATE INDEX idx_mesh_queue_claim_session
    ON mesh_queue(mesh_id, target_session_id, hold, priority_rank DESC, created_at)
    WHERE status = 'pending' AND target_session_id IS NOT NULL;

-- Assigned work, by node (busy checks, provider caps), by session and by lease
-- expiry. They replace the original's assignment index, which held every row.
DROP INDEX IF EXISTS idx_mesh_queue_assignment;
CREATE INDEX idx_mesh_queue_assigned_node
    ON mesh_queue(mesh_id, assigned_node_id, assigned_provider_type)
    WHERE status = 'assigned';
CREATE INDEX idx_mesh_queue_assigned_session
    ON mesh_queue(mesh_id, assigned_session_id)
    WHERE status = 'assigned';
CREATE INDEX idx_mesh_queue_lease
    ON mesh_queue(lease_expires_ms)
    WHERE status = 'assigned' AND lease_expires_ms IS NOT NULL;

-- Mission progress: the tasks of one mission, counted by status.
CREATE INDEX idx_mesh_queue_mission
    ON mesh_queue(mesh_id, mission_id, status)
    WHERE mission_id IS NOT NULL;
