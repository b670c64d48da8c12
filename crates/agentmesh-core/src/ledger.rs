//! The append-only event ledger: entries, kinds, and the slice protocol
//! `adhdev.mesh.ledger.slice.v1` used to page a ledger between daemons.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The slice protocol's name.
pub const SLICE_PROTOCOL: &str = "adhdev.mesh.ledger.slice.v1";
/// Page size when the caller gives none.
pub const SLICE_DEFAULT_LIMIT: u32 = 100;
/// Largest page a slice returns.
pub const SLICE_MAX_LIMIT: u32 = 500;

/// Ledger kinds the task lifecycle writes.
pub mod kinds {
    /// A task was enqueued.
    pub const TASK_DISPATCHED: &str = "task_dispatched";
    /// A worker claimed a task.
    pub const TASK_CLAIMED: &str = "task_claimed";
    /// A task completed.
    pub const TASK_COMPLETED: &str = "task_completed";
    /// A task failed.
    pub const TASK_FAILED: &str = "task_failed";
    /// A task was cancelled.
    pub const TASK_CANCELLED: &str = "task_cancelled";
    /// A task went back to the queue.
    pub const TASK_REQUEUED: &str = "task_requeued";
    /// A task's pull priority was changed.
    pub const TASK_PRIORITY_CHANGED: &str = "task_priority_changed";
    /// A stranded assignment was reclaimed.
    pub const TASK_RECLAIMED: &str = "task_reclaimed";
    /// A pending task was blocked by a failed or cancelled dependency.
    pub const TASK_BLOCKED: &str = "task_blocked";
    /// A pending task's block was lifted.
    pub const TASK_UNBLOCKED: &str = "task_unblocked";
    /// A completion was refused: stale epoch, wrong session, or a task no longer
    /// assigned. The payload's `reason` says which.
    pub const COMPLETION_REFUSED: &str = "completion_refused";
    /// A heartbeat was refused for the same reasons.
    pub const HEARTBEAT_REFUSED: &str = "heartbeat_refused";
    /// A worker's progress report on its running task (a bounded trail per
    /// assignment).
    pub const TASK_PROGRESS: &str = "task_progress";
}

/// One ledger entry, in the original's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    /// Unique id; appending an id that exists is a no-op.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// When it happened (ISO).
    pub timestamp: String,
    /// What happened (`task_claimed`, ...).
    pub kind: String,
    /// The node involved.
    #[serde(default)]
    pub node_id: Option<String>,
    /// The session involved.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The provider type involved.
    #[serde(default)]
    pub provider_type: Option<String>,
    /// Details, a JSON object.
    #[serde(default = "empty_object")]
    pub payload: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl LedgerEntry {
    /// The task this entry is about: `payload.taskId`, trimmed.
    pub fn task_id(&self) -> Option<&str> {
        self.payload.get("taskId").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
    }

    /// Checks what an entry from outside must satisfy: a mesh, an id and a kind that
    /// are not blank, a parseable timestamp, an object payload.
    pub fn validate(&self) -> Result<(), crate::InvalidInput> {
        use crate::InvalidInput;
        if self.id.trim().is_empty() {
            return Err(InvalidInput::new("id", "must not be blank"));
        }
        // The one mesh-id rule, as for a mesh named anywhere else.
        crate::MeshId::parse_field("meshId", &self.mesh_id)?;
        if self.kind.trim().is_empty() {
            return Err(InvalidInput::new("kind", "must not be blank"));
        }
        if crate::Timestamp::parse_iso(&self.timestamp).is_none() {
            return Err(InvalidInput::new(
                "timestamp",
                format!("{:?} is not an ISO-8601 instant", self.timestamp),
            ));
        }
        if !self.payload.is_object() {
            return Err(InvalidInput::new("payload", "must be a JSON object"));
        }
        Ok(())
    }

    /// Checks a batch of entries from outside as [`LedgerEntry::validate`]
    /// checks one; the first bad entry's field is named under `entries[i]`.
    pub fn validate_all(entries: &[LedgerEntry]) -> Result<(), crate::InvalidInput> {
        for (i, entry) in entries.iter().enumerate() {
            entry.validate().map_err(|err| err.within(format_args!("entries[{i}]")))?;
        }
        Ok(())
    }
}

/// Filters for newest-first ledger reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerQuery {
    /// At most this many entries (200 when unset).
    pub tail: Option<u32>,
    /// Only entries at or after this instant (ISO).
    pub since: Option<String>,
    /// Only entries of these kinds (all when empty).
    pub kinds: Vec<String>,
}

/// A slice request.
///
/// A page is read in one of two orders. With `after_seq` it is in the order the
/// database committed the entries (their sequence): an entry committed late, or
/// imported with an old timestamp, still comes after every entry a peer has
/// already paged past, so a peer paging by sequence never skips one. Without it,
/// the page is in the original's (timestamp, id) order after `after_id`, which is
/// what the original's peers send; an entry whose timestamp lies before their
/// cursor is not seen by them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceQuery {
    /// Entries strictly after this one in (timestamp, id) order.
    pub after_id: Option<String>,
    /// Entries committed after the entry of this sequence number, in sequence
    /// order (0: from the first). Not given together with `after_id`.
    pub after_seq: Option<u64>,
    /// Only entries at or after this instant.
    pub since: Option<String>,
    /// Only entries of this kind.
    pub kind: Option<String>,
    /// Page size; clamped to `1..=500`, 100 when unset.
    pub limit: Option<u32>,
}

impl SliceQuery {
    /// The effective page size.
    pub fn effective_limit(&self) -> u32 {
        self.limit.map_or(SLICE_DEFAULT_LIMIT, |l| l.clamp(1, SLICE_MAX_LIMIT))
    }
}

/// The slice cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SliceCursor {
    /// The cursor the page was read after.
    pub after_id: Option<String>,
    /// Pass this as `afterId` for the next page.
    pub next_after_id: Option<String>,
    /// The effective page size.
    pub limit: u32,
    /// More entries may follow: read the next page. A page by sequence may say
    /// so with fewer entries than its limit, or none, when it stopped after
    /// walking a bounded stretch of the sequence (other meshes' entries).
    pub has_more: bool,
    /// The sequence the page was read after, on a page read by sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Pass this as `afterSeq` for the next page: the last entry's sequence on a
    /// page that has more; on the last page, a number at or past it (up to the
    /// head) after which no entry of the mesh matching the filters was read, so
    /// the next page need not walk what this one did; on a page read by
    /// sequence only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after_seq: Option<u64>,
    /// The highest sequence number handed out when the page was read (at or
    /// past the mesh's last entry, of any kind, whatever the filters; a backend
    /// numbering every mesh in one sequence gives its highest); on a page read
    /// by sequence only. A reader that only wants what comes next starts from
    /// here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_seq: Option<u64>,
}

/// Where a slice was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SliceSource {
    /// Backend kind (`local_sqlite`).
    pub kind: String,
    /// Table read.
    pub table: String,
    /// Pages are bounded.
    pub bounded: bool,
    /// Largest page.
    pub max_limit: u32,
}

/// One page of the slice protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerSlice {
    /// Always [`SLICE_PROTOCOL`].
    pub protocol: String,
    /// The mesh.
    pub mesh_id: String,
    /// Entries in (timestamp, id) order, or in sequence order when the page was
    /// read by sequence.
    pub entries: Vec<LedgerEntry>,
    /// On a page read by sequence, each entry's sequence number, in the order
    /// of `entries`: passed as `afterSeq`, it reads what follows that entry.
    /// Empty on a page read by time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seqs: Vec<u64>,
    /// How many of `entries`, from the first, were read from the archive
    /// (see [`crate::retention`]): archived entries come before the hot
    /// database's on a page. Omitted when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub archived: u32,
    /// Paging state.
    pub cursor: SliceCursor,
    /// Where the page came from.
    pub source_of_truth: SliceSource,
    /// The database whose sequence numbers the cursor counts (an id made when the
    /// database was created). A peer that finds a different origin than on its
    /// last page is reading another database and starts again from `afterSeq` 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl LedgerSlice {
    /// A page of `entries` as a page read by time (`afterId`) has it: the cursor
    /// read after and the one to pass next, whether more follow, and the store it
    /// was read from (`source`, e.g. `postgres`). No sequence numbers and no
    /// origin: a page read by sequence sets those on it.
    pub fn by_time(
        mesh_id: &str,
        entries: Vec<LedgerEntry>,
        after_id: Option<String>,
        next_after_id: Option<String>,
        limit: u32,
        has_more: bool,
        source: &str,
    ) -> LedgerSlice {
        LedgerSlice {
            archived: 0,
            seqs: Vec::new(),
            protocol: SLICE_PROTOCOL.to_owned(),
            mesh_id: mesh_id.to_owned(),
            entries,
            cursor: SliceCursor {
                after_id,
                next_after_id,
                limit,
                has_more,
                after_seq: None,
                next_after_seq: None,
                head_seq: None,
            },
            source_of_truth: SliceSource {
                kind: source.to_owned(),
                table: "mesh_event_ledger".to_owned(),
                bounded: true,
                max_limit: SLICE_MAX_LIMIT,
            },
            origin: None,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_clamped() {
        let q = |limit| SliceQuery { limit, ..SliceQuery::default() };
        assert_eq!(q(None).effective_limit(), 100);
        assert_eq!(q(Some(0)).effective_limit(), 1);
        assert_eq!(q(Some(10_000)).effective_limit(), 500);
    }

    #[test]
    fn validation_names_the_field() {
        let mut e = LedgerEntry {
            id: "e1".into(),
            mesh_id: "m".into(),
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            kind: "task_claimed".into(),
            node_id: None,
            session_id: None,
            provider_type: None,
            payload: serde_json::json!({"taskId": " t1 "}),
        };
        assert!(e.validate().is_ok());
        assert_eq!(e.task_id(), Some("t1"));
        for bad_mesh in ["", "m\n2", &"m".repeat(201)] {
            let refused = LedgerEntry { mesh_id: bad_mesh.to_owned(), ..e.clone() }.validate().unwrap_err();
            assert_eq!(
                refused,
                crate::MeshId::parse_field("meshId", bad_mesh).unwrap_err(),
                "the one mesh rule"
            );
        }
        e.timestamp = "yesterday".into();
        assert_eq!(e.validate().unwrap_err().field, "timestamp");
        e.timestamp = "2025-01-01T00:00:00.000Z".into();
        e.payload = serde_json::json!([1]);
        assert_eq!(e.validate().unwrap_err().field, "payload");
        let good = LedgerEntry { payload: serde_json::json!({}), ..e.clone() };
        assert!(LedgerEntry::validate_all(&[good.clone(), good.clone()]).is_ok());
        let refused = LedgerEntry::validate_all(&[good.clone(), good, e]).unwrap_err();
        assert_eq!(refused.field, "entries[2].payload", "the batch names the bad entry");
    }
}
