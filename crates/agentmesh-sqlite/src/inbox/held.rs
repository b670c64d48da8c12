//! Requeueing a held event: the SQL (`agentmesh_store::inbox_writes` decides).

use agentmesh_core::{LedgerEntry, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{Res, ledger};

/// Puts the event of an `event_held` entry back in the inbox, with its
/// `event_held_requeued` entry.
pub(crate) fn requeue_held(
    conn: &Connection,
    mesh_id: &str,
    held_entry_id: &str,
    now: Timestamp,
) -> Res<agentmesh_store::HeldRequeue> {
    agentmesh_store::inbox_writes::requeue_held(&super::drain::Inbox(conn), mesh_id, held_entry_id, now)
}

/// The `event_held` ledger entry `entry_id`.
pub(super) fn held_entry(conn: &Connection, mesh_id: &str, entry_id: &str) -> Res<Option<LedgerEntry>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger WHERE id = ?1 AND mesh_id = ?2 AND kind = 'event_held'",
        )?
        .query_row(params![entry_id, mesh_id], ledger::entry_from_row)
        .optional()?)
}

/// The rowid of the event row `id`.
pub(super) fn stored_event(conn: &Connection, mesh_id: &str, id: &str) -> Res<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT rowid FROM mesh_pending_events WHERE id = ?1 AND mesh_id = ?2")?
        .query_row(params![id, mesh_id], |r| r.get(0))
        .optional()?)
}
