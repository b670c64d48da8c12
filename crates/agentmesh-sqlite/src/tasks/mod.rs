//! The work queue: `mesh_queue` rows, their projected columns, dependency edges,
//! claims and the task lifecycle.
//!
//! The JSON `payload` of a row is the task (the original's queue entry) and the
//! source of truth. Every write also rewrites the row's projected columns from it
//! (`agentmesh_store::projection`), so a claim selects candidates through indexes in claim order
//! and decodes only the winner. Readiness is maintained, not recomputed per claim:
//! `deps_unmet` counts a task's dependencies that are not completed and is updated
//! whenever one of them changes status; `hold` folds it together with the block and
//! the parking into one indexed number (0 = claimable as far as the task goes).
//!
//! What a write stores and records is decided by the core
//! (`agentmesh_core::effects::task`); the writes that load a task, ask the core
//! and persist its decision are shared with the other store
//! (`agentmesh_store::task_writes`), over this store's rows (`persist`), and so is
//! the claim walk (`agentmesh_core::claim::walk`).
//!
//! - `rows`: projection, load and save by rowid, edges and readiness.
//! - `enqueue`: enqueue and the raw queue operations (import, replace, insert, update).
//! - `claim`: the claim streams and the survey.
//! - `persist`: the rows ([`Rows`], over a connection) the shared task writes
//!   (completion, heartbeat, cancel, requeue, reclaim, and the effect writer) work on.
//! - `reads`: listings, counts and lookups.

mod claim;
mod enqueue;
mod persist;
mod reads;
mod rows;

pub(crate) use agentmesh_store::task_writes::{complete, heartbeat, reclaim_if_lease_expired};
pub(crate) use claim::claim;
pub(crate) use enqueue::{enqueue, import_entries, record_dispatched};
pub(crate) use persist::Rows;
pub(crate) use reads::{
    active_assignments, entries, expired_leases, find, mesh_task_count, oldest_pending_created_at, stats,
};
pub(crate) use rows::backfill_projection;
pub(crate) use rows::decode;
