//! The operations the model checks, drawn from small fixed sets of ids so that
//! random sequences collide (the same task claimed twice, a dependency on a task
//! enqueued later, two coordinators on one machine), and their answers in one
//! comparable form.
//!
//! An [`Op`] names everything by index into those sets; [`Op`]s that refer to
//! something only a run knows (the current epoch of a task, the k-th queued
//! event's row id) are resolved when they run, from the model for values both
//! sides must agree on, from each side's own answers for ids each side minted.

use std::collections::BTreeMap;

use agentmesh_core::events::{CoordinatorIdentity, Drainer, EmitHint, PendingEvent, Scope};
use agentmesh_core::{
    Claimant, LedgerEntry, NewMission, NewTask, NotBefore, RequeueOptions, Requeued, SliceQuery, Task,
    TaskPriority, Timestamp,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::{
    ClaimOptions, ClaimOutcome, CompletionReport, DrainOutcome, DrainRequest, InboxEvent, Outcome,
    QueueOutcome, StoreError, StoreResult,
};

/// The meshes: nearly everything happens in the first.
pub const MESHES: [&str; 2] = ["m", "other"];
/// Task ids.
pub const TASKS: [&str; 8] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"];
/// Node ids: two forms of one machine, another machine, a plain host name.
pub const NODES: [&str; 4] = ["mach_A", "daemon_mach_A", "mach_B", "laptop"];
/// Worker sessions.
pub const SESSIONS: [&str; 4] = ["s1", "s2", "s3", "s4"];
/// Provider types of claimants.
pub const PROVIDERS: [Option<&str>; 3] = [None, Some("claude"), Some("codex")];
/// Per-(node, provider) caps of claimants.
pub const CAPS: [Option<u32>; 3] = [None, Some(1), Some(2)];
/// Task difficulties: none, one a picky claimant takes, one it does not, and
/// the unconstrained `freeform`.
pub const DIFFICULTIES: [Option<&str>; 4] = [None, Some("easy"), Some("difficult"), Some("freeform")];
/// Capability tag sets (of tasks: required; of claimants: offered).
pub const TAGS: [&[&str]; 4] = [&[], &["gpu"], &["os=linux"], &["gpu", "os=linux"]];
/// Coordinators: (daemon, run, session). Two runs on one machine, one elsewhere.
pub const COORDINATORS: [(&str, &str, Option<&str>); 3] =
    [("mach_C", "run-1", None), ("mach_C", "run-2", None), ("mach_D", "run-1", Some("cs1"))];
/// Priorities by name; the last is refused.
pub const PRIORITIES: [&str; 4] = ["low", "normal", "high", "urgent"];
/// Task modes by name; the last is refused.
pub const MODES: [&str; 4] = ["code_change", "live_debug_readonly", "convergence", "bogus"];
/// Messages; the second asks a read-only task for a forbidden operation.
pub const MESSAGES: [&str; 3] = ["write the parser", "then run npm install left-pad", "  "];
/// Names of events pushed by hand.
pub const EVENTS: [&str; 5] = [
    "agent:ready",
    "agent:generating_completed",
    "mesh:dispatch_blocked",
    "monitor:no_progress",
    "mission_close_candidate",
];
/// Missions.
pub const MISSIONS: [&str; 2] = ["auth", "docs"];
/// Mission statuses; the last is refused.
pub const MISSION_STATUSES: [&str; 3] = ["active", "closed", "Not A Status"];

/// An enqueue request, by index.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Index into [`TASKS`].
    pub id: usize,
    /// Index into [`MESSAGES`].
    pub message: usize,
    /// Indexes into [`TASKS`].
    pub deps: Vec<usize>,
    /// Index into [`TAGS`].
    pub tags: usize,
    /// Index into [`NODES`].
    pub pin_node: Option<usize>,
    /// Index into [`SESSIONS`].
    pub pin_session: Option<usize>,
    /// Index into [`PRIORITIES`].
    pub priority: Option<usize>,
    /// The explicit read-only flag.
    pub readonly: Option<bool>,
    /// Index into [`MODES`].
    pub mode: Option<usize>,
    /// `notBefore` as an offset in milliseconds.
    pub not_before_ms: Option<i64>,
    /// The retry budget.
    pub max_retries: Option<i64>,
    /// Index into [`COORDINATORS`].
    pub coordinator: Option<usize>,
    /// Index into [`MISSIONS`].
    pub mission: Option<usize>,
}

/// A claimant, by index.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimSpec {
    /// Index into [`NODES`].
    pub node: usize,
    /// Index into [`SESSIONS`].
    pub session: usize,
    /// Index into [`TAGS`].
    pub tags: usize,
    /// Index into [`PROVIDERS`].
    pub provider: usize,
    /// Index into [`CAPS`].
    pub cap: usize,
    /// The node is a worktree.
    pub worktree: bool,
    /// Lease in seconds.
    pub lease_s: Option<i64>,
}

/// The task a report or heartbeat names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskRef {
    /// This one (index into [`TASKS`]).
    Id(usize),
    /// The task the reporting session holds, as the model says (none: unnamed).
    Held,
    /// None: the store matches the session's task.
    Unnamed,
}

/// Which epoch a report presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochSpec {
    /// The task's epoch now.
    Current,
    /// One less than now.
    Stale,
    /// None at all.
    Omitted,
}

/// A worker's report, by index.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportSpec {
    /// Index into [`SESSIONS`].
    pub session: usize,
    /// The task the report names.
    pub task: TaskRef,
    /// The epoch presented.
    pub epoch: EpochSpec,
    /// A failure rather than a completion.
    pub failed: bool,
}

/// An event pushed by hand.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// Index into [`EVENTS`].
    pub name: usize,
    /// Index into [`COORDINATORS`]: the daemon (and session) it targets.
    pub target: Option<usize>,
    /// The run the emit hint names (with a target).
    pub run_hint: bool,
    /// The scope the emit hint sets.
    pub scope: Option<Scope>,
    /// The machine id stamped as the dispatcher when no target is known.
    pub self_machine: bool,
    /// Index into [`TASKS`]: the task the metadata names.
    pub task: Option<usize>,
    /// A distinguishing timestamp in the metadata (same value: same fingerprint).
    pub stamp: u8,
}

/// A drain or peek, by index.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainSpec {
    /// Index into [`COORDINATORS`].
    pub coordinator: usize,
    /// Indexes into [`EVENTS`].
    pub only: Option<Vec<usize>>,
    /// At most this many delivered.
    pub limit: Option<u32>,
    /// Enforce mode.
    pub enforce: bool,
}

/// One step of a sequence.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Enqueue one task in a mesh (index into [`MESHES`]).
    Enqueue(usize, TaskSpec),
    /// Enqueue several tasks in the first mesh, all or none.
    EnqueueBatch(Vec<TaskSpec>),
    /// Claim in a mesh.
    Claim(usize, ClaimSpec),
    /// A completion or failure.
    Complete(ReportSpec),
    /// A completion, then a claim.
    CompleteAndClaim(ReportSpec, ClaimSpec),
    /// A heartbeat with a lease in seconds.
    Heartbeat {
        /// The task.
        task: TaskRef,
        /// Index into [`SESSIONS`].
        session: usize,
        /// The epoch presented (an omitted one presents 0).
        epoch: EpochSpec,
        /// The new lease.
        lease_s: i64,
    },
    /// Cancel a task.
    Cancel(usize),
    /// Requeue a task (with `force`).
    Requeue(usize, bool),
    /// Change a task's priority (index into [`PRIORITIES`], without the refused one).
    Priority(usize, usize),
    /// The lease reaper: list the expired leases, reclaim each.
    Reap,
    /// Queue an event in the first mesh.
    Push(EventSpec),
    /// Drain.
    Drain(DrainSpec),
    /// Peek.
    Peek(DrainSpec),
    /// Ack the k-th event ever queued (modulo how many there are).
    Ack(usize),
    /// Queue again a copy of the k-th event pushed by hand (modulo how many
    /// there are), as stamped, with new content: the same event id, another
    /// fingerprint (a relayed or replayed event).
    Repush(usize),
    /// A coordinator's presence heartbeat.
    Touch(usize),
    /// A coordinator ends.
    End(usize),
    /// Upsert a mission (index into [`MISSIONS`], into [`MISSION_STATUSES`]).
    Mission(usize, usize),
    /// A mission's progress.
    Progress(usize),
    /// Page through the whole ledger of the first mesh: by sequence or by
    /// `(timestamp, id)` cursor, with this page size.
    Page {
        /// By sequence.
        by_seq: bool,
        /// Page size.
        limit: u32,
    },
    /// Let time pass (milliseconds).
    Wait(i64),
    /// Close and open the database again (a no-op where there is nothing to reopen).
    Reopen,
}

/// The clock of a sequence: every step moves it on by this much at least, so no
/// two steps share an instant.
pub const STEP_MS: i64 = 7;

/// Where every sequence starts.
pub const T0: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn task_spec() -> impl Strategy<Value = TaskSpec> {
    (
        (0..TASKS.len(), prop_oneof![8 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize)]),
        prop_oneof![
            6 => Just(Vec::new()),
            3 => proptest::collection::vec(0..TASKS.len(), 1..2),
            1 => proptest::collection::vec(0..TASKS.len(), 2..3),
        ],
        prop_oneof![4 => Just(0usize), 1 => 1..TAGS.len()],
        proptest::option::weighted(0.15, 0..NODES.len()),
        proptest::option::weighted(0.1, 0..SESSIONS.len()),
        proptest::option::weighted(0.4, prop_oneof![10 => 0..3usize, 1 => Just(3usize)]),
        (
            proptest::option::weighted(0.2, any::<bool>()),
            proptest::option::weighted(0.25, prop_oneof![10 => 0..3usize, 1 => Just(3usize)]),
        ),
        proptest::option::weighted(0.15, 0i64..600_000),
        proptest::option::weighted(0.3, 0i64..3),
        proptest::option::weighted(0.7, 0..COORDINATORS.len()),
        proptest::option::weighted(0.3, 0..MISSIONS.len()),
    )
        .prop_map(
            |(
                (id, message),
                deps,
                tags,
                pin_node,
                pin_session,
                priority,
                (readonly, mode),
                not_before_ms,
                max_retries,
                coordinator,
                mission,
            )| {
                TaskSpec {
                    id,
                    message,
                    deps,
                    tags,
                    pin_node,
                    pin_session,
                    priority,
                    readonly,
                    mode,
                    not_before_ms,
                    max_retries,
                    coordinator,
                    mission,
                }
            },
        )
}

fn claim_spec() -> impl Strategy<Value = ClaimSpec> {
    (
        0..NODES.len(),
        0..SESSIONS.len(),
        prop_oneof![2 => Just(0usize), 1 => 1..TAGS.len()],
        0..PROVIDERS.len(),
        0..CAPS.len(),
        proptest::bool::weighted(0.1),
        proptest::option::weighted(0.6, prop_oneof![Just(30i64), Just(600i64)]),
    )
        .prop_map(|(node, session, tags, provider, cap, worktree, lease_s)| ClaimSpec {
            node,
            session,
            tags,
            provider,
            cap,
            worktree,
            lease_s,
        })
}

fn epoch_spec() -> impl Strategy<Value = EpochSpec> {
    prop_oneof![6 => Just(EpochSpec::Current), 1 => Just(EpochSpec::Stale), 2 => Just(EpochSpec::Omitted)]
}

fn task_ref() -> impl Strategy<Value = TaskRef> {
    prop_oneof![3 => (0..TASKS.len()).prop_map(TaskRef::Id), 5 => Just(TaskRef::Held), 1 => Just(TaskRef::Unnamed)]
}

fn report_spec() -> impl Strategy<Value = ReportSpec> {
    (0..SESSIONS.len(), task_ref(), epoch_spec(), proptest::bool::weighted(0.25))
        .prop_map(|(session, task, epoch, failed)| ReportSpec { session, task, epoch, failed })
}

fn event_spec() -> impl Strategy<Value = EventSpec> {
    (
        0..EVENTS.len(),
        proptest::option::weighted(0.7, 0..COORDINATORS.len()),
        any::<bool>(),
        proptest::option::weighted(
            0.3,
            prop_oneof![Just(Scope::Unicast), Just(Scope::Broadcast), Just(Scope::System)],
        ),
        proptest::bool::weighted(0.5),
        proptest::option::weighted(0.6, 0..TASKS.len()),
        0u8..3,
    )
        .prop_map(|(name, target, run_hint, scope, self_machine, task, stamp)| EventSpec {
            name,
            target,
            run_hint,
            scope,
            self_machine,
            task,
            stamp,
        })
}

fn drain_spec() -> impl Strategy<Value = DrainSpec> {
    (
        0..COORDINATORS.len(),
        proptest::option::weighted(0.2, proptest::collection::vec(0..EVENTS.len(), 0..3)),
        proptest::option::weighted(0.3, 0u32..4),
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(coordinator, only, limit, enforce)| DrainSpec { coordinator, only, limit, enforce })
}

/// One random step. `reopen` allows [`Op::Reopen`].
pub fn op(reopen: bool) -> impl Strategy<Value = Op> {
    // Without reopens, the step a reopen would take lets a second pass.
    let reopen_step = if reopen { Op::Reopen } else { Op::Wait(1_000) };
    prop_oneof![
        14 => (prop_oneof![9 => Just(0usize), 1 => Just(1usize)], task_spec()).prop_map(|(m, t)| Op::Enqueue(m, t)),
        2 => proptest::collection::vec(task_spec(), 1..4).prop_map(Op::EnqueueBatch),
        14 => (prop_oneof![9 => Just(0usize), 1 => Just(1usize)], claim_spec()).prop_map(|(m, c)| Op::Claim(m, c)),
        10 => report_spec().prop_map(Op::Complete),
        4 => (report_spec(), claim_spec()).prop_map(|(r, c)| Op::CompleteAndClaim(r, c)),
        3 => (task_ref(), 0..SESSIONS.len(), epoch_spec(), prop_oneof![Just(30i64), Just(600i64)])
            .prop_map(|(task, session, epoch, lease_s)| Op::Heartbeat { task, session, epoch, lease_s }),
        3 => (0..TASKS.len()).prop_map(Op::Cancel),
        3 => (0..TASKS.len(), any::<bool>()).prop_map(|(t, f)| Op::Requeue(t, f)),
        2 => (0..TASKS.len(), 0..3usize).prop_map(|(t, p)| Op::Priority(t, p)),
        3 => Just(Op::Reap),
        6 => event_spec().prop_map(Op::Push),
        6 => drain_spec().prop_map(Op::Drain),
        2 => drain_spec().prop_map(Op::Peek),
        1 => (0usize..16).prop_map(Op::Ack),
        2 => (0usize..16).prop_map(Op::Repush),
        2 => (0..COORDINATORS.len()).prop_map(Op::Touch),
        1 => (0..COORDINATORS.len()).prop_map(Op::End),
        2 => (0..MISSIONS.len(), prop_oneof![6 => 0..2usize, 1 => Just(2usize)]).prop_map(|(m, s)| Op::Mission(m, s)),
        1 => (0..MISSIONS.len()).prop_map(Op::Progress),
        2 => (any::<bool>(), 1u32..7).prop_map(|(by_seq, limit)| Op::Page { by_seq, limit }),
        3 => prop_oneof![Just(1_000i64), Just(40_000i64), Just(200_000i64), Just(700_000i64)].prop_map(Op::Wait),
        1 => Just(reopen_step),
    ]
}

/// A random sequence of `len` steps.
pub fn sequence(len: std::ops::Range<usize>, reopen: bool) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(reopen), len)
}

// ── Building requests ───────────────────────────────────────────────────────

/// The request of a task spec.
pub fn new_task(spec: &TaskSpec) -> NewTask {
    let coordinator = spec.coordinator.map(|i| COORDINATORS[i]);
    NewTask {
        id: Some(TASKS[spec.id].to_owned()),
        message: match MESSAGES[spec.message] {
            blank if blank.trim().is_empty() => blank.to_owned(),
            text => format!("{text} ({})", TASKS[spec.id]),
        },
        task_mode: spec.mode.map(|i| MODES[i].to_owned()),
        readonly: spec.readonly,
        target_node_id: spec.pin_node.map(|i| NODES[i].to_owned()),
        target_session_id: spec.pin_session.map(|i| SESSIONS[i].to_owned()),
        required_tags: TAGS[spec.tags].iter().map(|t| (*t).to_owned()).collect(),
        priority: spec.priority.map(|i| PRIORITIES[i].to_owned()),
        not_before: spec.not_before_ms.map(NotBefore::Millis),
        depends_on: spec.deps.iter().map(|i| TASKS[*i].to_owned()).collect(),
        mission_id: spec.mission.map(|i| MISSIONS[i].to_owned()),
        max_retries: spec.max_retries,
        source_coordinator_daemon_id: coordinator.map(|c| c.0.to_owned()),
        source_coordinator_run_id: coordinator.map(|c| c.1.to_owned()),
        source_coordinator_session_id: coordinator.and_then(|c| c.2.map(str::to_owned)),
        // Difficulties cycle with the task ids, none among them.
        difficulty: DIFFICULTIES[spec.id % DIFFICULTIES.len()].map(str::to_owned),
        ..NewTask::default()
    }
}

/// The claimant of a claim spec.
pub fn claimant(spec: &ClaimSpec) -> Claimant {
    Claimant {
        node_id: NODES[spec.node].to_owned(),
        session_id: SESSIONS[spec.session].to_owned(),
        capability_tags: TAGS[spec.tags].iter().map(|t| (*t).to_owned()).collect(),
        provider_type: PROVIDERS[spec.provider].map(str::to_owned),
        provider_max_parallel: CAPS[spec.cap],
        node_is_worktree: spec.worktree,
        // Every other session says how its transcript is read, so both sides
        // stamp the profile, and clear it, alike.
        transcript_profile: (spec.session % 2 == 1).then(|| agentmesh_core::TranscriptProfile {
            class: "pty".to_owned(),
            timing: "live".to_owned(),
            emits_pty_turn_events: true,
        }),
        // Sessions s3 and s4 take only easy and medium tasks.
        allowed_difficulties: (spec.session >= 2).then(|| vec!["easy".to_owned(), "medium".to_owned()]),
    }
}

/// The options of a claim spec.
pub fn claim_options(spec: &ClaimSpec) -> ClaimOptions {
    ClaimOptions { lease_ms: spec.lease_s.map(|s| s * 1000) }
}

/// The epoch a spec presents for a task whose epoch is `current` (`None`: the
/// task is unknown).
pub fn epoch(spec: EpochSpec, current: Option<u64>) -> Option<u64> {
    match spec {
        EpochSpec::Current => Some(current.unwrap_or(0)),
        EpochSpec::Stale => Some(current.unwrap_or(0).saturating_sub(1)),
        EpochSpec::Omitted => None,
    }
}

/// The report of a spec about `task` (resolved from its [`TaskRef`]),
/// presenting the epoch `current` resolves to.
pub fn report(spec: &ReportSpec, task: Option<&str>, current: Option<u64>) -> CompletionReport {
    CompletionReport {
        session_id: SESSIONS[spec.session].to_owned(),
        task_id: task.map(str::to_owned),
        epoch: epoch(spec.epoch, current),
        occurred_at: None,
        outcome: if spec.failed {
            Outcome::Failed { reason: "tests still red".to_owned(), summary: Some("tried twice".to_owned()) }
        } else {
            Outcome::Completed { summary: Some(format!("done by {}", SESSIONS[spec.session])) }
        },
    }
}

/// A coordinator's identity.
pub fn coordinator(i: usize) -> CoordinatorIdentity {
    let (daemon, run, session) = COORDINATORS[i];
    CoordinatorIdentity::new(daemon, run, session.map(str::to_owned))
}

/// The drain request of a spec.
pub fn drain_request(spec: &DrainSpec) -> DrainRequest {
    DrainRequest {
        drainer: Drainer::new(coordinator(spec.coordinator), &[]),
        only_events: spec.only.as_ref().map(|names| names.iter().map(|i| EVENTS[*i].to_owned()).collect()),
        enforce: spec.enforce,
        limit: spec.limit,
    }
}

/// A copy of a stamped event, queued again at `now` with other content.
pub fn replayed(event: &PendingEvent, k: usize, now: Timestamp) -> PendingEvent {
    let mut copy = event.clone();
    copy.metadata_event.insert("timestamp".to_owned(), json!(9_000 + k as i64));
    copy.queued_at = now;
    copy
}

/// The event, hint and machine id of an event spec, queued at `now`.
pub fn event(spec: &EventSpec, now: Timestamp) -> (PendingEvent, EmitHint, Option<&'static str>) {
    let mut metadata = Map::new();
    if let Some(task) = spec.task {
        metadata.insert("taskId".to_owned(), json!(TASKS[task]));
    }
    metadata.insert("timestamp".to_owned(), json!(1_000 + i64::from(spec.stamp)));
    let mut ev = PendingEvent::new(EVENTS[spec.name], MESHES[0], "Node 'n1'", metadata, now);
    ev.node_id = Some("n1".to_owned());
    let mut hint = EmitHint { scope: spec.scope, ..EmitHint::default() };
    if let Some(target) = spec.target {
        let (daemon, run, session) = COORDINATORS[target];
        ev.target_coordinator_daemon_id = Some(daemon.to_owned());
        ev.target_coordinator_session_id = session.map(str::to_owned);
        if spec.run_hint {
            hint.coordinator_run_id = Some(run.to_owned());
        }
    }
    (ev, hint, spec.self_machine.then_some("mach_C"))
}

// ── Answers ─────────────────────────────────────────────────────────────────

/// An error as an answer.
pub fn error(err: &StoreError) -> Value {
    json!({ "error": err.to_string() })
}

/// Any result as an answer.
pub fn answer<T>(result: &StoreResult<T>, ok: impl FnOnce(&T) -> Value) -> Value {
    match result {
        Ok(value) => ok(value),
        Err(err) => error(err),
    }
}

/// A task.
pub fn task(task: &Task) -> Value {
    serde_json::to_value(task).expect("a task serializes")
}

/// A list of tasks.
pub fn tasks(tasks: &[Task]) -> Value {
    Value::Array(tasks.iter().map(task).collect())
}

/// A claim's outcome.
pub fn claimed(outcome: &ClaimOutcome) -> Value {
    match outcome {
        ClaimOutcome::Claimed(t) => json!({ "claimed": task(t) }),
        ClaimOutcome::Refused(r) => json!({ "refused": r.as_str() }),
    }
}

/// A requeue's outcome.
pub fn requeued(outcome: &Requeued) -> Value {
    match outcome {
        Requeued::Pending(t) => json!({ "pending": task(t) }),
        Requeued::RetriesExhausted(t) => json!({ "exhausted": task(t) }),
    }
}

/// A queued event's outcome.
pub fn queued(outcome: &QueueOutcome) -> Value {
    match outcome {
        QueueOutcome::Queued { id, event } => json!({ "queued": id, "event": event.to_value() }),
        QueueOutcome::Duplicate(reason) => json!({ "duplicate": format!("{reason:?}") }),
    }
}

/// An event as a drain or peek hands it out.
pub fn inbox_event(e: &InboxEvent) -> Value {
    json!({
        "id": e.id,
        "name": e.name,
        "event": e.event.parse(),
        "fingerprint": e.fingerprint,
        "queuedAt": e.queued_at_ms,
    })
}

/// What a drain did. `v2RoutedAway` counts the events a drain looked at and left
/// queued, which depends on how much of the queue a backend reads (see
/// DIFFERENCES.md); it is not compared.
pub fn drained(outcome: &DrainOutcome) -> Value {
    let mut counters = outcome.counters;
    counters.v2_routed_away = 0;
    json!({
        "events": outcome.events.iter().map(inbox_event).collect::<Vec<_>>(),
        "counters": serde_json::to_value(counters).expect("counters serialize"),
        "quarantined": outcome.quarantined,
    })
}

/// A ledger entry without its id (ids are minted by each side and compared
/// through the entries that name them, not one by one).
pub fn entry(e: &LedgerEntry) -> Value {
    let mut value = serde_json::to_value(e).expect("an entry serializes");
    if let Some(object) = value.as_object_mut() {
        object.remove("id");
    }
    value
}

/// A list of ledger entries.
pub fn entries(list: &[LedgerEntry]) -> Value {
    Value::Array(list.iter().map(entry).collect())
}

/// The request of a ledger page after `cursor` (a sequence or an entry id).
pub fn page_query(by_seq: bool, limit: u32, seq: u64, after_id: Option<String>) -> SliceQuery {
    if by_seq {
        SliceQuery { after_seq: Some(seq), limit: Some(limit), ..SliceQuery::default() }
    } else {
        SliceQuery { after_id, limit: Some(limit), ..SliceQuery::default() }
    }
}

/// The priority of an index.
pub fn priority(i: usize) -> TaskPriority {
    TaskPriority::ALL[i]
}

/// A mission request.
pub fn mission(id: usize, status: usize) -> NewMission {
    NewMission {
        id: MISSIONS[id].to_owned(),
        title: format!("the {} mission", MISSIONS[id]),
        goal: Some("ship it".to_owned()),
        status: Some(MISSION_STATUSES[status].to_owned()),
        source: None,
    }
}

/// Requeue options.
pub fn requeue_options(force: bool) -> RequeueOptions {
    RequeueOptions { reason: Some("retry".to_owned()), force, ..RequeueOptions::default() }
}

/// Renames the ids one side minted (UUIDs) to `id#1`, `id#2`, ... in the order
/// they first appear, so two sides' answers compare equal exactly when they are
/// the same up to a consistent renaming of minted ids. Objects are rebuilt with
/// their keys sorted (a backend may store JSON with its keys reordered).
#[derive(Debug, Default)]
pub struct Renamer {
    names: BTreeMap<String, String>,
}

impl Renamer {
    /// The canonical form of `value`.
    pub fn canonical(&mut self, value: &Value) -> Value {
        match value {
            Value::String(s) if is_minted(s) => {
                let next = format!("id#{}", self.names.len() + 1);
                Value::String(self.names.entry(s.clone()).or_insert(next).clone())
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| self.canonical(v)).collect()),
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), self.canonical(&map[k]));
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }
}

/// Whether `s` is an id the minter made (a hyphenated UUID).
fn is_minted(s: &str) -> bool {
    s.len() == 36 && uuid::Uuid::try_parse(s).is_ok()
}
