//! Deletes, retracts, clears and counts.

use rusqlite::{Connection, params};

use crate::Res;

pub(crate) fn delete(conn: &Connection, mesh_id: &str, ids: &[String]) -> Res<u64> {
    let mut stmt = conn.prepare_cached("DELETE FROM mesh_pending_events WHERE mesh_id = ?1 AND id = ?2")?;
    let mut n = 0;
    for id in ids {
        n += stmt.execute(params![mesh_id, id])? as u64;
    }
    Ok(n)
}

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

pub(crate) fn clear(conn: &Connection, mesh_id: &str) -> Res<u64> {
    // The durable completion dedup records of the mesh go with its events.
    conn.execute(
        "DELETE FROM mesh_completion_fingerprints WHERE mesh_id = ?1 AND fingerprint LIKE 'pending::%'",
        [mesh_id],
    )?;
    // Queue entries and dedup records first, so the delete trigger finds none.
    conn.execute("DELETE FROM mesh_inbox_queue WHERE mesh_id = ?1", [mesh_id])?;
    conn.execute("DELETE FROM mesh_inbox_drained WHERE mesh_id = ?1", [mesh_id])?;
    Ok(conn.execute("DELETE FROM mesh_pending_events WHERE mesh_id = ?1", [mesh_id])? as u64)
}

pub(crate) fn count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt = conn.prepare_cached("SELECT COUNT(*) FROM mesh_inbox_queue WHERE mesh_id = ?1")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
}
