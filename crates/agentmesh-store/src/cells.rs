//! The records both backends keep in tables of the same columns (ledger
//! entries, missions, direct dispatches, session deliveries, in-flight holds,
//! idle sessions, completion conflicts),
//! read from a stored row in one place: each backend offers its row's cells by position ([`Cells`]), and
//! the readers here build the record, naming the stored value that cannot be
//! one ([`StoreError::Corrupt`]).
//!
//! A backend selects a record's columns in the order its `*_COLUMNS` lists them.

use agentmesh_core::{
    CompletionConflict, DirectDispatch, IdleSession, InflightHold, LedgerEntry, Mission, SessionDelivery,
};

use crate::{StoreError, StoreResult};

/// A stored row's cells, by position in the statement's columns.
pub trait Cells {
    /// The text at `i`.
    fn text(&self, i: usize) -> StoreResult<String>;
    /// The text at `i`, none for NULL.
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>>;
    /// The integer at `i`.
    fn int(&self, i: usize) -> StoreResult<i64>;
}

/// The columns [`ledger_entry`] reads, in its order.
pub const LEDGER_COLUMNS: &str = "id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload";

/// The columns [`mission`] reads, in its order.
pub const MISSION_COLUMNS: &str = "id, mesh_id, title, goal, status, created_at, updated_at, source";

/// The columns [`dispatch`] reads, in its order.
pub const DISPATCH_COLUMNS: &str = "task_id, mesh_id, node_id, session_id, provider_type, message, \
     task_mode, via, status, dispatched_to_idle_session, dispatched_at, updated_at";

/// The columns [`delivery`] reads, in its order.
pub const DELIVERY_COLUMNS: &str = "id, mesh_id, node_id, session_id, provider_type, task_id, kind, \
     priority, message, status, deliver_after, expires_at, attempt_count, source_coordinator_session_id, \
     source_coordinator_daemon_id, last_error, created_at, updated_at";

/// The columns [`hold`] reads, in its order.
pub const HOLD_COLUMNS: &str =
    "task_id, mesh_id, hold_reason, held_at, first_idle_since_ack, read_failure_count, updated_at";

/// The columns [`idle_session`] reads, in its order.
pub const IDLE_COLUMNS: &str = "mesh_id, node_id, session_id, provider_type, expires_at, metadata";

/// The columns [`conflict`] reads, in its order.
pub const CONFLICT_COLUMNS: &str = "id, mesh_id, fingerprint, conflicting_task_id, conflicting_session_id, \
     original_task_id, original_session_id, event, created_at";

fn corrupt(what: &str, problem: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { what: what.to_owned(), problem: problem.to_string() }
}

/// A stored count, which no row holds negative or past `u32`.
fn count(row: &impl Cells, i: usize, what: &str) -> StoreResult<u32> {
    u32::try_from(row.int(i)?).map_err(|e| corrupt(what, e))
}

/// A ledger entry, from [`LEDGER_COLUMNS`]. A payload that is not JSON reads
/// as `{}`, as in the original.
pub fn ledger_entry(row: &impl Cells) -> StoreResult<LedgerEntry> {
    let payload = row.text(7)?;
    Ok(LedgerEntry {
        id: row.text(0)?,
        mesh_id: row.text(1)?,
        timestamp: row.text(2)?,
        kind: row.text(3)?,
        node_id: row.opt_text(4)?,
        session_id: row.opt_text(5)?,
        provider_type: row.opt_text(6)?,
        payload: serde_json::from_str(&payload).unwrap_or_else(|_| serde_json::json!({})),
    })
}

/// A mission, from [`MISSION_COLUMNS`].
pub fn mission(row: &impl Cells) -> StoreResult<Mission> {
    Ok(Mission {
        id: row.text(0)?,
        mesh_id: row.text(1)?,
        title: row.text(2)?,
        goal: row.text(3)?,
        status: row.text(4)?,
        created_at: row.text(5)?,
        updated_at: row.text(6)?,
        source: row.opt_text(7)?,
    })
}

/// A direct dispatch, from [`DISPATCH_COLUMNS`].
pub fn dispatch(row: &impl Cells) -> StoreResult<DirectDispatch> {
    Ok(DirectDispatch {
        task_id: row.text(0)?,
        mesh_id: row.text(1)?,
        node_id: row.opt_text(2)?,
        session_id: row.opt_text(3)?,
        provider_type: row.opt_text(4)?,
        message: row.text(5)?,
        task_mode: row.opt_text(6)?,
        via: row.text(7)?,
        status: row.text(8)?.parse().map_err(|e| corrupt("dispatch status", e))?,
        dispatched_to_idle_session: row.int(9)? != 0,
        dispatched_at: row.text(10)?,
        updated_at: row.text(11)?,
    })
}

/// A session delivery, from [`DELIVERY_COLUMNS`].
pub fn delivery(row: &impl Cells) -> StoreResult<SessionDelivery> {
    Ok(SessionDelivery {
        id: row.text(0)?,
        mesh_id: row.text(1)?,
        node_id: row.opt_text(2)?,
        session_id: row.opt_text(3)?,
        provider_type: row.opt_text(4)?,
        task_id: row.opt_text(5)?,
        kind: row.text(6)?,
        priority: row.int(7)?,
        message: row.text(8)?,
        status: row.text(9)?.parse().map_err(|e| corrupt("delivery status", e))?,
        deliver_after: row.opt_text(10)?,
        expires_at: row.opt_text(11)?,
        attempt_count: count(row, 12, "delivery attempt count")?,
        source_coordinator_session_id: row.opt_text(13)?,
        source_coordinator_daemon_id: row.opt_text(14)?,
        last_error: row.opt_text(15)?,
        created_at: row.text(16)?,
        updated_at: row.text(17)?,
    })
}

/// An in-flight hold, from [`HOLD_COLUMNS`].
pub fn hold(row: &impl Cells) -> StoreResult<InflightHold> {
    Ok(InflightHold {
        task_id: row.text(0)?,
        mesh_id: row.text(1)?,
        hold_reason: row.text(2)?,
        held_at: row.text(3)?,
        first_idle_since_ack: row.opt_text(4)?,
        read_failure_count: count(row, 5, "hold read failure count")?,
        updated_at: row.text(6)?,
    })
}

/// An idle session, from [`IDLE_COLUMNS`]. Metadata that is not JSON reads as
/// none.
pub fn idle_session(row: &impl Cells) -> StoreResult<IdleSession> {
    Ok(IdleSession {
        mesh_id: row.text(0)?,
        node_id: row.text(1)?,
        session_id: row.text(2)?,
        provider_type: row.text(3)?,
        expires_at_ms: row.int(4)?,
        metadata: row.opt_text(5)?.and_then(|m| serde_json::from_str(&m).ok()),
    })
}

/// A completion conflict, from [`CONFLICT_COLUMNS`].
pub fn conflict(row: &impl Cells) -> StoreResult<CompletionConflict> {
    Ok(CompletionConflict {
        id: row.text(0)?,
        mesh_id: row.text(1)?,
        fingerprint: row.text(2)?,
        conflicting_task_id: row.opt_text(3)?,
        conflicting_session_id: row.opt_text(4)?,
        original_task_id: row.opt_text(5)?,
        original_session_id: row.opt_text(6)?,
        event: row.text(7)?,
        created_at: row.text(8)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of text and integer cells.
    struct Row(Vec<Option<&'static str>>);

    impl Cells for Row {
        fn text(&self, i: usize) -> StoreResult<String> {
            self.opt_text(i)?.ok_or_else(|| corrupt("cell", format!("{i} is NULL")))
        }
        fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
            Ok(self.0[i].map(str::to_owned))
        }
        fn int(&self, i: usize) -> StoreResult<i64> {
            self.text(i)?.parse().map_err(|e| corrupt("cell", e))
        }
    }

    fn stored_hold(failures: &'static str) -> Row {
        Row(vec![Some("t1"), Some("m"), Some("idle"), Some("2026-01-01"), None, Some(failures), Some("2026")])
    }

    #[test]
    fn a_record_reads_from_its_columns_in_order() {
        let hold = hold(&stored_hold("3")).expect("a hold");
        assert_eq!((hold.task_id.as_str(), hold.hold_reason.as_str()), ("t1", "idle"));
        assert_eq!((hold.first_idle_since_ack, hold.read_failure_count), (None, 3));
        assert_eq!(HOLD_COLUMNS.split(", ").count(), 7);
        assert_eq!(DISPATCH_COLUMNS.split(", ").count(), 12);
        assert_eq!(DELIVERY_COLUMNS.split(", ").count(), 18);
        assert_eq!(IDLE_COLUMNS.split(", ").count(), 6);
        assert_eq!(CONFLICT_COLUMNS.split(", ").count(), 9);
    }

    #[test]
    fn idle_metadata_that_is_not_json_reads_as_none() {
        let stored =
            |metadata| Row(vec![Some("m"), Some("n1"), Some("s1"), Some("codex"), Some("9"), metadata]);
        let idle = idle_session(&stored(Some(r#"{"cwd":"/w"}"#))).expect("an idle session");
        assert_eq!((idle.expires_at_ms, idle.metadata), (9, Some(serde_json::json!({"cwd": "/w"}))));
        assert_eq!(idle_session(&stored(Some("{not json"))).expect("an idle session").metadata, None);
        let conflict = conflict(&Row(vec![
            Some("c1"),
            Some("m"),
            Some("fp"),
            None,
            Some("s2"),
            Some("t1"),
            None,
            Some("task_completed"),
            Some("2026"),
        ]))
        .expect("a conflict");
        assert_eq!(
            (conflict.conflicting_task_id, conflict.conflicting_session_id),
            (None, Some("s2".into()))
        );
    }

    #[test]
    fn a_value_no_record_can_hold_is_named_corrupt() {
        match hold(&stored_hold("-1")) {
            Err(StoreError::Corrupt { what, .. }) => assert_eq!(what, "hold read failure count"),
            other => panic!("expected the count named corrupt, got {other:?}"),
        }
        let mut row: Vec<Option<&str>> = vec![Some("x"); 12];
        row[8] = Some("no-such-status");
        row[9] = Some("0");
        match dispatch(&Row(row)) {
            Err(StoreError::Corrupt { what, .. }) => assert_eq!(what, "dispatch status"),
            other => panic!("expected the status named corrupt, got {other:?}"),
        }
    }
}
