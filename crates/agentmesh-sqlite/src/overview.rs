//! Reads for overviews (`agentmesh status`, `agentmesh meshes`): aggregates no hot
//! path needs.

use std::collections::BTreeMap;

use agentmesh_core::TaskStatus;
use agentmesh_store::{MeshSummary, PendingAddressee, StatusCount};
use rusqlite::Connection;

use crate::Res;
use crate::payload::Json;

/// Undrained events of the mesh grouped by addressee: the v2 `intendedFor`
/// identity when the event has one, else its v1 daemon and session targets (the
/// session read from the payload, in Rust: it may be stored deflated).
pub(crate) fn pending_by_addressee(conn: &Connection, mesh_id: &str) -> Res<Vec<PendingAddressee>> {
    let mut stmt = conn.prepare_cached(
        "SELECT COALESCE(json_extract(e.intended_for, '$.daemonId'), e.coordinator_daemon_id) AS daemon,
                json_extract(e.intended_for, '$.coordinatorRunId') AS run,
                json_extract(e.intended_for, '$.sessionId') AS session,
                CASE WHEN json_extract(e.intended_for, '$.sessionId') IS NULL THEN e.payload END AS v1,
                COUNT(*) AS n
           FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
          WHERE q.mesh_id = ?1
          GROUP BY daemon, run, session, v1",
    )?;
    let groups = stmt
        .query_map([mesh_id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get::<_, Option<Json>>(3)?.map(String::from),
                r.get::<_, i64>(4)? as u64,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(agentmesh_store::inbox_writes::count_by_addressee(groups))
}

/// Every mesh with a row in any mesh-scoped table, with its counts, by mesh id.
///
/// The reads share the store's read transaction, so the counts are of one moment. Each
/// count walks an index led by `mesh_id` (tasks by status, the inbox queue, the
/// ledger's slice index, missions by status), never a payload.
pub(crate) fn mesh_summaries(conn: &Connection) -> Res<Vec<MeshSummary>> {
    let tx = conn;
    let mut meshes: BTreeMap<String, MeshSummary> = BTreeMap::new();
    let mut ids = tx.prepare_cached(
        "SELECT mesh_id FROM mesh_queue UNION SELECT mesh_id FROM mesh_event_ledger
         UNION SELECT mesh_id FROM mesh_pending_events UNION SELECT mesh_id FROM mesh_missions
         UNION SELECT mesh_id FROM mesh_session_delivery UNION SELECT mesh_id FROM mesh_direct_dispatches
         UNION SELECT mesh_id FROM remote_idle_sessions",
    )?;
    for mesh_id in ids.query_map([], |r| r.get::<_, String>(0))? {
        let mesh_id = mesh_id?;
        let summary = MeshSummary {
            mesh_id: mesh_id.clone(),
            tasks: Vec::new(),
            pending_events: 0,
            ledger_entries: 0,
            missions: 0,
        };
        meshes.insert(mesh_id, summary);
    }
    drop(ids);
    let mut statuses =
        tx.prepare_cached("SELECT mesh_id, status, COUNT(*) FROM mesh_queue GROUP BY mesh_id, status")?;
    let rows = statuses
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))?;
    for row in rows {
        let (mesh_id, status, count) = row?;
        // A status this build does not know (a row written by something else) is
        // not counted under a wrong name.
        if let (Some(summary), Ok(status)) = (meshes.get_mut(&mesh_id), status.parse::<TaskStatus>()) {
            summary.tasks.push(StatusCount { status, count: count as u64 });
        }
    }
    drop(statuses);
    for (mesh_id, count) in
        counts_by_mesh(tx, "SELECT mesh_id, COUNT(*) FROM mesh_inbox_queue GROUP BY mesh_id")?
    {
        if let Some(summary) = meshes.get_mut(&mesh_id) {
            summary.pending_events = count;
        }
    }
    for (mesh_id, count) in
        counts_by_mesh(tx, "SELECT mesh_id, COUNT(*) FROM mesh_event_ledger GROUP BY mesh_id")?
    {
        if let Some(summary) = meshes.get_mut(&mesh_id) {
            summary.ledger_entries = count;
        }
    }
    for (mesh_id, count) in
        counts_by_mesh(tx, "SELECT mesh_id, COUNT(*) FROM mesh_missions GROUP BY mesh_id")?
    {
        if let Some(summary) = meshes.get_mut(&mesh_id) {
            summary.missions = count;
        }
    }
    let mut out: Vec<MeshSummary> = meshes.into_values().collect();
    for summary in &mut out {
        summary.tasks.sort_by_key(|c| TaskStatus::ALL.iter().position(|s| *s == c.status));
    }
    Ok(out)
}

/// The `(mesh_id, count)` rows of a `GROUP BY mesh_id` count.
fn counts_by_mesh(conn: &Connection, sql: &str) -> Res<Vec<(String, u64)>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}
