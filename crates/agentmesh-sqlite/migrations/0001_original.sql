-- The schema of the original TypeScript MeshRuntimeStore (seed generation), so a
-- database it created opens unchanged: every statement is IF NOT EXISTS.

CREATE TABLE IF NOT EXISTS mesh_queue (
    id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    status TEXT NOT NULL,
    target_node_id TEXT,
    target_session_id TEXT,
    assigned_node_id TEXT,
    assigned_session_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_mesh_queue_mesh_status_created
    ON mesh_queue(mesh_id, status, created_at);
CREATE INDEX IF NOT EXISTS idx_mesh_queue_assignment
    ON mesh_queue(mesh_id, assigned_node_id, assigned_session_id, status);

CREATE TABLE IF NOT EXISTS mesh_completion_fingerprints (
    fingerprint TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL,
    mesh_id TEXT NOT NULL DEFAULT ''
);

CREATE TABLE IF NOT EXISTS mesh_direct_dispatches (
    task_id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    node_id TEXT,
    session_id TEXT,
    provider_type TEXT,
    message TEXT NOT NULL,
    task_mode TEXT,
    via TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'dispatched',
    dispatched_to_idle_session INTEGER NOT NULL DEFAULT 0,
    dispatched_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_direct_dispatches_mesh_session
    ON mesh_direct_dispatches(mesh_id, session_id, status);

CREATE TABLE IF NOT EXISTS remote_idle_sessions (
    mesh_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    provider_type TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    metadata TEXT,
    PRIMARY KEY (mesh_id, node_id, session_id)
);

CREATE TABLE IF NOT EXISTS mesh_session_delivery (
    id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    node_id TEXT,
    session_id TEXT,
    provider_type TEXT,
    task_id TEXT,
    kind TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',
    deliver_after TEXT,
    expires_at TEXT,
    attempt_count INTEGER NOT NULL DEFAULT 0,
    source_coordinator_session_id TEXT,
    source_coordinator_daemon_id TEXT,
    last_error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_mesh_session_delivery_mesh_status
    ON mesh_session_delivery(mesh_id, status, created_at);
CREATE INDEX IF NOT EXISTS idx_mesh_session_delivery_session
    ON mesh_session_delivery(mesh_id, session_id, status);
CREATE INDEX IF NOT EXISTS idx_mesh_session_delivery_task
    ON mesh_session_delivery(mesh_id, task_id);

CREATE TABLE IF NOT EXISTS mesh_completion_conflicts (
    id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    conflicting_task_id TEXT,
    conflicting_session_id TEXT,
    original_task_id TEXT,
    original_session_id TEXT,
    event TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_mesh_completion_conflicts_mesh
    ON mesh_completion_conflicts(mesh_id, created_at);

CREATE TABLE IF NOT EXISTS mesh_tool_call_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    mesh_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    session_id TEXT,
    called_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_mesh_tool_call_log_mesh_tool_time
    ON mesh_tool_call_log(mesh_id, tool, called_at);

CREATE TABLE IF NOT EXISTS mesh_event_ledger (
    id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    kind TEXT NOT NULL,
    node_id TEXT,
    session_id TEXT,
    provider_type TEXT,
    payload TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS idx_mesh_event_ledger_mesh_time
    ON mesh_event_ledger(mesh_id, timestamp);
CREATE INDEX IF NOT EXISTS idx_mesh_event_ledger_mesh_kind
    ON mesh_event_ledger(mesh_id, kind, timestamp);
CREATE INDEX IF NOT EXISTS idx_mesh_event_ledger_session
    ON mesh_event_ledger(mesh_id, session_id, timestamp);

CREATE TABLE IF NOT EXISTS mesh_pending_events (
    id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    coordinator_daemon_id TEXT,
    event TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    fingerprint TEXT,
    queued_at INTEGER NOT NULL,
    drained INTEGER NOT NULL DEFAULT 0,
    drained_at INTEGER
);
CREATE INDEX IF NOT EXISTS idx_mesh_pending_events_mesh_drained
    ON mesh_pending_events(mesh_id, drained, queued_at);
CREATE UNIQUE INDEX IF NOT EXISTS idx_mesh_pending_events_fingerprint
    ON mesh_pending_events(mesh_id, fingerprint)
    WHERE fingerprint IS NOT NULL;

CREATE TABLE IF NOT EXISTS mesh_missions (
    id TEXT PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    title TEXT NOT NULL,
    goal TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'active',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_mesh_missions_mesh_status
    ON mesh_missions(mesh_id, status, updated_at);

CREATE TABLE IF NOT EXISTS mesh_scheduler_cursor (
    mesh_id TEXT PRIMARY KEY,
    cursor INTEGER NOT NULL DEFAULT 0
);
