-- The ledger's task column (filled from payload.taskId) and the index that makes a
-- slice page cost the same wherever its cursor is: (mesh_id, timestamp, id) is
-- exactly the slice order.
ALTER TABLE mesh_event_ledger ADD COLUMN task_id TEXT;
UPDATE mesh_event_ledger
   SET task_id = NULLIF(TRIM(json_extract(payload, '$.taskId')), '')
 WHERE json_valid(payload) AND json_type(payload, '$.taskId') = 'text';
CREATE INDEX idx_mesh_event_ledger_slice ON mesh_event_ledger(mesh_id, timestamp, id);
CREATE INDEX idx_mesh_event_ledger_task ON mesh_event_ledger(mesh_id, task_id) WHERE task_id IS NOT NULL;
