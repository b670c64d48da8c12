//! Deletes, retracts, clears and counts.

use agentmesh_store::inbox_writes::is_about_task;
use rusqlite::{Connection, params};

use crate::Res;
use crate::payload::Json;

/// Deletes the undrained `mesh:dispatch_blocked` events about `task_id`. The
/// payloads are matched in Rust (they may be stored deflated), so a payload that
/// is not JSON is passed over.
pub(crate) fn retract_dispatch_blocked(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<u64> {
    let task_id = task_id.trim();
    if task_id.is_empty() {
        return Ok(0);
    }
    let rows: Vec<(i64, Json)> = conn
        .prepare_cached(
            "SELECT e.rowid, e.payload FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
              WHERE q.mesh_id = ?1 AND q.event = 'mesh:dispatch_blocked'",
        )?
        .query_map([mesh_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut delete = conn.prepare_cached("DELETE FROM mesh_pending_events WHERE rowid = ?1")?;
    let mut deleted = 0;
    for (rowid, payload) in rows {
        if is_about_task(&payload.0, task_id) {
            deleted += delete.execute([rowid])? as u64;
        }
    }
    Ok(deleted)
}

/// Deletes the mesh's events of `ids`, drained or not; the delete trigger takes
/// their queue entries and drained-event-id records with them.
pub(crate) fn delete(conn: &Connection, mesh_id: &str, ids: &[String]) -> Res<u64> {
    let mut stmt = conn.prepare_cached("DELETE FROM mesh_pending_events WHERE id = ?1 AND mesh_id = ?2")?;
    let mut deleted = 0;
    for id in ids {
        deleted += stmt.execute(params![id, mesh_id])? as u64;
    }
    Ok(deleted)
}

pub(crate) fn count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt = conn.prepare_cached("SELECT COUNT(*) FROM mesh_inbox_queue WHERE mesh_id = ?1")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
}
