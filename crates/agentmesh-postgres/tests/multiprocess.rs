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

use std::process::ExitCode;
use std::time::Instant;

use agentmesh_postgres::PgStore;
use agentmesh_store::conformance::claim_race as claims;
use agentmesh_store::conformance::reservation_race as race;
use agentmesh_test_support::postgres::database_url;

#[path = "it/support.rs"]
#[allow(dead_code)]
mod support;

const WORKERS: usize = 16;
const TASKS: usize = 800;

fn main() -> ExitCode {
    claims::process_main(open_store, parent)
}

fn parent() -> ExitCode {
    let Some(url) = database_url() else {
        return ExitCode::SUCCESS;
    };
    println!("running 2 tests");
    let db = support::TestDb::new(&url);
    let schema = db.schema().to_owned();
    claims::fill(&db.store, TASKS);
    let exe = std::env::current_exe().unwrap();
    let began = Instant::now();
    let busy_workers = claims::race_in_processes(&exe, &schema, WORKERS, TASKS, &db.store);
    let took = began.elapsed();
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

/// A worker's or racer's own store on the installation in `schema`.
fn open_store(schema: &str) -> PgStore {
    let url = database_url().expect("workers run only where the parent found the server");
    let mut options = support::options(&url, schema);
    options.max_connections = 2;
    PgStore::open(&options).expect("a worker opens the installation")
}
