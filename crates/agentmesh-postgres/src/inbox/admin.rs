//! Deletes, retracts, clears, counts, and the undrained events by addressee.

use agentmesh_store::PendingAddressee;

use crate::Res;
use crate::db::{Db, unsigned};
use agentmesh_store::inbox_writes::is_about_task;

/// Deletes the events of `ids` (drained or not); how many there were.
pub(crate) fn delete(db: &Db<'_>, mesh_id: &str, ids: &[String]) -> Res<u64> {
    db.execute("DELETE FROM mesh_pending_events WHERE mesh_id = $1 AND id = ANY($2)", &[&mesh_id, &ids])
}

/// Deletes the undrained `mesh:dispatch_blocked` events about `task_id`.
pub(crate) fn retract_dispatch_blocked(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<u64> {
    let task_id = task_id.trim();
    if task_id.is_empty() {
        return Ok(0);
    }
    // The payloads are matched here rather than in SQL (they may be stored
    // deflated), so a payload that is not JSON is passed over.
    let rows = db.query(
        "SELECT e.id, e.payload FROM mesh_inbox_queue q
           JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
          WHERE q.mesh_id = $1 AND q.event = 'mesh:dispatch_blocked'",
        &[&mesh_id],
    )?;
    let mut ids: Vec<String> = Vec::new();
    for r in &rows {
        if is_about_task(&crate::payload::json(r.get(1)), task_id) {
            ids.push(r.get(0));
        }
    }
    if ids.is_empty() {
        return Ok(0);
    }
    delete(db, mesh_id, &ids)
}

/// The mesh's undrained events.
pub(crate) fn count(db: &Db<'_>, mesh_id: &str) -> Res<u64> {
    let n: i64 =
        db.query_one("SELECT COUNT(*) FROM mesh_inbox_queue WHERE mesh_id = $1", &[&mesh_id])?.get(0);
    Ok(unsigned(n))
}

/// The mesh's undrained events counted by addressee (daemon, run, session), the
/// 50 largest counts. The identity columns and payloads are JSON (queueing
/// serializes them).
pub(crate) fn pending_by_addressee(db: &Db<'_>, mesh_id: &str) -> Res<Vec<PendingAddressee>> {
    let rows = db.query(
        "SELECT COALESCE(e.intended_for::jsonb ->> 'daemonId', e.coordinator_daemon_id) AS daemon,
                e.intended_for::jsonb ->> 'coordinatorRunId' AS run,
                e.intended_for::jsonb ->> 'sessionId' AS session,
                CASE WHEN e.intended_for::jsonb ->> 'sessionId' IS NULL THEN e.payload END AS v1,
                COUNT(*) AS n
           FROM mesh_inbox_queue q
           JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
          WHERE q.mesh_id = $1
          GROUP BY daemon, run, session, v1",
        &[&mesh_id],
    )?;
    let mut groups = Vec::with_capacity(rows.len());
    for r in &rows {
        let v1 = r.get::<_, Option<&[u8]>>(3).map(crate::payload::json);
        groups.push((r.get(0), r.get(1), r.get(2), v1, unsigned(r.get(4))));
    }
    Ok(agentmesh_store::inbox_writes::count_by_addressee(groups))
}
