//! The SQLite store held to the reference model
//! (`agentmesh_store::model`): random operation sequences, with the database
//! file closed and opened again at random steps, run on the model and on a
//! fresh file side by side, every answer and every view compared after each
//! step. A failing sequence is shrunk and kept in
//! `tests/proptest-regressions/model.txt`, which later runs replay first.
//!
//! `PROPTEST_CASES` sets how many sequences a run tries (default 96, each up
//! to 60 steps).

use agentmesh_sqlite::SqliteStore;
use agentmesh_store::model::{check, ops};
use proptest::prelude::*;

/// A store on a fresh database file in a temp directory.
fn fresh_file() -> check::Reopened<SqliteStore, tempfile::TempDir> {
    let dir = tempfile::tempdir().expect("a temp directory");
    let path = dir.path().join("mesh-runtime.db");
    check::Reopened::new(dir, move || SqliteStore::open(&path).expect("the file opens"))
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn model_sqlite_agrees_with_the_reference_model(seq in ops::sequence(1..60, true)) {
        let mut file = fresh_file();
        if let Err(difference) = check::run(&mut file, &seq) {
            prop_assert!(false, "{}", difference);
        }
    }
}

/// The sequences the check draws reach every outcome worth comparing: a
/// generator that stopped reaching one (a claim that always refuses, a drain
/// that never delivers) would make the comparison above pass without testing it.
#[test]
fn model_generated_sequences_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = ops::sequence(40..60, false);
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..300 {
        let seq = strategy.new_tree(&mut runner).expect("a sequence").current();
        for outcome in check::outcomes(&seq) {
            *seen.entry(outcome).or_default() += 1;
        }
    }
    let expected = [
        "Enqueue: ok pending",
        "Enqueue: error dependency cycle detected:",
        "Enqueue: error task t",
        "Enqueue: error invalid message: must",
        "Enqueue: error invalid message: live_debug_readonly_guardrail_violation:",
        "EnqueueBatch: some",
        "Claim: claimed",
        "Claim: refused session_already_assigned",
        "Claim: refused no_pending_candidates",
        "Claim: refused required_tags_unsatisfied",
        "Claim: refused dependencies_unsatisfied",
        "Claim: refused not_before_delayed",
        "Claim: refused convergence_target_is_worktree",
        "Claim: refused target_pin_unmatched",
        "Claim: refused difficulty_floor_unmet",
        "Claim: refused parallel_cap_reached",
        "Claim: refused node_busy_with_active_assignment",
        "Complete: ok completed",
        "Complete: ok failed",
        "Complete: error stale epoch for",
        "Complete: error task t",
        "CompleteAndClaim: completed, then claimed",
        "Heartbeat: ok assigned",
        "Heartbeat: error stale epoch for",
        "Cancel: ok cancelled",
        "Requeue: pending",
        "Requeue: exhausted",
        "Priority: ok pending",
        "Reap: reclaimed",
        "Push: queued",
        "Push: duplicate",
        "Drain: delivered",
        "Drain: dedup skipped",
        "Drain: quarantined",
        "Peek: some",
        "Mission: created",
        "Mission: updated",
        "Progress: \"MissionProgress",
        "Repush: queued",
    ];
    let report: Vec<String> = seen.iter().map(|(k, n)| format!("{n:>6}  {k}")).collect();
    println!("{}", report.join("\n"));
    let missing: Vec<&str> =
        expected.iter().copied().filter(|e| !seen.keys().any(|k| k.starts_with(e))).collect();
    assert!(missing.is_empty(), "never reached: {missing:?}\nreached:\n{}", report.join("\n"));
}
