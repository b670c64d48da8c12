//! Writes of one mesh from many threads at once, with no lock of the mesh:
//! each task is claimed by one session and completed once, and readiness kept
//! by concurrent completions and enqueues is never lost.

use std::sync::Arc;

use agentmesh_core::{Claimant, NewTask, TaskStatus, Timestamp};
use agentmesh_postgres::PgStore;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome};

use crate::support::TestDb;

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn task(id: &str) -> NewTask {
    NewTask { id: Some(id.to_owned()), message: format!("work on {id}"), ..NewTask::default() }
}

fn worker(k: usize) -> Claimant {
    Claimant { node_id: format!("node-{k}"), session_id: format!("session-{k}"), ..Claimant::default() }
}

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

/// Claims and completes until a claim finds nothing; the ids it completed.
fn claim_then_complete(db: &PgStore, who: &Claimant, mesh: &str) -> Vec<String> {
    let mut done = Vec::new();
    while let Some(task) =
        claimed(db.claim_next(mesh, who, &ClaimOptions::default(), NOW).expect("a claim"), who)
    {
        let stored = db.complete_task(mesh, &self::done(who, &task), NOW).expect("a completion");
        assert_eq!(stored.status, TaskStatus::Completed);
        done.push(task.id);
    }
    done
}

/// Fills mesh `m` with `tasks` tasks, runs `threads` workers (a session and a
/// node each) through `work` until it returns the ids it completed, and checks
/// that every task was claimed and completed exactly once, with its ledger
/// entries.
fn workers_run_every_task_once(tasks: usize, threads: usize, work: fn(&PgStore, &Claimant) -> Vec<String>) {
    let url = agentmesh_test_support::require_postgres!();
    let db = Arc::new(TestDb::new(&url));
    let batch: Vec<NewTask> = (0..tasks).map(|i| task(&format!("t{i:03}"))).collect();
    db.enqueue_batch("m", &batch, NOW).expect("the tasks");
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || work(&db, &worker(t)))
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
    let ledger = db.read_ledger_ordered("m", &agentmesh_core::LedgerQuery::default()).expect("the ledger");
    assert_eq!(ledger.len(), 3 * tasks);
}

#[test]
fn concurrent_claims_and_completions_run_each_task_once() {
    workers_run_every_task_once(400, 12, |db, who| claim_then_complete(db, who, "m"));
}

#[test]
fn concurrent_completions_that_claim_the_next_run_each_task_once() {
    workers_run_every_task_once(400, 12, |db, who| {
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

/// Dependents enqueued while their dependencies complete, two dependencies
/// each completing at once on other threads: every dependent ends ready,
/// whichever way the writes met (none is left counting a completed
/// dependency as unmet).
#[test]
fn dependents_enqueued_while_their_dependencies_complete_all_become_ready() {
    const ROOTS: usize = 24;
    const PER_THREAD: usize = 40;
    const ENQUEUERS: usize = 3;
    const COMPLETERS: usize = 3;
    let url = agentmesh_test_support::require_postgres!();
    let db = Arc::new(TestDb::new(&url));
    let roots: Vec<NewTask> = (0..ROOTS).map(|i| task(&format!("root{i:02}"))).collect();
    db.enqueue_batch("m", &roots, NOW).expect("the roots");
    let mut handles = Vec::new();
    for e in 0..ENQUEUERS {
        let db = Arc::clone(&db);
        handles.push(std::thread::spawn(move || {
            for i in 0..PER_THREAD {
                let n = e * PER_THREAD + i;
                // Two roots, spread so that each root has dependents from every thread.
                let (a, mut b) = (n % ROOTS, (n * 7 + 3) % ROOTS);
                if a == b {
                    b = (b + 1) % ROOTS;
                }
                let deps = vec![format!("root{a:02}"), format!("root{b:02}")];
                let new = NewTask { depends_on: deps, ..task(&format!("dep{n:03}")) };
                db.enqueue("m", &new, NOW).expect("a dependent");
            }
            Vec::new()
        }));
    }
    for c in 0..COMPLETERS {
        let db = Arc::clone(&db);
        // Roots are the only ready tasks until one completes; dependents
        // becoming ready are claimed too, which is fine: all that counts is
        // that everything ends completed.
        handles.push(std::thread::spawn(move || claim_then_complete(&db, &worker(c), "m")));
    }
    let mut done: Vec<String> = handles.into_iter().flat_map(|h| h.join().expect("a thread")).collect();
    // Whatever the completers left: every dependent must be claimable now.
    done.extend(claim_then_complete(&db, &worker(99), "m"));
    done.sort();
    let before = done.len();
    done.dedup();
    assert_eq!(done.len(), before, "no task was completed twice");
    let left = db.queue_entries("m", &[TaskStatus::Pending]).expect("the queue");
    let stuck: Vec<(String, Vec<String>)> =
        left.iter().map(|t| (t.id.clone(), t.dependencies().to_vec())).collect();
    assert!(stuck.is_empty(), "tasks left pending after every dependency completed: {stuck:?}");
    assert_eq!(done.len(), ROOTS + ENQUEUERS * PER_THREAD);
}

/// Claims and completions submitted without waiting (as the daemon submits
/// them) all run, on the store's own threads, each task once.
#[test]
fn submitted_claims_and_completions_run_each_task_once() {
    use agentmesh_store::TaskWrite;
    use agentmesh_store::submit::{self, wait};

    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let store = Arc::new(PgStore::open(&crate::support::options(&url, db.store.schema())).unwrap());
    let tasks: Vec<NewTask> = (0..40).map(|i| task(&format!("t{i}"))).collect();
    store.enqueue_batch("m", &tasks, NOW).unwrap();
    let claims: Vec<_> = (0..40)
        .map(|i| submit::claim(Arc::clone(&store), "m".into(), worker(i), ClaimOptions::default(), NOW))
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
            submit::task(Arc::clone(&store), "m".into(), TaskWrite::Complete(done(&worker(*i), t)), NOW)
        })
        .collect();
    for f in completions {
        wait(f).expect("a completion");
    }
    let done = store.queue_entries("m", &[TaskStatus::Completed]).unwrap();
    assert_eq!(done.len(), 40);
}

/// Reading a task takes no row lock: it neither waits for a write that holds
/// the row nor holds it itself, so a claim beside a reader (the dashboard's
/// task page, `task show`) never steps over the task it reads.
#[test]
fn reading_a_task_neither_waits_for_a_writer_nor_blocks_a_claim() {
    let url = agentmesh_test_support::require_postgres!();
    let db = Arc::new(TestDb::new(&url));
    db.enqueue("m", &task("shown"), NOW).expect("an enqueue");

    // A write in progress on another connection holds the row.
    let mut writer = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
    let mut tx = writer.transaction().expect("a transaction");
    tx.batch_execute(&format!(
        "SET LOCAL search_path TO \"{}\";
         SELECT 1 FROM mesh_queue WHERE mesh_id = 'm' AND id = 'shown' FOR UPDATE",
        db.store.schema()
    ))
    .expect("the writer locks the row");
    let (sent, read) = std::sync::mpsc::channel();
    let reader = Arc::clone(&db);
    std::thread::spawn(move || {
        let _ = sent.send(reader.find_task("m", "shown"));
    });
    let found = read
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the read answers while a writer holds the row")
        .expect("a read");
    assert_eq!(found.map(|t| t.id).as_deref(), Some("shown"));
    tx.rollback().expect("the writer ends");

    // Reads of the task on many threads while a worker claims: the claim
    // takes the task every time (a read holding its row would make the
    // claim's SKIP LOCKED pass it by, and the claim find nothing).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    db.find_task("m", "shown").expect("a read");
                }
            })
        })
        .collect();
    let who = worker(0);
    for round in 0..200 {
        let outcome = db.claim_next("m", &who, &ClaimOptions::default(), NOW).expect("a claim");
        let Some(task) = claimed(outcome, &who) else {
            panic!("round {round}: the claim passed the task by while it was being read");
        };
        assert_eq!(task.id, "shown");
        let force = agentmesh_core::RequeueOptions { force: true, ..Default::default() };
        db.task_command("m", "shown", agentmesh_store::TaskCommand::Requeue(&force), NOW).expect("a requeue");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.join().expect("a reader");
    }
}
