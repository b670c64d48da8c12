//! Requeueing a held event.

use agentmesh_core::Timestamp;
use agentmesh_core::events::held::{held_event, held_row_id, requeued_entry};
use agentmesh_core::events::{EmitHint, PendingEvent};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{QueueOutcome, StoreError};

use super::queue::{enqueue_stored, queue};
use super::reconcile::ledger_entry;
use crate::db::Db;
use crate::{Fail, Res, ledger};

/// Puts the event of an `event_held` entry back in the inbox, with its
/// `event_held_requeued` entry, in the caller's transaction (which holds the
/// mesh's lock).
pub(crate) fn requeue_held(db: &Db<'_>, mesh_id: &str, held_entry_id: &str, now: Timestamp) -> Res<bool> {
    let entry = db
        .query_opt(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger WHERE mesh_id = $1 AND id = $2 AND kind = 'event_held'",
            &[&mesh_id, &held_entry_id],
        )?
        .map(|r| ledger_entry(&r))
        .ok_or_else(|| {
            Fail(StoreError::NotFound {
                kind: "held event",
                mesh_id: mesh_id.to_owned(),
                id: held_entry_id.to_owned(),
            })
        })?;
    let stored: Option<i64> = match held_row_id(&entry) {
        Some(row) => db
            .query_opt(
                "SELECT row_id FROM mesh_pending_events WHERE mesh_id = $1 AND id = $2",
                &[&mesh_id, &row],
            )?
            .map(|r| r.get(0)),
        None => None,
    };
    let requeued = match stored {
        Some(row_id) => enqueue_stored(db, mesh_id, row_id)?,
        None => {
            // Retention removed the row: queue the held event again (its envelope,
            // and so its event id, is kept).
            let event = PendingEvent::from_value(held_event(&entry)).map_err(|e| {
                Fail(StoreError::Corrupt {
                    what: format!("held event of ledger entry {held_entry_id}"),
                    problem: e.to_string(),
                })
            })?;
            matches!(queue(db, mesh_id, event, &EmitHint::default(), None, now)?, QueueOutcome::Queued { .. })
        }
    };
    ledger::append(db, &requeued_entry(mesh_id, &entry, requeued, mint_at(now), now))?;
    Ok(requeued)
}
