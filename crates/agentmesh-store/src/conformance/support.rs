//! The suite's shared pieces: a fixed clock, builders for tasks, claimants, reports
//! and ledger entries, and `#[track_caller]` assertions whose messages say what was
//! expected. Rules use these so that each rule reads as the behaviour it checks.
//!
//! Nothing here reads a clock: every instant is [`T0`] plus an offset.

use std::fmt::Debug;

use agentmesh_core::{
    ClaimRefusal, Claimant, LedgerEntry, LedgerQuery, NewTask, Task, TaskStatus, Timestamp,
};
use serde_json::json;

use crate::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, Store, StoreError, StoreResult};

/// The mesh most rules work in.
pub const MESH: &str = "mesh-a";
/// A second mesh, for isolation rules.
pub const OTHER_MESH: &str = "mesh-b";
/// The suite's epoch: 2025-01-01T00:00:00.000Z.
pub const T0: Timestamp = Timestamp::from_millis(1_735_689_600_000);
/// The lease every claim of the suite asks for.
pub const LEASE_MS: i64 = 60_000;
/// The provider type of [`worker`] sessions.
pub const PROVIDER: &str = "claude-cli";

/// [`T0`] plus `secs` seconds.
pub fn at(secs: i64) -> Timestamp {
    T0.plus_millis(secs * 1_000)
}

/// An enqueue request with a fixed id and a message naming it.
pub fn new_task(id: &str) -> NewTask {
    NewTask { id: Some(id.to_owned()), message: format!("work on {id}"), ..NewTask::default() }
}

/// An enqueue request for a task that depends on `deps`.
pub fn dependent_task(id: &str, deps: &[&str]) -> NewTask {
    NewTask { depends_on: deps.iter().map(|d| (*d).to_owned()).collect(), ..new_task(id) }
}

/// An enqueue request for a read-only task (mode `live_debug_readonly`).
pub fn readonly_task(id: &str) -> NewTask {
    NewTask { task_mode: Some("live_debug_readonly".to_owned()), ..new_task(id) }
}

/// A worker session `session` on node `node`, provider [`PROVIDER`], no tags.
pub fn worker(node: &str, session: &str) -> Claimant {
    Claimant {
        node_id: node.to_owned(),
        session_id: session.to_owned(),
        provider_type: Some(PROVIDER.to_owned()),
        ..Claimant::default()
    }
}

/// The claim options of the suite: a [`LEASE_MS`] lease.
pub fn lease() -> ClaimOptions {
    ClaimOptions { lease_ms: Some(LEASE_MS) }
}

/// An assigned task as a store would hold it, for rules that insert rows directly.
pub fn assigned_row(id: &str, session: &str, dispatched: Timestamp) -> Task {
    let mut task = Task::new(id, MESH, format!("work on {id}"), &T0.iso());
    task.status = TaskStatus::Assigned;
    task.assigned_node_id = Some("node-1".to_owned());
    task.assigned_session_id = Some(session.to_owned());
    task.assigned_provider_type = Some(PROVIDER.to_owned());
    task.dispatch_timestamp = Some(dispatched.iso());
    task.dispatch_nonce = Some(1);
    task.updated_at = dispatched.iso();
    task
}

/// A ledger entry with an object payload naming its id.
pub fn ledger_entry(mesh: &str, id: &str, kind: &str, timestamp: Timestamp) -> LedgerEntry {
    LedgerEntry {
        id: id.to_owned(),
        mesh_id: mesh.to_owned(),
        timestamp: timestamp.iso(),
        kind: kind.to_owned(),
        node_id: None,
        session_id: None,
        provider_type: None,
        payload: json!({ "entry": id }),
    }
}

/// A completion report for the current holder of `task`, at its current epoch.
pub fn report(task: &Task, outcome: Outcome) -> CompletionReport {
    CompletionReport {
        session_id: task.assigned_session_id.clone().unwrap_or_default(),
        task_id: Some(task.id.clone()),
        epoch: Some(task.epoch()),
        occurred_at: None,
        outcome,
    }
}

/// A successful outcome with `summary`.
pub fn done(summary: &str) -> Outcome {
    Outcome::Completed { summary: Some(summary.to_owned()) }
}

/// A failed outcome with `reason`.
pub fn failed(reason: &str) -> Outcome {
    Outcome::Failed { reason: reason.to_owned(), summary: None }
}

/// Unwraps a store result, naming the operation that was expected to succeed.
#[track_caller]
pub fn ok<T>(result: StoreResult<T>, what: &str) -> T {
    result.unwrap_or_else(|err| panic!("expected {what} to succeed, got error {err:?}"))
}

/// Unwraps the error of a store result, naming the operation that was expected to fail.
#[track_caller]
pub fn expect_err<T: Debug>(result: StoreResult<T>, what: &str) -> StoreError {
    match result {
        Ok(value) => panic!("expected {what} to fail, but it succeeded with {value:?}"),
        Err(err) => err,
    }
}

/// Asserts an [`StoreError::InvalidInput`] naming `field`: the field itself, or a
/// path ending in it (`tasks[2].message`, `entries[1].timestamp`).
#[track_caller]
pub fn assert_invalid_input<T: Debug>(result: StoreResult<T>, field: &str, what: &str) {
    match expect_err(result, what) {
        StoreError::InvalidInput(e) => assert!(
            e.field == field || e.field.ends_with(&format!(".{field}")),
            "expected {what} to be refused naming the field {field:?}, but it named {:?} ({e})",
            e.field
        ),
        other => panic!("expected {what} to be refused as invalid input naming {field:?}, got {other:?}"),
    }
}

/// Enqueues `new`, which must succeed.
#[track_caller]
pub fn enqueue(store: &dyn Store, mesh: &str, new: NewTask, now: Timestamp) -> Task {
    let what = format!("enqueue of {:?} into {mesh}", new.id);
    ok(store.enqueue(mesh, &new, now), &what)
}

/// Runs one claim with the suite's lease; the claim itself must not error.
#[track_caller]
pub fn claim(store: &dyn Store, mesh: &str, claimant: &Claimant, now: Timestamp) -> ClaimOutcome {
    let what = format!("claim by session {} on node {}", claimant.session_id, claimant.node_id);
    ok(store.claim_next(mesh, claimant, &lease(), now), &what)
}

/// Asserts that a claim produced the task `expected_id`, and returns it.
#[track_caller]
pub fn assert_claimed(outcome: ClaimOutcome, expected_id: &str) -> Task {
    match outcome {
        ClaimOutcome::Claimed(task) => {
            assert_eq!(task.id, expected_id, "expected the claim to produce task {expected_id}");
            task
        }
        ClaimOutcome::Refused(reason) => {
            panic!("expected the claim to produce task {expected_id}, but it was refused: {reason}")
        }
    }
}

/// Asserts that a claim was refused for `expected`.
#[track_caller]
pub fn assert_refused(outcome: ClaimOutcome, expected: ClaimRefusal) {
    match outcome {
        ClaimOutcome::Refused(reason) => {
            assert_eq!(reason, expected, "expected the claim to be refused with {expected}, got {reason}")
        }
        ClaimOutcome::Claimed(task) => {
            panic!("expected the claim to be refused with {expected}, but it claimed task {}", task.id)
        }
    }
}

/// Claims as `claimant` and asserts the claim produced `expected_id`.
#[track_caller]
pub fn claim_ok(
    store: &dyn Store,
    mesh: &str,
    claimant: &Claimant,
    now: Timestamp,
    expected_id: &str,
) -> Task {
    assert_claimed(claim(store, mesh, claimant, now), expected_id)
}

/// Completes `task` as its holder at its epoch; must succeed.
#[track_caller]
pub fn complete(store: &dyn Store, mesh: &str, task: &Task, now: Timestamp) -> Task {
    let what = format!("completion of task {} by its holder", task.id);
    ok(store.complete_task(mesh, &report(task, done("all done")), now), &what)
}

/// Fails `task` as its holder at its epoch with `reason`; must succeed.
#[track_caller]
pub fn fail(store: &dyn Store, mesh: &str, task: &Task, reason: &str, now: Timestamp) -> Task {
    let what = format!("failure report of task {} by its holder", task.id);
    ok(store.complete_task(mesh, &report(task, failed(reason)), now), &what)
}

/// The stored task `id`, which must exist.
#[track_caller]
pub fn find(store: &dyn Store, mesh: &str, id: &str) -> Task {
    let what = format!("find_task({mesh}, {id})");
    ok(store.find_task(mesh, id), &what)
        .unwrap_or_else(|| panic!("expected task {id} to exist in mesh {mesh}, found none"))
}

/// Asserts the stored status of task `id`.
#[track_caller]
pub fn assert_status(store: &dyn Store, mesh: &str, id: &str, expected: TaskStatus) {
    let status = find(store, mesh, id).status;
    assert_eq!(status, expected, "expected task {id} to be {expected}, it is {status}");
}

/// Ids of the mesh's tasks in the order [`Store::queue_entries`] returns them.
#[track_caller]
pub fn queue_ids(store: &dyn Store, mesh: &str, statuses: &[TaskStatus]) -> Vec<String> {
    let what = format!("queue_entries({mesh}, {statuses:?})");
    ok(store.queue_entries(mesh, statuses), &what).into_iter().map(|t| t.id).collect()
}

/// Every ledger entry of the mesh in append order.
#[track_caller]
pub fn ledger_entries(store: &dyn Store, mesh: &str) -> Vec<LedgerEntry> {
    let what = format!("read_ledger_ordered({mesh})");
    ok(store.read_ledger_ordered(mesh, &LedgerQuery::default()), &what)
}

/// The kinds of the mesh's ledger entries in append order.
#[track_caller]
pub fn ledger_kinds(store: &dyn Store, mesh: &str) -> Vec<String> {
    ledger_entries(store, mesh).into_iter().map(|e| e.kind).collect()
}

/// The mesh's ledger entries in append order as `kind:taskId` (`kind` alone when the
/// payload names no task).
#[track_caller]
pub fn ledger_events(store: &dyn Store, mesh: &str) -> Vec<String> {
    ledger_entries(store, mesh)
        .iter()
        .map(|e| match e.task_id() {
            Some(task) => format!("{}:{task}", e.kind),
            None => e.kind.clone(),
        })
        .collect()
}

/// Ids of a list of ledger entries.
pub fn entry_ids(entries: &[LedgerEntry]) -> Vec<String> {
    entries.iter().map(|e| e.id.clone()).collect()
}

/// Follows a mesh's ledger and hands out what was appended since the last look.
#[derive(Debug)]
pub struct LedgerCursor {
    mesh: String,
    seen: usize,
}

impl LedgerCursor {
    /// Starts after everything the mesh's ledger holds now.
    #[track_caller]
    pub fn new(store: &dyn Store, mesh: &str) -> LedgerCursor {
        LedgerCursor { mesh: mesh.to_owned(), seen: ledger_entries(store, mesh).len() }
    }

    /// Asserts that exactly `expected` (`kind:taskId` each) was appended since the
    /// last look, in this order.
    #[track_caller]
    pub fn assert_new(&mut self, store: &dyn Store, after: &str, expected: &[&str]) {
        let events = ledger_events(store, &self.mesh);
        let new = events.get(self.seen..).unwrap_or_default();
        assert_eq!(
            new, expected,
            "expected {after} to append exactly {expected:?} to the ledger of {}, it appended {new:?}",
            self.mesh
        );
        self.seen = events.len();
    }
}

/// Everything of one mesh a failed operation must leave as it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    tasks: Vec<Task>,
    ledger: Vec<LedgerEntry>,
}

impl Snapshot {
    /// The mesh's tasks and ledger now.
    #[track_caller]
    pub fn take(store: &dyn Store, mesh: &str) -> Snapshot {
        let what = format!("queue_entries({mesh})");
        Snapshot { tasks: ok(store.queue_entries(mesh, &[]), &what), ledger: ledger_entries(store, mesh) }
    }

    /// Asserts that the mesh's tasks and ledger are exactly as in this snapshot.
    #[track_caller]
    pub fn assert_unchanged(&self, store: &dyn Store, mesh: &str, after: &str) {
        let now = Snapshot::take(store, mesh);
        assert_eq!(
            now.tasks.len(),
            self.tasks.len(),
            "expected {after} to leave the queue of {mesh} unchanged; task count went from {} to {}",
            self.tasks.len(),
            now.tasks.len()
        );
        assert_eq!(now.tasks, self.tasks, "expected {after} to leave every task of {mesh} unchanged");
        assert_eq!(
            now.ledger.len(),
            self.ledger.len(),
            "expected {after} to leave the ledger of {mesh} unchanged; entry count went from {} to {}",
            self.ledger.len(),
            now.ledger.len()
        );
        assert_eq!(now.ledger, self.ledger, "expected {after} to leave the ledger of {mesh} unchanged");
    }
}
