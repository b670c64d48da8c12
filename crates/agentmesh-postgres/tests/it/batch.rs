//! Group commit per mesh: writes of one mesh that arrive together share a
//! COMMIT, and a write that fails inside a shared transaction is undone alone.

use std::sync::Arc;

use agentmesh_core::{Claimant, NewTask, TaskStatus, Timestamp};
use agentmesh_postgres::PgStore;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, StoreError};

use crate::support::TestDb;

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn task(id: &str) -> NewTask {
    NewTask { id: Some(id.to_owned()), message: format!("work on {id}"), ..NewTask::default() }
}

#[test]
fn concurrent_writes_of_one_mesh_share_commits_and_a_failure_stays_alone() {
    let url = agentmesh_test_support::require_postgres!();
    let db = Arc::new(TestDb::new(&url));
    db.enqueue("m", &task("taken"), NOW).expect("the first enqueue");
    let threads = 16;
    let per_thread = 25;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut refused = 0;
                for i in 0..per_thread {
                    db.enqueue("m", &task(&format!("t{t}-{i}")), NOW).expect("a fresh id is enqueued");
                    // A duplicate fails inside whatever batch it joined.
                    match db.enqueue("m", &task("taken"), NOW) {
                        Err(StoreError::DuplicateTaskId { .. }) => refused += 1,
                        other => panic!("expected the duplicate refused, got {other:?}"),
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = handles.into_iter().map(|h| h.join().expect("a writer thread")).sum();
    assert_eq!(refused, threads * per_thread, "every duplicate is refused");
    let tasks = db.queue_entries("m", &[]).expect("the queue");
    assert_eq!(tasks.len(), 1 + threads * per_thread, "every fresh task is there, and only those");
    let entries = db.ledger_count("m").expect("the ledger count");
    assert_eq!(entries, tasks.len() as u64, "one task_dispatched entry per task, none for a refusal");
    let (writes, commits) = db.write_stats();
    assert!(writes >= (1 + 2 * threads * per_thread) as u64, "{writes} writes counted");
    assert!(
        commits < writes,
        "expected concurrent writes to share commits: {writes} writes in {commits} commits"
    );
    eprintln!("{writes} writes in {commits} commits");
}

/// A batch commits while the next one opens: the next one's opener waits for
/// the mesh lock that the committing batch holds, so the committing batch must
/// never wait for anything the opener holds. Under a steady stream of writes
/// from many threads, every write of one mesh finishes promptly; a write caught
/// in a wait between the two batches would stall until the server's lock
/// timeout (30 s) broke it.
#[test]
fn a_batch_that_commits_never_waits_for_the_batch_that_opens_after_it() {
    let url = agentmesh_test_support::require_postgres!();
    let db = Arc::new(TestDb::new(&url));
    // More writers than a batch takes (32), so writers wait for a full batch
    // to close and open the next one the moment it does.
    let threads = 48;
    let per_thread = 60;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut slowest = std::time::Duration::ZERO;
                for i in 0..per_thread {
                    let began = std::time::Instant::now();
                    db.enqueue("m", &task(&format!("t{t}-{i}")), NOW).expect("a fresh id is enqueued");
                    slowest = slowest.max(began.elapsed());
                }
                slowest
            })
        })
        .collect();
    let slowest = handles.into_iter().map(|h| h.join().expect("a writer thread")).max().unwrap_or_default();
    assert!(
        slowest < std::time::Duration::from_secs(10),
        "a write of the mesh waited {slowest:?}: batches waited for each other"
    );
    let tasks = db.queue_entries("m", &[]).expect("the queue");
    assert_eq!(tasks.len(), threads * per_thread, "every task is there");
}

/// Claims and completions of many threads on one store are decided in groups:
/// each task is claimed by one session and completed once, every claim and
/// completion is in the ledger once and in order, and the groups decided
/// requests in memory without one failing as a whole.
/// The task a worker's claim got, checked to be held by it.
fn claimed(outcome: ClaimOutcome, who: &Claimant) -> Option<agentmesh_core::Task> {
    let ClaimOutcome::Claimed(task) = outcome else { return None };
    assert_eq!(task.assigned_session_id.as_deref(), Some(who.session_id.as_str()));
    Some(task)
}

fn done(who: &Claimant, task: &agentmesh_core::Task) -> CompletionReport {
    CompletionReport {
        session_id: who.session_id.clone(),
        task_id: Some(task.id.clone()),
        epoch: Some(task.epoch()),
        occurred_at: None,
        outcome: Outcome::Completed { summary: None },
    }
}

/// Fills mesh `m` with `tasks` tasks, runs `threads` workers (a session and a
/// node each) through `work` until it returns the ids it completed, and checks
/// that every task was claimed and completed exactly once, with its ledger
/// entries, that no group failed, and that the store decided `requests` claims
/// and completions, in groups.
fn workers_run_every_task_once(
    tasks: usize,
    threads: usize,
    requests: u64,
    work: fn(&PgStore, &Claimant) -> Vec<String>,
) {
    let url = agentmesh_test_support::require_postgres!();
    let db = Arc::new(TestDb::new(&url));
    let batch: Vec<NewTask> = (0..tasks).map(|i| task(&format!("t{i:03}"))).collect();
    db.enqueue_batch("m", &batch, NOW).expect("the tasks");
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let who = Claimant {
                    node_id: format!("node-{t}"),
                    session_id: format!("session-{t}"),
                    ..Claimant::default()
                };
                work(&db, &who)
            })
        })
        .collect();
    let mut done: Vec<String> =
        handles.into_iter().flat_map(|h| h.join().expect("a worker thread")).collect();
    assert_eq!(done.len(), tasks, "every claim was of a task not claimed before");
    done.sort();
    done.dedup();
    assert_eq!(done.len(), tasks, "no task was claimed twice");
    let completed = db.queue_entries("m", &[TaskStatus::Completed]).expect("the queue");
    assert_eq!(completed.len(), tasks);
    // Dispatched, claimed and completed: three entries a task.
    assert_eq!(db.ledger_count("m").expect("the ledger count"), 3 * tasks as u64);
    let stats = db.group_stats();
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(stats.in_memory + stats.alone, requests, "{stats:?}");
    assert!(stats.groups > 0 && stats.in_memory > stats.groups, "requests shared groups: {stats:?}");
}

#[test]
fn concurrent_claims_and_completions_are_decided_in_groups_and_each_task_runs_once() {
    // A claim and a completion a task, and each worker's last claim, refused.
    workers_run_every_task_once(400, 12, 2 * 400 + 12, |db, who| {
        let mut done = Vec::new();
        while let Some(task) =
            claimed(db.claim_next("m", who, &ClaimOptions::default(), NOW).expect("a claim"), who)
        {
            let stored = db.complete_task("m", &self::done(who, &task), NOW).expect("a completion");
            assert_eq!(stored.status, TaskStatus::Completed);
            done.push(task.id);
        }
        done
    });
}

#[test]
fn concurrent_completions_that_claim_the_next_are_grouped_and_each_task_runs_once() {
    // Each worker's first claim, then one request a task.
    workers_run_every_task_once(400, 12, 400 + 12, |db, who| {
        let mut done = Vec::new();
        let mut next = db.claim_next("m", who, &ClaimOptions::default(), NOW).expect("a claim");
        while let Some(task) = claimed(next, who) {
            let (stored, outcome) = db
                .complete_and_claim("m", &self::done(who, &task), who, &ClaimOptions::default(), NOW)
                .expect("a completion and claim");
            assert_eq!((stored.id.as_str(), stored.status), (task.id.as_str(), TaskStatus::Completed));
            done.push(task.id);
            next = outcome;
        }
        done
    });
}

/// Claims and completions submitted without waiting (as the daemon submits
/// them) all run, on the store's own threads, each task once.
#[test]
fn submitted_claims_and_completions_run_each_task_once() {
    use agentmesh_core::{Claimant, NewTask, Timestamp};
    use agentmesh_store::submit::wait;
    use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome};
    use std::sync::Arc;

    let url = agentmesh_test_support::require_postgres!();
    let db = crate::support::TestDb::new(&url);
    let store = Arc::new(
        agentmesh_postgres::PgStore::open(&crate::support::options(&url, db.store.schema())).unwrap(),
    );
    let now = Timestamp::from_millis(1_780_000_000_000);
    let tasks: Vec<NewTask> = (0..40)
        .map(|i| NewTask { id: Some(format!("t{i}")), message: format!("task {i}"), ..NewTask::default() })
        .collect();
    store.enqueue_batch("m", &tasks, now).unwrap();
    let claimant = |i: usize| Claimant {
        node_id: format!("node-{i}"),
        session_id: format!("s{i}"),
        ..Claimant::default()
    };
    let claims: Vec<_> = (0..40)
        .map(|i| Arc::clone(&store).submit_claim("m".into(), claimant(i), ClaimOptions::default(), now))
        .collect();
    let claimed: Vec<(usize, agentmesh_core::Task)> = claims
        .into_iter()
        .enumerate()
        .map(|(i, f)| match wait(f).expect("a claim") {
            ClaimOutcome::Claimed(t) => (i, t),
            ClaimOutcome::Refused(r) => panic!("claim {i} refused: {r}"),
        })
        .collect();
    let mut ids: Vec<String> = claimed.iter().map(|(_, t)| t.id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40, "every task claimed once");
    let completions: Vec<_> = claimed
        .iter()
        .map(|(i, t)| {
            let report = CompletionReport {
                session_id: format!("s{i}"),
                task_id: Some(t.id.clone()),
                epoch: Some(t.epoch()),
                occurred_at: None,
                outcome: Outcome::Completed { summary: None },
            };
            Arc::clone(&store).submit_completion("m".into(), report, now)
        })
        .collect();
    for f in completions {
        wait(f).expect("a completion");
    }
    let done = store.queue_entries("m", &[agentmesh_core::TaskStatus::Completed]).unwrap();
    assert_eq!(done.len(), 40);
}
