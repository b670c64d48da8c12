//! The work queue: `mesh_queue` rows, their projected columns, dependency edges,
//! claims and the task lifecycle.
//!
//! The JSON `payload` of a row is the task and the source of truth. Every write
//! also rewrites the row's projected columns from it, so a claim selects
//! candidates through the partial claim indexes in claim order and decodes only
//! the winner. Readiness is maintained, not recomputed per claim: `deps_unmet`
//! counts a task's dependencies that are not completed and is updated whenever
//! one of them changes status; `hold` folds it together with the block and the
//! parking into one number (0 = claimable as far as the task goes).
//!
//! What a write stores and records is decided by the core
//! (`agentmesh_core::effects::task`); the writes that load a task, ask the core
//! and persist its decision are shared with the other store
//! (`agentmesh_store::task_writes`), over this store's rows (`persist`), and so is
//! the claim walk (`agentmesh_core::claim::walk`). Each write locks the rows it
//! changes; a claim holds its session's and node's locks as well, an enqueue
//! the mesh's dependency graph (see `locks` and `claim`).
//!
//! - `rows`: projection, load and save, edges and readiness.
//! - `enqueue`: enqueue and the raw queue operations (replace, insert, update).
//! - `claim`: the claim streams and the survey.
//! - `persist`: the rows the shared task writes (completion, heartbeat, cancel,
//!   requeue, reclaim, and the effect writer) work on.
//! - `remembered`: the tasks this store claimed, so that their worker's
//!   heartbeats and completion need not read the row back.
//! - `reads`: listings, counts and lookups.

use std::sync::Arc;

use agentmesh_core::{Claimant, NewTask, Task, TaskStatus, Timestamp};
use agentmesh_store::{
    ActiveAssignment, ClaimOptions, ClaimOutcome, CompletionReport, StatusCount, StoreResult, Submitted,
    TaskCommand, TaskWrite, TaskWritten,
};

use crate::{Fail, Lock, PgStore};

mod claim;
mod enqueue;
mod persist;
mod reads;
mod remembered;
mod rows;

use agentmesh_store::task_writes;
pub(crate) use agentmesh_store::task_writes::{heartbeat, reclaim_if_lease_expired};
use claim::{claim, claim_locks, complete_then_claim};
pub(crate) use enqueue::{enqueue, import_entries, record_dispatched};
use persist::Rows;
pub(crate) use reads::{active_assignments, entries, expired_leases, find, oldest_pending_created_at, stats};
pub(crate) use remembered::Claims;
use remembered::{Held, is_stale};
pub(crate) use rows::decode;

/// The dependency graph's lock for an enqueue of `tasks`: exclusive when one
/// of them adds edges, shared otherwise (see `locks`).
fn graph_lock(tasks: &[NewTask]) -> Lock<'static> {
    Lock::Graph { exclusive: tasks.iter().any(|t| !t.depends_on.is_empty()) }
}

impl agentmesh_store::QueueStore for PgStore {
    fn enqueue(&self, mesh_id: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task> {
        let graph = graph_lock(std::slice::from_ref(new));
        self.write_with(mesh_id, &[graph], |db| enqueue(db, mesh_id, new, now))
    }

    fn record_dispatched_task(
        &self,
        mesh_id: &str,
        task: &agentmesh_core::NewDispatchedTask,
        now: Timestamp,
    ) -> StoreResult<agentmesh_store::RecordedDispatch> {
        let locks = [Lock::Mesh, Lock::Graph { exclusive: false }];
        self.write_with(mesh_id, &locks, |db| record_dispatched(db, mesh_id, task, now))
    }

    fn enqueue_batch(&self, mesh_id: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>> {
        self.write_with(mesh_id, &[graph_lock(new)], |db| {
            new.iter()
                .enumerate()
                .map(|(i, n)| {
                    enqueue(db, mesh_id, n, now).map_err(|Fail(err)| Fail(task_writes::in_batch(i, err)))
                })
                .collect()
        })
    }

    fn queue_entries(&self, mesh_id: &str, statuses: &[TaskStatus]) -> StoreResult<Vec<Task>> {
        self.read(|db| entries(db, mesh_id, statuses))
    }

    fn find_task(&self, mesh_id: &str, task_id: &str) -> StoreResult<Option<Task>> {
        self.read(|db| find(db, mesh_id, task_id))
    }

    fn stats_by_status(&self, mesh_id: &str) -> StoreResult<Vec<StatusCount>> {
        self.read(|db| stats(db, mesh_id))
    }

    fn oldest_pending_created_at(&self, mesh_id: &str) -> StoreResult<Option<Timestamp>> {
        self.read(|db| oldest_pending_created_at(db, mesh_id))
    }

    fn active_assignments(&self, mesh_id: &str) -> StoreResult<Vec<ActiveAssignment>> {
        self.read(|db| active_assignments(db, mesh_id))
    }

    fn claim_next(
        &self,
        mesh_id: &str,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome> {
        let (outcome, held) = self.write_with(mesh_id, &claim_locks(claimant), |db| {
            db.unannounced();
            claim(db, mesh_id, claimant, opts, now, None)
        })?;
        self.remember(mesh_id, held);
        Ok(outcome)
    }

    fn complete_task(&self, mesh_id: &str, report: &CompletionReport, now: Timestamp) -> StoreResult<Task> {
        self.with_remembered(mesh_id, report.task_id.as_deref(), |held| {
            self.write_with(mesh_id, &[], |db| {
                task_writes::complete(&Rows::remembering(db, held), mesh_id, report, now)
            })
        })
    }

    fn complete_and_claim(
        &self,
        mesh_id: &str,
        report: &CompletionReport,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)> {
        let (task, (outcome, held)) = self.with_remembered(mesh_id, report.task_id.as_deref(), |held| {
            self.write_with(mesh_id, &claim_locks(claimant), |db| {
                complete_then_claim(&Rows::remembering(db, held), mesh_id, report, claimant, opts, now)
            })
        })?;
        self.remember(mesh_id, held);
        Ok((task, outcome))
    }

    fn heartbeat(
        &self,
        mesh_id: &str,
        beat: &agentmesh_store::Heartbeat,
        now: Timestamp,
    ) -> StoreResult<Task> {
        let mut at = None;
        let task = self.with_remembered(mesh_id, Some(&beat.task_id), |held| {
            at = held.as_ref().map(|h| (h.row_id, h.deps_unmet));
            self.write_with(mesh_id, &[], |db| {
                db.unannounced();
                heartbeat(&Rows::remembering(db, held), mesh_id, beat, now)
            })
        })?;
        // The beat rewrote the remembered row in place: remember it as written.
        if let Some((row_id, deps_unmet)) = at {
            self.remember(mesh_id, Some(Held { task: task.clone(), row_id, deps_unmet }));
        }
        Ok(task)
    }

    fn task_command(
        &self,
        mesh_id: &str,
        task_id: &str,
        command: TaskCommand<'_>,
        now: Timestamp,
    ) -> StoreResult<Task> {
        self.write_with(mesh_id, &[], |db| {
            task_writes::command(&Rows::of(db), mesh_id, task_id, command, now)
        })
    }

    fn submit_task_write(
        self: Arc<Self>,
        mesh_id: String,
        write: TaskWrite,
        now: Timestamp,
    ) -> Submitted<TaskWritten> {
        let workers = self.workers.clone();
        workers.submit(move || write.run(&*self, &mesh_id, now))
    }

    fn expired_leases(&self, now: Timestamp) -> StoreResult<Vec<(String, String)>> {
        self.read(|db| expired_leases(db, now))
    }

    fn reclaim_if_lease_expired(
        &self,
        mesh_id: &str,
        task_id: &str,
        now: Timestamp,
    ) -> StoreResult<Option<Task>> {
        self.write_with(mesh_id, &[], |db| reclaim_if_lease_expired(&Rows::of(db), mesh_id, task_id, now))
    }
}

impl PgStore {
    /// Remembers the row a committed claim left (see `remembered`).
    fn remember(&self, mesh_id: &str, held: Option<Held>) {
        if let Some(held) = held {
            self.claims.note(mesh_id, held);
        }
    }

    /// Runs `write` of the task `task_id` with this store's remembered row of
    /// it, when it has one; when that row turns out stale, runs `write` again
    /// without it. `write`'s inner `Err` is a refusal it recorded.
    fn with_remembered<T>(
        &self,
        mesh_id: &str,
        task_id: Option<&str>,
        mut write: impl FnMut(Option<Held>) -> StoreResult<StoreResult<T>>,
    ) -> StoreResult<T> {
        if let Some(held) = task_id.and_then(|id| self.claims.take(mesh_id, id)) {
            match write(Some(held)) {
                Err(err) if is_stale(&err) => self.claims.count_stale(),
                done => return done?,
            }
        }
        write(None)?
    }
}
