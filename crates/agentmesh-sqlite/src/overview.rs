//! Reads for overviews (`agentmesh status`): aggregates no hot path needs.

use agentmesh_store::PendingAddressee;
use rusqlite::Connection;

use crate::Res;

/// Undrained events of the mesh grouped by addressee: the v2 `intendedFor`
/// identity when the event has one, else its v1 daemon and session targets.
pub(crate) fn pending_by_addressee(conn: &Connection, mesh_id: &str) -> Res<Vec<PendingAddressee>> {
    let mut stmt = conn.prepare_cached(
        "SELECT COALESCE(json_extract(e.intended_for, '$.daemonId'), e.coordinator_daemon_id) AS daemon,
                json_extract(e.intended_for, '$.coordinatorRunId') AS run,
                COALESCE(json_extract(e.intended_for, '$.sessionId'),
                         CASE WHEN json_valid(e.payload)
                              THEN json_extract(e.payload, '$.targetCoordinatorSessionId') END) AS session,
                COUNT(*) AS n
           FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
          WHERE q.mesh_id = ?1
          GROUP BY daemon, run, session
          ORDER BY n DESC, daemon, run, session
          LIMIT 50",
    )?;
    let rows = stmt.query_map([mesh_id], |r| {
        Ok(PendingAddressee {
            daemon_id: r.get(0)?,
            run_id: r.get(1)?,
            session_id: r.get(2)?,
            count: r.get::<_, i64>(3)? as u64,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}
