//! Queueing's SQL (`agentmesh_store::inbox_writes` checks, stamps and
//! deduplicates): the event row with its queue entry, requeueing a stored row.

use agentmesh_core::events::PendingEvent;
use rusqlite::{Connection, params};

use crate::Res;
use crate::payload::Stored;
use agentmesh_store::transfer::StoredEvent;

/// Stores an event, as it is, under `id`: the whole event in `payload`, its daemon
/// target, fingerprint, event id, addressee and projected routing inputs in their
/// columns (the rest of its v2 envelope is read from the payload). `false` when its fingerprint is already used in the mesh (nothing is
/// written).
pub(crate) fn insert_row(conn: &Connection, id: &str, ev: &PendingEvent) -> Res<bool> {
    store_event(conn, &StoredEvent::queued(id, ev))
}

/// Stores an event row as it is (queued now, or imported), with its queue
/// entry when it is undrained, or its event-id dedup record when it was
/// drained. `false` when its id or fingerprint is used in the mesh already
/// (nothing is written).
pub(crate) fn store_event(conn: &Connection, e: &StoredEvent) -> Res<bool> {
    let r = &e.route;
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO mesh_pending_events
                 (id, mesh_id, coordinator_daemon_id, event, payload, fingerprint, queued_at,
                  event_id, intended_for, route_class, to_machine, to_key, to_fallback, to_session, lane)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?
        .execute(params![
            e.id,
            e.mesh_id,
            e.coordinator_daemon_id,
            e.name,
            Stored::of(&e.payload),
            e.fingerprint,
            e.queued_at_ms,
            r.event_id,
            r.intended_for,
            r.route_class,
            r.to_machine,
            r.to_key,
            r.to_fallback,
            r.to_session,
            r.lane,
        ])?;
    if inserted == 0 {
        return Ok(false);
    }
    let rowid = conn.last_insert_rowid();
    if !e.drained {
        conn.prepare_cached(
            "INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_rowid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![e.mesh_id, r.lane, e.queued_at_ms, e.id, e.coordinator_daemon_id, e.name, rowid])?;
    } else if let Some(event_id) = &r.event_id {
        conn.prepare_cached(
            "INSERT OR IGNORE INTO mesh_inbox_drained (mesh_id, event_id, id) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![e.mesh_id, event_id, e.id])?;
    }
    Ok(true)
}

/// Puts the stored event row `rowid` (back) on the queue; `false` when it was
/// queued already or there is no such row.
pub(crate) fn enqueue_stored(conn: &Connection, rowid: i64) -> Res<bool> {
    let queued = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO mesh_inbox_queue
                 (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_rowid)
             SELECT mesh_id, lane, queued_at, id, coordinator_daemon_id, event, rowid
               FROM mesh_pending_events WHERE rowid = ?1",
        )?
        .execute([rowid])?;
    if queued > 0 {
        conn.prepare_cached(
            "DELETE FROM mesh_inbox_drained
              WHERE (mesh_id, event_id, id) = (SELECT mesh_id, event_id, id FROM mesh_pending_events WHERE rowid = ?1)",
        )?
        .execute([rowid])?;
    }
    Ok(queued > 0)
}

/// Records the event id of the stored, drained event row `rowid` (if it has one).
pub(crate) fn record_drained_stored(conn: &Connection, rowid: i64) -> Res<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO mesh_inbox_drained (mesh_id, event_id, id)
         SELECT mesh_id, event_id, id FROM mesh_pending_events WHERE rowid = ?1 AND event_id IS NOT NULL",
    )?
    .execute([rowid])?;
    Ok(())
}
