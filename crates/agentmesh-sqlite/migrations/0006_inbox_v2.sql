-- The coordinator inbox gains the v2 envelope columns (the whole event, envelope
-- included, stays in payload; these make it queryable) and the drainer's identity.
ALTER TABLE mesh_pending_events ADD COLUMN protocol_version TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN event_id TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN scope TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN dispatched_by TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN intended_for TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN drained_by TEXT;

-- Events queued by the original already carry their envelope in the payload.
UPDATE mesh_pending_events
   SET protocol_version = json_extract(payload, '$.protocolVersion'),
       event_id = NULLIF(TRIM(json_extract(payload, '$.eventId')), ''),
       scope = json_extract(payload, '$.scope'),
       dispatched_by = json_extract(payload, '$.dispatchedBy'),
       intended_for = json_extract(payload, '$.intendedFor')
 WHERE json_valid(payload) AND json_type(payload, '$.eventId') = 'text';

-- Event-id dedup is a lookup, not a scan of every drained id.
CREATE INDEX idx_mesh_pending_events_event_id
    ON mesh_pending_events(mesh_id, event_id)
    WHERE event_id IS NOT NULL;

-- A drain walks undrained events in (queued_at, id) order and filters on the
-- daemon target and the event name without touching the table; drained rows leave
-- the index. It replaces the original's (mesh_id, drained, queued_at) index.
CREATE INDEX idx_mesh_pending_events_drain
    ON mesh_pending_events(mesh_id, queued_at, id, coordinator_daemon_id, event)
    WHERE drained = 0;
DROP INDEX IF EXISTS idx_mesh_pending_events_mesh_drained;
