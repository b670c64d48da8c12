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

use super::Model;
use super::ops::{self as o, Op, Renamer, TaskRef};
use crate::{Store, StoreResult};
use agentmesh_core::events::EmitHint;
use agentmesh_core::{LedgerQuery, TaskStatus, Timestamp};

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
    let mut model = Model::new(subject.store().id_scope());
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
        let want = on_model(&mut model, &mut ms, op, task, current, now);
        let got = on_store(subject.store(), &mut ss, op, task, current, now);
        let (want, got) = (ms.names.canonical(&want), ss.names.canonical(&got));
        if want != got {
            return Err(difference(ops, step, "the answer", &want, &got));
        }
        for mesh in o::MESHES {
            let want = view_of_model(&model, mesh);
            let got = view_of_store(subject.store(), mesh);
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

/// What a reader sees of a mesh: its tasks, its ledger, how many events wait.
fn view_of_model(model: &Model, mesh: &str) -> Value {
    json!({
        "tasks": o::tasks(&model.queue_entries(mesh)),
        "ledger": o::entries(&model.read_ledger_ordered(mesh, &LedgerQuery::default())),
        "pending": model.pending_event_count(mesh),
    })
}

fn view_of_store<S: Store>(store: &S, mesh: &str) -> Value {
    json!({
        "tasks": o::answer(&store.queue_entries(mesh, &[]), |t| o::tasks(t)),
        "ledger": o::answer(&store.read_ledger_ordered(mesh, &LedgerQuery::default()), |e| o::entries(e)),
        "pending": o::answer(&store.pending_event_count(mesh), |n| json!(n)),
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

fn on_model(
    model: &mut Model,
    side: &mut Side,
    op: &Op,
    task: Option<&str>,
    current: Option<u64>,
    now: Timestamp,
) -> Value {
    let mesh = o::MESHES[0];
    match op {
        Op::Enqueue(m, spec) => o::answer(&model.enqueue(o::MESHES[*m], &o::new_task(spec), now), o::task),
        Op::EnqueueBatch(specs) => {
            let new: Vec<_> = specs.iter().map(o::new_task).collect();
            o::answer(&model.enqueue_batch(mesh, &new, now), |t| o::tasks(t))
        }
        Op::Claim(m, spec) => o::answer(
            &model.claim_next(o::MESHES[*m], &o::claimant(spec), &o::claim_options(spec), now),
            o::claimed,
        ),
        Op::Complete(spec) => {
            o::answer(&model.complete_task(mesh, &o::report(spec, task, current), now), o::task)
        }
        Op::CompleteAndClaim(spec, claim) => {
            let report = o::report(spec, task, current);
            let result =
                model.complete_and_claim(mesh, &report, &o::claimant(claim), &o::claim_options(claim), now);
            o::answer(&result, |(t, c)| json!([o::task(t), o::claimed(c)]))
        }
        Op::Heartbeat { session, epoch, lease_s, .. } => {
            let presented = o::epoch(*epoch, current).unwrap_or(0);
            let result = model.heartbeat(
                mesh,
                task.unwrap_or(o::TASKS[0]),
                o::SESSIONS[*session],
                presented,
                lease_s * 1000,
                now,
            );
            o::answer(&result, o::task)
        }
        Op::Cancel(t) => o::answer(&model.cancel_task(mesh, o::TASKS[*t], Some("not needed"), now), o::task),
        Op::Requeue(t, force) => {
            o::answer(&model.requeue_task(mesh, o::TASKS[*t], &o::requeue_options(*force), now), o::requeued)
        }
        Op::Priority(t, p) => o::answer(
            &model.set_task_priority(mesh, o::TASKS[*t], o::priority(*p), Some("reordered"), now),
            o::task,
        ),
        Op::Reap => {
            let expired = model.expired_leases(now);
            let reclaimed: Vec<Value> = expired
                .iter()
                .map(|(m, t)| {
                    o::answer(&model.reclaim_if_lease_expired(m, t, now), |t| json!(t.as_ref().map(o::task)))
                })
                .collect();
            json!({ "expired": expired, "reclaimed": reclaimed })
        }
        Op::Push(spec) => {
            let (ev, hint, machine) = o::event(spec, now);
            let result = model.queue_pending_event(mesh, &ev, &hint, machine, now);
            if let Ok(crate::QueueOutcome::Queued { id, event }) = &result {
                side.pushed.push((id.clone(), event.clone()));
            }
            o::answer(&result, o::queued)
        }
        Op::Repush(k) => match side.pushed.get(k % side.pushed.len().max(1)) {
            Some((_, event)) => {
                let copy = o::replayed(event, *k, now);
                o::answer(&model.queue_pending_event(mesh, &copy, &EmitHint::default(), None, now), o::queued)
            }
            None => Value::Null,
        },
        Op::Drain(spec) => {
            o::answer(&model.drain_pending_events(mesh, &o::drain_request(spec), now), o::drained)
        }
        Op::Peek(spec) => json!(
            model
                .peek_pending_events(mesh, &o::drain_request(spec))
                .iter()
                .map(o::inbox_event)
                .collect::<Vec<_>>()
        ),
        Op::Ack(k) => match side.pushed.get(k % side.pushed.len().max(1)) {
            Some((id, _)) => json!(model.ack_pending_events(mesh, std::slice::from_ref(id))),
            None => Value::Null,
        },
        Op::Touch(c) => {
            model.touch_coordinator(mesh, &o::coordinator(*c), now);
            json!(null)
        }
        Op::End(c) => json!(model.end_coordinator(mesh, &o::coordinator(*c), now)),
        Op::Mission(m, s) => {
            o::answer(&model.upsert_mission(mesh, &o::mission(*m, *s), now), |u| json!(format!("{:?}", u)))
        }
        Op::Progress(m) => {
            o::answer(&model.mission_progress(mesh, o::MISSIONS[*m]), |p| json!(format!("{p:?}")))
        }
        Op::Page { by_seq, limit } => page(|query| Ok(model.ledger_slice(mesh, query)), *by_seq, *limit),
        Op::Wait(_) | Op::Reopen => Value::Null,
    }
}

fn on_store<S: Store>(
    store: &S,
    side: &mut Side,
    op: &Op,
    task: Option<&str>,
    current: Option<u64>,
    now: Timestamp,
) -> Value {
    let mesh = o::MESHES[0];
    match op {
        Op::Enqueue(m, spec) => o::answer(&store.enqueue(o::MESHES[*m], &o::new_task(spec), now), o::task),
        Op::EnqueueBatch(specs) => {
            let new: Vec<_> = specs.iter().map(o::new_task).collect();
            o::answer(&store.enqueue_batch(mesh, &new, now), |t| o::tasks(t))
        }
        Op::Claim(m, spec) => o::answer(
            &store.claim_next(o::MESHES[*m], &o::claimant(spec), &o::claim_options(spec), now),
            o::claimed,
        ),
        Op::Complete(spec) => {
            o::answer(&store.complete_task(mesh, &o::report(spec, task, current), now), o::task)
        }
        Op::CompleteAndClaim(spec, claim) => {
            let report = o::report(spec, task, current);
            let result =
                store.complete_and_claim(mesh, &report, &o::claimant(claim), &o::claim_options(claim), now);
            o::answer(&result, |(t, c)| json!([o::task(t), o::claimed(c)]))
        }
        Op::Heartbeat { session, epoch, lease_s, .. } => {
            let presented = o::epoch(*epoch, current).unwrap_or(0);
            let result = store.heartbeat(
                mesh,
                task.unwrap_or(o::TASKS[0]),
                o::SESSIONS[*session],
                presented,
                lease_s * 1000,
                now,
            );
            o::answer(&result, o::task)
        }
        Op::Cancel(t) => o::answer(&store.cancel_task(mesh, o::TASKS[*t], Some("not needed"), now), o::task),
        Op::Requeue(t, force) => {
            o::answer(&store.requeue_task(mesh, o::TASKS[*t], &o::requeue_options(*force), now), o::requeued)
        }
        Op::Priority(t, p) => o::answer(
            &store.set_task_priority(mesh, o::TASKS[*t], o::priority(*p), Some("reordered"), now),
            o::task,
        ),
        Op::Reap => match store.expired_leases(now) {
            Ok(mut expired) => {
                expired.sort();
                let reclaimed: Vec<Value> = expired
                    .iter()
                    .map(|(m, t)| {
                        o::answer(&store.reclaim_if_lease_expired(m, t, now), |t| {
                            json!(t.as_ref().map(o::task))
                        })
                    })
                    .collect();
                json!({ "expired": expired, "reclaimed": reclaimed })
            }
            Err(err) => o::error(&err),
        },
        Op::Push(spec) => {
            let (ev, hint, machine) = o::event(spec, now);
            let result = store.queue_pending_event(mesh, &ev, &hint, machine, now);
            if let Ok(crate::QueueOutcome::Queued { id, event }) = &result {
                side.pushed.push((id.clone(), event.clone()));
            }
            o::answer(&result, o::queued)
        }
        Op::Repush(k) => match side.pushed.get(k % side.pushed.len().max(1)) {
            Some((_, event)) => {
                let copy = o::replayed(event, *k, now);
                o::answer(&store.queue_pending_event(mesh, &copy, &EmitHint::default(), None, now), o::queued)
            }
            None => Value::Null,
        },
        Op::Drain(spec) => {
            o::answer(&store.drain_pending_events(mesh, &o::drain_request(spec), now), o::drained)
        }
        Op::Peek(spec) => o::answer(&store.peek_pending_events(mesh, &o::drain_request(spec)), |events| {
            json!(events.iter().map(o::inbox_event).collect::<Vec<_>>())
        }),
        Op::Ack(k) => match side.pushed.get(k % side.pushed.len().max(1)) {
            Some((id, _)) => {
                o::answer(&store.ack_pending_events(mesh, std::slice::from_ref(id), now), |n| json!(n))
            }
            None => Value::Null,
        },
        Op::Touch(c) => o::answer(&store.touch_coordinator(mesh, &o::coordinator(*c), now), |_| json!(null)),
        Op::End(c) => o::answer(&store.end_coordinator(mesh, &o::coordinator(*c), now), |b| json!(b)),
        Op::Mission(m, s) => {
            o::answer(&store.upsert_mission(mesh, &o::mission(*m, *s), now), |u| json!(format!("{:?}", u)))
        }
        Op::Progress(m) => {
            o::answer(&store.mission_progress(mesh, o::MISSIONS[*m]), |p| json!(format!("{p:?}")))
        }
        Op::Page { by_seq, limit } => page(|query| store.ledger_slice(mesh, query), *by_seq, *limit),
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
        let answer = on_model(&mut model, &mut side, op, task, current, now);
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
