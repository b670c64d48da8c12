//! The coordinator inbox: `mesh_pending_events` holds every queued event (the
//! fingerprint and event-id history), `mesh_inbox_queue` the undrained ones in
//! drain-walk order, `mesh_inbox_drained` the event ids of the drained ones.
//! Queueing stamps and deduplicates; a drain routes every event inside its
//! transaction.
//!
//! What queueing, drains, peeks, acks and held requeues decide (the checks and
//! dedup, the lanes and the oldest-first walk, routing, reconciliation) is
//! `agentmesh_store::inbox_writes`, over this module's `InboxRows`; here is the
//! SQL and the row mapping. A drain never rewrites an event row: it deletes
//! queue entries and adds dedup records, small rows written side by side.
//!
//! - `queue`: an event row with its queue entry; requeueing a stored row.
//! - `columns`: an event row's routing columns and lane.
//! - `walk`: the next lane holding events, a lane's page, the dedup history.
//! - `drain`: the `InboxRows` of a transaction; taking events off the queue.
//! - `presence`: coordinator presence records.
//! - `reconcile`: the ledger entry of a refine job's outcome.
//! - `held`: the rows a held event's requeue reads.
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

pub(crate) use admin::{count, delete, retract_dispatch_blocked};
pub(crate) use columns::backfill_route_columns;
pub(crate) use drain::{ack, drain, peek};
pub(crate) use held::requeue_held;
pub(crate) use presence::{end_coordinator, touch_coordinator};
pub(crate) use queue::{enqueue_stored, insert_row, queue, record_drained_stored};
