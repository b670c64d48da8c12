-- The archive: finished tasks and old ledger entries moved out of the hot
-- tables by the retention policy (see archive.rs), still read by the product.
--
-- An archived task is kept as its Task JSON; pos is the archive's order of
-- tasks (an export's cursor). An archived ledger entry keeps its sequence
-- number and the id of the transaction that wrote it, so that a page by
-- sequence reads the archive in the order it read the hot ledger, (txid, seq).
-- mesh_archive_meta holds where an export's drop got to (dropped_through, and
-- the transaction id of that entry, dropped_txid). A mesh's own retention
-- windows are in agentmesh_meta, under the key retention:<mesh>.

CREATE TABLE mesh_queue_archive (
    mesh_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    pos BIGINT GENERATED ALWAYS AS IDENTITY,
    status TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    archived_at BIGINT NOT NULL,
    task TEXT NOT NULL,
    PRIMARY KEY (mesh_id, id)
);
CREATE INDEX idx_mesh_queue_archive_pos ON mesh_queue_archive (mesh_id, pos);

CREATE TABLE mesh_event_ledger_archive (
    mesh_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    timestamp TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    node_id TEXT COLLATE "C",
    session_id TEXT COLLATE "C",
    provider_type TEXT COLLATE "C",
    payload TEXT NOT NULL DEFAULT '{}',
    txid xid8 NOT NULL,
    PRIMARY KEY (mesh_id, seq),
    UNIQUE (mesh_id, id)
);
CREATE INDEX idx_mesh_event_ledger_archive_order ON mesh_event_ledger_archive (mesh_id, txid, seq);
CREATE INDEX idx_mesh_event_ledger_archive_slice ON mesh_event_ledger_archive (mesh_id, timestamp, id);

CREATE TABLE mesh_archive_meta (
    mesh_id TEXT COLLATE "C" NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (mesh_id, key)
);
