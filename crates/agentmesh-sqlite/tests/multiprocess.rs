//! Sixteen OS processes claim from one database file at once: every task must be
//! claimed exactly once, and completed exactly once.
//!
//! This test has its own `main` (`harness = false`). Run without arguments it is the
//! parent: it fills a queue, starts 16 copies of this executable with `--worker`,
//! and checks what they report. Each worker opens the file itself and claims,
//! completes, and claims again until nothing is left.

use std::collections::HashMap;
use std::process::{Command, ExitCode, Stdio};

use agentmesh_core::{Claimant, LedgerQuery, NewTask, TaskStatus, Timestamp};
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::conformance::reservation_race as race;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, StoreError};

const MESH: &str = "race";
const WORKERS: usize = 16;
const TASKS: usize = 1_600;
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
fn worker(db: &str, n: &str) -> ExitCode {
    let store = SqliteStore::open(db).expect("worker opens the database");
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
                Ok(_) => break,
                Err(StoreError::Busy) => continue,
                Err(e) => panic!("complete failed: {e}"),
            }
        }
    }
}

fn parent() -> ExitCode {
    println!("running 2 tests");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mesh-runtime.db");
    let store = SqliteStore::open(&db).unwrap();
    let batch: Vec<NewTask> =
        (0..TASKS).map(|i| NewTask { message: format!("task {i}"), ..NewTask::default() }).collect();
    store.enqueue_batch(MESH, &batch, NOW).unwrap();

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORKERS)
        .map(|n| {
            Command::new(&exe)
                .args(["--worker", db.to_str().unwrap(), &n.to_string()])
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

    let twice: Vec<_> = claims.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "tasks claimed more than once: {twice:?}");
    assert_eq!(claims.len(), TASKS, "every task claimed");
    assert!(busy_workers > 1, "the race needs more than one worker taking work");
    let done = store.queue_entries(MESH, &[TaskStatus::Completed]).unwrap();
    assert_eq!(done.len(), TASKS, "every task completed");
    let ledger = store.read_ledger_ordered(MESH, &LedgerQuery::default()).unwrap();
    let claimed = ledger.iter().filter(|e| e.kind == "task_claimed").count();
    assert_eq!(claimed, TASKS, "one task_claimed entry per task");
    println!("test sixteen_processes_claim_each_task_exactly_once ... ok ({busy_workers} workers took work)");
    let raced = race::race_in_processes(&exe, db.to_str().unwrap(), WORKERS, &store);
    println!(
        "test sixteen_processes_reserve_overlapping_paths ... ok ({} granted, {} denied)",
        raced.granted, raced.denied
    );
    println!("\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    ExitCode::SUCCESS
}

/// A racer's own store on the database file `db`.
fn open_racer_store(db: &str) -> SqliteStore {
    SqliteStore::open(db).expect("a racer opens the database")
}
