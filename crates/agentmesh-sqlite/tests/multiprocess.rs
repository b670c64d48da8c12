//! Sixteen OS processes claim from one database file at once: every task must be
//! claimed exactly once, and completed exactly once.
//!
//! This test has its own `main` (`harness = false`). Run without arguments it is the
//! parent: it fills a queue, starts 16 copies of this executable with `--worker`,
//! and checks what they report. Each worker opens the file itself and claims,
//! completes, and claims again until nothing is left.

use std::process::ExitCode;

use agentmesh_sqlite::SqliteStore;
use agentmesh_store::conformance::claim_race as claims;
use agentmesh_store::conformance::reservation_race as race;

const WORKERS: usize = 16;
const TASKS: usize = 1_600;

fn main() -> ExitCode {
    claims::process_main(open_store, parent)
}

fn parent() -> ExitCode {
    println!("running 2 tests");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mesh-runtime.db");
    let store = SqliteStore::open(&db).unwrap();
    claims::fill(&store, TASKS);
    let exe = std::env::current_exe().unwrap();
    let busy_workers = claims::race_in_processes(&exe, db.to_str().unwrap(), WORKERS, TASKS, &store);
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
fn open_store(db: &str) -> SqliteStore {
    SqliteStore::open(db).expect("a worker opens the database")
}
