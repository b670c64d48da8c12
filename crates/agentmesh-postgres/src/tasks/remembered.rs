//! The tasks this store claimed, remembered until their completion, so that a
//! worker's next write of its task (its heartbeats, its completion) skips
//! reading the row back: one round trip instead of two.
//!
//! A write of a task loads it, the core decides, and the store writes the
//! decision (`agentmesh_store::task_writes`). Loading is a round trip of its
//! own: the row locked, with its dependents' ids. When this store claimed the
//! task, it holds the row as its claim wrote it, so the write can be decided
//! on that copy and sent at once, behind a check that makes it sound:
//!
//! - The row is locked `FOR UPDATE` by a statement that fails (a division by
//!   zero) unless its `row_id`, payload and readiness count are still the
//!   ones remembered. The payload is the task, so an equal row is an equal
//!   task, and what the core decided on the copy it would have decided on the
//!   row. Any other write of the task since (another daemon's heartbeat, a
//!   cancel, a reclaim) changed its payload and fails the check.
//! - A change that needs the task's dependents takes them to be none, and a
//!   later statement, which runs after the lock is held (so an enqueue that
//!   added one while the lock was awaited is seen, as `rows::load` sees it),
//!   fails unless there are none: the row's update itself, when the change
//!   completes the task or takes its completion back, else a check of its own.
//! - Both go out ahead of the writes, in the same round trip as them and the
//!   COMMIT. A failed check aborts the transaction on the server, so none of
//!   the writes commit; the store then runs the write again the usual way
//!   ([`is_stale`]). A task with dependents pays that extra round trip at its
//!   completion.
//!
//! Nothing else relies on the memory: a remembered task that was changed, or
//! is gone, costs one failed check. The memory holds [`CAPACITY`] tasks at
//! most; past that it forgets the oldest-claimed half.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agentmesh_core::Task;
use agentmesh_store::StoreError;

use super::rows::{Dependents, Loaded};
use crate::db::{Db, Missing, Owned};

/// How many claimed tasks a store remembers at most.
pub(crate) const CAPACITY: usize = 4096;

/// A task as this store's last write of it left its row.
pub(crate) struct Held {
    pub(super) task: Task,
    pub(super) row_id: i64,
    pub(super) deps_unmet: i64,
}

impl Held {
    /// The remembered row of `loaded` once `task` was written over it.
    pub(super) fn of(loaded: &Loaded, task: Task) -> Held {
        Held { task, row_id: loaded.row_id, deps_unmet: loaded.deps_unmet }
    }
}

/// The remembered tasks, by mesh and task id, each with the order it was
/// noted in, and the next such number.
#[derive(Default)]
struct Memory {
    next: u64,
    held: HashMap<(String, String), (u64, Held)>,
}

/// The claimed tasks a store remembers.
#[derive(Default)]
pub(crate) struct Claims {
    held: Mutex<Memory>,
    /// How many writes found their remembered row stale and ran again.
    stale: std::sync::atomic::AtomicU64,
}

impl Claims {
    /// Remembers `held` once the write that left it has committed.
    pub(crate) fn note(&self, mesh_id: &str, held: Held) {
        let mut memory = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if memory.held.len() >= CAPACITY {
            let mut order: Vec<u64> = memory.held.values().map(|(n, _)| *n).collect();
            order.sort_unstable();
            let keep_from = order[order.len() / 2];
            memory.held.retain(|_, (n, _)| *n >= keep_from);
        }
        memory.next += 1;
        let n = memory.next;
        memory.held.insert((mesh_id.to_owned(), held.task.id.clone()), (n, held));
    }

    /// Takes the remembered task `task_id` of `mesh_id` out of the memory.
    pub(crate) fn take(&self, mesh_id: &str, task_id: &str) -> Option<Held> {
        let mut memory = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        memory.held.remove(&(mesh_id.to_owned(), task_id.to_owned())).map(|(_, held)| held)
    }

    /// Counts a write whose remembered row was stale.
    pub(crate) fn count_stale(&self) {
        self.stale.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many tasks are remembered, and how many writes found theirs stale.
    #[cfg(test)]
    fn counts(&self) -> (usize, u64) {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner).held.len();
        (held, self.stale.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// The failure of a check of a remembered row: the row is not as remembered.
#[derive(Debug)]
struct Stale;

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the task's row changed since this store wrote it")
    }
}

impl std::error::Error for Stale {}

pub(super) fn stale() -> Missing {
    Arc::new(|| StoreError::Backend(Box::new(Stale)))
}

/// Whether `err` is a failed check of a remembered row: the write is to be run
/// again the usual way.
pub(crate) fn is_stale(err: &StoreError) -> bool {
    matches!(err, StoreError::Backend(source) if source.is::<Stale>())
}

/// Locks the row of `held`, failing the transaction unless it is as remembered.
const CHECK_ROW: &str = "SELECT 1 / (SELECT count(*)::INT FROM (
        SELECT 1 FROM mesh_queue
         WHERE mesh_id = $1 AND row_id = $2 AND id = $3 AND deps_unmet = $4 AND payload = $5
         FOR UPDATE) r)";

/// Fails the transaction when a task depends on `$2`.
const CHECK_NO_DEPENDENTS: &str = "SELECT 1 / (NOT EXISTS (
        SELECT 1 FROM mesh_task_deps WHERE mesh_id = $1 AND depends_on_id = $2))::INT";

/// Sends, ahead of the change's writes, the check that `task` has no dependents.
pub(super) fn check_no_dependents(db: &Db<'_>, task: &Task) {
    let params: Vec<Owned> = vec![Arc::new(task.mesh_id.clone()), Arc::new(task.id.clone())];
    db.defer(CHECK_NO_DEPENDENTS, params, Some(stale()));
}

/// The task `held` as loaded for a change, its row not read: the check that
/// the row is still as remembered, which also locks it, goes out ahead of the
/// change's writes (see the module).
pub(super) fn load(db: &Db<'_>, held: Held) -> Loaded {
    let task = held.task;
    // The bytes the row holds when it is as remembered: the task's JSON, as
    // every write of a row stores it (`rows::TaskRow`).
    let payload = crate::payload::stored_task(&task.to_json(), task.status);
    let params: Vec<Owned> = vec![
        Arc::new(task.mesh_id.clone()),
        Arc::new(held.row_id),
        Arc::new(task.id.clone()),
        Arc::new(held.deps_unmet),
        Arc::new(payload),
    ];
    db.defer(CHECK_ROW, params, Some(stale()));
    Loaded {
        task,
        deps_unmet: held.deps_unmet,
        row_id: held.row_id,
        dependents: Dependents::NoneChecked(std::cell::Cell::new(false)),
    }
}

#[cfg(test)]
mod tests {
    use agentmesh_core::{ClaimRefusal, Task, TaskPriority, TaskStatus, Timestamp};
    use agentmesh_store::Heartbeat;
    use agentmesh_store::conformance::support::*;
    use agentmesh_store::prelude::*;

    use crate::testing::FreshStore;
    use crate::{PgOptions, PgStore};

    /// A store, and a second one on the same installation (another daemon).
    fn two_daemons(url: &str) -> (FreshStore, PgStore) {
        let first = FreshStore::new(url);
        let second = PgStore::open(&PgOptions::new(url).schema(first.schema())).expect("a second store");
        (first, second)
    }

    fn claimed(store: &PgStore, id: &str, now: Timestamp) -> Task {
        assert_claimed(claim(store, MESH, &worker("node-1", "s1"), now), id)
    }

    /// Two daemons, and task `t1` the first one claimed.
    fn claimed_by_the_first(url: &str) -> (FreshStore, PgStore, Task) {
        let (a, b) = two_daemons(url);
        enqueue(&*a, MESH, new_task("t1"), at(0));
        let task = claimed(&a, "t1", at(1));
        (a, b, task)
    }

    #[test]
    fn a_claimed_task_is_remembered_until_its_completion_which_reads_nothing_back() {
        let url = agentmesh_test_support::require_postgres!();
        let (a, _, task) = claimed_by_the_first(&url);
        assert_eq!(a.claims.counts(), (1, 0));
        let beat = Heartbeat::new(&task.id, "s1", task.epoch(), 90_000);
        let beaten = a.heartbeat(MESH, &beat, at(2)).expect("a heartbeat");
        assert_eq!(a.claims.counts(), (1, 0), "the beat is remembered as written");
        let done = complete(&*a, MESH, &beaten, at(3));
        assert_eq!(done.status, TaskStatus::Completed);
        assert_eq!(a.claims.counts(), (0, 0), "neither write found its row stale");
        assert_eq!(find(&*a, MESH, "t1").status, TaskStatus::Completed);
        let kinds = ledger_kinds(&*a, MESH);
        assert_eq!(kinds.iter().filter(|k| *k == "task_completed").count(), 1, "{kinds:?}");
    }

    #[test]
    fn a_task_another_daemon_changed_is_completed_as_it_is_stored() {
        let url = agentmesh_test_support::require_postgres!();
        let (a, b, task) = claimed_by_the_first(&url);
        let reprioritised = b
            .task_command(
                MESH,
                "t1",
                TaskCommand::SetPriority { priority: TaskPriority::High, reason: Some("rush") },
                at(2),
            )
            .expect("another daemon changes the priority");
        assert_ne!(reprioritised.priority, task.priority);
        let done = complete(&*a, MESH, &task, at(3));
        assert_eq!(done.status, TaskStatus::Completed);
        assert_eq!(done.priority, reprioritised.priority, "the completion kept the other daemon's change");
        assert_eq!(find(&*a, MESH, "t1").priority, reprioritised.priority);
        assert_eq!(a.claims.counts(), (0, 1), "the remembered row was found stale once");
    }

    #[test]
    fn a_task_another_daemon_cancelled_is_not_completed() {
        let url = agentmesh_test_support::require_postgres!();
        let (a, b, task) = claimed_by_the_first(&url);
        b.task_command(MESH, "t1", TaskCommand::Cancel { reason: Some("no longer needed") }, at(2))
            .expect("another daemon cancels it");
        let err = a.complete_task(MESH, &report(&task, done("finished")), at(3)).expect_err("refused");
        assert!(!super::is_stale(&err), "the refusal of the row as stored, not the memory's: {err:?}");
        assert_eq!(find(&*a, MESH, "t1").status, TaskStatus::Cancelled);
        let kinds = ledger_kinds(&*a, MESH);
        assert!(!kinds.iter().any(|k| k == "task_completed"), "{kinds:?}");
    }

    #[test]
    fn a_dependent_enqueued_after_the_claim_is_unblocked_by_the_completion() {
        let url = agentmesh_test_support::require_postgres!();
        let (a, b, task) = claimed_by_the_first(&url);
        enqueue(&b, MESH, dependent_task("t2", &["t1"]), at(2));
        assert_refused(
            claim(&b, MESH, &worker("node-2", "s2"), at(3)),
            ClaimRefusal::DependenciesUnsatisfied,
        );
        complete(&*a, MESH, &task, at(4));
        assert_eq!(a.claims.counts(), (0, 1), "the check of its dependents sent it the usual way");
        assert_claimed(claim(&b, MESH, &worker("node-2", "s2"), at(5)), "t2");
    }

    #[test]
    fn a_dependent_enqueued_after_the_claim_is_blocked_by_the_failure() {
        let url = agentmesh_test_support::require_postgres!();
        let (a, b, task) = claimed_by_the_first(&url);
        enqueue(&b, MESH, dependent_task("t2", &["t1"]), at(2));
        fail(&*a, MESH, &task, "tests broke", at(4));
        assert_eq!(a.claims.counts(), (0, 1), "the check of its dependents sent it the usual way");
        assert_eq!(find(&b, MESH, "t2").blocked_reason.as_deref(), Some("dependency_failed:t1"));
    }

    #[test]
    fn the_memory_forgets_the_oldest_half_when_full() {
        let url = agentmesh_test_support::require_postgres!();
        let (a, _) = two_daemons(&url);
        let remembered = |i: usize| super::Held {
            task: Task { mesh_id: MESH.to_owned(), ..assigned_row(&format!("t{i}"), "s1", at(0)) },
            row_id: i as i64,
            deps_unmet: 0,
        };
        for i in 0..super::CAPACITY {
            a.claims.note(MESH, remembered(i));
        }
        assert_eq!(a.claims.counts().0, super::CAPACITY);
        a.claims.note(MESH, remembered(super::CAPACITY));
        assert_eq!(a.claims.counts().0, super::CAPACITY / 2 + 1);
        assert!(a.claims.take(MESH, "t0").is_none(), "the oldest is forgotten");
        assert!(a.claims.take(MESH, &format!("t{}", super::CAPACITY)).is_some(), "the newest is kept");
        assert!(a.claims.take("other-mesh", &format!("t{}", super::CAPACITY - 1)).is_none(), "by mesh");
    }
}
