//! Requeueing a held event: the SQL (`agentmesh_store::inbox_writes` decides).

use agentmesh_core::{LedgerEntry, Timestamp};

use super::reconcile::ledger_entry;
use crate::Res;
use crate::db::Db;

/// Puts the event of an `event_held` entry back in the inbox, with its
/// `event_held_requeued` entry, in the caller's transaction (which holds the
/// mesh's inbox lock).
pub(crate) fn requeue_held(
    db: &Db<'_>,
    mesh_id: &str,
    held_entry_id: &str,
    now: Timestamp,
) -> Res<agentmesh_store::HeldRequeue> {
    agentmesh_store::inbox_writes::requeue_held(&super::drain::Inbox(db), mesh_id, held_entry_id, now)
}

/// The `event_held` ledger entry `entry_id`.
pub(super) fn held_entry(db: &Db<'_>, mesh_id: &str, entry_id: &str) -> Res<Option<LedgerEntry>> {
    Ok(db
        .query_opt(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger WHERE mesh_id = $1 AND id = $2 AND kind = 'event_held'",
            &[&mesh_id, &entry_id],
        )?
        .map(|r| ledger_entry(&r)))
}

/// The `row_id` of the event row `id`.
pub(super) fn stored_event(db: &Db<'_>, mesh_id: &str, id: &str) -> Res<Option<i64>> {
    Ok(db
        .query_opt("SELECT row_id FROM mesh_pending_events WHERE mesh_id = $1 AND id = $2", &[&mesh_id, &id])?
        .map(|r| r.get(0)))
}
