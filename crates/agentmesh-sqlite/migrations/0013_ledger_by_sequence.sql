-- The ledger stored in sequence order: the table is keyed by (mesh_id, seq), so a
-- page by sequence walks the table itself, and the separate sequence index goes:
-- every append writes one b-tree fewer. The entry id stays unique through its own
-- index; the slice and kind indexes are rebuilt as they were.
--
-- A row without a number (written by a process that did not number it) takes
-- the next numbers of its mesh, in (timestamp, rowid) order, before the copy.
UPDATE mesh_event_ledger SET seq = numbered.n
  FROM (SELECT l.rowid AS rid,
               MAX(COALESCE((SELECT MAX(m.seq) FROM mesh_event_ledger AS m WHERE m.mesh_id = l.mesh_id), 0),
                   COALESCE((SELECT value FROM mesh_meta WHERE key = 'ledger_seq_floor:' || l.mesh_id), 0))
                 + row_number() OVER (PARTITION BY l.mesh_id ORDER BY l.timestamp, l.rowid) AS n
          FROM mesh_event_ledger AS l
         WHERE l.seq IS NULL) AS numbered
 WHERE mesh_event_ledger.rowid = numbered.rid;

CREATE TABLE mesh_event_ledger_by_seq (
    mesh_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT UNIQUE,
    timestamp TEXT NOT NULL,
    kind TEXT NOT NULL,
    node_id TEXT,
    session_id TEXT,
    provider_type TEXT,
    payload TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (mesh_id, seq)
) WITHOUT ROWID;
INSERT INTO mesh_event_ledger_by_seq
       (mesh_id, seq, id, timestamp, kind, node_id, session_id, provider_type, payload)
SELECT mesh_id, seq, id, timestamp, kind, node_id, session_id, provider_type, payload
  FROM mesh_event_ledger ORDER BY mesh_id, seq;
DROP TABLE mesh_event_ledger;
ALTER TABLE mesh_event_ledger_by_seq RENAME TO mesh_event_ledger;
CREATE INDEX idx_mesh_event_ledger_slice ON mesh_event_ledger(mesh_id, timestamp, id);
CREATE INDEX idx_mesh_event_ledger_mesh_kind ON mesh_event_ledger(mesh_id, kind, timestamp)
    WHERE kind <> 'task_dispatched' AND kind <> 'task_claimed' AND kind <> 'task_completed';
