//! Queueing: stamping an event, the refine-terminal and fingerprint dedup, and
//! the event row with its queue entry.

use std::sync::Arc;

use agentmesh_core::Timestamp;
use agentmesh_core::events::{EmitHint, PendingEvent};
use agentmesh_store::DuplicateReason;
use agentmesh_store::ids::mint_at;
use agentmesh_store::inbox_writes;

use crate::Res;
use crate::db::{Db, Owned, Write};
use agentmesh_store::transfer::StoredEvent;

/// Stores a stamped event under `id` with its queue entry; `false` when its
/// fingerprint is already used in the mesh.
pub(super) fn insert(db: &Db<'_>, id: &str, ev: &PendingEvent) -> Res<bool> {
    Ok(db.execute_owned(INSERT_EVENT, &event_values(StoredEvent::queued(id, ev)))? > 0)
}

/// Queues one event as [`inbox_writes::queue`] does, for a caller that does not read the
/// outcome: the event's row goes out with the operation's next statement (see
/// [`Db::defer`]), and a duplicate is dropped as queueing drops it.
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
    db.defer_write(&INSERT_EVENT_LATER, event_values(StoredEvent::queued(id, ev)), None);
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
/// is already used in the mesh: neither is an error. Its parameters are
/// [`event_values`].
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

/// The parameters of an event row's insert ([`INSERT_EVENT`], the import's):
/// the mesh, the id, then the row's columns in the statements' order.
pub(crate) fn event_values(e: StoredEvent) -> Vec<Owned> {
    let r = e.route;
    vec![
        Arc::new(e.mesh_id),
        Arc::new(e.id),
        Arc::new(e.coordinator_daemon_id),
        Arc::new(e.name),
        Arc::new(crate::payload::stored(&e.payload)),
        Arc::new(e.fingerprint),
        Arc::new(e.queued_at_ms),
        Arc::new(r.event_id),
        Arc::new(r.intended_for),
        Arc::new(r.route_class),
        Arc::new(r.to_machine),
        Arc::new(r.to_key),
        Arc::new(r.to_fallback),
        Arc::new(r.to_session),
        Arc::new(r.lane),
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
