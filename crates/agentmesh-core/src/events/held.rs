//! Held events: inbox events taken out of delivery and kept in the ledger until
//! someone puts them back.
//!
//! An event is held in two ways: an enforce-mode drain quarantines an unversioned
//! or invalid v2 event, and the retention sweep moves an event nobody drained for
//! 30 days out of the inbox. Either way an `event_held` ledger entry records it,
//! recoverable, with the whole event under `heldEvent`. Putting it back writes an
//! `event_held_requeued` entry naming the held entry (`heldEntryId`).
//!
//! This module decides which held entries are still held and which of them a
//! filter selects; the store reads the entries and requeues.

use serde_json::{Value, json};

use super::metadata::read_completion_summary;
use super::routing::QuarantineReason;
use crate::daemon_id::daemon_ids_equivalent;
use crate::{InvalidInput, LedgerEntry, Timestamp};

/// The ledger kind of a held event.
pub const HELD_KIND: &str = "event_held";
/// The ledger kind that records a held event put back in the inbox.
pub const REQUEUED_KIND: &str = "event_held_requeued";

/// The reasons an event is held, as the `event_held` entries name them: the two
/// enforce-mode quarantines, the retention sweep, and the original's older trim
/// of an overlong inbox.
pub const HELD_REASONS: [&str; 4] = [
    "v2_enforce_unversioned_quarantined",
    "v2_enforce_validation_failed_quarantined",
    "pending_retention_expired",
    "pending_trim_dropped",
];

/// The warning the retention sweep logs when it moved `count` undelivered events
/// of a mesh to the ledger: what happened, where they are, and the commands that
/// list them and put them back.
pub fn retention_warning(mesh_id: &str, count: u64) -> String {
    let reason = "pending_retention_expired";
    format!(
        "{count} event(s) of mesh {mesh_id} were never delivered: no coordinator drained them \
         within the inbox's retention. They are held in the ledger ({HELD_KIND}, reason {reason}), \
         not lost. List them with \
         `agentmesh --mesh {mesh_id} events held --reason {reason}` and put them back with \
         `agentmesh --mesh {mesh_id} events requeue-held --reason {reason}`"
    )
}

/// Which held events an operator means. Every part that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldFilter {
    /// Held for this reason (one of [`HELD_REASONS`]).
    pub reason: Option<String>,
    /// About this node (any of its id forms).
    pub node_id: Option<String>,
    /// About this task.
    pub task_id: Option<String>,
    /// Of this event name.
    pub event: Option<String>,
    /// Held at or before this instant (an age: "held for at least ...").
    pub held_before: Option<Timestamp>,
}

impl HeldFilter {
    /// Checks the parts a caller gave: a reason must be one of [`HELD_REASONS`].
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if let Some(reason) = &self.reason
            && !HELD_REASONS.contains(&reason.as_str())
        {
            return Err(InvalidInput::new(
                "reason",
                format!("unknown hold reason {reason:?} (expected one of {})", HELD_REASONS.join(", ")),
            ));
        }
        Ok(())
    }

    /// Whether no part is set (the filter selects every held event).
    pub fn is_empty(&self) -> bool {
        *self == HeldFilter::default()
    }

    /// Whether the `event_held` entry `entry` is selected.
    pub fn matches(&self, entry: &LedgerEntry) -> bool {
        let text = |key: &str| entry.payload.get(key).and_then(Value::as_str).map(str::trim);
        if self.reason.as_deref().is_some_and(|want| text("reason") != Some(want)) {
            return false;
        }
        if self.event.as_deref().is_some_and(|want| text("event") != Some(want.trim())) {
            return false;
        }
        if self.task_id.as_deref().is_some_and(|want| held_task_id(entry) != Some(want.trim())) {
            return false;
        }
        if let Some(want) = self.node_id.as_deref() {
            let node = entry.node_id.as_deref().or_else(|| {
                entry.payload.get("heldEvent").and_then(|e| e.get("nodeId")).and_then(Value::as_str)
            });
            if !node.is_some_and(|node| daemon_ids_equivalent(node, want)) {
                return false;
            }
        }
        if let Some(cutoff) = self.held_before {
            match Timestamp::parse_iso(&entry.timestamp) {
                Some(held_at) if held_at <= cutoff => {}
                _ => return false,
            }
        }
        true
    }
}

/// The task a held entry is about: its event's `metadataEvent.taskId`, where
/// the original's quarantine entries carry it, else the entry's own `taskId`.
pub fn held_task_id(entry: &LedgerEntry) -> Option<&str> {
    let from_event = entry
        .payload
        .get("heldEvent")
        .and_then(|e| e.get("metadataEvent"))
        .and_then(|m| m.get("taskId"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    from_event.or_else(|| entry.task_id())
}

/// The `event_held` entries that no `event_held_requeued` entry has settled, in
/// the order given.
///
/// `entries` holds the mesh's entries of both kinds. A requeue entry settles its
/// held entry whatever it found: the event queued again, or already queued (or
/// its fingerprint taken by a live event), so there is nothing left to put back.
pub fn still_held(entries: Vec<LedgerEntry>) -> Vec<LedgerEntry> {
    let settled: std::collections::HashSet<String> = entries
        .iter()
        .filter(|e| e.kind == REQUEUED_KIND)
        .filter_map(|e| e.payload.get("heldEntryId").and_then(Value::as_str).map(str::to_owned))
        .collect();
    entries.into_iter().filter(|e| e.kind == HELD_KIND && !settled.contains(&e.id)).collect()
}

/// The `event_held` entry of an event an enforce-mode drain quarantined:
/// recoverable, with the whole event (`raw`, the stored event row `row_id`
/// queued at `queued_at` ms) under `heldEvent`. `id` is the entry's fresh id.
pub fn quarantine_entry(
    mesh_id: &str,
    row_id: &str,
    raw: &Value,
    reason: QuarantineReason,
    queued_at: i64,
    id: String,
    now: Timestamp,
) -> LedgerEntry {
    let metadata = raw.get("metadataEvent").and_then(|m| m.as_object());
    LedgerEntry {
        id,
        mesh_id: mesh_id.to_owned(),
        timestamp: now.iso(),
        kind: HELD_KIND.to_owned(),
        node_id: raw.get("nodeId").and_then(|v| v.as_str()).map(str::to_owned),
        session_id: None,
        provider_type: None,
        payload: json!({
            "event": raw.get("event").cloned().unwrap_or(Value::Null),
            "reason": reason.as_str(),
            "recoverable": true,
            "nodeLabel": raw.get("nodeLabel").cloned().unwrap_or(json!("")),
            "workspace": raw.get("workspace").cloned(),
            "targetCoordinatorDaemonId": raw.get("targetCoordinatorDaemonId").cloned().unwrap_or(Value::Null),
            "eventId": raw.get("eventId").cloned(),
            "queuedAt": queued_at,
            "finalSummary": metadata.and_then(read_completion_summary),
            "taskId": metadata.and_then(|m| m.get("taskId")).cloned(),
            "heldEvent": raw,
            "pendingEventId": row_id,
        }),
    }
}

/// The reason of an event the retention sweep moved out of the inbox.
pub const RETENTION_REASON: &str = "pending_retention_expired";

/// The `event_held` entry of an undrained event the retention sweep removed: the
/// stored row `row_id` of event `name`, queued at `queued_at` ms, whose stored
/// text is `payload`. Recoverable, with the whole event under `heldEvent` (the
/// stored text itself when it is not a JSON object). `id` is the entry's fresh id.
pub fn retention_entry(
    mesh_id: &str,
    row_id: &str,
    name: &str,
    payload: &str,
    queued_at: i64,
    id: String,
    now: Timestamp,
) -> LedgerEntry {
    let raw = serde_json::from_str::<Value>(payload).ok().filter(Value::is_object);
    let get = |key: &str| raw.as_ref().and_then(|r| r.get(key)).cloned();
    let metadata = raw.as_ref().and_then(|r| r.get("metadataEvent")).and_then(Value::as_object);
    LedgerEntry {
        id,
        mesh_id: mesh_id.to_owned(),
        timestamp: now.iso(),
        kind: HELD_KIND.to_owned(),
        node_id: get("nodeId").and_then(|v| v.as_str().map(str::to_owned)),
        session_id: None,
        provider_type: None,
        payload: json!({
            "event": name,
            "reason": RETENTION_REASON,
            "recoverable": true,
            "nodeLabel": get("nodeLabel").unwrap_or_else(|| json!("")),
            "workspace": get("workspace"),
            "targetCoordinatorDaemonId": get("targetCoordinatorDaemonId").unwrap_or(Value::Null),
            "eventId": get("eventId"),
            "queuedAt": queued_at,
            "finalSummary": metadata.and_then(read_completion_summary),
            "taskId": metadata.and_then(|m| m.get("taskId")).cloned(),
            "pendingEventId": row_id,
            "heldEvent": raw.clone().unwrap_or_else(|| Value::String(payload.to_owned())),
        }),
    }
}

/// The stored event row a held entry names (`pendingEventId`), if any.
pub fn held_row_id(held: &LedgerEntry) -> Option<&str> {
    held.payload.get("pendingEventId").and_then(Value::as_str)
}

/// The event a held entry keeps (`heldEvent`), to queue again when its row is gone.
pub fn held_event(held: &LedgerEntry) -> Value {
    held.payload.get("heldEvent").cloned().unwrap_or(Value::Null)
}

/// The `event_held_requeued` entry that settles the held entry `held`, saying
/// whether its event was queued again. `id` is the entry's fresh id.
pub fn requeued_entry(
    mesh_id: &str,
    held: &LedgerEntry,
    requeued: bool,
    id: String,
    now: Timestamp,
) -> LedgerEntry {
    LedgerEntry {
        id,
        mesh_id: mesh_id.to_owned(),
        timestamp: now.iso(),
        kind: REQUEUED_KIND.to_owned(),
        node_id: held.node_id.clone(),
        session_id: None,
        provider_type: None,
        payload: json!({
            "heldEntryId": held.id,
            "event": held.payload.get("event"),
            "requeued": requeued,
            "taskId": held.payload.get("taskId"),
            "reason": held.payload.get("reason"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn held(id: &str, at: &str, node: Option<&str>, payload: Value) -> LedgerEntry {
        LedgerEntry {
            id: id.to_owned(),
            mesh_id: "m".to_owned(),
            timestamp: at.to_owned(),
            kind: HELD_KIND.to_owned(),
            node_id: node.map(str::to_owned),
            session_id: None,
            provider_type: None,
            payload,
        }
    }

    fn requeued(id: &str, of: &str) -> LedgerEntry {
        LedgerEntry {
            kind: REQUEUED_KIND.to_owned(),
            payload: json!({ "heldEntryId": of, "requeued": false }),
            ..held(id, "2025-01-01T00:10:00.000Z", None, json!({}))
        }
    }

    #[test]
    fn a_requeue_entry_settles_its_held_entry_whatever_it_found() {
        let a = held("a", "2025-01-01T00:00:00.000Z", None, json!({ "event": "agent:stopped" }));
        let b = held("b", "2025-01-01T00:01:00.000Z", None, json!({ "event": "agent:stopped" }));
        let left = still_held(vec![a, b.clone(), requeued("r", "a")]);
        assert_eq!(left, [b]);
    }

    #[test]
    fn every_part_of_a_filter_must_match() {
        let entry = held(
            "h",
            "2025-01-01T00:00:00.000Z",
            Some("mach_1b46842a15d3409d96ad33e767a916dd"),
            json!({ "event": "agent:stopped", "reason": "pending_retention_expired", "taskId": "t1" }),
        );
        assert!(HeldFilter::default().matches(&entry));
        let by = |f: HeldFilter| f.matches(&entry);
        assert!(by(HeldFilter { reason: Some("pending_retention_expired".into()), ..HeldFilter::default() }));
        assert!(!by(HeldFilter {
            reason: Some("v2_enforce_unversioned_quarantined".into()),
            ..HeldFilter::default()
        }));
        assert!(by(HeldFilter {
            task_id: Some("t1".into()),
            event: Some("agent:stopped".into()),
            ..HeldFilter::default()
        }));
        assert!(!by(HeldFilter { task_id: Some("t2".into()), ..HeldFilter::default() }));
        assert!(by(HeldFilter {
            node_id: Some("daemon_mach_1b46842a15d3409d96ad33e767a916dd".into()),
            ..HeldFilter::default()
        }));
        assert!(!by(HeldFilter { node_id: Some("laptop".into()), ..HeldFilter::default() }));
        let at = Timestamp::parse_iso("2025-01-01T00:00:00.000Z").unwrap();
        assert!(by(HeldFilter { held_before: Some(at), ..HeldFilter::default() }));
        assert!(!by(HeldFilter { held_before: Some(at.plus_millis(-1)), ..HeldFilter::default() }));
    }

    #[test]
    fn an_entry_of_the_original_is_selected_by_the_task_its_event_names() {
        // The original's quarantine entries carry the task only inside the event.
        let original = held(
            "h",
            "2025-01-01T00:00:00.000Z",
            None,
            json!({ "event": "agent:stopped", "heldEvent": { "metadataEvent": { "taskId": " t7 " } } }),
        );
        let by_task = |task: &str| HeldFilter { task_id: Some(task.into()), ..HeldFilter::default() };
        assert_eq!(held_task_id(&original), Some("t7"));
        assert!(by_task("t7").matches(&original));
        assert!(!by_task("t8").matches(&original));
        // The event's task wins over the entry's; the entry's is the fallback.
        let both = held(
            "h2",
            "2025-01-01T00:00:00.000Z",
            None,
            json!({ "taskId": "t1", "heldEvent": { "metadataEvent": { "taskId": "t2" } } }),
        );
        assert_eq!(held_task_id(&both), Some("t2"));
        let entry_only =
            held("h3", "2025-01-01T00:00:00.000Z", None, json!({ "taskId": "t3", "heldEvent": "x" }));
        assert!(by_task("t3").matches(&entry_only));
    }

    #[test]
    fn the_retention_warning_names_the_count_the_mesh_and_the_way_back() {
        let text = retention_warning("mesh-a", 3);
        assert!(text.starts_with("3 event(s) of mesh mesh-a were never delivered"), "{text}");
        assert!(
            text.contains("agentmesh --mesh mesh-a events requeue-held --reason pending_retention_expired"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_reason_is_refused_naming_the_field() {
        let filter = HeldFilter { reason: Some("bored".into()), ..HeldFilter::default() };
        assert_eq!(filter.validate().unwrap_err().field, "reason");
        assert!(HeldFilter::default().validate().is_ok());
    }

    #[test]
    fn a_quarantined_event_is_held_with_the_whole_event() {
        let raw = json!({
            "event": "agent:generating_completed", "nodeId": "n1", "nodeLabel": "Node 'n1'",
            "eventId": "e1", "metadataEvent": {"taskId": "t1", "finalSummary": "done"},
        });
        let now = Timestamp::from_millis(60_000);
        let entry =
            quarantine_entry("m", "row-1", &raw, QuarantineReason::Unversioned, 5, "id-1".into(), now);
        assert_eq!(
            (entry.id.as_str(), entry.kind.as_str(), entry.mesh_id.as_str()),
            ("id-1", HELD_KIND, "m")
        );
        assert_eq!(entry.timestamp, now.iso());
        assert_eq!(entry.node_id.as_deref(), Some("n1"));
        assert_eq!(
            entry.payload.to_string(),
            json!({
                "event": "agent:generating_completed", "reason": "v2_enforce_unversioned_quarantined",
                "recoverable": true, "nodeLabel": "Node 'n1'", "workspace": null,
                "targetCoordinatorDaemonId": null, "eventId": "e1", "queuedAt": 5, "finalSummary": "done",
                "taskId": "t1", "heldEvent": raw, "pendingEventId": "row-1",
            })
            .to_string()
        );
        assert_eq!(held_row_id(&entry), Some("row-1"));
        assert_eq!(held_event(&entry), raw);
        assert!(HELD_REASONS.contains(&entry.payload["reason"].as_str().unwrap()));
    }

    #[test]
    fn an_expired_event_is_held_with_its_stored_text() {
        let now = Timestamp::from_millis(9);
        let stored = r#"{"event":"agent:stopped","nodeId":"n1","metadataEvent":{"taskId":"t1"}}"#;
        let e = retention_entry("m", "row-1", "agent:stopped", stored, 4, "id-1".into(), now);
        assert_eq!((e.id.as_str(), e.kind.as_str(), e.node_id.as_deref()), ("id-1", HELD_KIND, Some("n1")));
        assert_eq!(
            e.payload.to_string(),
            json!({
                "event": "agent:stopped", "reason": RETENTION_REASON, "recoverable": true, "nodeLabel": "",
                "workspace": null, "targetCoordinatorDaemonId": null, "eventId": null, "queuedAt": 4,
                "finalSummary": null, "taskId": "t1", "pendingEventId": "row-1",
                "heldEvent": serde_json::from_str::<Value>(stored).unwrap(),
            })
            .to_string()
        );
        let unreadable = retention_entry("m", "row-2", "x", "not json", 4, "id-2".into(), now);
        assert_eq!(unreadable.payload["heldEvent"], "not json");
        assert_eq!(unreadable.node_id, None);
        assert!(HELD_REASONS.contains(&RETENTION_REASON));
    }

    #[test]
    fn a_requeue_entry_names_its_held_entry() {
        let held = quarantine_entry(
            "m",
            "row-1",
            &json!({"event": "x", "nodeId": "n1", "metadataEvent": {"taskId": "t1"}}),
            QuarantineReason::ValidationFailed,
            5,
            "held-1".into(),
            Timestamp::from_millis(1),
        );
        let entry = requeued_entry("m", &held, true, "id-2".into(), Timestamp::from_millis(2));
        assert_eq!((entry.id.as_str(), entry.kind.as_str()), ("id-2", REQUEUED_KIND));
        assert_eq!(entry.node_id.as_deref(), Some("n1"));
        assert_eq!(
            entry.payload.to_string(),
            json!({"heldEntryId": "held-1", "event": "x", "requeued": true, "taskId": "t1",
                   "reason": "v2_enforce_validation_failed_quarantined"})
            .to_string()
        );
        assert_eq!(still_held(vec![held, entry]), Vec::new());
    }
}
