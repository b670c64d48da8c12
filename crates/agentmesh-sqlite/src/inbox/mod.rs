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
//! - `walk`: the SQL of a drain's walk (the next lane holding events, a lane's
//!   page) and its row mapping.
//! - `drain`: the `InboxRows` of a transaction: the walk's reads, the dedup
//!   history, taking events off the queue, the rows a held requeue reads.
//! - `reconcile`: the ledger entry of a refine job's outcome.
//! - `admin`: the count of undrained events.
//!
//! Every ledger entry and event text is the core's (`agentmesh_core::events`).

mod admin;
mod columns;
mod drain;
mod queue;
mod reconcile;
mod walk;

pub(crate) use admin::count;
pub(crate) use columns::backfill_route_columns;
pub(crate) use drain::Inbox;
pub(crate) use queue::{enqueue_stored, insert_row, record_drained_stored, store_event};
