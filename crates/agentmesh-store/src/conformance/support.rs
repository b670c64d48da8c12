//! The suite's shared pieces: a fixed clock, builders for tasks, claimants, reports,
//! ledger entries and the runtime records (direct dispatches, session deliveries,
//! idle sessions, conflicts, tool calls, missions, inbox events), and `#[track_caller]` assertions
//! whose messages say what was expected. Rules use these so that each rule reads as the behaviour it checks.
//!
//! Nothing here reads a clock: every instant is [`T0`] plus an offset.

use std::fmt::Debug;

use agentmesh_core::events::names::AGENT_GENERATING_COMPLETED;
use agentmesh_core::events::{CoordinatorIdentity, DrainCounters, Drainer, EmitHint, PendingEvent};
use agentmesh_core::{
    ClaimRefusal, Claimant, CompletionConflict, CompletionFingerprint, DeliveryStatus, DirectDispatch,
    DispatchStatus, IdleSession, LedgerEntry, LedgerQuery, Mission, NewDirectDispatch, NewMission,
    NewSessionDelivery, NewTask, SessionDelivery, SliceQuery, Task, TaskStatus, Timestamp,
};
use serde_json::json;

pub use crate::TaskCommand;
use crate::transfer::{ImportReport, Records, TransferStore};
use crate::{
    ClaimOptions, ClaimOutcome, CompletionReport, DeliveryQuery, DeliveryUpdate, DispatchChange,
    DrainOutcome, DrainRequest, DuplicateReason, IdleWrite, InboxEvent, MissionQuery, Outcome, QueueOutcome,
    Store, StoreError, StoreResult, ToolCall,
};

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

/// Puts `records` into `mesh` as they are, through the import `agentmesh migrate`
/// uses: how a rule sets up rows no operation of its own would produce (an old
/// assignment, a row the original wrote, a fingerprint). Must succeed.
#[track_caller]
pub fn seed(store: &dyn TransferStore, mesh: &str, records: Records) -> ImportReport {
    ok(store.import_page(mesh, &records), &format!("import into {mesh}"))
}

/// Seeds tasks as they are (each into its own mesh); every one must be new.
#[track_caller]
pub fn seed_tasks(store: &dyn TransferStore, tasks: &[Task]) {
    for task in tasks {
        let report = seed(store, &task.mesh_id, Records::Tasks(vec![task.clone()]));
        assert_eq!(report.inserted, 1, "expected task {} imported as new, got {report:?}", task.id);
    }
}

/// The mesh's tasks with `status`, counted by `stats_by_status`.
#[track_caller]
pub fn status_count(store: &dyn Store, mesh: &str, status: TaskStatus) -> u64 {
    let counts = ok(store.stats_by_status(mesh), "stats_by_status");
    counts.iter().find(|c| c.status == status).map_or(0, |c| c.count)
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

/// Claims as `claimant` with a half-second lease and asserts the claim produced
/// `expected_id`: for rules that let the lease lapse ([`reclaim_lapsed`]).
#[track_caller]
pub fn claim_briefly(
    store: &dyn Store,
    mesh: &str,
    claimant: &Claimant,
    now: Timestamp,
    expected_id: &str,
) -> Task {
    let what = format!("short claim by session {}", claimant.session_id);
    let brief = ClaimOptions { lease_ms: Some(500) };
    assert_claimed(ok(store.claim_next(mesh, claimant, &brief, now), &what), expected_id)
}

/// Reclaims task `id`, whose lease must have lapsed by `now`, as the daemon's
/// lease sweep does; returns the task as the reclaim left it.
#[track_caller]
pub fn reclaim_lapsed(store: &dyn Store, mesh: &str, id: &str, now: Timestamp) -> Task {
    ok(store.reclaim_if_lease_expired(mesh, id, now), &format!("reclaim of {id}"))
        .unwrap_or_else(|| panic!("expected the lapsed lease of {id} reclaimed at {now}"))
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

/// Ids of the mesh's tasks in the order [`crate::QueueStore::queue_entries`] returns them.
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

/// Asserts a [`StoreError::NotFound`] for the record `kind` `id` in `mesh`.
#[track_caller]
pub fn assert_not_found<T: Debug>(result: StoreResult<T>, kind: &str, mesh: &str, id: &str, what: &str) {
    match expect_err(result, what) {
        StoreError::NotFound { kind: k, mesh_id, id: i } => assert!(
            k == kind && mesh_id == mesh && i == id,
            "expected {what} to fail with NotFound for {kind} {id} in {mesh}, got NotFound for {k} {i} in {mesh_id}"
        ),
        other => panic!("expected {what} to fail with NotFound for {kind} {id} in {mesh}, got {other:?}"),
    }
}

// ── Direct dispatches ────────────────────────────────────────────────────────

/// A direct dispatch of `task_id` over `pty` to `session` (if any) on `node-1`.
pub fn direct_dispatch(task_id: &str, session: Option<&str>) -> NewDirectDispatch {
    NewDirectDispatch {
        task_id: task_id.to_owned(),
        node_id: Some("node-1".to_owned()),
        session_id: session.map(str::to_owned),
        provider_type: Some(PROVIDER.to_owned()),
        message: format!("do {task_id}"),
        task_mode: None,
        via: "pty".to_owned(),
        dispatched_to_idle_session: false,
    }
}

/// Records `new` in `mesh` at `now`; must succeed.
#[track_caller]
pub fn record_dispatch(
    store: &dyn Store,
    mesh: &str,
    new: NewDirectDispatch,
    now: Timestamp,
) -> DirectDispatch {
    let what = format!("record_direct_dispatch of task {} in {mesh}", new.task_id);
    ok(store.record_direct_dispatch(mesh, &new, now), &what)
}

/// Moves the dispatch of `task_id` (named by task id alone) to `status` and asserts
/// that exactly one row changed.
#[track_caller]
pub fn set_dispatch_status(
    store: &dyn Store,
    mesh: &str,
    task_id: &str,
    status: DispatchStatus,
    now: Timestamp,
) {
    let what = format!("set_direct_dispatch_status of task {task_id} to {status} in {mesh}");
    let changed = ok(
        store.change_direct_dispatches(
            mesh,
            DispatchChange::Status { session_id: None, task_id: Some(task_id), status },
            now,
        ),
        &what,
    );
    assert_eq!(changed, 1, "expected {what} to change exactly one row, it changed {changed}");
}

/// The mesh's active dispatches.
#[track_caller]
pub fn active_dispatches(store: &dyn Store, mesh: &str) -> Vec<DirectDispatch> {
    let what = format!("active_direct_dispatches({mesh})");
    ok(store.direct_dispatches(mesh, None), &what)
}

/// Task ids of the mesh's active dispatches, in the order the store lists them.
#[track_caller]
pub fn active_dispatch_ids(store: &dyn Store, mesh: &str) -> Vec<String> {
    active_dispatches(store, mesh).into_iter().map(|d| d.task_id).collect()
}

/// The mesh's active dispatch of `task_id`, which must be listed.
#[track_caller]
pub fn active_dispatch(store: &dyn Store, mesh: &str, task_id: &str) -> DirectDispatch {
    active_dispatches(store, mesh).into_iter().find(|d| d.task_id == task_id).unwrap_or_else(|| {
        panic!("expected the dispatch of task {task_id} to be active in {mesh}, it is not listed")
    })
}

// ── Session deliveries ───────────────────────────────────────────────────────

/// A `task` delivery `id` to `session` on `node-1` with `priority`, no expiry.
pub fn delivery(id: &str, session: &str, priority: i64) -> NewSessionDelivery {
    NewSessionDelivery {
        id: id.to_owned(),
        node_id: Some("node-1".to_owned()),
        session_id: Some(session.to_owned()),
        provider_type: Some(PROVIDER.to_owned()),
        kind: "task".to_owned(),
        priority,
        message: format!("deliver {id}"),
        ..NewSessionDelivery::default()
    }
}

/// Inserts `new` into `mesh` at `now`; must succeed.
#[track_caller]
pub fn insert_delivery(
    store: &dyn Store,
    mesh: &str,
    new: NewSessionDelivery,
    now: Timestamp,
) -> SessionDelivery {
    let what = format!("insert_session_delivery of {} in {mesh}", new.id);
    ok(store.insert_session_delivery(mesh, &new, now), &what)
}

/// Asks to move delivery `id` to `status` (no error, no attempt); returns whether it moved.
#[track_caller]
pub fn set_delivery_status(
    store: &dyn Store,
    mesh: &str,
    id: &str,
    status: DeliveryStatus,
    now: Timestamp,
) -> bool {
    let what = format!("set_session_delivery_status of {id} to {status} in {mesh}");
    ok(store.set_session_delivery_status(mesh, id, status, &DeliveryUpdate::default(), now), &what)
}

/// The active deliveries of the mesh (or of one session) at `now`.
#[track_caller]
pub fn active_deliveries(
    store: &dyn Store,
    mesh: &str,
    session: Option<&str>,
    now: Timestamp,
) -> Vec<SessionDelivery> {
    let what = format!("active_session_deliveries({mesh}, {session:?}, {now})");
    ok(store.session_deliveries(mesh, DeliveryQuery::Waiting { session_id: session, now }), &what)
}

/// Ids of the active deliveries of the mesh (or of one session) at `now`, in the
/// order the store lists them.
#[track_caller]
pub fn active_delivery_ids(
    store: &dyn Store,
    mesh: &str,
    session: Option<&str>,
    now: Timestamp,
) -> Vec<String> {
    active_deliveries(store, mesh, session, now).into_iter().map(|d| d.id).collect()
}

/// The active delivery `id` of the mesh at `now`, which must be listed.
#[track_caller]
pub fn active_delivery(store: &dyn Store, mesh: &str, id: &str, now: Timestamp) -> SessionDelivery {
    active_deliveries(store, mesh, None, now)
        .into_iter()
        .find(|d| d.id == id)
        .unwrap_or_else(|| panic!("expected delivery {id} to be active in {mesh} at {now}, it is not listed"))
}

/// The stored status of delivery `id`, which must exist.
#[track_caller]
pub fn delivery_status(store: &dyn Store, mesh: &str, id: &str) -> DeliveryStatus {
    delivery_by_id(store, mesh, id).unwrap_or_else(|| panic!("expected delivery {id} in {mesh}")).status
}

/// The delivery `id` of the mesh whatever its status: `session_deliveries`
/// by id answers none or one.
#[track_caller]
pub fn delivery_by_id(store: &dyn Store, mesh: &str, id: &str) -> Option<SessionDelivery> {
    let found = ok(
        store.session_deliveries(mesh, DeliveryQuery::Id(id)),
        &format!("session_deliveries({mesh}, {id})"),
    );
    assert!(found.len() <= 1, "expected at most one delivery {id}, got {found:?}");
    found.into_iter().next()
}

/// The mission `id` of the mesh: `missions` by id answers none or one.
#[track_caller]
pub fn mission_of(store: &dyn Store, mesh: &str, id: &str) -> Option<Mission> {
    let found = ok(store.missions(mesh, MissionQuery::Id(id)), &format!("missions({mesh}, {id})"));
    assert!(found.len() <= 1, "expected at most one mission {id}, got {found:?}");
    found.into_iter().next()
}

// ── Idle sessions, conflicts, tool calls ─────────────────────────────────────

/// Seeds the fingerprint `fp` of `mesh`, in force until `expires`.
#[track_caller]
pub fn seed_fingerprint(store: &dyn TransferStore, mesh: &str, fp: &str, expires: Timestamp) {
    let record = CompletionFingerprint { fingerprint: fp.to_owned(), expires_at_ms: expires.millis() };
    seed(store, mesh, Records::CompletionFingerprints(vec![record]));
}

/// Whether the fingerprint `fp` of `mesh` is listed as in force at `now`.
#[track_caller]
pub fn fingerprint_in_force(store: &dyn Store, mesh: &str, fp: &str, now: Timestamp) -> bool {
    let listed = ok(store.completion_fingerprints(mesh, now, 1_000), "completion_fingerprints");
    listed.iter().any(|f| f.fingerprint == fp)
}

/// Seeds one conflict into its mesh; whether it was new.
#[track_caller]
pub fn seed_conflict(store: &dyn TransferStore, conflict: &CompletionConflict) -> bool {
    seed(store, &conflict.mesh_id, Records::CompletionConflicts(vec![conflict.clone()])).inserted == 1
}

/// An idle report of `session` on `node` in `mesh`, valid until `expires`, no metadata.
pub fn idle_session(mesh: &str, node: &str, session: &str, expires: Timestamp) -> IdleSession {
    IdleSession {
        mesh_id: mesh.to_owned(),
        node_id: node.to_owned(),
        session_id: session.to_owned(),
        provider_type: PROVIDER.to_owned(),
        expires_at_ms: expires.millis(),
        metadata: None,
    }
}

/// Records `session` as idle; must succeed.
#[track_caller]
pub fn set_idle(store: &dyn Store, session: &IdleSession) {
    let what = format!("set_idle_session({}, {}, {})", session.mesh_id, session.node_id, session.session_id);
    ok(store.write_idle_session(IdleWrite::Report(session)), &what);
}

/// The idle sessions the mesh lists at `now`, sorted by node and session (the
/// order of the listing is not part of the contract).
#[track_caller]
pub fn idle_sessions(store: &dyn Store, mesh: &str, now: Timestamp) -> Vec<IdleSession> {
    let what = format!("idle_sessions({mesh}, {now})");
    let mut sessions = ok(store.idle_sessions(mesh, now), &what);
    sessions.sort_by(|a, b| (&a.node_id, &a.session_id).cmp(&(&b.node_id, &b.session_id)));
    sessions
}

/// The idle sessions the mesh lists at `now` as sorted `node/session` keys.
#[track_caller]
pub fn idle_session_keys(store: &dyn Store, mesh: &str, now: Timestamp) -> Vec<String> {
    idle_sessions(store, mesh, now).into_iter().map(|s| format!("{}/{}", s.node_id, s.session_id)).collect()
}

/// A completion conflict `id` over a fingerprint naming it, created at `created`.
pub fn completion_conflict(mesh: &str, id: &str, created: Timestamp) -> CompletionConflict {
    CompletionConflict {
        id: id.to_owned(),
        mesh_id: mesh.to_owned(),
        fingerprint: format!("{mesh}::{id}::fingerprint"),
        conflicting_task_id: Some(format!("{id}-late")),
        conflicting_session_id: Some("s2".to_owned()),
        original_task_id: Some(format!("{id}-first")),
        original_session_id: Some("s1".to_owned()),
        event: "agent:generating_completed".to_owned(),
        created_at: created.iso(),
    }
}

/// Ids of the mesh's recent conflicts at `now` over `window_ms`, in the store's order.
#[track_caller]
pub fn recent_conflict_ids(
    store: &dyn Store,
    mesh: &str,
    window_ms: Option<i64>,
    now: Timestamp,
) -> Vec<String> {
    let what = format!("recent_completion_conflicts({mesh}, {window_ms:?}, {now})");
    ok(store.recent_completion_conflicts(mesh, window_ms, now), &what).into_iter().map(|c| c.id).collect()
}

/// A call of `tool` in `mesh` by the coordinator session `coord-1`.
pub fn tool_call(mesh: &str, tool: &str) -> ToolCall {
    ToolCall {
        mesh_id: mesh.to_owned(),
        tool: tool.to_owned(),
        session_id: Some("coord-1".to_owned()),
        caller_role: Some("coordinator".to_owned()),
    }
}

// ── Missions ─────────────────────────────────────────────────────────────────

/// A mission `id` with `title`, goal and status left unset.
pub fn new_mission(id: &str, title: &str) -> NewMission {
    NewMission { id: id.to_owned(), title: title.to_owned(), ..NewMission::default() }
}

/// Creates or updates a mission; must succeed.
#[track_caller]
pub fn upsert_mission(store: &dyn Store, mesh: &str, new: NewMission, now: Timestamp) -> Mission {
    let what = format!("upsert_mission of {} in {mesh}", new.id);
    ok(store.upsert_mission(mesh, &new, now), &what).mission
}

/// Ids of the mesh's missions in `statuses` (all when empty), in the store's order.
#[track_caller]
pub fn mission_ids(store: &dyn Store, mesh: &str, statuses: &[&str]) -> Vec<String> {
    let what = format!("missions({mesh}, {statuses:?})");
    let statuses: Vec<String> = statuses.iter().map(|s| (*s).to_owned()).collect();
    ok(store.missions(mesh, MissionQuery::Statuses(&statuses)), &what).into_iter().map(|m| m.id).collect()
}

// ── Coordinator inbox ────────────────────────────────────────────────────────

/// A coordinator identity `{daemon, run, session?}`.
pub fn coordinator(daemon: &str, run: &str, session: Option<&str>) -> CoordinatorIdentity {
    CoordinatorIdentity::new(daemon, run, session.map(str::to_owned))
}

/// A drain request by `identity` (no other daemon ids), accept mode, no name
/// filter, the default limit.
pub fn drain_request(identity: &CoordinatorIdentity) -> DrainRequest {
    DrainRequest {
        drainer: Drainer::new(identity.clone(), &[]),
        only_events: None,
        enforce: false,
        limit: None,
    }
}

/// An event `name` in `mesh` about node `n1`, queued at `queued`, whose metadata
/// carries `label` as its task id (so every label gives its own fingerprint) and
/// `queued` as its timestamp.
pub fn inbox_event(mesh: &str, name: &str, label: &str, queued: Timestamp) -> PendingEvent {
    let metadata = json!({ "taskId": label, "timestamp": queued.millis() });
    let metadata = metadata.as_object().cloned().unwrap_or_default();
    let mut event = PendingEvent::new(name, mesh, "Node 'n1'", metadata, queued);
    event.node_id = Some("n1".to_owned());
    event
}

/// Addresses `event` through its coordinator target fields, as a completion
/// producer does: `targetCoordinatorDaemonId` and `targetCoordinatorSessionId` from
/// `to`, and the hint's run id from `to`, so that the stamp names exactly `to`.
pub fn targeted_at(mut event: PendingEvent, to: &CoordinatorIdentity) -> (PendingEvent, EmitHint) {
    event.target_coordinator_daemon_id = Some(to.daemon_id.clone());
    event.target_coordinator_session_id = to.session_id.clone();
    let hint = EmitHint { coordinator_run_id: Some(to.coordinator_run_id.clone()), ..EmitHint::default() };
    (event, hint)
}

/// Leaves `event` without coordinator target fields and names its dispatcher in
/// the hint, so that only the v2 envelope says who it is for (its own coordinator
/// for a unicast name, everyone for a broadcast name).
pub fn dispatched_by(event: PendingEvent, by: &CoordinatorIdentity) -> (PendingEvent, EmitHint) {
    (event, EmitHint { dispatched_by: Some(by.clone()), ..EmitHint::default() })
}

/// Queues `event` with `hint` and no machine id of its own at `now`; it must be
/// stored. Returns the row id and the event as stored.
#[track_caller]
pub fn queue_event(
    store: &dyn Store,
    mesh: &str,
    (event, hint): (PendingEvent, EmitHint),
    now: Timestamp,
) -> (String, PendingEvent) {
    let what = format!("queue_pending_event of {} in {mesh}", event.event);
    match ok(store.queue_pending_event(mesh, &event, &hint, None, now), &what) {
        QueueOutcome::Queued { id, event } => (id, event),
        QueueOutcome::Duplicate(reason) => {
            panic!("expected {what} to be stored, it was refused as a duplicate ({reason:?})")
        }
    }
}

/// Queues `event` with `hint` at `now`; it must be refused as a duplicate for
/// `expected`.
#[track_caller]
pub fn assert_duplicate(
    store: &dyn Store,
    mesh: &str,
    (event, hint): (PendingEvent, EmitHint),
    now: Timestamp,
    expected: DuplicateReason,
    why: &str,
) {
    let what = format!("queue_pending_event of {} in {mesh}", event.event);
    match ok(store.queue_pending_event(mesh, &event, &hint, None, now), &what) {
        QueueOutcome::Duplicate(reason) => assert_eq!(
            reason, expected,
            "expected {what} to be refused as a duplicate for {expected:?} ({why}), it was refused for {reason:?}"
        ),
        QueueOutcome::Queued { id, .. } => {
            panic!("expected {what} to be refused as a duplicate ({why}), it was stored as row {id}")
        }
    }
}

/// Drains as `request` at `now`; the drain itself must not error.
#[track_caller]
pub fn drain(store: &dyn Store, mesh: &str, request: &DrainRequest, now: Timestamp) -> DrainOutcome {
    let what = format!("drain_pending_events({mesh}) by {}", request.drainer.identity().key());
    let out = ok(store.drain_pending_events(mesh, request, now), &what);
    names_match_payloads(&out.events, &what);
    out
}

/// Every event handed out is named as its payload names it.
#[track_caller]
fn names_match_payloads(events: &[InboxEvent], what: &str) {
    for e in events {
        let payload = e.event.parse();
        assert_eq!(
            payload.get("event").and_then(serde_json::Value::as_str).unwrap_or_default(),
            e.name,
            "{what}: expected event {} to carry its payload's name",
            e.id
        );
    }
}

/// Peeks as `request`; must not error.
#[track_caller]
pub fn peek(store: &dyn Store, mesh: &str, request: &DrainRequest) -> Vec<InboxEvent> {
    let what = format!("peek_pending_events({mesh}) by {}", request.drainer.identity().key());
    let events = ok(store.peek_pending_events(mesh, request), &what);
    names_match_payloads(&events, &what);
    events
}

/// The mesh's undrained event count.
#[track_caller]
pub fn pending_count(store: &dyn Store, mesh: &str) -> u64 {
    let what = format!("pending_event_count({mesh})");
    ok(store.pending_event_count(mesh), &what)
}

/// Asserts the mesh's undrained event count.
#[track_caller]
pub fn assert_pending_count(store: &dyn Store, mesh: &str, expected: u64, after: &str) {
    let count = pending_count(store, mesh);
    assert_eq!(count, expected, "expected {expected} undrained events in {mesh} {after}, found {count}");
}

/// The labels (metadata task ids, see [`inbox_event`]) of inbox events, in order.
pub fn labels(events: &[InboxEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.event.parse()["metadataEvent"]["taskId"].as_str().unwrap_or("<no taskId>").to_owned())
        .collect()
}

/// The row ids of inbox events, in order.
pub fn row_ids(events: &[InboxEvent]) -> Vec<String> {
    events.iter().map(|e| e.id.clone()).collect()
}

/// The mesh's `event_held` ledger entries in append order.
#[track_caller]
pub fn held_entries(store: &dyn Store, mesh: &str) -> Vec<LedgerEntry> {
    ledger_entries(store, mesh).into_iter().filter(|e| e.kind == "event_held").collect()
}

/// The coordinator most inbox rules drain as: run `run_1` on machine `mach_A`.
pub fn me() -> CoordinatorIdentity {
    coordinator("mach_A", "run_1", None)
}

/// A coordinator on another machine: run `run_B` on `mach_B`.
pub fn elsewhere() -> CoordinatorIdentity {
    coordinator("mach_B", "run_B", None)
}

/// An `agent:generating_completed` labelled `label`, queued at `secs`, addressed to
/// `to` through its coordinator target fields.
pub fn completion_for(
    mesh: &str,
    label: &str,
    secs: i64,
    to: &CoordinatorIdentity,
) -> (PendingEvent, EmitHint) {
    targeted_at(inbox_event(mesh, AGENT_GENERATING_COMPLETED, label, at(secs)), to)
}

/// Queues [`completion_for`] at `secs`; it must be stored. Returns its row id.
#[track_caller]
pub fn queue_completion(
    store: &dyn Store,
    mesh: &str,
    label: &str,
    secs: i64,
    to: &CoordinatorIdentity,
) -> String {
    queue_event(store, mesh, completion_for(mesh, label, secs, to), at(secs)).0
}

/// A completion that queueing leaves unstamped (v1): no coordinator target and an
/// empty hint (and [`queue_event`] passes no machine id).
pub fn v1_completion(mesh: &str, label: &str, secs: i64) -> (PendingEvent, EmitHint) {
    (inbox_event(mesh, AGENT_GENERATING_COMPLETED, label, at(secs)), EmitHint::default())
}

/// Drain counters with the given delivered, routed-away and dedup-skipped counts
/// and every other counter zero.
pub fn drain_counters(delivered: u64, routed_away: u64, dedup_skipped: u64) -> DrainCounters {
    DrainCounters {
        v2_delivered: delivered,
        v2_routed_away: routed_away,
        v2_dedup_skipped: dedup_skipped,
        ..DrainCounters::default()
    }
}

/// Asserts the labels of what a drain or peek handed out, in order.
#[track_caller]
pub fn assert_labels(events: &[InboxEvent], expected: &[&str], what: &str) {
    let got = labels(events);
    assert_eq!(
        got, expected,
        "expected {what} to hand out exactly {expected:?} in this order, it handed out {got:?}"
    );
}

/// Waits until paging `mesh`'s ledger by sequence reads every entry paging by
/// time reads, and returns the count. On PostgreSQL a page by sequence stops
/// before an entry while an older transaction is still running (the ledger's
/// horizon), and a transaction elsewhere on the same server can hold that back
/// for a moment.
pub fn settled(store: &dyn Store, mesh: &str) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (by_time, by_seq) = (ledger_count(store, mesh, false), ledger_count(store, mesh, true));
        if by_seq == by_time {
            return by_time as u64;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 30 s, {by_seq} of {by_time} entries by sequence"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// How many entries paging `mesh`'s ledger (the archive's first) reads, by
/// sequence or by time.
fn ledger_count(store: &dyn Store, mesh: &str, by_seq: bool) -> usize {
    let mut query = SliceQuery { limit: Some(500), ..SliceQuery::default() };
    if by_seq {
        query.after_seq = Some(0);
    }
    let mut count = 0;
    loop {
        let page = ok(crate::archive::slice(store, mesh, &query), "archive::slice");
        count += page.entries.len();
        if !page.cursor.has_more {
            return count;
        }
        if by_seq {
            query.after_seq = page.cursor.next_after_seq;
        } else {
            query.after_id = page.cursor.next_after_id;
        }
    }
}
