//! The bench cases, one function per case, grouped as the seed harness groups them
//! (`--only=` takes the group names). Helpers shared by several cases live here.

use agentmesh_core::{Claimant, NewTask, TaskStatus};
use agentmesh_store::{StatusCount, Store};

use crate::data::{MESH_ID, at};
use crate::timing::Timer;

pub(crate) mod claim;
pub(crate) mod enqueue;
pub(crate) mod floor;
pub(crate) mod http;
mod http_client;
pub(crate) mod http_floor;
pub(crate) mod ledger;
pub(crate) mod pending_events;
pub(crate) mod pg_claim;
pub(crate) mod pg_floor;
pub(crate) mod reads;
pub(crate) mod reservations;
pub(crate) mod retention;
pub(crate) mod storage;
pub(crate) mod webhooks;

/// A claimant on `node` with `session` and no tags or caps.
fn claimant(node: String, session: String) -> Claimant {
    Claimant { node_id: node, session_id: session, ..Claimant::default() }
}

/// Enqueues items `0..count` with `enqueue_batch`, `batch` at a time, timing each
/// call; `make(i)` builds item `i` (outside the clock).
///
/// A batch is enqueued at the instant of its first item, so all its tasks share
/// that `createdAt` and their order is the batch order.
fn enqueue_in_batches(
    store: &dyn Store,
    count: usize,
    batch: usize,
    timer: &mut Timer,
    make: impl Fn(usize) -> NewTask,
) -> anyhow::Result<()> {
    for first in (0..count).step_by(batch) {
        let tasks: Vec<NewTask> = (first..count.min(first + batch)).map(&make).collect();
        let stored = timer.time(|| store.enqueue_batch(MESH_ID, &tasks, at(first)))?;
        anyhow::ensure!(
            stored.len() == tasks.len(),
            "enqueue_batch stored {} of {}",
            stored.len(),
            tasks.len()
        );
    }
    Ok(())
}

/// The count of `status` in a `stats_by_status` answer.
fn count_of(stats: &[StatusCount], status: TaskStatus) -> u64 {
    stats.iter().find(|s| s.status == status).map_or(0, |s| s.count)
}

/// `stats_by_status` as `status=count` pairs, for check details.
fn show_stats(stats: &[StatusCount]) -> String {
    stats.iter().map(|s| format!("{}={}", s.status, s.count)).collect::<Vec<_>>().join(" ")
}
