//! The sequential differential check: one operation sequence run step by step
//! on the [`Model`] and on a store, every answer and every view compared after
//! each step.
//!
//! A backend runs it from a proptest of its own, with a [`Subject`] that holds a
//! fresh store (and can reopen it, where reopening means something):
//!
//! ```text
//! proptest! {
//!     #[test]
//!     fn the_store_agrees_with_the_model(ops in model::ops::sequence(1..60, true)) {
//!         let mut subject = FreshStore::new();
//!         if let Err(diff) = model::check::run(&mut subject, &ops) { prop_assert!(false, "{diff}") }
//!     }
//! }
//! ```
//!
//! Minted ids differ between the two sides; answers are compared after each side's
//! ids are renamed in order of appearance ([`Renamer`]), so an answer that names
//! the wrong event or entry still differs.

use serde_json::{Value, json};

use agentmesh_core::events::{CoordinatorIdentity, EmitHint, PendingEvent};
use agentmesh_core::{
    Claimant, LedgerEntry, LedgerQuery, LedgerSlice, MissionProgress, NewMission, NewTask, RequeueOptions,
    Requeued, SliceQuery, Task, TaskPriority, TaskStatus, Timestamp,
};

use super::Model;
use super::ops::{self as o, Op, Renamer, TaskRef};
use crate::{
    ClaimOptions, ClaimOutcome, CompletionReport, DrainOutcome, DrainRequest, EventSettle, Heartbeat,
    InboxEvent, QueueOutcome, Store, StoreResult, TaskCommand, UpsertedMission,
};

/// A store under test.
pub trait Subject {
    /// The store's type.
    type Store: Store;
    /// The store.
    fn store(&self) -> &Self::Store;
    /// Closes the store and opens the same database again. The default does
    /// nothing (a backend with nothing to reopen).
    fn reopen(&mut self) {}
}

/// A [`Subject`] that reopens by dropping its store and opening another with
/// `open`; `keep` (a temp directory, a schema) outlives every store.
pub struct Reopened<S, K> {
    // Declared first, so that it is dropped before what it is open on.
    store: Option<S>,
    open: Box<dyn Fn() -> S>,
    _keep: K,
}

impl<S: Store, K> Reopened<S, K> {
    /// A store opened with `open`, on what `keep` holds.
    pub fn new(keep: K, open: impl Fn() -> S + 'static) -> Reopened<S, K> {
        Reopened { store: Some(open()), open: Box::new(open), _keep: keep }
    }
}

impl<S: Store, K> Subject for Reopened<S, K> {
    type Store = S;

    fn store(&self) -> &S {
        self.store.as_ref().expect("the store is open")
    }

    /// Closes every connection of the store, then opens it again.
    fn reopen(&mut self) {
        drop(self.store.take());
        self.store = Some((self.open)());
    }
}

/// What one side knows between steps: the events it queued by hand (row id and
/// the event as stamped), in push order.
#[derive(Default)]
struct Side {
    pushed: Vec<(String, agentmesh_core::events::PendingEvent)>,
    names: Renamer,
}

/// Runs `ops` on a fresh model and on the subject's store (which must be empty),
/// comparing after each step. `Err` describes the first difference: the step,
/// the operations up to it, and both answers.
pub fn run<S: Subject>(subject: &mut S, ops: &[Op]) -> Result<(), String> {
    let mut model = Model::new(subject.store().profile().id_scope);
    let (mut ms, mut ss) = (Side::default(), Side::default());
    let mut now = o::T0;
    for (step, op) in ops.iter().enumerate() {
        now = now.plus_millis(o::STEP_MS);
        if let Op::Wait(ms) = op {
            now = now.plus_millis(*ms);
        }
        if let Op::Reopen = op {
            subject.reopen();
        }
        // Epochs are resolved before either side runs the step, from the model.
        let (task, current) = resolve(&model, op);
        let want = apply(&mut model, &mut ms, op, task, current, now);
        let got = apply(&mut Real(subject.store()), &mut ss, op, task, current, now);
        let (want, got) = (ms.names.canonical(&want), ss.names.canonical(&got));
        if want != got {
            return Err(difference(ops, step, "the answer", &want, &got));
        }
        for mesh in o::MESHES {
            let want = view(&mut model, mesh);
            let got = view(&mut Real(subject.store()), mesh);
            let (want, got) = (ms.names.canonical(&want), ss.names.canonical(&got));
            if want != got {
                return Err(difference(
                    ops,
                    step,
                    &format!("the view of mesh {mesh:?} after it"),
                    &want,
                    &got,
                ));
            }
        }
    }
    Ok(())
}

fn difference(ops: &[Op], step: usize, what: &str, want: &Value, got: &Value) -> String {
    let (want, got) = (pretty(want), pretty(got));
    let mut out = format!("step {step} ({:?}): {what} differs\n", ops[step]);
    out.push_str("sequence up to it:\n");
    for (i, op) in ops.iter().take(step + 1).enumerate() {
        out.push_str(&format!("  {i:>3}: {op:?}\n"));
    }
    // The first differing line of each, then both in full.
    if let Some((w, g)) = want.lines().zip(got.lines()).find(|(w, g)| w != g) {
        out.push_str(&format!("first difference:\n  model: {w}\n  store: {g}\n"));
    }
    out.push_str(&format!("model:\n{want}\nstore:\n{got}\n"));
    out
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The operations a step runs, as the model and a store both answer them: one
/// dispatcher ([`apply`]) drives either side.
trait Target {
    fn enqueue(&mut self, mesh: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task>;
    fn enqueue_batch(&mut self, mesh: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>>;
    fn claim(
        &mut self,
        mesh: &str,
        c: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome>;
    fn complete(&mut self, mesh: &str, report: &CompletionReport, now: Timestamp) -> StoreResult<Task>;
    fn complete_and_claim(
        &mut self,
        mesh: &str,
        report: &CompletionReport,
        c: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)>;
    fn heartbeat(&mut self, mesh: &str, beat: &Heartbeat, now: Timestamp) -> StoreResult<Task>;
    fn cancel(&mut self, mesh: &str, task: &str, now: Timestamp) -> StoreResult<Task>;
    fn requeue(
        &mut self,
        mesh: &str,
        task: &str,
        opts: &RequeueOptions,
        now: Timestamp,
    ) -> StoreResult<Requeued>;
    fn priority(&mut self, mesh: &str, task: &str, p: TaskPriority, now: Timestamp) -> StoreResult<Task>;
    fn expired_leases(&mut self, now: Timestamp) -> StoreResult<Vec<(String, String)>>;
    fn reclaim(&mut self, mesh: &str, task: &str, now: Timestamp) -> StoreResult<Option<Task>>;
    fn queue(
        &mut self,
        mesh: &str,
        ev: &PendingEvent,
        hint: &EmitHint,
        machine: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome>;
    fn drain(&mut self, mesh: &str, request: &DrainRequest, now: Timestamp) -> StoreResult<DrainOutcome>;
    fn peek(&mut self, mesh: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>>;
    fn ack(&mut self, mesh: &str, ids: &[String], now: Timestamp) -> StoreResult<u64>;
    fn touch(&mut self, mesh: &str, who: &CoordinatorIdentity, now: Timestamp) -> StoreResult<()>;
    fn end(&mut self, mesh: &str, who: &CoordinatorIdentity, now: Timestamp) -> StoreResult<bool>;
    fn mission(&mut self, mesh: &str, m: &NewMission, now: Timestamp) -> StoreResult<UpsertedMission>;
    fn progress(&mut self, mesh: &str, id: &str) -> StoreResult<MissionProgress>;
    fn slice(&mut self, mesh: &str, query: &SliceQuery) -> StoreResult<LedgerSlice>;
    fn tasks(&mut self, mesh: &str) -> StoreResult<Vec<Task>>;
    fn ledger(&mut self, mesh: &str) -> StoreResult<Vec<LedgerEntry>>;
    fn pending(&mut self, mesh: &str) -> StoreResult<u64>;
}

impl Target for Model {
    fn enqueue(&mut self, mesh: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task> {
        Model::enqueue(self, mesh, new, now)
    }
    fn enqueue_batch(&mut self, mesh: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>> {
        Model::enqueue_batch(self, mesh, new, now)
    }
    fn claim(
        &mut self,
        mesh: &str,
        c: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome> {
        self.claim_next(mesh, c, opts, now)
    }
    fn complete(&mut self, mesh: &str, report: &CompletionReport, now: Timestamp) -> StoreResult<Task> {
        self.complete_task(mesh, report, now)
    }
    fn complete_and_claim(
        &mut self,
        mesh: &str,
        report: &CompletionReport,
        c: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)> {
        Model::complete_and_claim(self, mesh, report, c, opts, now)
    }
    fn heartbeat(&mut self, mesh: &str, beat: &Heartbeat, now: Timestamp) -> StoreResult<Task> {
        Model::heartbeat(self, mesh, beat, now)
    }
    fn cancel(&mut self, mesh: &str, task: &str, now: Timestamp) -> StoreResult<Task> {
        self.cancel_task(mesh, task, Some(CANCEL_REASON), now)
    }
    fn requeue(
        &mut self,
        mesh: &str,
        task: &str,
        opts: &RequeueOptions,
        now: Timestamp,
    ) -> StoreResult<Requeued> {
        self.requeue_task(mesh, task, opts, now)
    }
    fn priority(&mut self, mesh: &str, task: &str, p: TaskPriority, now: Timestamp) -> StoreResult<Task> {
        self.set_task_priority(mesh, task, p, Some(PRIORITY_REASON), now)
    }
    fn expired_leases(&mut self, now: Timestamp) -> StoreResult<Vec<(String, String)>> {
        Ok(Model::expired_leases(self, now))
    }
    fn reclaim(&mut self, mesh: &str, task: &str, now: Timestamp) -> StoreResult<Option<Task>> {
        self.reclaim_if_lease_expired(mesh, task, now)
    }
    fn queue(
        &mut self,
        mesh: &str,
        ev: &PendingEvent,
        hint: &EmitHint,
        machine: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome> {
        self.queue_pending_event(mesh, ev, hint, machine, now)
    }
    fn drain(&mut self, mesh: &str, request: &DrainRequest, now: Timestamp) -> StoreResult<DrainOutcome> {
        self.drain_pending_events(mesh, request, now)
    }
    fn peek(&mut self, mesh: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>> {
        Ok(self.peek_pending_events(mesh, request))
    }
    fn ack(&mut self, mesh: &str, ids: &[String], _now: Timestamp) -> StoreResult<u64> {
        Ok(self.ack_pending_events(mesh, ids))
    }
    fn touch(&mut self, mesh: &str, who: &CoordinatorIdentity, now: Timestamp) -> StoreResult<()> {
        self.touch_coordinator(mesh, who, now);
        Ok(())
    }
    fn end(&mut self, mesh: &str, who: &CoordinatorIdentity, now: Timestamp) -> StoreResult<bool> {
        Ok(self.end_coordinator(mesh, who, now))
    }
    fn mission(&mut self, mesh: &str, m: &NewMission, now: Timestamp) -> StoreResult<UpsertedMission> {
        self.upsert_mission(mesh, m, now)
    }
    fn progress(&mut self, mesh: &str, id: &str) -> StoreResult<MissionProgress> {
        self.mission_progress(mesh, id)
    }
    fn slice(&mut self, mesh: &str, query: &SliceQuery) -> StoreResult<LedgerSlice> {
        Ok(self.ledger_slice(mesh, query))
    }
    fn tasks(&mut self, mesh: &str) -> StoreResult<Vec<Task>> {
        Ok(self.queue_entries(mesh))
    }
    fn ledger(&mut self, mesh: &str) -> StoreResult<Vec<LedgerEntry>> {
        Ok(self.read_ledger_ordered(mesh, &LedgerQuery::default()))
    }
    fn pending(&mut self, mesh: &str) -> StoreResult<u64> {
        Ok(self.pending_event_count(mesh))
    }
}

/// A store as a [`Target`].
struct Real<'a, S>(&'a S);

impl<S: Store> Target for Real<'_, S> {
    fn enqueue(&mut self, mesh: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task> {
        self.0.enqueue(mesh, new, now)
    }
    fn enqueue_batch(&mut self, mesh: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>> {
        self.0.enqueue_batch(mesh, new, now)
    }
    fn claim(
        &mut self,
        mesh: &str,
        c: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome> {
        self.0.claim_next(mesh, c, opts, now)
    }
    fn complete(&mut self, mesh: &str, report: &CompletionReport, now: Timestamp) -> StoreResult<Task> {
        self.0.complete_task(mesh, report, now)
    }
    fn complete_and_claim(
        &mut self,
        mesh: &str,
        report: &CompletionReport,
        c: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)> {
        self.0.complete_and_claim(mesh, report, c, opts, now)
    }
    fn heartbeat(&mut self, mesh: &str, beat: &Heartbeat, now: Timestamp) -> StoreResult<Task> {
        self.0.heartbeat(mesh, beat, now)
    }
    fn cancel(&mut self, mesh: &str, task: &str, now: Timestamp) -> StoreResult<Task> {
        self.0.task_command(mesh, task, TaskCommand::Cancel { reason: Some(CANCEL_REASON) }, now)
    }
    fn requeue(
        &mut self,
        mesh: &str,
        task: &str,
        opts: &RequeueOptions,
        now: Timestamp,
    ) -> StoreResult<Requeued> {
        self.0.task_command(mesh, task, TaskCommand::Requeue(opts), now).map(Requeued::from_task)
    }
    fn priority(&mut self, mesh: &str, task: &str, p: TaskPriority, now: Timestamp) -> StoreResult<Task> {
        self.0.task_command(
            mesh,
            task,
            TaskCommand::SetPriority { priority: p, reason: Some(PRIORITY_REASON) },
            now,
        )
    }
    fn expired_leases(&mut self, now: Timestamp) -> StoreResult<Vec<(String, String)>> {
        // Listed in any order; the model's is sorted.
        self.0.expired_leases(now).map(|mut list| {
            list.sort();
            list
        })
    }
    fn reclaim(&mut self, mesh: &str, task: &str, now: Timestamp) -> StoreResult<Option<Task>> {
        self.0.reclaim_if_lease_expired(mesh, task, now)
    }
    fn queue(
        &mut self,
        mesh: &str,
        ev: &PendingEvent,
        hint: &EmitHint,
        machine: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome> {
        self.0.queue_pending_event(mesh, ev, hint, machine, now)
    }
    fn drain(&mut self, mesh: &str, request: &DrainRequest, now: Timestamp) -> StoreResult<DrainOutcome> {
        self.0.drain_pending_events(mesh, request, now)
    }
    fn peek(&mut self, mesh: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>> {
        self.0.peek_pending_events(mesh, request)
    }
    fn ack(&mut self, mesh: &str, ids: &[String], _now: Timestamp) -> StoreResult<u64> {
        self.0.settle_pending_events(mesh, EventSettle::Ack(ids))
    }
    fn touch(&mut self, mesh: &str, who: &CoordinatorIdentity, now: Timestamp) -> StoreResult<()> {
        self.0.coordinator_presence(mesh, who, false, now).map(drop)
    }
    fn end(&mut self, mesh: &str, who: &CoordinatorIdentity, now: Timestamp) -> StoreResult<bool> {
        self.0.coordinator_presence(mesh, who, true, now)
    }
    fn mission(&mut self, mesh: &str, m: &NewMission, now: Timestamp) -> StoreResult<UpsertedMission> {
        self.0.upsert_mission(mesh, m, now)
    }
    fn progress(&mut self, mesh: &str, id: &str) -> StoreResult<MissionProgress> {
        self.0.mission_progress(mesh, id)
    }
    fn slice(&mut self, mesh: &str, query: &SliceQuery) -> StoreResult<LedgerSlice> {
        self.0.ledger_slice(mesh, query)
    }
    fn tasks(&mut self, mesh: &str) -> StoreResult<Vec<Task>> {
        self.0.queue_entries(mesh, &[])
    }
    fn ledger(&mut self, mesh: &str) -> StoreResult<Vec<LedgerEntry>> {
        self.0.read_ledger_ordered(mesh, &LedgerQuery::default())
    }
    fn pending(&mut self, mesh: &str) -> StoreResult<u64> {
        self.0.pending_event_count(mesh)
    }
}

/// The reason every cancel of a sequence gives.
const CANCEL_REASON: &str = "not needed";
/// The reason every priority change of a sequence gives.
const PRIORITY_REASON: &str = "reordered";

/// What a reader sees of a mesh: its tasks, its ledger, how many events wait.
fn view<T: Target>(target: &mut T, mesh: &str) -> Value {
    json!({
        "tasks": o::answer(&target.tasks(mesh), |t| o::tasks(t)),
        "ledger": o::answer(&target.ledger(mesh), |e| o::entries(e)),
        "pending": o::answer(&target.pending(mesh), |n| json!(n)),
    })
}

/// The task a report or heartbeat names and the epoch it resolves against,
/// from the model, before either side runs the step (both must share them).
fn resolve(model: &Model, op: &Op) -> (Option<&'static str>, Option<u64>) {
    let (task, session) = match op {
        Op::Complete(r) | Op::CompleteAndClaim(r, _) => (r.task, r.session),
        Op::Heartbeat { task, session, .. } => (*task, *session),
        _ => return (None, None),
    };
    let mesh = o::MESHES[0];
    let held = || {
        model.queue_entries(mesh).into_iter().find(|t| {
            t.status == TaskStatus::Assigned && t.assigned_session_id.as_deref() == Some(o::SESSIONS[session])
        })
    };
    let named = match task {
        TaskRef::Id(i) => Some(o::TASKS[i]),
        TaskRef::Held => held().and_then(|t| o::TASKS.iter().copied().find(|id| *id == t.id)),
        TaskRef::Unnamed => None,
    };
    let current = match named {
        Some(id) => model.find_task(mesh, id).map(|t| t.epoch()),
        None => held().map(|t| t.epoch()),
    };
    (named, current)
}

/// Runs one step on `target`, with the task and epoch [`resolve`] gave; its
/// answer.
fn apply<T: Target>(
    target: &mut T,
    side: &mut Side,
    op: &Op,
    task: Option<&str>,
    current: Option<u64>,
    now: Timestamp,
) -> Value {
    let mesh = o::MESHES[0];
    match op {
        Op::Enqueue(m, spec) => o::answer(&target.enqueue(o::MESHES[*m], &o::new_task(spec), now), o::task),
        Op::EnqueueBatch(specs) => {
            let new: Vec<_> = specs.iter().map(o::new_task).collect();
            o::answer(&target.enqueue_batch(mesh, &new, now), |t| o::tasks(t))
        }
        Op::Claim(m, spec) => o::answer(
            &target.claim(o::MESHES[*m], &o::claimant(spec), &o::claim_options(spec), now),
            o::claimed,
        ),
        Op::Complete(spec) => {
            o::answer(&target.complete(mesh, &o::report(spec, task, current), now), o::task)
        }
        Op::CompleteAndClaim(spec, claim) => {
            let report = o::report(spec, task, current);
            let result =
                target.complete_and_claim(mesh, &report, &o::claimant(claim), &o::claim_options(claim), now);
            o::answer(&result, |(t, c)| json!([o::task(t), o::claimed(c)]))
        }
        Op::Heartbeat { session, epoch, lease_s, .. } => {
            let presented = o::epoch(*epoch, current).unwrap_or(0);
            let task = task.unwrap_or(o::TASKS[0]);
            o::answer(
                &target.heartbeat(
                    mesh,
                    &Heartbeat::new(task, o::SESSIONS[*session], presented, lease_s * 1000),
                    now,
                ),
                o::task,
            )
        }
        Op::Cancel(t) => o::answer(&target.cancel(mesh, o::TASKS[*t], now), o::task),
        Op::Requeue(t, force) => {
            o::answer(&target.requeue(mesh, o::TASKS[*t], &o::requeue_options(*force), now), o::requeued)
        }
        Op::Priority(t, p) => o::answer(&target.priority(mesh, o::TASKS[*t], o::priority(*p), now), o::task),
        Op::Reap => match target.expired_leases(now) {
            Ok(expired) => {
                let reclaimed: Vec<Value> = expired
                    .iter()
                    .map(|(m, t)| o::answer(&target.reclaim(m, t, now), |t| json!(t.as_ref().map(o::task))))
                    .collect();
                json!({ "expired": expired, "reclaimed": reclaimed })
            }
            Err(err) => o::error(&err),
        },
        Op::Push(spec) => {
            let (ev, hint, machine) = o::event(spec, now);
            let result = target.queue(mesh, &ev, &hint, machine, now);
            if let Ok(QueueOutcome::Queued { id, event }) = &result {
                side.pushed.push((id.clone(), event.clone()));
            }
            o::answer(&result, o::queued)
        }
        Op::Repush(k) => match side.pushed.get(k % side.pushed.len().max(1)) {
            Some((_, event)) => {
                let copy = o::replayed(event, *k, now);
                o::answer(&target.queue(mesh, &copy, &EmitHint::default(), None, now), o::queued)
            }
            None => Value::Null,
        },
        Op::Drain(spec) => o::answer(&target.drain(mesh, &o::drain_request(spec), now), o::drained),
        Op::Peek(spec) => o::answer(&target.peek(mesh, &o::drain_request(spec)), |events| {
            json!(events.iter().map(o::inbox_event).collect::<Vec<_>>())
        }),
        Op::Ack(k) => match side.pushed.get(k % side.pushed.len().max(1)) {
            Some((id, _)) => o::answer(&target.ack(mesh, std::slice::from_ref(id), now), |n| json!(n)),
            None => Value::Null,
        },
        Op::Touch(c) => o::answer(&target.touch(mesh, &o::coordinator(*c), now), |_| json!(null)),
        Op::End(c) => o::answer(&target.end(mesh, &o::coordinator(*c), now), |b| json!(b)),
        Op::Mission(m, s) => {
            o::answer(&target.mission(mesh, &o::mission(*m, *s), now), |u| json!(format!("{u:?}")))
        }
        Op::Progress(m) => o::answer(&target.progress(mesh, o::MISSIONS[*m]), |p| json!(format!("{p:?}"))),
        Op::Page { by_seq, limit } => page(|query| target.slice(mesh, query), *by_seq, *limit),
        Op::Wait(_) | Op::Reopen => Value::Null,
    }
}

/// Pages through the whole ledger; the entries of every page, in order.
fn page(
    mut read: impl FnMut(&agentmesh_core::SliceQuery) -> StoreResult<agentmesh_core::LedgerSlice>,
    by_seq: bool,
    limit: u32,
) -> Value {
    let (mut seq, mut after_id) = (0u64, None);
    let mut all = Vec::new();
    for _ in 0..1_000 {
        let slice = match read(&o::page_query(by_seq, limit, seq, after_id.clone())) {
            Ok(slice) => slice,
            Err(err) => return o::error(&err),
        };
        if slice.entries.len() > limit as usize {
            return json!({ "error": format!("a page of limit {limit} held {} entries", slice.entries.len()) });
        }
        all.extend(slice.entries.iter().map(o::entry));
        if !slice.cursor.has_more {
            return Value::Array(all);
        }
        seq = slice.cursor.next_after_seq.unwrap_or(seq);
        after_id = slice.cursor.next_after_id.clone().or(after_id);
    }
    json!({ "error": "the ledger did not end after 1000 pages" })
}

/// Runs `ops` on a fresh model alone and names what each step did (the
/// operation and how it ended: `claim: refused parallel_cap_reached`,
/// `complete: error stale epoch`, `drain: delivered`, ...), so a test can
/// check that generated sequences reach every outcome worth comparing.
pub fn outcomes(ops: &[Op]) -> Vec<String> {
    let mut model = Model::new(crate::IdScope::Database);
    let mut side = Side::default();
    let mut now = o::T0;
    let mut out = Vec::new();
    for op in ops {
        now = now.plus_millis(o::STEP_MS);
        if let Op::Wait(ms) = op {
            now = now.plus_millis(*ms);
        }
        let (task, current) = resolve(&model, op);
        let answer = apply(&mut model, &mut side, op, task, current, now);
        let name = format!("{op:?}");
        let name = name.split(['(', ' ', '{']).next().unwrap_or_default().to_owned();
        out.push(format!("{name}: {}", label(&answer)));
    }
    out
}

/// A short name for an answer's outcome.
fn label(answer: &Value) -> String {
    let words = |s: &str, n: usize| s.split_whitespace().take(n).collect::<Vec<_>>().join(" ");
    if let Some(e) = answer.get("error").and_then(Value::as_str) {
        return format!("error {}", words(e, 3));
    }
    if let Some(r) = answer.get("refused").and_then(Value::as_str) {
        return format!("refused {r}");
    }
    if answer.get("claimed").is_some() {
        return "claimed".to_owned();
    }
    if let Some(list) = answer.as_array()
        && list.len() == 2
        && list[1].is_object()
    {
        return format!("completed, then {}", label(&list[1]));
    }
    for key in ["pending", "exhausted", "duplicate", "queued"] {
        if answer.get(key).is_some() {
            return key.to_owned();
        }
    }
    if let Some(events) = answer.get("events").and_then(Value::as_array) {
        let quarantined = answer.get("quarantined").and_then(Value::as_array).is_some_and(|q| !q.is_empty());
        let dedup = answer.pointer("/counters/v2DedupSkipped").and_then(Value::as_u64).unwrap_or(0) > 0;
        return match (events.is_empty(), quarantined, dedup) {
            (_, true, _) => "quarantined".to_owned(),
            (_, _, true) => "dedup skipped".to_owned(),
            (false, _, _) => "delivered".to_owned(),
            (true, _, _) => "nothing".to_owned(),
        };
    }
    if let Some(reclaimed) = answer.get("reclaimed").and_then(Value::as_array) {
        return if reclaimed.is_empty() { "nothing".to_owned() } else { "reclaimed".to_owned() };
    }
    match answer {
        Value::Array(a) if a.is_empty() => "nothing".to_owned(),
        Value::Array(_) => "some".to_owned(),
        Value::Object(o) if o.contains_key("status") => format!("ok {}", o["status"].as_str().unwrap_or("")),
        Value::String(s) if s.contains("created: true") => "created".to_owned(),
        Value::String(s) if s.contains("created: false") => "updated".to_owned(),
        Value::Null => "none".to_owned(),
        other => format!("{}", other).chars().take(20).collect(),
    }
}
