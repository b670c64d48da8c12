//! Refine reconciliation: what a drain hands out around asynchronous refine jobs.
//!
//! A `refine:accepted` event says "job accepted, result to follow". When a drain
//! carries an accepted job whose terminal event (`refine:completed` /
//! `refine:failed`) is missing, the terminal is rebuilt from the ledger's record
//! of the job's outcome; and an accepted event whose terminal is present (queued
//! or rebuilt) is superseded and left out, so the coordinator does not see stale
//! noise beside the outcome.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::message::{MessageOptions, build_coordinator_message};
use super::metadata::read_refine_job_id;
use super::names::{REFINE_ACCEPTED, REFINE_COMPLETED, REFINE_FAILED, is_refine_terminal_event};
use crate::{LedgerEntry, Timestamp};

/// The ledger source of a refine job's outcome entry.
pub const REFINE_SOURCE: &str = "refine_mesh_node_async_job";

/// The refine job ids of the accepted events in `events` that have no terminal
/// event among them: the jobs whose outcome must be looked up in the ledger.
pub fn jobs_missing_a_terminal(events: &[Value]) -> Vec<String> {
    let terminal: HashSet<&str> = events
        .iter()
        .filter(|e| e.get("event").and_then(Value::as_str).is_some_and(is_refine_terminal_event))
        .filter_map(read_refine_job_id)
        .collect();
    let mut missing: Vec<String> = Vec::new();
    for e in events.iter().filter(|e| e.get("event").and_then(Value::as_str) == Some(REFINE_ACCEPTED)) {
        if let Some(job) = read_refine_job_id(e)
            && !terminal.contains(job)
            && !missing.iter().any(|m| m == job)
        {
            missing.push(job.to_owned());
        }
    }
    missing
}

/// Whether a ledger entry records the outcome of refine job `job_id`
/// (`task_completed` / `task_failed` from the refine source).
pub fn is_refine_outcome(entry: &LedgerEntry, job_id: &str) -> bool {
    (entry.kind == "task_completed" || entry.kind == "task_failed")
        && entry.payload.get("source").and_then(Value::as_str) == Some(REFINE_SOURCE)
        && entry.payload.pointer("/refineJob/jobId").and_then(Value::as_str).map(str::trim) == Some(job_id)
}

/// The terminal event the ledger entry `entry` stands for, as the original rebuilt it.
pub fn terminal_from_ledger(mesh_id: &str, entry: &LedgerEntry, now: Timestamp) -> Value {
    let name = if entry.kind == "task_completed" { REFINE_COMPLETED } else { REFINE_FAILED };
    let job = entry.payload.get("refineJob").and_then(Value::as_object);
    let read = |key: &str| -> Option<String> {
        job.and_then(|j| j.get(key))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let node_id = read("nodeId").or_else(|| entry.node_id.clone());
    let mut metadata = Map::new();
    let mut put = |key: &str, value: Option<String>| {
        if let Some(v) = value {
            metadata.insert(key.to_owned(), json!(v));
        }
    };
    put("source", Some(REFINE_SOURCE.to_owned()));
    put("jobId", read("jobId"));
    put("interactionId", read("interactionId"));
    put("meshId", Some(mesh_id.to_owned()));
    put("nodeId", node_id.clone());
    put("targetDaemonId", read("targetDaemonId"));
    put("workspace", read("workspace"));
    put("status", Some(if name == REFINE_COMPLETED { "completed" } else { "failed" }.to_owned()));
    put("startedAt", read("startedAt"));
    put("completedAt", read("completedAt").or_else(|| Some(entry.timestamp.clone())));
    put(
        "retryOfJobId",
        read("retryOfJobId")
            .or_else(|| entry.payload.get("retryOfJobId").and_then(Value::as_str).map(str::to_owned)),
    );
    if let Some(result) = entry.payload.get("result").filter(|r| r.is_object()) {
        metadata.insert("result".to_owned(), result.clone());
    }
    let node_label = node_id.clone().unwrap_or_else(|| "refine job".to_owned());
    let message = build_coordinator_message(name, &node_label, &metadata, &MessageOptions::default());
    json!({
        "event": name,
        "meshId": mesh_id,
        "nodeLabel": node_label,
        "nodeId": node_id,
        "workspace": read("workspace"),
        "metadataEvent": metadata,
        "coordinatorMessage": message,
        "queuedAt": now.millis(),
    })
}

/// Leaves out of `items` the accepted events superseded by a terminal event of the
/// same job among `items` or `backfilled`; `event_of` reads an item's event.
pub fn drop_superseded<T>(items: Vec<T>, event_of: impl Fn(&T) -> &Value, backfilled: &[Value]) -> Vec<T> {
    let terminal: HashSet<String> = items
        .iter()
        .map(&event_of)
        .chain(backfilled.iter())
        .filter(|e| e.get("event").and_then(Value::as_str).is_some_and(is_refine_terminal_event))
        .filter_map(|e| read_refine_job_id(e).map(str::to_owned))
        .collect();
    items
        .into_iter()
        .filter(|item| {
            let e = event_of(item);
            !(e.get("event").and_then(Value::as_str) == Some(REFINE_ACCEPTED)
                && read_refine_job_id(e).is_some_and(|job| terminal.contains(job)))
        })
        .collect()
}

/// The name of a terminal rebuilt from the ledger and the id it is handed out
/// under: it is not a stored row, so its id (`ledger:<name>:<job>`) names where
/// it came from.
pub fn rebuilt_name_and_id(terminal: &Value) -> (String, String) {
    let job = read_refine_job_id(terminal).unwrap_or_default();
    let name = terminal.get("event").and_then(Value::as_str).unwrap_or_default().to_owned();
    let id = format!("ledger:{name}:{job}");
    (name, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, job: &str) -> LedgerEntry {
        LedgerEntry {
            id: format!("e-{job}"),
            mesh_id: "m".into(),
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            kind: kind.into(),
            node_id: Some("n1".into()),
            session_id: None,
            provider_type: None,
            payload: json!({"source": REFINE_SOURCE, "refineJob": {"jobId": job, "nodeId": "n1"}, "result": {"merged": true}}),
        }
    }

    #[test]
    fn an_accepted_job_without_its_terminal_is_backfilled_and_superseded() {
        let accepted = json!({"event": "refine:accepted", "meshId": "m", "metadataEvent": {"jobId": "j1"}});
        let other = json!({"event": "agent:ready", "meshId": "m", "metadataEvent": {}});
        let events = vec![accepted.clone(), other.clone()];
        assert_eq!(jobs_missing_a_terminal(&events), ["j1"]);
        let e = entry("task_completed", "j1");
        assert!(is_refine_outcome(&e, "j1"));
        assert!(!is_refine_outcome(&e, "j2"));
        let terminal = terminal_from_ledger("m", &e, Timestamp::from_millis(5));
        assert_eq!(terminal["event"], "refine:completed");
        assert_eq!(terminal["metadataEvent"]["jobId"], "j1");
        let out = drop_superseded(events, |e| e, std::slice::from_ref(&terminal));
        let names: Vec<&str> = out.iter().map(|e| e["event"].as_str().unwrap()).collect();
        assert_eq!(names, ["agent:ready"], "the accepted event is superseded by the rebuilt terminal");
        assert_eq!(
            rebuilt_name_and_id(&terminal),
            ("refine:completed".to_owned(), "ledger:refine:completed:j1".to_owned())
        );
    }

    #[test]
    fn a_queued_terminal_needs_no_backfill() {
        let events = vec![
            json!({"event": "refine:accepted", "metadataEvent": {"jobId": "j1"}}),
            json!({"event": "refine:failed", "metadataEvent": {"jobId": "j1"}}),
        ];
        assert!(jobs_missing_a_terminal(&events).is_empty());
        assert_eq!(drop_superseded(events, |e| e, &[]).len(), 1);
    }
}
