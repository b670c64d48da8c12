//! `kill -9` of a writing process, as both backends' `tests/crash.rs` run it: a
//! child started with [`WRITER_ARG`] enqueues, claims and completes as fast as it
//! can and prints every operation after it returned (so after its commit); the
//! parent kills it and checks, on a store of its own, that every reported
//! operation is there with exactly its ledger entry, that no entry lacks its
//! change, and that the store keeps working.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::ChildStdout;
use std::time::{Duration, Instant};

use agentmesh_core::{Claimant, LedgerQuery, NewTask, TaskStatus, Timestamp};

use crate::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, Store};

/// The mesh the writers write to.
pub const MESH: &str = "crash";

/// The argument that makes a test executable a writer: `WRITER_ARG <target> <round>`.
pub const WRITER_ARG: &str = "--writer";

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

/// What the writers reported as done, across the rounds.
#[derive(Debug, Default)]
pub struct Written {
    /// Tasks whose enqueue returned.
    pub enqueued: Vec<String>,
    /// Tasks whose completion returned.
    pub completed: Vec<String>,
}

/// A writer's loop for round `round`: writes until killed, printing `enqueued
/// <id>` and `completed <id>` after each operation returned.
pub fn write_until_killed(store: &dyn Store, round: &str) {
    let worker =
        Claimant { node_id: format!("n{round}"), session_id: format!("s{round}"), ..Claimant::default() };
    for i in 0.. {
        let new = NewTask { message: format!("round {round} task {i}"), ..NewTask::default() };
        let task = store.enqueue(MESH, &new, NOW).expect("enqueue");
        println!("enqueued {}", task.id);
        if let ClaimOutcome::Claimed(t) =
            store.claim_next(MESH, &worker, &ClaimOptions { lease_ms: Some(1_000) }, NOW).expect("claim")
        {
            let report = CompletionReport {
                session_id: worker.session_id.clone(),
                task_id: Some(t.id.clone()),
                epoch: Some(t.epoch()),
                occurred_at: None,
                outcome: Outcome::Completed { summary: Some(format!("done {i}")) },
            };
            store.complete_task(MESH, &report, NOW).expect("complete");
            println!("completed {}", t.id);
        }
    }
}

impl Written {
    /// Reads a writer's lines until `target` of them (or `limit` passed), noting
    /// what they report; returns how many were read.
    pub fn read(&mut self, out: ChildStdout, target: usize, limit: Duration) -> usize {
        let started = Instant::now();
        let mut seen = 0;
        for line in BufReader::new(out).lines() {
            let line = line.expect("a writer's line");
            match line.split_once(' ') {
                Some(("enqueued", id)) => self.enqueued.push(id.to_owned()),
                Some(("completed", id)) => self.completed.push(id.to_owned()),
                _ => panic!("unexpected writer output {line:?}"),
            }
            seen += 1;
            if seen >= target || started.elapsed() > limit {
                break;
            }
        }
        seen
    }

    /// Checks `store` after the kill of round `round`: every reported write is
    /// there with exactly its ledger entry, and every task has exactly the entries
    /// of the changes it went through. Then reclaims the killed writer's stranded
    /// tasks once their leases lapse and enqueues one more task (noted too).
    pub fn check_after_kill(&mut self, store: &dyn Store, round: u32) {
        let ledger = store.read_ledger_ordered(MESH, &LedgerQuery::default()).expect("the ledger is read");
        let mut entries: HashMap<(&str, &str), usize> = HashMap::new();
        for entry in &ledger {
            if let Some(task) = entry.task_id() {
                *entries.entry((entry.kind.as_str(), task)).or_default() += 1;
            }
        }
        let entries_of = |kind: &str, id: &str| entries.get(&(kind, id)).copied().unwrap_or(0);
        for id in &self.enqueued {
            let task = store.find_task(MESH, id).expect("a task is read");
            assert!(task.is_some(), "committed task {id} lost in round {round}");
            assert_eq!(entries_of("task_dispatched", id), 1, "the ledger entry of committed task {id}");
        }
        for id in &self.completed {
            let task = store.find_task(MESH, id).expect("a task is read").expect("a completed task");
            assert_eq!(task.status, TaskStatus::Completed, "committed completion of {id} lost");
            assert_eq!(entries_of("task_completed", id), 1, "the ledger entry of completed task {id}");
        }
        let all = store.queue_entries(MESH, &TaskStatus::ALL).expect("the queue is read");
        for task in &all {
            assert_eq!(entries_of("task_dispatched", &task.id), 1, "one task_dispatched for {}", task.id);
            let want_completed = usize::from(task.status == TaskStatus::Completed);
            let completed = entries_of("task_completed", &task.id);
            assert_eq!(
                completed, want_completed,
                "task_completed entries of {} ({:?})",
                task.id, task.status
            );
        }
        let dispatched = ledger.iter().filter(|e| e.kind == "task_dispatched").count();
        assert_eq!(dispatched, all.len(), "a task_dispatched entry exactly for every task there is");
        // A task assigned to the killed writer's session is stranded, not corrupt:
        // once its lease lapses the store reclaims it and keeps working.
        for task in store.queue_entries(MESH, &[TaskStatus::Assigned]).expect("the queue is read") {
            let reclaimed = store.reclaim_if_lease_expired(MESH, &task.id, NOW.plus_millis(2_000));
            assert!(reclaimed.expect("a reclaim").is_some(), "the stranded task {} is reclaimed", task.id);
        }
        let after = NewTask { message: "after the crash".into(), ..NewTask::default() };
        self.enqueued.push(store.enqueue(MESH, &after, NOW).expect("an enqueue after the crash").id);
    }
}

/// Claims and completes, as a new session, every task the killed writers left
/// pending; returns how many. Nothing is left pending or assigned after.
pub fn finish_leftovers(store: &dyn Store) -> usize {
    let survivor =
        Claimant { node_id: "n-after".into(), session_id: "s-after".into(), ..Claimant::default() };
    let mut finished = 0;
    while let ClaimOutcome::Claimed(task) =
        store.claim_next(MESH, &survivor, &ClaimOptions::default(), NOW).expect("a claim")
    {
        let report = CompletionReport {
            session_id: survivor.session_id.clone(),
            task_id: Some(task.id.clone()),
            epoch: Some(task.epoch()),
            occurred_at: None,
            outcome: Outcome::Completed { summary: None },
        };
        let done = store.complete_task(MESH, &report, NOW).expect("a completion");
        assert_eq!(done.status, TaskStatus::Completed);
        finished += 1;
    }
    let pending = store.queue_entries(MESH, &[TaskStatus::Pending, TaskStatus::Assigned]).expect("a read");
    assert!(pending.is_empty(), "every task was finished after the crashes");
    finished
}
