//! Content fingerprints of pending events: the inbox's v1 dedup key.
//!
//! A second event with the fingerprint of one still queued is a duplicate. The
//! strings are built exactly as the original built them (same parts, same order,
//! `::` separators), so an inbox imported from the original keeps deduplicating
//! against the rows it already holds. The event-id dedup of v2 events is separate
//! and lives in [`super::routing`].

use serde_json::{Map, Value};

use super::envelope::PendingEvent;
use super::js::{js_string, read_non_empty, read_record};
use super::metadata::{is_weak_completion_metadata, refine_job_id, resolve_event_session_id};
use super::names::{is_refine_terminal_event, is_terminal_completion_event, is_worktree_bootstrap_event};

/// The fingerprint of a pending event.
///
/// - `worktree_bootstrap_*`: `mesh::event::nodeId`. Bootstrap events are about a
///   node and carry no session, task or timestamp.
/// - `agent:generating_completed` / `agent:stopped` with a task id (metadata
///   `taskId`, else `payload.taskId`): `mesh::event::taskId::weak|genuine`. Two
///   producers report one completion with different timestamps; only the task id
///   is stable across them. The weakness mark keeps a tentative completion from
///   swallowing the genuine one that follows.
/// - metadata with a `consensusGroupId` (or `payload.consensusGroupId`):
///   `mesh::event::taskId::groupId::group`, so intentional fan-out replicas are
///   never collapsed.
/// - otherwise `mesh::event::nodeId::sessionId::providerSessionId::taskId::jobId::timestamp`,
///   with the timestamp stringified as JavaScript would.
///
/// The mesh id and node id are used as stored (not trimmed); metadata strings are
/// trimmed.
pub fn pending_event_fingerprint(event: &PendingEvent) -> String {
    let metadata = &event.metadata_event;
    let node_id = event.node_id.as_deref().unwrap_or("");
    if is_worktree_bootstrap_event(&event.event) {
        return [event.mesh_id.as_str(), &event.event, node_id].join("::");
    }
    let task_id = task_id(metadata);
    if let Some(task_id) = task_id.filter(|_| is_terminal_completion_event(&event.event)) {
        let strength = if is_weak_completion_metadata(metadata) { "weak" } else { "genuine" };
        return [event.mesh_id.as_str(), &event.event, task_id, strength].join("::");
    }
    let consensus_group = read_non_empty(metadata.get("consensusGroupId"))
        .or_else(|| payload(metadata).and_then(|p| read_non_empty(p.get("consensusGroupId"))));
    if let Some(group) = consensus_group {
        return [event.mesh_id.as_str(), &event.event, task_id.unwrap_or(""), group, "group"].join("::");
    }
    let timestamp = match metadata.get("timestamp") {
        None | Some(Value::Null) => String::new(),
        Some(value) => js_string(value),
    };
    [
        event.mesh_id.as_str(),
        &event.event,
        node_id,
        resolve_event_session_id(metadata).unwrap_or(""),
        read_non_empty(metadata.get("providerSessionId")).unwrap_or(""),
        task_id.unwrap_or(""),
        refine_job_id(metadata).unwrap_or(""),
        &timestamp,
    ]
    .join("::")
}

/// The duplicate key of a refine outcome: `mesh::event::jobId` for
/// `refine:completed` / `refine:failed` with a job id, else `None`. A second
/// outcome for a job already queued is suppressed.
pub fn refine_terminal_fingerprint(event: &PendingEvent) -> Option<String> {
    if !is_refine_terminal_event(&event.event) {
        return None;
    }
    let job_id = refine_job_id(&event.metadata_event)?;
    Some(format!("{}::{}::{job_id}", event.mesh_id, event.event))
}

/// The key of the drain-independent dedup record for a terminal completion:
/// `pending::<fingerprint>`, for task-keyed completions only. A task completes
/// once, so a second arrival of the same completion is a duplicate producer even
/// after the first was drained; any other event may legitimately recur.
pub fn durable_completion_dedup_key(event: &PendingEvent) -> Option<String> {
    if !is_terminal_completion_event(&event.event) || task_id(&event.metadata_event).is_none() {
        return None;
    }
    Some(format!("pending::{}", pending_event_fingerprint(event)))
}

fn payload(metadata: &Map<String, Value>) -> Option<&Map<String, Value>> {
    read_record(metadata.get("payload"))
}

fn task_id(metadata: &Map<String, Value>) -> Option<&str> {
    read_non_empty(metadata.get("taskId"))
        .or_else(|| payload(metadata).and_then(|p| read_non_empty(p.get("taskId"))))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::names::*;
    use super::*;
    use crate::Timestamp;

    fn event(name: &str, node_id: Option<&str>, metadata: Value) -> PendingEvent {
        let mut event = PendingEvent::new(
            name,
            "mesh1",
            "n",
            metadata.as_object().unwrap().clone(),
            Timestamp::from_millis(0),
        );
        event.node_id = node_id.map(str::to_owned);
        event
    }

    #[test]
    fn bootstrap_events_key_on_the_node() {
        let e = event(WORKTREE_BOOTSTRAP_COMPLETE, Some("wt-1"), json!({"taskId": "t", "timestamp": 5}));
        assert_eq!(pending_event_fingerprint(&e), "mesh1::worktree_bootstrap_complete::wt-1");
        let e = event(WORKTREE_BOOTSTRAP_FAILED, None, json!({}));
        assert_eq!(pending_event_fingerprint(&e), "mesh1::worktree_bootstrap_failed::");
    }

    #[test]
    fn terminal_completions_key_on_the_task() {
        let genuine =
            event(AGENT_GENERATING_COMPLETED, Some("n1"), json!({"taskId": " t1 ", "timestamp": 1}));
        let later = event(AGENT_GENERATING_COMPLETED, Some("n2"), json!({"taskId": "t1", "timestamp": 2}));
        assert_eq!(pending_event_fingerprint(&genuine), "mesh1::agent:generating_completed::t1::genuine");
        assert_eq!(pending_event_fingerprint(&genuine), pending_event_fingerprint(&later));
        let weak = event(AGENT_GENERATING_COMPLETED, None, json!({"taskId": "t1", "evidenceLevel": "weak"}));
        assert_eq!(pending_event_fingerprint(&weak), "mesh1::agent:generating_completed::t1::weak");
        let stopped = event(AGENT_STOPPED, None, json!({"payload": {"taskId": "t2"}}));
        assert_eq!(pending_event_fingerprint(&stopped), "mesh1::agent:stopped::t2::genuine");
    }

    #[test]
    fn a_completion_without_a_task_uses_the_generic_key() {
        let e = event(
            AGENT_STOPPED,
            Some("n1"),
            json!({"targetSessionId": "s1", "timestamp": 1_700_000_000_000_i64}),
        );
        assert_eq!(pending_event_fingerprint(&e), "mesh1::agent:stopped::n1::s1::::::::1700000000000");
    }

    #[test]
    fn consensus_groups_are_never_collapsed() {
        let e =
            event(AGENT_READY, Some("n1"), json!({"consensusGroupId": "g1", "taskId": "t1", "timestamp": 9}));
        assert_eq!(pending_event_fingerprint(&e), "mesh1::agent:ready::t1::g1::group");
        let e = event(REFINE_ACCEPTED, None, json!({"payload": {"consensusGroupId": "g2"}}));
        assert_eq!(pending_event_fingerprint(&e), "mesh1::refine:accepted::::g2::group");
        // A terminal completion with a task id is keyed by task before groups count.
        let e = event(AGENT_STOPPED, None, json!({"consensusGroupId": "g1", "taskId": "t1"}));
        assert_eq!(pending_event_fingerprint(&e), "mesh1::agent:stopped::t1::genuine");
    }

    #[test]
    fn generic_key_parts() {
        let e = event(
            REFINE_ACCEPTED,
            Some("n1"),
            json!({
                "sessionId": "s1",
                "providerSessionId": " p1 ",
                "taskId": "t1",
                "result": {"refineJob": {"jobId": "j1"}},
                "timestamp": "2025-01-01T00:00:00.000Z",
            }),
        );
        assert_eq!(
            pending_event_fingerprint(&e),
            "mesh1::refine:accepted::n1::s1::p1::t1::j1::2025-01-01T00:00:00.000Z"
        );
        let e = event(
            MESH_DISPATCH_BLOCKED,
            None,
            json!({"taskId": "t1", "reason": "pin_expired", "timestamp": null}),
        );
        assert_eq!(pending_event_fingerprint(&e), "mesh1::mesh:dispatch_blocked::::::::t1::::");
        let e = event(MONITOR_NO_PROGRESS, None, json!({"timestamp": 1.5}));
        assert_eq!(pending_event_fingerprint(&e), "mesh1::monitor:no_progress::::::::::::1.5");
    }

    #[test]
    fn refine_outcomes_key_on_the_job() {
        let e = event(REFINE_COMPLETED, None, json!({"jobId": "j1"}));
        assert_eq!(refine_terminal_fingerprint(&e).as_deref(), Some("mesh1::refine:completed::j1"));
        assert_eq!(refine_terminal_fingerprint(&event(REFINE_FAILED, None, json!({}))), None);
        assert_eq!(refine_terminal_fingerprint(&event(REFINE_ACCEPTED, None, json!({"jobId": "j1"}))), None);
    }

    #[test]
    fn durable_keys_only_for_task_keyed_completions() {
        let e = event(AGENT_GENERATING_COMPLETED, None, json!({"taskId": "t1"}));
        assert_eq!(
            durable_completion_dedup_key(&e).as_deref(),
            Some("pending::mesh1::agent:generating_completed::t1::genuine")
        );
        assert_eq!(durable_completion_dedup_key(&event(AGENT_STOPPED, None, json!({}))), None);
        assert_eq!(
            durable_completion_dedup_key(&event(REFINE_COMPLETED, None, json!({"taskId": "t1"}))),
            None
        );
    }
}
