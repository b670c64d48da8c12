//! `kill -9` in the middle of writing loses nothing that was committed.
//!
//! This test has its own `main` (`harness = false`). Run without arguments it is the
//! parent: it starts a copy of this executable with `--writer`, which enqueues and
//! claims tasks and completes them as fast as it can, printing the id of every
//! operation after it returned (so after its commit). The parent reads those lines,
//! kills the writer with SIGKILL at a moment of its choosing, reopens the database
//! and checks that every reported operation is there with its ledger entry, that
//! SQLite's integrity check passes, and that the store keeps working. It repeats
//! this several times on the same file.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentmesh_core::{Claimant, LedgerQuery, NewTask, TaskStatus, Timestamp};
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome};

const MESH: &str = "crash";
const ROUNDS: u32 = 5;
const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--writer") {
        Some(i) => writer(&args[i + 1], &args[i + 2]),
        None if args.iter().any(|a| a == "--list") => ExitCode::SUCCESS,
        None => parent(),
    }
}

/// Writes until killed. Prints `enqueued <id>` and `completed <id>` after each
/// operation returned.
fn writer(db: &str, round: &str) -> ExitCode {
    let store = SqliteStore::open(db).expect("writer opens the database");
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
    ExitCode::SUCCESS
}

fn parent() -> ExitCode {
    println!("running 1 test");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mesh-runtime.db");
    let exe = std::env::current_exe().unwrap();
    let mut enqueued = Vec::new();
    let mut completed = Vec::new();
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["--writer", db.to_str().unwrap(), &round.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn writer");
        let lines = BufReader::new(child.stdout.take().unwrap());
        // Let the writer get going, then kill it wherever it is: the kill lands
        // between any two SQLite calls, most likely in the middle of a transaction.
        let target = 200 + 150 * round as usize;
        let started = Instant::now();
        let mut seen = 0;
        for line in lines.lines() {
            let line = line.unwrap();
            match line.split_once(' ') {
                Some(("enqueued", id)) => enqueued.push(id.to_owned()),
                Some(("completed", id)) => completed.push(id.to_owned()),
                _ => panic!("unexpected writer output {line:?}"),
            }
            seen += 1;
            if seen >= target || started.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        // SIGKILL: no destructors, no rollback, no checkpoint.
        child.kill().expect("kill the writer");
        child.wait().unwrap();
        assert!(seen >= target, "the writer stopped early in round {round}");

        let store = SqliteStore::open(&db).expect("the database reopens after kill -9");
        let conn = rusqlite::Connection::open(&db).unwrap();
        let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(integrity, "ok", "integrity check after round {round}");
        let ledger = store.read_ledger_ordered(MESH, &LedgerQuery::default()).unwrap();
        for id in &enqueued {
            let task = store.find_task(MESH, id).unwrap();
            assert!(task.is_some(), "committed task {id} lost in round {round}");
            assert!(
                ledger.iter().any(|e| e.kind == "task_dispatched" && e.task_id() == Some(id.as_str())),
                "the ledger entry of committed task {id} is missing"
            );
        }
        for id in &completed {
            let task = store.find_task(MESH, id).unwrap().unwrap();
            assert_eq!(task.status, TaskStatus::Completed, "committed completion of {id} lost");
            assert!(ledger.iter().any(|e| e.kind == "task_completed" && e.task_id() == Some(id.as_str())));
        }
        // A task assigned to the killed writer's session is stranded, not corrupt:
        // once its lease lapses the store reclaims it and keeps working.
        for task in store.queue_entries(MESH, &[TaskStatus::Assigned]).unwrap() {
            let reclaimed = store.reclaim_if_lease_expired(MESH, &task.id, NOW.plus_millis(2_000)).unwrap();
            assert!(reclaimed.is_some(), "the stranded task {} is reclaimed", task.id);
        }
        store
            .enqueue(MESH, &NewTask { message: "after the crash".into(), ..NewTask::default() }, NOW)
            .unwrap();
    }
    println!(
        "test kill_9_loses_no_committed_write ... ok ({} enqueues and {} completions across {ROUNDS} kills)",
        enqueued.len(),
        completed.len()
    );
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    ExitCode::SUCCESS
}
