-- The routing inputs of a valid v2 event, projected when it is queued, so a drain
-- routes from columns and reads only the events that may be its own.
--
-- route_class: 0 = route from the payload (unversioned, or failing the v2
-- contract), 1 = broadcast, 2 = system, 3 = unicast, 4 = unicast without an
-- addressee. The to_* columns describe a unicast's addressee: machine core of its
-- daemon id, identity key (`core|run|session`), whether its run id is the
-- daemon-form stand-in, and its session.
--
-- lane partitions the undrained events by who may take them: 'u:' + the
-- addressee's key for a unicast, '@' + the machine core of the daemon target for
-- any other event targeted at a daemon, '' for the rest. A drain walks only the
-- lanes that can hold its events, merged in (queued_at, id) order, so a backlog
-- for another coordinator is never read. Existing rows are back-filled by the
-- migration's Rust step.
ALTER TABLE mesh_pending_events ADD COLUMN route_class INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_pending_events ADD COLUMN to_machine TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN to_key TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN to_fallback INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mesh_pending_events ADD COLUMN to_session TEXT;
ALTER TABLE mesh_pending_events ADD COLUMN lane TEXT NOT NULL DEFAULT '';

-- The drain walk: one range per lane, filtered on the daemon target and the event
-- name from the index. It replaces migration 0006's walk index.
DROP INDEX IF EXISTS idx_mesh_pending_events_drain;
CREATE INDEX idx_mesh_pending_events_drain
    ON mesh_pending_events(mesh_id, lane, queued_at, id, coordinator_daemon_id, event)
    WHERE drained = 0;

-- From here on drained_by holds the drainer's identity key (`core|run|session`)
-- instead of its JSON identity: it is written into every drained row, and a
-- shorter value grows the row less (fewer pages rewritten per drain).

-- Event-id dedup asks only about drained rows: an insert no longer touches this
-- index; a drain adds its rows (our event ids are time-ordered, so at the end).
DROP INDEX IF EXISTS idx_mesh_pending_events_event_id;
CREATE INDEX idx_mesh_pending_events_event_id
    ON mesh_pending_events(mesh_id, event_id)
    WHERE drained = 1 AND event_id IS NOT NULL;

-- Coordinator presence: a drain refreshes its drainer's record, a coordinator
-- can refresh it explicitly and mark it ended. A run that ended or was not seen
-- for the TTL is no longer live, and its unicasts go to the next coordinator on
-- its machine.
CREATE TABLE mesh_coordinator_presence (
    mesh_id TEXT NOT NULL,
    coordinator_key TEXT NOT NULL,
    machine TEXT,
    daemon_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    session_id TEXT,
    last_seen_ms INTEGER NOT NULL,
    ended_at_ms INTEGER,
    PRIMARY KEY (mesh_id, coordinator_key)
) WITHOUT ROWID;
