-- The whole schema of a PostgreSQL installation, in the schema the store was
-- opened with (its search_path). It holds the same rows as the embedded file,
-- with two differences that make it ready to shard by mesh:
--
-- * every table but the installation's metadata carries mesh_id first in its
--   primary key and in every unique constraint, so ids (task ids too) are
--   unique per mesh, not per database;
-- * the rowids the embedded file orders by are identity columns (row_id),
--   unique together with the mesh.
--
-- Every text column compares by bytes (COLLATE "C"), as SQLite's do, so ids and
-- ISO timestamps order the same on both backends whatever the server's locale.

CREATE TABLE agentmesh_meta (
    key TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE mesh_queue (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    row_id BIGINT GENERATED ALWAYS AS IDENTITY,
    status TEXT COLLATE "C" NOT NULL,
    target_node_id TEXT COLLATE "C",
    target_session_id TEXT COLLATE "C",
    assigned_node_id TEXT COLLATE "C",
    assigned_session_id TEXT COLLATE "C",
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    payload TEXT NOT NULL,
    priority_rank BIGINT NOT NULL DEFAULT 1,
    deps_unmet BIGINT NOT NULL DEFAULT 0,
    blocked BIGINT NOT NULL DEFAULT 0,
    parked BIGINT NOT NULL DEFAULT 0,
    hold BIGINT NOT NULL DEFAULT 0,
    readonly BIGINT NOT NULL DEFAULT 0,
    task_mode TEXT COLLATE "C",
    required_tags TEXT,
    not_before_ms BIGINT,
    assigned_provider_type TEXT COLLATE "C",
    dispatch_ts TEXT COLLATE "C",
    epoch BIGINT NOT NULL DEFAULT 0,
    lease_expires_ms BIGINT,
    mission_id TEXT COLLATE "C",
    PRIMARY KEY (mesh_id, id),
    UNIQUE (mesh_id, row_id)
);
CREATE INDEX idx_mesh_queue_mesh_status_created ON mesh_queue (mesh_id, status, created_at);
CREATE INDEX idx_mesh_queue_claim_open
    ON mesh_queue (mesh_id, hold, priority_rank DESC, created_at, row_id)
    WHERE status = 'pending' AND target_session_id IS NULL AND target_node_id IS NULL;
CREATE INDEX idx_mesh_queue_claim_open_readonly
    ON mesh_queue (mesh_id, hold, priority_rank DESC, created_at, row_id)
    WHERE status = 'pending' AND readonly = 1 AND target_session_id IS NULL AND target_node_id IS NULL;
CREATE INDEX idx_mesh_queue_claim_node
    ON mesh_queue (mesh_id, target_node_id, hold, priority_rank DESC, created_at, row_id)
    WHERE status = 'pending' AND target_session_id IS NULL AND target_node_id IS NOT NULL;
CREATE INDEX idx_mesh_queue_claim_session
    ON mesh_queue (mesh_id, target_session_id, hold, priority_rank DESC, created_at, row_id)
    WHERE status = 'pending' AND target_session_id IS NOT NULL;
CREATE INDEX idx_mesh_queue_mission
    ON mesh_queue (mesh_id, mission_id, status) WHERE mission_id IS NOT NULL;
CREATE INDEX idx_mesh_queue_assigned
    ON mesh_queue (mesh_id, assigned_session_id, assigned_node_id, assigned_provider_type, lease_expires_ms, id)
    WHERE status = 'assigned';
CREATE INDEX idx_mesh_queue_lease
    ON mesh_queue (mesh_id, lease_expires_ms) WHERE status = 'assigned' AND lease_expires_ms IS NOT NULL;

CREATE TABLE mesh_task_deps (
    mesh_id TEXT COLLATE "C" NOT NULL,
    task_id TEXT COLLATE "C" NOT NULL,
    depends_on_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, task_id, depends_on_id)
);
CREATE INDEX idx_mesh_task_deps_target ON mesh_task_deps (mesh_id, depends_on_id);

CREATE TABLE mesh_completion_fingerprints (
    mesh_id TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (mesh_id, fingerprint)
);
CREATE INDEX idx_mesh_completion_fingerprints_expires ON mesh_completion_fingerprints (mesh_id, expires_at);

CREATE TABLE mesh_direct_dispatches (
    mesh_id TEXT COLLATE "C" NOT NULL,
    task_id TEXT COLLATE "C" NOT NULL,
    row_id BIGINT GENERATED ALWAYS AS IDENTITY,
    node_id TEXT COLLATE "C",
    session_id TEXT COLLATE "C",
    provider_type TEXT COLLATE "C",
    message TEXT NOT NULL,
    task_mode TEXT COLLATE "C",
    via TEXT COLLATE "C" NOT NULL,
    status TEXT COLLATE "C" NOT NULL DEFAULT 'dispatched',
    dispatched_to_idle_session BIGINT NOT NULL DEFAULT 0,
    dispatched_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, task_id),
    UNIQUE (mesh_id, row_id)
);
CREATE INDEX idx_direct_dispatches_mesh_session ON mesh_direct_dispatches (mesh_id, session_id, status);
CREATE INDEX idx_direct_dispatches_mesh_status_time ON mesh_direct_dispatches (mesh_id, status, dispatched_at);

CREATE TABLE remote_idle_sessions (
    mesh_id TEXT COLLATE "C" NOT NULL,
    node_id TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    provider_type TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT NOT NULL,
    metadata TEXT,
    PRIMARY KEY (mesh_id, node_id, session_id)
);

CREATE TABLE mesh_session_delivery (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    row_id BIGINT GENERATED ALWAYS AS IDENTITY,
    node_id TEXT COLLATE "C",
    session_id TEXT COLLATE "C",
    provider_type TEXT COLLATE "C",
    task_id TEXT COLLATE "C",
    kind TEXT COLLATE "C" NOT NULL,
    priority BIGINT NOT NULL DEFAULT 0,
    message TEXT NOT NULL,
    status TEXT COLLATE "C" NOT NULL DEFAULT 'queued',
    deliver_after TEXT COLLATE "C",
    expires_at TEXT COLLATE "C",
    attempt_count BIGINT NOT NULL DEFAULT 0,
    source_coordinator_session_id TEXT COLLATE "C",
    source_coordinator_daemon_id TEXT COLLATE "C",
    last_error TEXT,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, id),
    UNIQUE (mesh_id, row_id)
);
CREATE INDEX idx_mesh_session_delivery_mesh_status ON mesh_session_delivery (mesh_id, status, created_at);
CREATE INDEX idx_mesh_session_delivery_session ON mesh_session_delivery (mesh_id, session_id, status);
CREATE INDEX idx_mesh_session_delivery_task ON mesh_session_delivery (mesh_id, task_id);

CREATE TABLE mesh_completion_conflicts (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    row_id BIGINT GENERATED ALWAYS AS IDENTITY,
    fingerprint TEXT COLLATE "C" NOT NULL,
    conflicting_task_id TEXT COLLATE "C",
    conflicting_session_id TEXT COLLATE "C",
    original_task_id TEXT COLLATE "C",
    original_session_id TEXT COLLATE "C",
    event TEXT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, id),
    UNIQUE (mesh_id, row_id)
);
CREATE INDEX idx_mesh_completion_conflicts_mesh ON mesh_completion_conflicts (mesh_id, created_at);

CREATE TABLE mesh_tool_call_log (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id BIGINT GENERATED ALWAYS AS IDENTITY,
    tool TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C",
    called_at BIGINT NOT NULL,
    caller_role TEXT COLLATE "C",
    PRIMARY KEY (mesh_id, id)
);
CREATE INDEX idx_mesh_tool_call_log_mesh_tool_time ON mesh_tool_call_log (mesh_id, tool, called_at);
CREATE INDEX idx_mesh_tool_call_log_mesh_time ON mesh_tool_call_log (mesh_id, called_at);

-- The ledger. seq is taken from one sequence while the append's transaction
-- holds its mesh's advisory lock, so within a mesh numbers rise in commit order.
CREATE SEQUENCE mesh_event_ledger_seq AS BIGINT;
CREATE TABLE mesh_event_ledger (
    mesh_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL DEFAULT nextval('mesh_event_ledger_seq'),
    id TEXT COLLATE "C" NOT NULL,
    timestamp TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    node_id TEXT COLLATE "C",
    session_id TEXT COLLATE "C",
    provider_type TEXT COLLATE "C",
    payload TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (mesh_id, seq),
    UNIQUE (mesh_id, id)
);
ALTER SEQUENCE mesh_event_ledger_seq OWNED BY mesh_event_ledger.seq;
CREATE INDEX idx_mesh_event_ledger_slice ON mesh_event_ledger (mesh_id, timestamp, id);
CREATE INDEX idx_mesh_event_ledger_mesh_kind ON mesh_event_ledger (mesh_id, kind, timestamp)
    WHERE kind <> 'task_dispatched' AND kind <> 'task_claimed' AND kind <> 'task_completed';

CREATE TABLE mesh_pending_events (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    row_id BIGINT GENERATED ALWAYS AS IDENTITY,
    coordinator_daemon_id TEXT COLLATE "C",
    event TEXT COLLATE "C" NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    fingerprint TEXT COLLATE "C",
    queued_at BIGINT NOT NULL,
    protocol_version TEXT COLLATE "C",
    event_id TEXT COLLATE "C",
    scope TEXT COLLATE "C",
    dispatched_by TEXT COLLATE "C",
    intended_for TEXT COLLATE "C",
    route_class BIGINT NOT NULL DEFAULT 0,
    to_machine TEXT COLLATE "C",
    to_key TEXT COLLATE "C",
    to_fallback BIGINT NOT NULL DEFAULT 0,
    to_session TEXT COLLATE "C",
    lane TEXT COLLATE "C" NOT NULL DEFAULT '',
    PRIMARY KEY (mesh_id, id),
    UNIQUE (mesh_id, row_id)
);
CREATE UNIQUE INDEX idx_mesh_pending_events_fingerprint
    ON mesh_pending_events (mesh_id, fingerprint) WHERE fingerprint IS NOT NULL;

-- The undrained events by lane, in queue order, and the drained events by
-- event id: what a drain walks and what dedup looks up. Kept by the inbox code,
-- and emptied with their event by the trigger below.
CREATE TABLE mesh_inbox_queue (
    mesh_id TEXT COLLATE "C" NOT NULL,
    lane TEXT COLLATE "C" NOT NULL,
    queued_at BIGINT NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    coordinator_daemon_id TEXT COLLATE "C",
    event TEXT COLLATE "C" NOT NULL,
    event_row_id BIGINT NOT NULL,
    PRIMARY KEY (mesh_id, lane, queued_at, id)
);
CREATE TABLE mesh_inbox_drained (
    mesh_id TEXT COLLATE "C" NOT NULL,
    event_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, event_id, id)
);
CREATE FUNCTION mesh_pending_events_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mesh_inbox_queue
     WHERE mesh_id = OLD.mesh_id AND lane = OLD.lane AND queued_at = OLD.queued_at AND id = OLD.id;
    DELETE FROM mesh_inbox_drained
     WHERE mesh_id = OLD.mesh_id AND event_id = OLD.event_id AND id = OLD.id;
    RETURN OLD;
END;
$$;
CREATE TRIGGER mesh_pending_events_removed AFTER DELETE ON mesh_pending_events
    FOR EACH ROW EXECUTE FUNCTION mesh_pending_events_removed();

CREATE TABLE mesh_coordinator_presence (
    mesh_id TEXT COLLATE "C" NOT NULL,
    coordinator_key TEXT COLLATE "C" NOT NULL,
    machine TEXT COLLATE "C",
    daemon_id TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C",
    last_seen_ms BIGINT NOT NULL,
    ended_at_ms BIGINT,
    PRIMARY KEY (mesh_id, coordinator_key)
);

CREATE TABLE mesh_missions (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    row_id BIGINT GENERATED ALWAYS AS IDENTITY,
    title TEXT NOT NULL,
    goal TEXT NOT NULL DEFAULT '',
    status TEXT COLLATE "C" NOT NULL DEFAULT 'active',
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, id)
);
CREATE INDEX idx_mesh_missions_mesh_status ON mesh_missions (mesh_id, status, updated_at);

CREATE TABLE mesh_scheduler_cursor (
    mesh_id TEXT COLLATE "C" NOT NULL,
    cursor BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (mesh_id)
);
INSERT INTO agentmesh_meta (key, value) VALUES ('database_id', gen_random_uuid()::text);
