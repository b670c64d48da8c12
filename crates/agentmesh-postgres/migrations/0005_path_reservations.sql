-- Path reservations: one row each (the reservation as JSON in payload, with
-- the columns the reads select by), and one row per literal prefix of its
-- patterns (folded to lower case), by which a request finds the reservations
-- it may overlap. Prefixes compare bytewise (COLLATE "C"), so the ones under a
-- directory are one range.
CREATE TABLE mesh_path_reservations (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    scope TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    task_id TEXT COLLATE "C",
    expires_ms BIGINT,
    created_at TEXT COLLATE "C" NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (mesh_id, id)
);
CREATE INDEX idx_path_reservations_scope ON mesh_path_reservations (mesh_id, scope, created_at);
CREATE INDEX idx_path_reservations_expiry ON mesh_path_reservations (expires_ms) WHERE expires_ms IS NOT NULL;
CREATE INDEX idx_path_reservations_task ON mesh_path_reservations (mesh_id, task_id) WHERE task_id IS NOT NULL;

CREATE TABLE mesh_path_reservation_prefixes (
    mesh_id TEXT COLLATE "C" NOT NULL,
    scope TEXT COLLATE "C" NOT NULL,
    prefix TEXT COLLATE "C" NOT NULL,
    reservation_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (mesh_id, scope, prefix, reservation_id)
);
