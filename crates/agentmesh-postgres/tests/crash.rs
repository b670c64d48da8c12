//! `kill -9` of a process in the middle of writing loses nothing it was told was
//! committed, and leaves no half of a write behind.
//!
//! This test has its own `main` (`harness = false`). Run without arguments it is the
//! parent: in a fresh schema, it starts a copy of this executable with `--writer`,
//! which enqueues and claims tasks and completes them as fast as it can, printing
//! every operation after it returned (so after its COMMIT). The parent reads those
//! lines, kills the writer with SIGKILL after a random number of them (and a random
//! sub-millisecond pause, so the kill lands anywhere in a round trip), opens the
//! installation again and checks that every reported operation is there with its
//! ledger entry, that every state change has exactly its entry and no entry lacks
//! its change, and that the store keeps working. It repeats this several times on
//! the same schema, then drops it. Without `AGENTMESH_TEST_DATABASE_URL` the
//! parent prints that it skipped and exits 0.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentmesh_core::{Claimant, LedgerQuery, NewTask, TaskStatus, Timestamp};
use agentmesh_postgres::PgStore;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome};
use agentmesh_test_support::postgres::database_url;

#[path = "it/support.rs"]
#[allow(dead_code)]
mod support;

const MESH: &str = "crash";
const ROUNDS: u32 = 6;
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
fn writer(schema: &str, round: &str) -> ExitCode {
    let url = database_url().expect("writers run only where the parent found the server");
    let mut options = support::options(&url, schema);
    options.max_connections = 2;
    let store = PgStore::open(&options).expect("writer opens the installation");
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

/// A small random number generator (xorshift), seeded from a random UUID; the
/// seed is printed so a failing run can be told apart.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn parent() -> ExitCode {
    let Some(url) = database_url() else {
        return ExitCode::SUCCESS;
    };
    println!("running 1 test");
    let db = support::TestDb::new(&url);
    let schema = db.schema().to_owned();
    let seed = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
    let mut rng = Rng(seed);
    let exe = std::env::current_exe().unwrap();
    let mut enqueued = Vec::new();
    let mut completed = Vec::new();
    let mut kills_at = Vec::new();
    let began = Instant::now();
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["--writer", &schema, &round.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn writer");
        let lines = BufReader::new(child.stdout.take().unwrap());
        // Let the writer get going, then kill it wherever it is: between two
        // round trips, or with a statement or a COMMIT on its way.
        let target = 30 + rng.below(300) as usize;
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
            if seen >= target || started.elapsed() > Duration::from_secs(30) {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(1_000)));
        // SIGKILL: no destructors, no ROLLBACK, the connections just drop.
        child.kill().expect("kill the writer");
        child.wait().unwrap();
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert!(seen >= target, "the writer stopped early in round {round}:\n{stderr}");
        kills_at.push(seen);

        let store =
            PgStore::open(&support::options(&url, &schema)).expect("the installation opens after kill -9");
        let ledger = store.read_ledger_ordered(MESH, &LedgerQuery::default()).unwrap();
        let mut entries: HashMap<(&str, &str), usize> = HashMap::new();
        for entry in &ledger {
            if let Some(task) = entry.task_id() {
                *entries.entry((entry.kind.as_str(), task)).or_default() += 1;
            }
        }
        let entries_of = |kind: &str, id: &str| entries.get(&(kind, id)).copied().unwrap_or(0);
        for id in &enqueued {
            let task = store.find_task(MESH, id).unwrap();
            assert!(task.is_some(), "committed task {id} lost in round {round}");
            assert_eq!(entries_of("task_dispatched", id), 1, "the ledger entry of committed task {id}");
        }
        for id in &completed {
            let task = store.find_task(MESH, id).unwrap().unwrap();
            assert_eq!(task.status, TaskStatus::Completed, "committed completion of {id} lost");
            assert_eq!(entries_of("task_completed", id), 1, "the ledger entry of completed task {id}");
        }
        // Nothing half written either: every task has exactly the entries of the
        // changes it went through, and no entry names a task that is not there.
        let all = store.queue_entries(MESH, &TaskStatus::ALL).unwrap();
        for task in &all {
            assert_eq!(entries_of("task_dispatched", &task.id), 1, "one task_dispatched for {}", task.id);
            let want_completed = usize::from(task.status == TaskStatus::Completed);
            assert_eq!(
                entries_of("task_completed", &task.id),
                want_completed,
                "task_completed entries of {} ({:?})",
                task.id,
                task.status
            );
        }
        let dispatched = ledger.iter().filter(|e| e.kind == "task_dispatched").count();
        assert_eq!(dispatched, all.len(), "a task_dispatched entry exactly for every task there is");
        // A task assigned to the killed writer's session is stranded, not corrupt:
        // once its lease lapses the store reclaims it and keeps working.
        for task in store.queue_entries(MESH, &[TaskStatus::Assigned]).unwrap() {
            let reclaimed = store.reclaim_if_lease_expired(MESH, &task.id, NOW.plus_millis(2_000)).unwrap();
            assert!(reclaimed.is_some(), "the stranded task {} is reclaimed", task.id);
        }
        let after = store
            .enqueue(MESH, &NewTask { message: "after the crash".into(), ..NewTask::default() }, NOW)
            .unwrap();
        enqueued.push(after.id);
    }
    // The last writer's leftovers and the tasks reclaimed above are claimable
    // and completable by a new session.
    let survivor =
        Claimant { node_id: "n-after".into(), session_id: "s-after".into(), ..Claimant::default() };
    let mut finished = 0;
    while let ClaimOutcome::Claimed(task) =
        db.claim_next(MESH, &survivor, &ClaimOptions::default(), NOW).unwrap()
    {
        let report = CompletionReport {
            session_id: survivor.session_id.clone(),
            task_id: Some(task.id.clone()),
            epoch: Some(task.epoch()),
            occurred_at: None,
            outcome: Outcome::Completed { summary: None },
        };
        assert_eq!(db.complete_task(MESH, &report, NOW).unwrap().status, TaskStatus::Completed);
        finished += 1;
    }
    let pending = db.queue_entries(MESH, &[TaskStatus::Pending, TaskStatus::Assigned]).unwrap();
    assert!(pending.is_empty(), "every task was finished after the crashes");
    println!(
        "test kill_9_loses_no_committed_write ... ok ({} enqueues and {} completions across {ROUNDS} kills \
         after {kills_at:?} operations, seed {seed:#x}; {finished} left-over tasks finished after; {:.2} s)",
        enqueued.len(),
        completed.len(),
        began.elapsed().as_secs_f64()
    );
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    ExitCode::SUCCESS
}
