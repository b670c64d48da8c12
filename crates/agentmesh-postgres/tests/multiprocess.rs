//! Sixteen OS processes, each with its own `PgStore`, claim from one queue of one
//! installation at once: every task must be claimed exactly once and completed
//! exactly once, and the ledger must say so.
//!
//! This test has its own `main` (`harness = false`). Run without arguments it is the
//! parent: it creates a fresh schema, fills a queue, starts 16 copies of this
//! executable with `--worker`, and checks what they report and what the database
//! holds. Each worker connects by itself and claims, completes, and claims again
//! until nothing is left. The schema is dropped at the end. Without
//! `AGENTMESH_TEST_DATABASE_URL` the parent prints that it skipped and exits 0.

use std::collections::HashMap;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use agentmesh_core::{Claimant, LedgerQuery, NewTask, TaskStatus, Timestamp};
use agentmesh_postgres::PgStore;
use agentmesh_store::conformance::reservation_race as race;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, StoreError};
use agentmesh_test_support::postgres::database_url;

#[path = "it/support.rs"]
#[allow(dead_code)]
mod support;

const MESH: &str = "race";
const WORKERS: usize = 16;
const TASKS: usize = 800;
const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == race::RACER_ARG) {
        race::racer(&open_racer_store(&args[i + 1]), &args[i + 1..]);
        return ExitCode::SUCCESS;
    }
    match args.iter().position(|a| a == "--worker") {
        Some(i) => worker(&args[i + 1], &args[i + 2]),
        // `cargo test -- --list` and filters must not start the race.
        None if args.iter().any(|a| a == "--list") => ExitCode::SUCCESS,
        None => parent(),
    }
}

/// Claims and completes until the queue is empty; prints one claimed id per line.
fn worker(schema: &str, n: &str) -> ExitCode {
    let url = database_url().expect("workers run only where the parent found the server");
    let mut options = support::options(&url, schema);
    options.max_connections = 2;
    let store = PgStore::open(&options).expect("worker opens the installation");
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
            ClaimOutcome::Refused(_) => return ExitCode::SUCCESS,
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

fn parent() -> ExitCode {
    let Some(url) = database_url() else {
        return ExitCode::SUCCESS;
    };
    println!("running 2 tests");
    let db = support::TestDb::new(&url);
    let schema = db.schema().to_owned();
    let batch: Vec<NewTask> =
        (0..TASKS).map(|i| NewTask { message: format!("task {i}"), ..NewTask::default() }).collect();
    db.enqueue_batch(MESH, &batch, NOW).unwrap();

    let exe = std::env::current_exe().unwrap();
    let began = Instant::now();
    let children: Vec<_> = (0..WORKERS)
        .map(|n| {
            Command::new(&exe)
                .args(["--worker", &schema, &n.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut claims: HashMap<String, usize> = HashMap::new();
    let mut busy_workers = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed: {:?}", out.status);
        let text = String::from_utf8(out.stdout).unwrap();
        busy_workers += usize::from(!text.trim().is_empty());
        for id in text.lines() {
            *claims.entry(id.to_owned()).or_default() += 1;
        }
    }
    let took = began.elapsed();

    let twice: Vec<_> = claims.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "tasks claimed more than once: {twice:?}");
    assert_eq!(claims.len(), TASKS, "every task claimed");
    assert!(busy_workers > 1, "the race needs more than one worker taking work");
    let done = db.queue_entries(MESH, &[TaskStatus::Completed]).unwrap();
    assert_eq!(done.len(), TASKS, "every task completed");
    let ledger = db.read_ledger_ordered(MESH, &LedgerQuery::default()).unwrap();
    for kind in ["task_claimed", "task_completed"] {
        let mut per_task: HashMap<&str, usize> = HashMap::new();
        for entry in ledger.iter().filter(|e| e.kind == kind) {
            *per_task.entry(entry.task_id().expect("a task entry names its task")).or_default() += 1;
        }
        assert_eq!(per_task.len(), TASKS, "a {kind} entry for every task");
        let repeated: Vec<_> = per_task.iter().filter(|(_, n)| **n != 1).collect();
        assert!(repeated.is_empty(), "tasks with more than one {kind} entry: {repeated:?}");
        let claimed_by_workers = per_task.keys().all(|id| claims.contains_key(*id));
        assert!(claimed_by_workers, "every {kind} entry names a task a worker reported");
    }
    let refused = ledger.iter().filter(|e| e.kind == "completion_refused").count();
    assert_eq!(refused, 0, "no completion was refused");
    let rate = TASKS as f64 / took.as_secs_f64();
    println!(
        "test sixteen_processes_claim_each_task_exactly_once ... ok ({busy_workers} workers took work; \
         {TASKS} claim+complete pairs in {:.2} s, {rate:.0} pairs/s)",
        took.as_secs_f64()
    );
    let raced = race::race_in_processes(&exe, &schema, WORKERS, &db.store);
    println!(
        "test sixteen_processes_reserve_overlapping_paths ... ok ({} granted, {} denied)",
        raced.granted, raced.denied
    );
    println!("\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    ExitCode::SUCCESS
}

/// A racer's own store on the installation in `schema`.
fn open_racer_store(schema: &str) -> PgStore {
    let url = database_url().expect("racers run only where the parent found the server");
    let mut options = support::options(&url, schema);
    options.max_connections = 2;
    PgStore::open(&options).expect("a racer opens the installation")
}
