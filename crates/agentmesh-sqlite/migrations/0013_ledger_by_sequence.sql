-- The ledger's sequence becomes the database's own: `seq` is the table's integer
-- key (the rowid), one number per entry across every mesh, rising in commit
-- order. An append then writes the b-trees it wrote before the sequence
-- existed (the table, the id, the slice index), where a per-mesh number needed
-- an index of its own; a page by sequence walks the table from its cursor.
--
-- Entries keep their rowid, their append order, as their number. Numbers per
-- mesh handed out before are not comparable with these, so the data step that
-- follows gives the database a new id: a peer paging by sequence sees a new
-- origin and starts over.
CREATE TABLE mesh_event_ledger_next (
    id TEXT UNIQUE,
    mesh_id TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    kind TEXT NOT NULL,
    node_id TEXT,
    session_id TEXT,
    provider_type TEXT,
    payload TEXT NOT NULL DEFAULT '{}',
    seq INTEGER PRIMARY KEY
);
INSERT INTO mesh_event_ledger_next
       (seq, id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload)
SELECT rowid, id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
  FROM mesh_event_ledger ORDER BY rowid;
DROP TABLE mesh_event_ledger;
ALTER TABLE mesh_event_ledger_next RENAME TO mesh_event_ledger;
CREATE INDEX idx_mesh_event_ledger_slice ON mesh_event_ledger(mesh_id, timestamp, id);
CREATE INDEX idx_mesh_event_ledger_mesh_kind ON mesh_event_ledger(mesh_id, kind, timestamp)
    WHERE kind <> 'task_dispatched' AND kind <> 'task_claimed' AND kind <> 'task_completed';
DELETE FROM mesh_meta WHERE key LIKE 'ledger_seq_floor:%';
