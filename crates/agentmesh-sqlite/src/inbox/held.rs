//! Requeueing a held event.

use agentmesh_core::Timestamp;
use agentmesh_core::events::held::{held_event, held_row_id, requeued_entry};
use agentmesh_core::events::{EmitHint, PendingEvent};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{QueueOutcome, StoreError};
use rusqlite::{Connection, OptionalExtension, params};

use super::queue::{enqueue_stored, queue};
use crate::{Fail, Res, ledger};

/// Puts the event of an `event_held` entry back in the inbox, with its
/// `event_held_requeued` entry.
pub(crate) fn requeue_held(
    conn: &Connection,
    mesh_id: &str,
    held_entry_id: &str,
    now: Timestamp,
) -> Res<bool> {
    let entry = conn
        .prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger WHERE id = ?1 AND mesh_id = ?2 AND kind = 'event_held'",
        )?
        .query_row(params![held_entry_id, mesh_id], ledger::entry_from_row)
        .optional()?
        .ok_or_else(|| {
            Fail(StoreError::NotFound {
                kind: "held event",
                mesh_id: mesh_id.to_owned(),
                id: held_entry_id.to_owned(),
            })
        })?;
    let row_id = held_row_id(&entry);
    let stored: Option<i64> = match row_id {
        Some(row) => conn
            .prepare_cached("SELECT rowid FROM mesh_pending_events WHERE id = ?1 AND mesh_id = ?2")?
            .query_row(params![row, mesh_id], |r| r.get(0))
            .optional()?,
        None => None,
    };
    let row_exists = stored.is_some();
    let mut requeued = match stored {
        Some(rowid) => enqueue_stored(conn, rowid)?,
        None => false,
    };
    if !row_exists {
        // Retention removed the row: queue the held event again (its envelope, and
        // so its event id, is kept).
        let event = PendingEvent::from_value(held_event(&entry)).map_err(|e| {
            Fail(StoreError::Corrupt {
                what: format!("held event of ledger entry {held_entry_id}"),
                problem: e.to_string(),
            })
        })?;
        requeued = matches!(
            queue(conn, mesh_id, event, &EmitHint::default(), None, now)?,
            QueueOutcome::Queued { .. }
        );
    }
    ledger::append(conn, &requeued_entry(mesh_id, &entry, requeued, mint_at(now), now))?;
    Ok(requeued)
}
