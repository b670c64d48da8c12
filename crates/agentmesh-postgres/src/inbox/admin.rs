//! The undrained events counted: in all, and by addressee.

use agentmesh_store::PendingAddressee;

use crate::Res;
use crate::db::{Db, unsigned};

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
