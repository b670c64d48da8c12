//! Queueing: stamping an event, the refine-terminal and fingerprint dedup, and
//! the event row with its queue entry.

use agentmesh_core::Timestamp;
use agentmesh_core::events::{EmitHint, PendingEvent, pending_event_fingerprint, project_route};
use agentmesh_store::ids::mint_at;
use agentmesh_store::inbox_writes;
use agentmesh_store::{DuplicateReason, QueueOutcome};

use crate::Res;
use crate::columns::statement_row;
use crate::db::{Db, Write};
use agentmesh_store::route_columns::RouteColumns;

/// Queues one event for a coordinator (stamped on the way in), in the caller's
/// transaction, which holds the mesh's inbox lock.
pub(crate) fn queue(
    db: &Db<'_>,
    mesh_id: &str,
    ev: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<QueueOutcome> {
    inbox_writes::queue(&super::drain::Inbox(db), mesh_id, ev, hint, self_machine_id, now)
}

/// Stores a stamped event under `id` with its queue entry; `false` when its
/// fingerprint is already used in the mesh.
pub(super) fn insert(db: &Db<'_>, id: &str, ev: &PendingEvent) -> Res<bool> {
    Ok(db.execute_owned(INSERT_EVENT, &EventRow::of(id, ev).values(&ev.mesh_id))? > 0)
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
        insert_later(db, &id, &ev);
    }
    Ok(())
}

/// Stores a stamped event under `id` with its queue entry, with the
/// operation's next statement; a duplicate is dropped.
pub(crate) fn insert_later(db: &Db<'_>, id: &str, ev: &PendingEvent) {
    db.defer_write(&INSERT_EVENT_LATER, EventRow::of(id, ev).values(&ev.mesh_id), None);
}

/// Checks and stamps an event and mints its id; a refine outcome already
/// queued is the duplicate it names.
fn prepare(
    db: &Db<'_>,
    mesh_id: &str,
    ev: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<Result<(String, PendingEvent), DuplicateReason>> {
    let ev = inbox_writes::stamp(mesh_id, ev, hint, self_machine_id, now)?;
    if inbox_writes::refine_terminal_queued(&super::drain::Inbox(db), &ev)? {
        return Ok(Err(DuplicateReason::RefineTerminal));
    }
    Ok(Ok((mint_at(now), ev)))
}

/// Stores an event, as it is, with its queue entry, in one statement: the whole
/// event in `payload`, its daemon target, fingerprint, v2 envelope and projected
/// routing inputs in their columns. Changes no row when its fingerprint (or id)
/// is already used in the mesh: neither is an error. `$1` is the mesh, the rest
/// an [`EventRow`]'s values.
const INSERT_EVENT: &str = concat!("WITH stored AS (", store_event!(), ") ", queue_entry!("stored"));

/// [`INSERT_EVENT`] as a write that shares a statement with the writes next
/// to it.
static INSERT_EVENT_LATER: Write = Write { bodies: &[store_event!(), queue_entry!("{0}")], checked: false };

/// The event row of [`INSERT_EVENT`], returning what its queue entry takes.
macro_rules! store_event {
    () => {
        "INSERT INTO mesh_pending_events
             (id, mesh_id, coordinator_daemon_id, event, payload, fingerprint, queued_at,
              event_id, intended_for, route_class, to_machine, to_key, to_fallback, to_session, lane)
         VALUES ($2, $1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
         ON CONFLICT DO NOTHING
         RETURNING mesh_id, lane, queued_at, id, coordinator_daemon_id, event, row_id"
    };
}
use store_event;

/// The queue entry of [`INSERT_EVENT`], from the stored event row `$from`.
macro_rules! queue_entry {
    ($from:literal) => {
        concat!(
            "INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_row_id)
     SELECT mesh_id, lane, queued_at, id, coordinator_daemon_id, event, row_id FROM ",
            $from
        )
    };
}
use queue_entry;

statement_row! {
    /// One event row with its queue entry's inputs, in [`INSERT_EVENT`]'s
    /// parameter order.
    pub(crate) struct EventRow {
        id: String,
        target: Option<String>,
        event: String,
        payload: Vec<u8>,
        fingerprint: Option<String>,
        queued_at: i64,
        event_id: Option<String>,
        intended_for: Option<String>,
        route_class: i64,
        to_machine: Option<String>,
        to_key: Option<String>,
        to_fallback: i64,
        to_session: Option<String>,
        lane: String,
    }
}

impl EventRow {
    /// The row of the event `ev` stored under `id`.
    pub(crate) fn of(id: &str, ev: &PendingEvent) -> EventRow {
        let fingerprint = pending_event_fingerprint(ev);
        let envelope = &ev.envelope;
        let identity = |i: &Option<agentmesh_core::events::CoordinatorIdentity>| {
            i.as_ref().map(|i| i.to_json().to_string())
        };
        let value = ev.to_value();
        let projected = project_route(&value);
        let columns = RouteColumns::of(projected.as_ref());
        let event_id = match &projected {
            Some(p) => Some(p.event_id.clone()),
            None => envelope.event_id.clone(),
        };
        let target = ev.target_coordinator_daemon_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let lane = columns.lane(target);
        EventRow {
            id: id.to_owned(),
            target: target.map(str::to_owned),
            event: ev.event.clone(),
            payload: crate::payload::stored(&value.to_string()),
            fingerprint: (!fingerprint.is_empty()).then_some(fingerprint),
            queued_at: ev.queued_at.millis(),
            event_id,
            intended_for: identity(&envelope.intended_for),
            route_class: columns.class,
            to_machine: columns.machine,
            to_key: columns.key,
            to_fallback: i64::from(columns.fallback),
            to_session: columns.session,
            lane,
        }
    }
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

/// The payloads of the undrained events named `name`. The read runs under the
/// mesh's inbox lock (free when the caller holds it already): a drain beside it
/// could take the event it looks for.
pub(super) fn queued_payloads(db: &Db<'_>, mesh_id: &str, name: &str) -> Res<Vec<String>> {
    db.lock(mesh_id, crate::Lock::Inbox)?;
    let rows = db.query(
        "SELECT e.payload FROM mesh_inbox_queue q
           JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
          WHERE q.mesh_id = $1 AND q.event = $2",
        &[&mesh_id, &name],
    )?;
    Ok(rows.iter().map(|r| crate::payload::json(r.get(0))).collect())
}
