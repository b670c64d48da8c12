//! Queueing's SQL (`agentmesh_store::inbox_writes` checks, stamps and
//! deduplicates): the event row with its queue entry, requeueing a stored row.

use agentmesh_core::Timestamp;
use agentmesh_core::events::{EmitHint, PendingEvent, pending_event_fingerprint, project_route};
use agentmesh_store::QueueOutcome;
use rusqlite::{Connection, params};

use super::columns::RouteColumns;
use crate::Res;
use crate::payload::{Json, Stored};

/// Queues one event for a coordinator (stamped on the way in).
pub(crate) fn queue(
    conn: &Connection,
    mesh_id: &str,
    ev: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<QueueOutcome> {
    agentmesh_store::inbox_writes::queue(&super::drain::Inbox(conn), mesh_id, ev, hint, self_machine_id, now)
}

/// Stores an event, as it is, under `id`: the whole event in `payload`, its daemon
/// target, fingerprint, event id, addressee and projected routing inputs in their
/// columns (the rest of its v2 envelope is read from the payload). `false` when its fingerprint is already used in the mesh (nothing is
/// written).
pub(crate) fn insert_row(conn: &Connection, id: &str, ev: &PendingEvent) -> Res<bool> {
    let fingerprint = pending_event_fingerprint(ev);
    let fingerprint = (!fingerprint.is_empty()).then_some(fingerprint);
    let envelope = &ev.envelope;
    let identity =
        |i: &Option<agentmesh_core::events::CoordinatorIdentity>| i.as_ref().map(|i| i.to_json().to_string());
    let value = ev.to_value();
    let payload = value.to_string();
    let projected = project_route(&value);
    let columns = RouteColumns::of(projected.as_ref());
    let event_id = match &projected {
        Some(p) => Some(p.event_id.as_str()),
        None => envelope.event_id.as_deref(),
    };
    let target = ev.target_coordinator_daemon_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let lane = columns.lane(target);
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO mesh_pending_events
                 (id, mesh_id, coordinator_daemon_id, event, payload, fingerprint, queued_at,
                  event_id, intended_for, route_class, to_machine, to_key, to_fallback, to_session, lane)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?
        .execute(params![
            id,
            ev.mesh_id,
            target,
            ev.event,
            Stored::of(&payload),
            fingerprint,
            ev.queued_at.millis(),
            event_id,
            identity(&envelope.intended_for),
            columns.class,
            columns.machine,
            columns.key,
            columns.fallback,
            columns.session,
            lane,
        ])?;
    if inserted == 0 {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_rowid)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![ev.mesh_id, lane, ev.queued_at.millis(), id, target, ev.event, conn.last_insert_rowid()])?;
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

/// The payloads of the undrained events named `name`.
pub(super) fn queued_payloads(conn: &Connection, mesh_id: &str, name: &str) -> Res<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT e.payload FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
          WHERE q.mesh_id = ?1 AND q.event = ?2",
    )?;
    let rows = stmt.query_map(params![mesh_id, name], |r| r.get::<_, Json>(0).map(String::from))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
