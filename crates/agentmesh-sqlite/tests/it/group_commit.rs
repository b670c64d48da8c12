//! Group commit under real contention: many threads writing through one store on
//! a real file. Which writes end up sharing a COMMIT depends on scheduling, so
//! these tests check what must hold whatever the batches were (every returned
//! write is committed, nothing is claimed twice, a read sees only committed rows)
//! and assert only a weak bound on batching itself. The protocol step by step
//! (failed and panicking operations inside a batch, a failed COMMIT, a read
//! meeting an open batch) is unit-tested in `src/lib.rs`.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use agentmesh_core::{Claimant, NewTask, TaskStatus, Timestamp};
use agentmesh_sqlite::{DB_FILE_NAME, SqliteStore};
use agentmesh_store::TaskWrite::Complete;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome};

const MESH: &str = "m";
const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);
const THREADS: usize = 8;

fn task(message: String) -> NewTask {
    NewTask { message, ..NewTask::default() }
}

/// A count read through a connection of its own: what is committed.
fn committed_count(path: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn count_of(store: &SqliteStore, status: TaskStatus) -> u64 {
    store.stats_by_status(MESH).unwrap().iter().find(|s| s.status == status).map_or(0, |s| s.count)
}

#[test]
fn concurrent_writers_all_commit_and_share_commits() {
    const PER_THREAD: usize = 150;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE_NAME);
    let store = SqliteStore::open(&path).unwrap();
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (store, start) = (&store, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..PER_THREAD {
                    store.enqueue(MESH, &task(format!("thread {t} task {i}")), NOW).unwrap();
                }
            });
        }
    });
    let writes = (THREADS * PER_THREAD) as u64;
    let stats = store.write_stats();
    assert_eq!(stats.writes, writes, "every enqueue is one committed write");
    // Eight threads each doing many writes always overlap somewhere, and one
    // overlap is enough for two writes to share a COMMIT: a weak bound on purpose.
    assert!(stats.commits < stats.writes, "no batch formed: {stats:?}");
    assert!(stats.commits >= writes.div_ceil(32), "a batch holds at most 32 writes: {stats:?}");
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(count_of(&store, TaskStatus::Pending), writes);
    let dispatched =
        committed_count(&path, "SELECT count(*) FROM mesh_event_ledger WHERE kind = 'task_dispatched'");
    assert_eq!(dispatched, writes as i64, "each task's ledger entry committed with it");
}

#[test]
fn concurrent_workers_claim_each_task_once_and_complete_it() {
    const TASKS: usize = 240;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE_NAME);
    let store = SqliteStore::open(&path).unwrap();
    let batch: Vec<NewTask> = (0..TASKS).map(|i| task(format!("task {i}"))).collect();
    store.enqueue_batch(MESH, &batch, NOW).unwrap();

    let start = Barrier::new(THREADS);
    let claimed: Vec<String> = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|w| {
                let (store, start) = (&store, &start);
                s.spawn(move || {
                    let who = Claimant {
                        node_id: format!("n{w}"),
                        session_id: format!("s{w}"),
                        ..Claimant::default()
                    };
                    let mut mine = Vec::new();
                    start.wait();
                    loop {
                        let task = match store.claim_next(MESH, &who, &ClaimOptions::default(), NOW).unwrap()
                        {
                            ClaimOutcome::Claimed(task) => task,
                            ClaimOutcome::Refused(_) => break mine,
                        };
                        let report = CompletionReport {
                            session_id: who.session_id.clone(),
                            task_id: Some(task.id.clone()),
                            epoch: Some(task.epoch()),
                            occurred_at: None,
                            outcome: Outcome::Completed { summary: None },
                        };
                        let done = store.complete_task(MESH, &report, NOW).unwrap();
                        assert_eq!(done.status, TaskStatus::Completed);
                        mine.push(task.id);
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(claimed.len(), TASKS, "every task was claimed");
    assert_eq!(claimed.iter().collect::<HashSet<_>>().len(), TASKS, "no task was claimed twice");
    let stats = store.write_stats();
    assert_eq!(
        stats.writes,
        1 + 2 * TASKS as u64 + THREADS as u64,
        "the batch enqueue, a claim and a completion per task, and each worker's last (refused) claim"
    );
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(count_of(&store, TaskStatus::Completed), TASKS as u64, "every completion survived a reopen");
}

#[test]
fn a_read_never_sees_an_uncommitted_write() {
    const WRITERS: usize = 4;
    const PER_WRITER: usize = 150;
    const READERS: usize = 2;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE_NAME);
    let store = SqliteStore::open(&path).unwrap();
    let writing = AtomicBool::new(true);
    let start = Barrier::new(WRITERS + READERS);
    thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (store, start) = (&store, &start);
                s.spawn(move || {
                    start.wait();
                    for i in 0..PER_WRITER {
                        store.enqueue(MESH, &task(format!("writer {t} task {i}")), NOW).unwrap();
                    }
                })
            })
            .collect();
        for _ in 0..READERS {
            let (store, start, writing, path) = (&store, &start, &writing, &path);
            s.spawn(move || {
                let committed = rusqlite::Connection::open(path).unwrap();
                start.wait();
                // Tasks are only added, so what a read saw must be committed by the
                // time it returns: a connection of our own sees at least as many.
                while writing.load(Ordering::SeqCst) {
                    let seen = count_of(store, TaskStatus::Pending);
                    let on_disk: i64 = committed
                        .query_row("SELECT count(*) FROM mesh_queue WHERE mesh_id = ?1", [MESH], |r| r.get(0))
                        .unwrap();
                    assert!(
                        on_disk >= i64::try_from(seen).unwrap(),
                        "a read saw {seen} tasks while only {on_disk} were committed"
                    );
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        writing.store(false, Ordering::SeqCst);
    });
    assert_eq!(count_of(&store, TaskStatus::Pending), (WRITERS * PER_WRITER) as u64);
}

#[test]
fn with_group_commit_off_every_write_commits_on_its_own() {
    const PER_THREAD: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join(DB_FILE_NAME)).unwrap();
    store.set_group_commit(false);
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (store, start) = (&store, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..PER_THREAD {
                    store.enqueue(MESH, &task(format!("thread {t} task {i}")), NOW).unwrap();
                }
            });
        }
    });
    let writes = (THREADS * PER_THREAD) as u64;
    assert_eq!(store.write_stats().writes, writes);
    assert_eq!(store.write_stats().commits, writes);
}

#[test]
fn of_concurrent_upserts_of_a_new_mission_exactly_one_created_it() {
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE_NAME);
    // Two stores on one file, as two processes would have, plus threads on each.
    let stores = [SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap()];
    for round in 0..ROUNDS {
        let id = format!("mission-{round}");
        let start = Barrier::new(THREADS);
        let created: usize = thread::scope(|s| {
            let upserts: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (store, start, id) = (&stores[t % 2], &start, &id);
                    s.spawn(move || {
                        let new = agentmesh_core::NewMission {
                            id: id.clone(),
                            title: format!("upsert {t}"),
                            ..agentmesh_core::NewMission::default()
                        };
                        start.wait();
                        store.upsert_mission(MESH, &new, NOW).unwrap().created
                    })
                })
                .collect();
            upserts.into_iter().map(|u| usize::from(u.join().unwrap())).sum()
        });
        assert_eq!(created, 1, "round {round}: {created} upserts said they created {id}");
    }
    let created_entries =
        committed_count(&path, "SELECT count(*) FROM mesh_event_ledger WHERE kind = 'mission_created'");
    assert_eq!(created_entries, ROUNDS as i64, "one mission_created entry per mission");
}

/// Waits for every submitted write in turn. They were all queued when submitted,
/// so they run (and share commits) whatever order they are waited for in.
fn wait_all<T>(submitted: Vec<agentmesh_store::Submitted<T>>) -> Vec<agentmesh_store::StoreResult<T>> {
    submitted.into_iter().map(agentmesh_store::submit::wait).collect()
}

#[test]
fn submitted_claims_and_completions_take_each_task_once_and_share_commits() {
    const TASKS: usize = 120;
    const WORKERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE_NAME);
    let store = std::sync::Arc::new(SqliteStore::open(&path).unwrap());
    let new: Vec<NewTask> = (0..TASKS).map(|i| task(format!("task {i}"))).collect();
    store.enqueue_batch(MESH, &new, NOW).unwrap();
    let before = store.write_stats();
    let worker = |k: usize| Claimant {
        node_id: format!("node-{k}"),
        session_id: format!("session-{k}"),
        ..Claimant::default()
    };
    let mut completed = HashSet::new();
    loop {
        // Every worker claims at once, then every worker completes at once: the
        // writes of a round are all in flight together, no thread held for any.
        let claims = (0..WORKERS)
            .map(|k| {
                agentmesh_store::submit::claim(
                    std::sync::Arc::clone(&store),
                    MESH.into(),
                    worker(k),
                    ClaimOptions::default(),
                    NOW,
                )
            })
            .collect();
        let claimed: Vec<_> = wait_all(claims)
            .into_iter()
            .filter_map(|outcome| match outcome.unwrap() {
                ClaimOutcome::Claimed(task) => Some(task),
                ClaimOutcome::Refused(_) => None,
            })
            .collect();
        if claimed.is_empty() {
            break;
        }
        let reports = claimed
            .iter()
            .map(|t| {
                let report = CompletionReport {
                    session_id: t.assigned_session_id.clone().unwrap(),
                    task_id: Some(t.id.clone()),
                    epoch: Some(t.epoch()),
                    occurred_at: None,
                    outcome: Outcome::Completed { summary: Some("done".into()) },
                };
                agentmesh_store::submit::task(
                    std::sync::Arc::clone(&store),
                    MESH.into(),
                    Complete(report),
                    NOW,
                )
            })
            .collect();
        for done in wait_all(reports) {
            let done = done.unwrap();
            assert_eq!(done.status, TaskStatus::Completed);
            assert!(completed.insert(done.id.clone()), "task {} completed twice", done.id);
        }
    }
    assert_eq!(completed.len(), TASKS, "every task was claimed and completed once");
    assert_eq!(
        committed_count(&path, "SELECT COUNT(*) FROM mesh_queue WHERE status = 'completed'"),
        TASKS as i64
    );
    let stats = store.write_stats();
    let (writes, commits) = (stats.writes - before.writes, stats.commits - before.commits);
    // One claim and one completion per task, and the refused claims of the last round.
    assert_eq!(writes, (2 * TASKS + WORKERS) as u64);
    assert!(commits < writes, "writes in flight together shared commits: {writes} writes, {commits} commits");

    // A stale completion is refused through the submitted path as through the
    // synchronous one, and the refusal is in the ledger.
    let stale = CompletionReport {
        session_id: "session-0".into(),
        task_id: completed.iter().next().cloned(),
        epoch: Some(99),
        occurred_at: None,
        outcome: Outcome::Completed { summary: None },
    };
    let refused = wait_all(vec![agentmesh_store::submit::task(
        std::sync::Arc::clone(&store),
        MESH.into(),
        Complete(stale),
        NOW,
    )]);
    assert!(
        matches!(refused[0], Err(agentmesh_store::StoreError::StaleEpoch { presented: 99, .. })),
        "{:?}",
        refused[0]
    );
    assert_eq!(
        committed_count(&path, "SELECT COUNT(*) FROM mesh_event_ledger WHERE kind = 'completion_refused'"),
        1
    );
}

#[test]
fn a_large_wal_is_copied_into_the_database_by_the_store_s_checkpointer_thread() {
    // Big messages (overflow pages): a few hundred commits fill the WAL past the
    // size at which the checkpointer thread starts (10,000 pages), and stay below
    // the 40,000 pages at which a writer checkpoints it by itself.
    const COMMITS: usize = 330;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE_NAME);
    let store = SqliteStore::open(&path).unwrap();
    let message = agentmesh_test_support::incompressible(128 * 1024, 11);
    let db_bytes = || std::fs::metadata(&path).map_or(0, |m| m.len());
    let before = db_bytes();
    for i in 0..COMMITS {
        store.enqueue(MESH, &task(format!("{i} {message}")), NOW).unwrap();
    }
    let written = (COMMITS * message.len()) as u64;
    // The pages reach the database file without any writer checkpointing: the
    // checkpointer thread copies them (all but the last few hundred, which the
    // next COMMIT finishes before the WAL starts over, and what was committed
    // after that).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while db_bytes() < before + written / 2 && std::time::Instant::now() < deadline {
        thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        db_bytes() >= before + written / 2,
        "the database file holds {} bytes after {written} bytes were committed",
        db_bytes()
    );
    assert_eq!(committed_count(&path, "SELECT COUNT(*) FROM mesh_queue"), COMMITS as i64);
}
