//! What a drain (and a peek) leaves out of what it took off the queue: a
//! `refine:accepted` superseded by its job's terminal event, and alerts about
//! tasks that are already finished.
//!
//! Events are labelled as in [`super::inbox`] (the label is the metadata task id).

use agentmesh_core::events::PendingEvent;
use agentmesh_core::events::names::{
    AGENT_WAITING_APPROVAL, MESH_DISPATCH_BLOCKED, MONITOR_NO_PROGRESS, REFINE_ACCEPTED, REFINE_COMPLETED,
};
use serde_json::json;

use super::support::*;
use crate::{InboxEvent, Store};

/// A refine event of job `job` named `name`, queued at `secs`.
fn refine_event(name: &str, job: &str, secs: i64) -> PendingEvent {
    let mut event = inbox_event(MESH, name, job, at(secs));
    event.metadata_event.insert("jobId".to_owned(), json!(job));
    event
}

/// `name:label` of each event handed out, in order.
fn named(events: &[InboxEvent]) -> Vec<String> {
    events.iter().zip(labels(events)).map(|(e, label)| format!("{}:{label}", e.name)).collect()
}

/// When a job's `refine:accepted` and its terminal `refine:completed` are both queued, a peek and a drain hand out only the terminal event; the superseded acceptance leaves the queue with the drain.
pub fn inbox_a_superseded_refine_accepted_is_not_delivered(store: &dyn Store) {
    let me = me();
    queue_event(store, MESH, targeted_at(refine_event(REFINE_ACCEPTED, "job-1", 1), &me), at(1));
    queue_event(store, MESH, targeted_at(refine_event(REFINE_COMPLETED, "job-1", 2), &me), at(2));
    let expected = ["refine:completed:job-1"];
    assert_eq!(
        named(&peek(store, MESH, &drain_request(&me))),
        expected,
        "expected the peek without the acceptance"
    );
    let drained = drain(store, MESH, &drain_request(&me), at(3));
    assert_eq!(named(&drained.events), expected, "expected the drain to hand out only the terminal event");
    assert_pending_count(store, MESH, 0, "after the drain took both");
    assert!(drain(store, MESH, &drain_request(&me), at(4)).events.is_empty(), "expected nothing left");

    // An acceptance whose terminal is not queued (and not in the ledger) is delivered.
    queue_event(store, MESH, targeted_at(refine_event(REFINE_ACCEPTED, "job-2", 5), &me), at(5));
    let drained = drain(store, MESH, &drain_request(&me), at(6));
    assert_eq!(named(&drained.events), ["refine:accepted:job-2"], "expected a lone acceptance delivered");
}

/// A `mesh:dispatch_blocked` or `monitor:no_progress` about a task that is already completed, failed or cancelled is left out of a peek and dropped by a drain (it leaves the queue); the same alerts about a pending task, an unknown task or no task are delivered, and so are other events about a finished task.
pub fn inbox_alerts_about_finished_tasks_are_dropped(store: &dyn Store) {
    let me = me();
    enqueue(store, MESH, new_task("done"), at(1));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "done");
    complete(store, MESH, &task, at(3));
    enqueue(store, MESH, new_task("broke"), at(4));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(5), "broke");
    fail(store, MESH, &task, "it broke", at(6));
    enqueue(store, MESH, new_task("gone"), at(7));
    ok(store.task_command(MESH, "gone", TaskCommand::Cancel { reason: None }, at(8)), "cancel of gone");
    enqueue(store, MESH, new_task("waiting"), at(9));
    // The completion and the failure told their coordinator; take those first.
    drain(store, MESH, &drain_request(&me), at(10));
    assert_pending_count(store, MESH, 0, "before the alerts");

    let alerts = [
        (MESH_DISPATCH_BLOCKED, "gone"),
        (MONITOR_NO_PROGRESS, "done"),
        (MONITOR_NO_PROGRESS, "broke"),
        (MESH_DISPATCH_BLOCKED, "waiting"),
        (MESH_DISPATCH_BLOCKED, "ghost"),
        (AGENT_WAITING_APPROVAL, "done"),
    ];
    for (i, (name, task)) in alerts.into_iter().enumerate() {
        let secs = 20 + i as i64;
        queue_event(store, MESH, targeted_at(inbox_event(MESH, name, task, at(secs)), &me), at(secs));
    }
    let mut untasked = inbox_event(MESH, MONITOR_NO_PROGRESS, "x", at(30));
    untasked.metadata_event.remove("taskId");
    queue_event(store, MESH, targeted_at(untasked, &me), at(30));

    let expected = [
        "mesh:dispatch_blocked:waiting",
        "mesh:dispatch_blocked:ghost",
        "agent:waiting_approval:done",
        "monitor:no_progress:<no taskId>",
    ];
    assert_eq!(
        named(&peek(store, MESH, &drain_request(&me))),
        expected,
        "expected the peek without stale alerts"
    );
    let drained = drain(store, MESH, &drain_request(&me), at(31));
    assert_eq!(named(&drained.events), expected, "expected the drain without stale alerts");
    assert_pending_count(store, MESH, 0, "after the drain (the stale alerts are dropped, not kept)");
}
