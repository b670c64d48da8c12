//! Announcements: every write a store commits wakes the listeners of every
//! store on the installation with its mesh, including a write made just before
//! its store is dropped (a CLI command that writes and exits); claims and
//! heartbeats, which no waiter of another daemon looks for, do not.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentmesh_core::{NewTask, Timestamp};
use agentmesh_postgres::PgStore;
use agentmesh_store::prelude::*;

use crate::support::{TestDb, options};

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn task(message: &str) -> NewTask {
    NewTask { message: message.to_owned(), ..NewTask::default() }
}

/// The meshes heard within `wait`, until every one of `want` was heard.
fn heard_all(heard: &mpsc::Receiver<String>, want: &[&str], wait: Duration) -> Vec<String> {
    let until = Instant::now() + wait;
    let mut got = Vec::new();
    while !want.iter().all(|w| got.iter().any(|g| g == w)) {
        let Some(left) = until.checked_duration_since(Instant::now()) else { break };
        match heard.recv_timeout(left) {
            Ok(mesh) => got.push(mesh),
            Err(_) => break,
        }
    }
    got
}

/// A listening store, what it hears, and a second store on its schema (another
/// daemon) that writes.
struct Heard {
    heard: mpsc::Receiver<String>,
    writer: PgStore,
    _listener: agentmesh_postgres::Listener,
    _db: TestDb,
}

fn listening(url: &str) -> Heard {
    let db = TestDb::new(url);
    let (tx, heard) = mpsc::channel();
    let listener = db.store.listen(move |mesh| drop(tx.send(mesh.to_owned()))).expect("a listener");
    let writer = PgStore::open(&options(url, db.store.schema())).expect("a second store");
    Heard { heard, writer, _listener: listener, _db: db }
}

#[test]
fn a_listener_hears_the_mesh_of_each_write_of_another_store() {
    let url = agentmesh_test_support::require_postgres!();
    let Heard { heard, writer, _listener, _db } = listening(&url);
    writer.enqueue("alpha", &task("one"), NOW).expect("an enqueue");
    writer.enqueue("beta", &task("two"), NOW).expect("an enqueue");
    let got = heard_all(&heard, &["alpha", "beta"], Duration::from_secs(5));
    assert!(got.iter().any(|m| m == "alpha") && got.iter().any(|m| m == "beta"), "heard {got:?}");

    // A store dropped right after its write announces it before it goes.
    writer.enqueue("gamma", &task("three"), NOW).expect("an enqueue");
    drop(writer);
    let got = heard_all(&heard, &["gamma"], Duration::from_secs(5));
    assert!(got.iter().any(|m| m == "gamma"), "heard {got:?}");
}

#[test]
fn a_refused_write_is_not_announced() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let (tx, heard) = mpsc::channel();
    let _listener = db.store.listen(move |mesh| drop(tx.send(mesh.to_owned()))).expect("a listener");

    // Refused inside its transaction: the task is looked for, and is not there.
    let report = agentmesh_store::CompletionReport {
        session_id: "session-1".to_owned(),
        task_id: Some("no-such-task".to_owned()),
        epoch: Some(1),
        occurred_at: None,
        outcome: agentmesh_store::Outcome::Completed { summary: None },
    };
    db.store.complete_task("refused", &report, NOW).expect_err("no such task");
    db.store.enqueue("accepted", &task("one"), NOW).expect("an enqueue");
    let got = heard_all(&heard, &["accepted"], Duration::from_secs(5));
    assert!(got.iter().any(|m| m == "accepted"), "heard {got:?}");
    assert!(!got.iter().any(|m| m == "refused"), "a write that changed nothing was announced: {got:?}");
}

#[test]
fn a_claim_and_a_heartbeat_are_not_announced_and_the_completion_is() {
    use agentmesh_store::conformance::support::{claim_ok, complete, worker};
    let url = agentmesh_test_support::require_postgres!();
    let Heard { heard, writer, _listener, _db } = listening(&url);
    let queued = writer.enqueue("work", &task("one"), NOW).expect("an enqueue");
    let got = heard_all(&heard, &["work"], Duration::from_secs(5));
    assert!(got.iter().any(|m| m == "work"), "the enqueue was not heard: {got:?}");

    let claimed = claim_ok(&writer, "work", &worker("node-1", "s1"), NOW, &queued.id);
    let beat = agentmesh_store::Heartbeat {
        task_id: claimed.id.clone(),
        session_id: "s1".to_owned(),
        epoch: claimed.epoch(),
        lease_ms: 60_000,
        progress: None,
    };
    writer.heartbeat("work", &beat, NOW).expect("a heartbeat");
    // An empty queue's refused claim writes nothing and is not heard either.
    writer.claim_next("idle", &worker("node-2", "s2"), &Default::default(), NOW).expect("a claim");
    // Last in name order, as one announcement sends its meshes.
    writer.enqueue("zz-marker", &task("two"), NOW).expect("an enqueue");
    let got = heard_all(&heard, &["zz-marker"], Duration::from_secs(5));
    assert!(got.iter().any(|m| m == "zz-marker"), "the marker was not heard: {got:?}");
    assert!(!got.iter().any(|m| m == "work" || m == "idle"), "a claim or a heartbeat was announced: {got:?}");

    complete(&writer, "work", &claimed, NOW);
    let got = heard_all(&heard, &["work"], Duration::from_secs(5));
    assert!(got.iter().any(|m| m == "work"), "the completion was not heard: {got:?}");
}
