//! Four OS processes, each with its own store on one database file, run random
//! work on one mesh at once while this process pages the ledger by sequence
//! the whole time; then the history is checked
//! (`agentmesh_store::model::history`): one holder per task, caps and busy
//! nodes, increasing epochs, every acknowledged write present, every ended
//! task's event delivered exactly once, and the follower's view complete and in
//! order.
//!
//! This test has its own `main` (`harness = false`): run without arguments it
//! is the parent, which seeds the queue and starts copies of itself with
//! `--worker FILE INDEX SEED`; each prints its records as JSON lines.
//! `AGENTMESH_HISTORY_RUNS` sets how many runs (default 3, each with a new seed).

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use agentmesh_sqlite::SqliteStore;
use agentmesh_store::model::history::{self, Plan, Record};

const WORKERS: usize = 4;
const STEPS: usize = 250;

fn plan(seed: u64) -> Plan {
    Plan::new("history", WORKERS, STEPS, seed)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--worker") {
        Some(i) => worker(&args[i + 1], &args[i + 2], &args[i + 3]),
        None if args.iter().any(|a| a == "--list") => ExitCode::SUCCESS,
        None => parent(),
    }
}

fn worker(path: &str, index: &str, seed: &str) -> ExitCode {
    let store = SqliteStore::open(path).expect("the worker opens the database");
    let index: usize = index.parse().expect("a worker index");
    let plan = plan(seed.parse().expect("a seed"));
    for record in history::worker(&store, &plan, index) {
        println!("{}", serde_json::to_string(&record).expect("a record serializes"));
    }
    ExitCode::SUCCESS
}

fn parent() -> ExitCode {
    let runs: u64 = std::env::var("AGENTMESH_HISTORY_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let base = history::wall_clock().millis() as u64;
    for run in 0..runs {
        let seed = base.wrapping_add(run.wrapping_mul(7919));
        if let Err(problem) = one_run(seed) {
            eprintln!("history run with seed {seed} failed:\n{problem}");
            return ExitCode::FAILURE;
        }
    }
    println!("history: {runs} passed, 0 failed");
    ExitCode::SUCCESS
}

fn one_run(seed: u64) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("a temp directory");
    let path = dir.path().join("mesh-runtime.db");
    let plan = plan(seed);
    let store = Arc::new(SqliteStore::open(&path).expect("a fresh database"));
    history::seed(&*store, &plan).map_err(|e| format!("seeding failed: {e}"))?;

    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (store, stop, mesh) = (Arc::clone(&store), Arc::clone(&stop), plan.mesh.clone());
        std::thread::spawn(move || history::follow(&*store, &mesh, &stop))
    };
    let exe = std::env::current_exe().expect("this test's executable");
    let children: Vec<_> = (0..WORKERS)
        .map(|i| {
            Command::new(&exe)
                .args(["--worker", path.to_str().expect("a UTF-8 path"), &i.to_string(), &seed.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("a worker process starts")
        })
        .collect();
    let mut records: Vec<Record> = Vec::new();
    for mut child in children {
        let out = child.stdout.take().expect("the worker's stdout");
        for line in BufReader::new(out).lines() {
            let line = line.expect("a line from the worker");
            records.push(serde_json::from_str(&line).map_err(|e| format!("a bad record {line:?}: {e}"))?);
        }
        let status = child.wait().expect("the worker ends");
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
    }
    records.extend(history::settle(&*store, &plan));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let followed = follower.join().expect("the follower thread")?;
    let summary = history::check(&*store, &plan, &records, &followed)?;
    println!("seed {seed}: {summary:?}");
    if summary.claims == 0 || summary.ended == 0 || summary.delivered == 0 {
        return Err(format!("the run did too little to check anything: {summary:?}"));
    }
    Ok(())
}
