-- Task and event payloads become bytes: the JSON text as it was, or, when that
-- is shorter, the text deflated behind a marker byte (agentmesh_store::packed).
-- Rows written before keep their text, as UTF-8 bytes, and read as they did.
-- An older agentmesh would read the deflated rows as text, so it is refused by
-- this schema version instead.
ALTER TABLE mesh_queue ALTER COLUMN payload TYPE bytea USING convert_to(payload, 'UTF8');
ALTER TABLE mesh_pending_events
    ALTER COLUMN payload DROP DEFAULT,
    ALTER COLUMN payload TYPE bytea USING convert_to(payload, 'UTF8'),
    ALTER COLUMN payload SET DEFAULT convert_to('{}', 'UTF8');
