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

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use agentmesh_sqlite::SqliteStore;
use agentmesh_store::conformance::crash::{self, WRITER_ARG, Written};

const ROUNDS: u32 = 5;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == WRITER_ARG) {
        Some(i) => {
            let store = SqliteStore::open(&args[i + 1]).expect("writer opens the database");
            crash::write_until_killed(&store, &args[i + 2]);
            ExitCode::SUCCESS
        }
        None if args.iter().any(|a| a == "--list") => ExitCode::SUCCESS,
        None => parent(),
    }
}

fn parent() -> ExitCode {
    println!("running 1 test");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mesh-runtime.db");
    let exe = std::env::current_exe().unwrap();
    let mut written = Written::default();
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args([WRITER_ARG, db.to_str().unwrap(), &round.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn writer");
        // Let the writer get going, then kill it wherever it is: the kill lands
        // between any two SQLite calls, most likely in the middle of a transaction.
        let target = 200 + 150 * round as usize;
        let seen = written.read(child.stdout.take().unwrap(), target, Duration::from_secs(20));
        // SIGKILL: no destructors, no rollback, no checkpoint.
        child.kill().expect("kill the writer");
        child.wait().unwrap();
        assert!(seen >= target, "the writer stopped early in round {round}");

        let store = SqliteStore::open(&db).expect("the database reopens after kill -9");
        let conn = rusqlite::Connection::open(&db).unwrap();
        let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(integrity, "ok", "integrity check after round {round}");
        written.check_after_kill(&store, round);
    }
    let finished = crash::finish_leftovers(&SqliteStore::open(&db).unwrap());
    println!(
        "test kill_9_loses_no_committed_write ... ok ({} enqueues and {} completions across {ROUNDS} kills; \
         {finished} left-over tasks finished after)",
        written.enqueued.len(),
        written.completed.len()
    );
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    ExitCode::SUCCESS
}
