//! Claims raced by OS processes, each with a store of its own on one database:
//! what both backends' `tests/multiprocess.rs` run. The parent fills a queue and
//! starts copies of its test executable with [`WORKER_ARG`]; each worker claims,
//! completes and claims again until nothing is left, printing every id it claimed;
//! the parent then checks that every task was claimed and completed exactly once,
//! by the workers' reports and by the ledger.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use agentmesh_core::{Claimant, LedgerQuery, NewTask, TaskStatus, Timestamp};

use crate::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, Store, StoreError};

/// The mesh the race runs in.
pub const MESH: &str = "race";

/// The argument that makes a test executable a worker: `WORKER_ARG <target> <n>`.
pub const WORKER_ARG: &str = "--worker";

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

/// The `main` of a backend's race test executable: a copy started as a claim
/// worker ([`WORKER_ARG`]) or a reservation racer
/// ([`super::reservation_race::RACER_ARG`]) opens the store at the target it
/// is given (`open`) and runs its part; a listing (`cargo test -- --list`, and
/// filters) runs nothing; any other start is the parent's (`parent`).
pub fn process_main<S: Store>(open: impl Fn(&str) -> S, parent: impl FnOnce() -> ExitCode) -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let role = |arg: &str| args.iter().position(|a| a == arg);
    if let Some(i) = role(super::reservation_race::RACER_ARG) {
        super::reservation_race::racer(&open(&args[i + 1]), &args[i + 1..]);
        ExitCode::SUCCESS
    } else if let Some(i) = role(WORKER_ARG) {
        claim_until_empty(&open(&args[i + 1]), &args[i + 2]);
        ExitCode::SUCCESS
    } else if role("--list").is_some() {
        ExitCode::SUCCESS
    } else {
        parent()
    }
}

/// Fills the race's queue with `tasks` tasks.
pub fn fill(store: &dyn Store, tasks: usize) {
    let batch: Vec<NewTask> =
        (0..tasks).map(|i| NewTask { message: format!("task {i}"), ..NewTask::default() }).collect();
    store.enqueue_batch(MESH, &batch, NOW).expect("the queue is filled");
}

/// A worker's loop, as worker `n`: claims and completes until the queue is empty,
/// printing each claimed id on a line of its own. Contention is retried.
pub fn claim_until_empty(store: &dyn Store, n: &str) {
    let claimant =
        Claimant { node_id: format!("node-{n}"), session_id: format!("session-{n}"), ..Claimant::default() };
    loop {
        let outcome = match store.claim_next(MESH, &claimant, &ClaimOptions::default(), NOW) {
            Ok(o) => o,
            Err(StoreError::Busy) => continue,
            Err(e) => panic!("claim failed: {e}"),
        };
        let task = match outcome {
            ClaimOutcome::Claimed(t) => t,
            ClaimOutcome::Refused(_) => return,
        };
        println!("{}", task.id);
        let report = CompletionReport {
            session_id: claimant.session_id.clone(),
            task_id: Some(task.id.clone()),
            epoch: Some(task.epoch()),
            occurred_at: None,
            outcome: Outcome::Completed { summary: None },
        };
        loop {
            match store.complete_task(MESH, &report, NOW) {
                Ok(done) => {
                    assert_eq!(done.status, TaskStatus::Completed, "task {} completed", task.id);
                    break;
                }
                Err(StoreError::Busy) => continue,
                Err(e) => panic!("complete failed: {e}"),
            }
        }
    }
}

/// The parent's side: starts `workers` copies of `exe` as workers on `target` (a
/// database file or a schema), waits for them, and checks that each of the
/// `tasks` tasks was claimed once, completed once and recorded once of each kind,
/// with no completion refused. Returns how many workers took work (more than one).
pub fn race_in_processes(exe: &Path, target: &str, workers: usize, tasks: usize, store: &dyn Store) -> usize {
    let children: Vec<_> = (0..workers)
        .map(|n| {
            Command::new(exe)
                .args([WORKER_ARG, target, &n.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut claims: HashMap<String, usize> = HashMap::new();
    let mut busy_workers = 0;
    for child in children {
        let out = child.wait_with_output().expect("a worker ends");
        assert!(out.status.success(), "a worker failed: {:?}", out.status);
        let text = String::from_utf8(out.stdout).expect("a worker prints UTF-8");
        busy_workers += usize::from(!text.trim().is_empty());
        for id in text.lines() {
            *claims.entry(id.to_owned()).or_default() += 1;
        }
    }

    let twice: Vec<_> = claims.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "tasks claimed more than once: {twice:?}");
    assert_eq!(claims.len(), tasks, "every task claimed");
    assert!(busy_workers > 1, "the race needs more than one worker taking work");
    let done = store.queue_entries(MESH, &[TaskStatus::Completed]).expect("the queue is read");
    assert_eq!(done.len(), tasks, "every task completed");
    let ledger = store.read_ledger_ordered(MESH, &LedgerQuery::default()).expect("the ledger is read");
    for kind in ["task_claimed", "task_completed"] {
        let mut per_task: HashMap<&str, usize> = HashMap::new();
        for entry in ledger.iter().filter(|e| e.kind == kind) {
            *per_task.entry(entry.task_id().expect("a task entry names its task")).or_default() += 1;
        }
        assert_eq!(per_task.len(), tasks, "a {kind} entry for every task");
        let repeated: Vec<_> = per_task.iter().filter(|(_, n)| **n != 1).collect();
        assert!(repeated.is_empty(), "tasks with more than one {kind} entry: {repeated:?}");
        let claimed_by_workers = per_task.keys().all(|id| claims.contains_key(*id));
        assert!(claimed_by_workers, "every {kind} entry names a task a worker reported");
    }
    let refused = ledger.iter().filter(|e| e.kind == "completion_refused").count();
    assert_eq!(refused, 0, "no completion was refused");
    busy_workers
}
