//! The events agentmesh itself queues for a coordinator, built in one place: the
//! completion (`agent:generating_completed`) or stop (`agent:stopped`) of a task
//! for the coordinator that enqueued it, and any event given a node and a name
//! (`events push`), each with the node label and the coordinator-facing text.

use serde_json::{Map, Value};

use super::message::{MessageOptions, build_coordinator_message};
use super::names;
use super::{EmitHint, PendingEvent};
use crate::{Task, TaskStatus, Timestamp};

/// How the coordinator's texts name a node: `Node '<id>'`, or `Remote agent`
/// when the node is unknown (absent or blank).
pub fn node_label(node_id: Option<&str>) -> String {
    match node_id.filter(|n| !n.is_empty()) {
        Some(node) => format!("Node '{node}'"),
        None => "Remote agent".to_owned(),
    }
}

/// An event about `node_id` with its node label and the text the core writes for
/// its name (none for names that carry no text).
pub fn texted_event(
    name: impl Into<String>,
    mesh_id: impl Into<String>,
    node_id: Option<String>,
    metadata: Map<String, Value>,
    now: Timestamp,
) -> PendingEvent {
    let name = name.into();
    let label = node_label(node_id.as_deref());
    let text = build_coordinator_message(&name, &label, &metadata, &MessageOptions::default());
    let mut event = PendingEvent::new(name, mesh_id, label, metadata, now);
    event.node_id = node_id;
    event.coordinator_message = Some(text).filter(|t| !t.is_empty());
    event
}

/// An event to queue, with the hint its envelope is stamped from.
#[derive(Debug, Clone, PartialEq)]
pub struct EventToQueue {
    /// The event.
    pub event: PendingEvent,
    /// How to stamp it.
    pub hint: EmitHint,
}

/// The completion or failure event of a finished task, for the coordinator that
/// enqueued it: its worker, summary and failure reason in the metadata, the
/// epoch as `dispatchNonce`, addressed to the task's coordinator daemon, session
/// and run. A task enqueued without a coordinator daemon gets an unaddressed
/// event, which any coordinator of the mesh drains. `None` for a task that is
/// neither completed nor failed.
pub fn completion_event(task: &Task, now: Timestamp) -> Option<EventToQueue> {
    let name = match task.status {
        TaskStatus::Completed => names::AGENT_GENERATING_COMPLETED,
        TaskStatus::Failed => names::AGENT_STOPPED,
        _ => return None,
    };
    let mut metadata = Map::new();
    metadata.insert("taskId".into(), Value::from(task.id.as_str()));
    for (key, value) in [
        ("targetSessionId", &task.assigned_session_id),
        ("providerType", &task.assigned_provider_type),
        ("finalSummary", &task.final_summary),
        ("reason", &task.failure_reason),
        ("meshCoordinatorSessionId", &task.source_coordinator_session_id),
    ] {
        if let Some(v) = value {
            metadata.insert(key.into(), Value::from(v.as_str()));
        }
    }
    metadata.insert("dispatchNonce".into(), Value::from(task.epoch()));
    let mut event = texted_event(name, task.mesh_id.clone(), task.assigned_node_id.clone(), metadata, now);
    event.target_coordinator_daemon_id = task.source_coordinator_daemon_id.clone();
    event.target_coordinator_session_id = task.source_coordinator_session_id.clone();
    let hint = EmitHint { coordinator_run_id: task.source_coordinator_run_id.clone(), ..EmitHint::default() };
    Some(EventToQueue { event, hint })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn finished(status: TaskStatus) -> Task {
        let mut t = Task::new("t1", "m", "do it", "2026-01-01T00:00:00.000Z");
        t.status = status;
        t.assigned_node_id = Some("laptop".into());
        t.assigned_session_id = Some("s1".into());
        t.assigned_provider_type = Some("claude".into());
        t.dispatch_nonce = Some(3);
        t.source_coordinator_daemon_id = Some("daemon_mach_A".into());
        t.source_coordinator_session_id = Some("coord-s".into());
        t.source_coordinator_run_id = Some("run-1".into());
        t
    }

    #[test]
    fn node_labels_name_the_node_or_a_remote_agent() {
        assert_eq!(node_label(Some("laptop")), "Node 'laptop'");
        assert_eq!(node_label(Some("")), "Remote agent");
        assert_eq!(node_label(None), "Remote agent");
    }

    #[test]
    fn a_completed_task_makes_a_completion_for_its_coordinator() {
        let mut task = finished(TaskStatus::Completed);
        task.final_summary = Some("done".into());
        let now = Timestamp::from_millis(1_000);
        let queued = completion_event(&task, now).unwrap();
        let ev = &queued.event;
        assert_eq!(ev.event, names::AGENT_GENERATING_COMPLETED);
        assert_eq!(ev.mesh_id, "m");
        assert_eq!(ev.node_label, "Node 'laptop'");
        assert_eq!(ev.node_id.as_deref(), Some("laptop"));
        assert_eq!(ev.queued_at, now);
        assert_eq!(
            Value::Object(ev.metadata_event.clone()),
            json!({"taskId": "t1", "targetSessionId": "s1", "providerType": "claude",
                   "finalSummary": "done", "meshCoordinatorSessionId": "coord-s", "dispatchNonce": 3})
        );
        assert!(ev.coordinator_message.as_deref().is_some_and(|m| m.contains("done")));
        assert_eq!(ev.target_coordinator_daemon_id.as_deref(), Some("daemon_mach_A"));
        assert_eq!(ev.target_coordinator_session_id.as_deref(), Some("coord-s"));
        assert_eq!(queued.hint.coordinator_run_id.as_deref(), Some("run-1"));
        assert_eq!(queued.hint.scope, None);
    }

    #[test]
    fn a_failed_task_makes_a_stop_with_its_reason() {
        let mut task = finished(TaskStatus::Failed);
        task.failure_reason = Some("broke".into());
        task.assigned_node_id = None;
        let ev = completion_event(&task, Timestamp::from_millis(5)).unwrap().event;
        assert_eq!(ev.event, names::AGENT_STOPPED);
        assert_eq!(ev.node_label, "Remote agent");
        assert_eq!(ev.metadata_event.get("reason"), Some(&json!("broke")));
        assert!(ev.metadata_event.get("finalSummary").is_none());
    }

    #[test]
    fn unfinished_tasks_make_no_completion() {
        for status in [TaskStatus::Pending, TaskStatus::Assigned, TaskStatus::Cancelled] {
            assert!(completion_event(&finished(status), Timestamp::from_millis(0)).is_none(), "{status:?}");
        }
    }

    #[test]
    fn a_texted_event_carries_the_text_for_its_name_only() {
        let meta = Map::from_iter([("taskId".to_owned(), json!("t1"))]);
        let ev = texted_event("custom:thing", "m", None, meta, Timestamp::from_millis(0));
        assert_eq!(ev.node_label, "Remote agent");
        assert_eq!(ev.coordinator_message, None);
    }
}
