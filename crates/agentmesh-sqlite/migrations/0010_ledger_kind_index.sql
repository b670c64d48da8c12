-- The kind index leaves out the kinds written once per task enqueued, claimed and
-- completed. They are most of a ledger, so a filter on them finds its entries
-- close together in time order (the slice index); every other kind is rare, and
-- its filter seeks this index. Each enqueue, claim and completion then writes one
-- index fewer. A query states the index's condition, word for word, to use it
-- (`ledger::INDEXED_KIND`). `<>` rather than `NOT IN`: SQLite evaluates a
-- `NOT IN` list by building a temporary table on every insert.
DROP INDEX IF EXISTS idx_mesh_event_ledger_mesh_kind;
CREATE INDEX idx_mesh_event_ledger_mesh_kind ON mesh_event_ledger(mesh_id, kind, timestamp)
    WHERE kind <> 'task_dispatched' AND kind <> 'task_claimed' AND kind <> 'task_completed';
