//! Queueing: stamping an event, the refine-terminal and fingerprint dedup, and
//! the event row with its queue entry.

use std::sync::Arc;

use agentmesh_core::events::{
    EmitHint, PendingEvent, pending_event_fingerprint, project_route, refine_job_id,
    refine_terminal_fingerprint, stamp_event,
};
use agentmesh_core::{InvalidInput, Timestamp};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{DuplicateReason, QueueOutcome, StoreError};

use super::walk::parse;
use crate::db::{Db, Owned};
use crate::{Fail, Res};
use agentmesh_store::route_columns::RouteColumns;

/// Queues one event for a coordinator (stamped on the way in), in the caller's
/// transaction, which holds the mesh's lock.
pub(crate) fn queue(
    db: &Db<'_>,
    mesh_id: &str,
    ev: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<QueueOutcome> {
    let (id, ev) = match prepare(db, mesh_id, ev, hint, self_machine_id, now)? {
        Ok(prepared) => prepared,
        Err(reason) => return Ok(QueueOutcome::Duplicate(reason)),
    };
    if db.execute_owned(INSERT_EVENT, &row_values(&id, &ev))? == 0 {
        return Ok(QueueOutcome::Duplicate(DuplicateReason::Fingerprint));
    }
    Ok(QueueOutcome::Queued { id, event: ev })
}

/// Queues one event as [`queue`] does, for a caller that does not read the
/// outcome: the event's row goes out with the operation's next statement (see
/// [`Db::defer`]), and a duplicate is dropped as [`queue`] drops it.
pub(crate) fn queue_later(
    db: &Db<'_>,
    mesh_id: &str,
    ev: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<()> {
    if let Ok((id, ev)) = prepare(db, mesh_id, ev, hint, self_machine_id, now)? {
        db.defer(INSERT_EVENT, row_values(&id, &ev), None);
    }
    Ok(())
}

/// Checks and stamps an event and mints its id; a refine outcome already
/// queued is the duplicate it names.
fn prepare(
    db: &Db<'_>,
    mesh_id: &str,
    mut ev: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<Result<(String, PendingEvent), DuplicateReason>> {
    if ev.event.trim().is_empty() {
        return Err(Fail(StoreError::InvalidInput(InvalidInput::new("event", "must not be blank"))));
    }
    if ev.mesh_id != mesh_id {
        return Err(Fail(StoreError::InvalidInput(InvalidInput::new(
            "meshId",
            format!("the event belongs to mesh {:?}, not {mesh_id:?}", ev.mesh_id),
        ))));
    }
    stamp_event(&mut ev, hint, &mint_at(now), self_machine_id);
    if refine_terminal_fingerprint(&ev).is_some() && refine_terminal_pending(db, &ev)? {
        return Ok(Err(DuplicateReason::RefineTerminal));
    }
    Ok(Ok((mint_at(now), ev)))
}

/// Stores an event, as it is, with its queue entry, in one statement: the whole
/// event in `payload`, its daemon target, fingerprint, v2 envelope and projected
/// routing inputs in their columns. Changes no row when its fingerprint (or id)
/// is already used in the mesh: neither is an error.
const INSERT_EVENT: &str = "WITH stored AS (
         INSERT INTO mesh_pending_events
             (id, mesh_id, coordinator_daemon_id, event, payload, fingerprint, queued_at,
              protocol_version, event_id, scope, dispatched_by, intended_for,
              route_class, to_machine, to_key, to_fallback, to_session, lane)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
         ON CONFLICT DO NOTHING
         RETURNING mesh_id, lane, queued_at, id, coordinator_daemon_id, event, row_id)
     INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_row_id)
     SELECT mesh_id, lane, queued_at, id, coordinator_daemon_id, event, row_id FROM stored";

/// The parameters of [`INSERT_EVENT`] for the event `ev` stored under `id`.
fn row_values(id: &str, ev: &PendingEvent) -> Vec<Owned> {
    let fingerprint = pending_event_fingerprint(ev);
    let fingerprint = (!fingerprint.is_empty()).then_some(fingerprint);
    let envelope = &ev.envelope;
    let identity =
        |i: &Option<agentmesh_core::events::CoordinatorIdentity>| i.as_ref().map(|i| i.to_json().to_string());
    let value = ev.to_value();
    let projected = project_route(&value);
    let columns = RouteColumns::of(projected.as_ref());
    let event_id = match &projected {
        Some(p) => Some(p.event_id.clone()),
        None => envelope.event_id.clone(),
    };
    let target = ev.target_coordinator_daemon_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let lane = columns.lane(target);
    vec![
        Arc::new(id.to_owned()),
        Arc::new(ev.mesh_id.clone()),
        Arc::new(target.map(str::to_owned)),
        Arc::new(ev.event.clone()),
        Arc::new(value.to_string()),
        Arc::new(fingerprint),
        Arc::new(ev.queued_at.millis()),
        Arc::new(envelope.protocol_version.map(|v| v.as_str())),
        Arc::new(event_id),
        Arc::new(envelope.scope.map(|s| s.as_str())),
        Arc::new(identity(&envelope.dispatched_by)),
        Arc::new(identity(&envelope.intended_for)),
        Arc::new(columns.class),
        Arc::new(columns.machine.clone()),
        Arc::new(columns.key.clone()),
        Arc::new(i64::from(columns.fallback)),
        Arc::new(columns.session.clone()),
        Arc::new(lane),
    ]
}

/// Puts the stored event row `row_id` of the mesh (back) on the queue; `false`
/// when it was queued already or there is no such row.
pub(super) fn enqueue_stored(db: &Db<'_>, mesh_id: &str, row_id: i64) -> Res<bool> {
    let queued = db.execute(
        "INSERT INTO mesh_inbox_queue
             (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_row_id)
         SELECT mesh_id, lane, queued_at, id, coordinator_daemon_id, event, row_id
           FROM mesh_pending_events WHERE mesh_id = $1 AND row_id = $2
         ON CONFLICT DO NOTHING",
        &[&mesh_id, &row_id],
    )?;
    if queued > 0 {
        db.execute(
            "DELETE FROM mesh_inbox_drained d
              USING mesh_pending_events e
              WHERE d.mesh_id = $1 AND e.mesh_id = $1 AND e.row_id = $2
                AND d.event_id = e.event_id AND d.id = e.id",
            &[&mesh_id, &row_id],
        )?;
    }
    Ok(queued > 0)
}

/// Whether an undrained event of the same refine job and outcome is queued.
fn refine_terminal_pending(db: &Db<'_>, ev: &PendingEvent) -> Res<bool> {
    let Some(job) = refine_job_id(&ev.metadata_event) else { return Ok(false) };
    let rows = db.query(
        "SELECT e.payload FROM mesh_inbox_queue q
           JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
          WHERE q.mesh_id = $1 AND q.event = $2",
        &[&ev.mesh_id, &ev.event],
    )?;
    for row in rows {
        let payload = parse(row.get(0));
        let metadata = payload.get("metadataEvent").and_then(|m| m.as_object());
        if metadata.and_then(refine_job_id) == Some(job) {
            return Ok(true);
        }
    }
    Ok(false)
}
