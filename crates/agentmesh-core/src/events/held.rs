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

use serde_json::Value;

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
        "{count} event(s) of mesh {mesh_id} were never drained and outlived the inbox's retention; \
         they are held in the ledger ({HELD_KIND}, reason {reason}). List them with \
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
        if self.task_id.as_deref().is_some_and(|want| entry.task_id() != Some(want.trim())) {
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
    fn the_retention_warning_names_the_count_the_mesh_and_the_way_back() {
        let text = retention_warning("mesh-a", 3);
        assert!(text.starts_with("3 event(s) of mesh mesh-a"), "{text}");
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
}
