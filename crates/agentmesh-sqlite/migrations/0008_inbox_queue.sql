-- The undrained events move out of the event rows into a queue of their own, so a
-- drain never rewrites an event row (its payload included): it deletes the queue
-- entries of what it took and records the event ids it took, both small rows
-- written next to each other.
--
-- mesh_pending_events keeps every queued event, drained or not: the fingerprint
-- history the unique index refuses duplicates against, and what retention,
-- export and requeue read.
--
-- mesh_inbox_queue holds one entry per undrained event, clustered in drain-walk
-- order (lane, then queued_at, id: see migration 0007), with the two columns a
-- drain filters on and the event row's rowid. An event is drained exactly when
-- it has no queue entry.
CREATE TABLE mesh_inbox_queue (
    mesh_id TEXT NOT NULL,
    lane TEXT NOT NULL,
    queued_at INTEGER NOT NULL,
    id TEXT NOT NULL,
    coordinator_daemon_id TEXT,
    event TEXT NOT NULL,
    event_rowid INTEGER NOT NULL,
    PRIMARY KEY (mesh_id, lane, queued_at, id)
) WITHOUT ROWID;

-- mesh_inbox_drained holds the event id of every drained event row that has one
-- (delivered, deduplicated or quarantined): the event-id dedup history, as the
-- partial index of migration 0007 held it.
CREATE TABLE mesh_inbox_drained (
    mesh_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    id TEXT NOT NULL,
    PRIMARY KEY (mesh_id, event_id, id)
) WITHOUT ROWID;

INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_rowid)
    SELECT mesh_id, lane, queued_at, id, coordinator_daemon_id, event, rowid
      FROM mesh_pending_events WHERE drained = 0;
INSERT OR IGNORE INTO mesh_inbox_drained (mesh_id, event_id, id)
    SELECT mesh_id, event_id, id FROM mesh_pending_events WHERE drained = 1 AND event_id IS NOT NULL;

DROP INDEX IF EXISTS idx_mesh_pending_events_drain;
DROP INDEX IF EXISTS idx_mesh_pending_events_event_id;
DROP INDEX IF EXISTS idx_mesh_pending_events_mesh_drained;
ALTER TABLE mesh_pending_events DROP COLUMN drained;
ALTER TABLE mesh_pending_events DROP COLUMN drained_at;
ALTER TABLE mesh_pending_events DROP COLUMN drained_by;

-- An event row that goes (delete by id, clear, retention, retract) takes its
-- queue entry and its dedup record with it.
CREATE TRIGGER mesh_pending_events_removed AFTER DELETE ON mesh_pending_events
BEGIN
    DELETE FROM mesh_inbox_queue
     WHERE mesh_id = old.mesh_id AND lane = old.lane AND queued_at = old.queued_at AND id = old.id;
    DELETE FROM mesh_inbox_drained
     WHERE mesh_id = old.mesh_id AND event_id = old.event_id AND id = old.id;
END;
