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
use super::ops::{self as o, Op, Renamer};
use crate::{Store, StoreResult};
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

/// What one side knows between steps: the ids it minted for the events pushed
/// by hand, in push order.
#[derive(Default)]
struct Side {
    pushed: Vec<String>,
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
        let current = match op {
            Op::Complete(r) | Op::CompleteAndClaim(r, _) => current_epoch(&model, r.task, r.session),
            Op::Heartbeat { task, session, .. } => current_epoch(&model, Some(*task), *session),
            _ => None,
        };
        let want = on_model(&mut model, &mut ms, op, current, now);
        let got = on_store(subject.store(), &mut ss, op, current, now);
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

/// The epoch a report or heartbeat on `task` (or, without one, on the task the
/// session holds) resolves against: the model's, which both sides must share.
fn current_epoch(model: &Model, task: Option<usize>, session: usize) -> Option<u64> {
    let mesh = o::MESHES[0];
    match task {
        Some(t) => model.find_task(mesh, o::TASKS[t]).map(|t| t.epoch()),
        None => model
            .queue_entries(mesh)
            .into_iter()
            .find(|t| {
                t.status == TaskStatus::Assigned
                    && t.assigned_session_id.as_deref() == Some(o::SESSIONS[session])
            })
            .map(|t| t.epoch()),
    }
}

fn on_model(model: &mut Model, side: &mut Side, op: &Op, current: Option<u64>, now: Timestamp) -> Value {
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
        Op::Complete(spec) => o::answer(&model.complete_task(mesh, &o::report(spec, current), now), o::task),
        Op::CompleteAndClaim(spec, claim) => {
            let report = o::report(spec, current);
            let result =
                model.complete_and_claim(mesh, &report, &o::claimant(claim), &o::claim_options(claim), now);
            o::answer(&result, |(t, c)| json!([o::task(t), o::claimed(c)]))
        }
        Op::Heartbeat { task, session, epoch, lease_s } => {
            let presented = o::epoch(*epoch, current).unwrap_or(0);
            let result =
                model.heartbeat(mesh, o::TASKS[*task], o::SESSIONS[*session], presented, lease_s * 1000, now);
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
            if let Ok(crate::QueueOutcome::Queued { id, .. }) = &result {
                side.pushed.push(id.clone());
            }
            o::answer(&result, o::queued)
        }
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
            Some(id) => json!(model.ack_pending_events(mesh, std::slice::from_ref(id))),
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

fn on_store<S: Store>(store: &S, side: &mut Side, op: &Op, current: Option<u64>, now: Timestamp) -> Value {
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
        Op::Complete(spec) => o::answer(&store.complete_task(mesh, &o::report(spec, current), now), o::task),
        Op::CompleteAndClaim(spec, claim) => {
            let report = o::report(spec, current);
            let result =
                store.complete_and_claim(mesh, &report, &o::claimant(claim), &o::claim_options(claim), now);
            o::answer(&result, |(t, c)| json!([o::task(t), o::claimed(c)]))
        }
        Op::Heartbeat { task, session, epoch, lease_s } => {
            let presented = o::epoch(*epoch, current).unwrap_or(0);
            let result =
                store.heartbeat(mesh, o::TASKS[*task], o::SESSIONS[*session], presented, lease_s * 1000, now);
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
            if let Ok(crate::QueueOutcome::Queued { id, .. }) = &result {
                side.pushed.push(id.clone());
            }
            o::answer(&result, o::queued)
        }
        Op::Drain(spec) => {
            o::answer(&store.drain_pending_events(mesh, &o::drain_request(spec), now), o::drained)
        }
        Op::Peek(spec) => o::answer(&store.peek_pending_events(mesh, &o::drain_request(spec)), |events| {
            json!(events.iter().map(o::inbox_event).collect::<Vec<_>>())
        }),
        Op::Ack(k) => match side.pushed.get(k % side.pushed.len().max(1)) {
            Some(id) => {
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
