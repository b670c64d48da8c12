//! The PostgreSQL store held to the reference model (`agentmesh_store::model`).
//!
//! - `model_postgres_agrees_with_the_reference_model`: random operation
//!   sequences, with the store closed and opened again on its schema at random
//!   steps (a daemon's restart), run on the model and on a fresh schema side by
//!   side, every answer and view compared after each step. A failing sequence
//!   is shrunk and kept in `tests/model.proptest-regressions`.
//!   `PROPTEST_CASES` sets how many sequences (default 64).
//! - `history_*`: several stores on one schema, each as a daemon would hold it
//!   (a pool of its own), run random work on one mesh at once from threads
//!   while a follower pages the ledger by sequence; the history is checked
//!   (`agentmesh_store::model::history`). `AGENTMESH_HISTORY_RUNS` sets how many
//!   runs each (default 2).
//!
//! The server is `$AGENTMESH_TEST_DATABASE_URL`; without it these tests skip.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_postgres::{PgOptions, PgStore};
use agentmesh_store::model::history::{self, Plan};
use agentmesh_store::model::{check, ops};
use agentmesh_test_support::postgres::Schema;
use proptest::prelude::*;

fn options(url: &str, schema: &str, connections: usize) -> PgOptions {
    let mut options = PgOptions::new(url).schema(schema);
    options.max_connections = connections;
    options
}

/// A store on a fresh schema, which it can close and open again.
fn fresh_schema(url: &str) -> check::Reopened<PgStore, Schema> {
    let schema = Schema::fresh(url, "am_model");
    let (url, name) = (url.to_owned(), schema.name().to_owned());
    check::Reopened::new(schema, move || PgStore::open(&options(&url, &name, 2)).expect("the schema opens"))
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn model_postgres_agrees_with_the_reference_model(seq in ops::sequence(1..60, true)) {
        let Some(url) = agentmesh_test_support::postgres::database_url() else { return Ok(()) };
        let mut subject = fresh_schema(&url);
        if let Err(difference) = check::run(&mut subject, &seq) {
            prop_assert!(false, "{}", difference);
        }
    }
}

/// `stores` stores on one fresh schema run a plan from threads; checked.
fn history_run(url: &str, stores: usize, seed: u64) -> Result<history::Summary, String> {
    let schema = Schema::fresh(url, "am_history");
    let plan = Plan::new("history", stores, 250, seed);
    let follower_store = Arc::new(PgStore::open(&options(url, schema.name(), 2)).expect("a fresh schema"));
    history::seed(&*follower_store, &plan).map_err(|e| format!("seeding failed: {e}"))?;
    let daemons: Vec<Arc<PgStore>> = (0..stores)
        .map(|_| {
            Arc::new(PgStore::open(&options(url, schema.name(), 2)).expect("another store on the schema"))
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (store, stop, mesh) = (Arc::clone(&follower_store), Arc::clone(&stop), plan.mesh.clone());
        std::thread::spawn(move || history::follow(&*store, &mesh, &stop))
    };
    let workers: Vec<_> = daemons
        .iter()
        .enumerate()
        .map(|(i, store)| {
            let (store, plan) = (Arc::clone(store), plan.clone());
            std::thread::spawn(move || history::worker(&*store, &plan, i))
        })
        .collect();
    let mut records = Vec::new();
    for w in workers {
        records.extend(w.join().map_err(|_| "a worker panicked".to_owned())?);
    }
    records.extend(history::settle(&*follower_store, &plan));
    stop.store(true, Ordering::SeqCst);
    let followed = follower.join().map_err(|_| "the follower panicked".to_owned())??;
    let summary = history::check(&*follower_store, &plan, &records, &followed)
        .map_err(|problem| format!("seed {seed}, {stores} stores:\n{problem}"))?;
    drop(daemons);
    drop(follower_store);
    if summary.claims == 0 || summary.ended == 0 || summary.delivered == 0 {
        return Err(format!("the run did too little to check anything: {summary:?}"));
    }
    Ok(summary)
}

fn history_runs(stores: usize) {
    let url = agentmesh_test_support::require_postgres!();
    let runs: u64 = std::env::var("AGENTMESH_HISTORY_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let base = history::wall_clock().millis() as u64;
    for run in 0..runs {
        let seed = base.wrapping_add(run.wrapping_mul(104_729)).wrapping_add(stores as u64);
        match history_run(&url, stores, seed) {
            Ok(summary) => println!("seed {seed}, {stores} stores: {summary:?}"),
            Err(problem) => panic!("{problem}"),
        }
    }
}

#[test]
fn history_of_four_stores_on_one_schema_holds_every_rule() {
    history_runs(4);
}

#[test]
fn history_of_eight_stores_on_one_schema_holds_every_rule() {
    history_runs(8);
}
