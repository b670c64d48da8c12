//! Deletes, retracts, clears and counts.

use rusqlite::{Connection, params};

use crate::Res;

pub(crate) fn retract_dispatch_blocked(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<u64> {
    let task_id = task_id.trim();
    if task_id.is_empty() {
        return Ok(0);
    }
    Ok(conn
        .prepare_cached(
            "DELETE FROM mesh_pending_events
              WHERE rowid IN (SELECT event_rowid FROM mesh_inbox_queue
                               WHERE mesh_id = ?1 AND event = 'mesh:dispatch_blocked')
                AND json_valid(payload) AND TRIM(json_extract(payload, '$.metadataEvent.taskId')) = ?2",
        )?
        .execute(params![mesh_id, task_id])? as u64)
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
