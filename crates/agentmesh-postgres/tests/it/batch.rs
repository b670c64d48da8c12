//! Group commit per mesh: writes of one mesh that arrive together share a
//! COMMIT, and a write that fails inside a shared transaction is undone alone.

use std::sync::Arc;

use agentmesh_core::{NewTask, Timestamp};
use agentmesh_store::StoreError;
use agentmesh_store::prelude::*;

use crate::support::TestDb;

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn task(id: &str) -> NewTask {
    NewTask { id: Some(id.to_owned()), message: format!("work on {id}"), ..NewTask::default() }
}

#[test]
fn concurrent_writes_of_one_mesh_share_commits_and_a_failure_stays_alone() {
    let db = Arc::new(TestDb::new());
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
