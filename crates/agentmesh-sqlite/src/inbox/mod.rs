//! The coordinator inbox: `mesh_pending_events` holds every queued event (the
//! fingerprint and event-id history), `mesh_inbox_queue` the undrained ones in
//! drain-walk order, `mesh_inbox_drained` the event ids of the drained ones.
//! Queueing stamps and deduplicates; a drain routes every event inside its
//! transaction.
//!
//! A drain walks the mesh's queue entries oldest first, lane by lane, in pages
//! keyed by (queued_at, id). The daemon target and the `onlyEvents` filter are
//! applied in SQL from the queue entries; the v2 routing decision
//! (`agentmesh_core::events::route_event`) is taken per event. Only delivered,
//! deduplicated and quarantined events are taken off the queue; routed-away ones
//! are stepped over and stay queued, so a backlog for other coordinators costs a
//! walk over queue entries and never hides the drainer's own events. A drain
//! never rewrites an event row: it deletes queue entries and adds dedup records,
//! small rows written side by side.
//!
//! - `queue`: queueing an event (stamp, dedup, the row and its queue entry).
//! - `columns`: an event row's routing columns and lane.
//! - `walk`: the lanes a drain reads and its oldest-first walk over them.
//! - `drain`: drain, peek and ack.
//! - `presence`: coordinator presence records.
//! - `reconcile`: refine terminals and stale alerts in what a drain hands out.
//! - `held`: requeueing a held event.
//! - `admin`: delete, retract, clear, count.
//!
//! Every ledger entry and event text is the core's (`agentmesh_core::events`).

mod admin;
mod columns;
mod drain;
mod held;
mod presence;
mod queue;
mod reconcile;
mod walk;

pub(crate) use admin::{clear, count, delete, retract_dispatch_blocked};
pub(crate) use columns::backfill_route_columns;
pub(crate) use drain::{ack, drain, peek};
pub(crate) use held::requeue_held;
pub(crate) use presence::{end_coordinator, touch_coordinator};
pub(crate) use queue::{enqueue_stored, insert_row, queue, record_drained_stored};
