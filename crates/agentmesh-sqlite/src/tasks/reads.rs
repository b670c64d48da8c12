//! Reads of the queue.

use agentmesh_core::{Task, TaskStatus, Timestamp};
use agentmesh_store::{ActiveAssignment, StatusCount};
use rusqlite::types::Value;
use rusqlite::{Connection, params, params_from_iter};

use super::rows::{decode, load};
use crate::Res;
use crate::payload::Bytes;

fn decode_rows(rows: Vec<(String, Bytes)>) -> Res<Vec<Task>> {
    rows.into_iter().map(|(id, payload)| decode(&id, &payload.0)).collect()
}

pub(crate) fn find(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Option<Task>> {
    Ok(load(conn, mesh_id, task_id)?.map(|l| l.task))
}

pub(crate) fn entries(conn: &Connection, mesh_id: &str, statuses: &[TaskStatus]) -> Res<Vec<Task>> {
    let mut sql = String::from("SELECT id, payload FROM mesh_queue WHERE mesh_id = +?");
    let mut args = vec![Value::Text(mesh_id.to_owned())];
    if !statuses.is_empty() {
        sql.push_str(&format!(" AND status IN ({})", vec!["+?"; statuses.len()].join(", ")));
        args.extend(statuses.iter().map(|s| Value::Text(s.as_str().to_owned())));
    }
    sql.push_str(" ORDER BY created_at ASC, rowid ASC");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params_from_iter(args.iter()), |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    decode_rows(rows)
}

/// The statement of [`oldest_pending_created_at`]: one seek into
/// `idx_mesh_queue_mesh_status_created` (mesh, status, created_at), whose first
/// entry for the mesh's pending tasks holds the smallest `created_at`.
const OLDEST_PENDING_SQL: &str =
    "SELECT MIN(created_at) FROM mesh_queue WHERE mesh_id = ?1 AND status = 'pending'";

/// When the mesh's oldest pending task was enqueued. `created_at` is the ISO form
/// every writer uses (see `Timestamp::iso`), so the smallest string is the
/// earliest instant; a value that does not parse counts as no answer.
pub(crate) fn oldest_pending_created_at(conn: &Connection, mesh_id: &str) -> Res<Option<Timestamp>> {
    let mut stmt = conn.prepare_cached(OLDEST_PENDING_SQL)?;
    let oldest: Option<String> = stmt.query_row([mesh_id], |r| r.get(0))?;
    Ok(oldest.as_deref().and_then(Timestamp::parse_iso))
}

pub(crate) fn stats(conn: &Connection, mesh_id: &str) -> Res<Vec<StatusCount>> {
    let mut stmt =
        conn.prepare_cached("SELECT status, COUNT(*) FROM mesh_queue WHERE mesh_id = ?1 GROUP BY status")?;
    let rows = stmt
        .query_map([mesh_id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for status in TaskStatus::ALL {
        if let Some((_, n)) = rows.iter().find(|(s, _)| s == status.as_str()) {
            out.push(StatusCount { status, count: *n as u64 });
        }
    }
    Ok(out)
}

pub(crate) fn active_assignments(conn: &Connection, mesh_id: &str) -> Res<Vec<ActiveAssignment>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, payload FROM mesh_queue WHERE mesh_id = +?1 AND status = 'assigned'
          ORDER BY dispatch_ts ASC, rowid ASC",
    )?;
    let rows = stmt.query_map([mesh_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<Vec<_>, _>>()?;
    Ok(decode_rows(rows)?.into_iter().map(ActiveAssignment::from).collect())
}

/// The tasks assigned to `session_id` in a mesh. Session ids match after
/// trimming, as the original compared them: a row written with its session padded
/// still belongs to that session.
pub(super) fn assigned_to_session(conn: &Connection, mesh_id: &str, session_id: &str) -> Res<Vec<Task>> {
    let session = session_id.trim();
    if session.is_empty() {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT id, payload FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
          WHERE mesh_id = ?1 AND status = 'assigned'
            AND TRIM(assigned_session_id, ' ' || char(9, 10, 11, 12, 13)) = ?2",
    )?;
    let rows = stmt
        .query_map(params![mesh_id, session], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    decode_rows(rows)
}

pub(crate) fn expired_leases(conn: &Connection, now: Timestamp) -> Res<Vec<(String, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT mesh_id, id FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
          WHERE status = 'assigned' AND lease_expires_ms IS NOT NULL AND lease_expires_ms < ?1
          ORDER BY lease_expires_ms",
    )?;
    let rows =
        stmt.query_map([now.millis()], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Tasks in a mesh.
pub(crate) fn mesh_task_count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt = conn.prepare_cached("SELECT COUNT(*) FROM mesh_queue WHERE mesh_id = ?1")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::query_plan as plan;

    /// The oldest pending task is found by one seek into the (mesh, status,
    /// created_at) index, whatever the queue depth.
    #[test]
    fn the_oldest_pending_task_is_one_index_seek() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        conn.execute_batch("ANALYZE").unwrap();
        let p = plan(&conn, OLDEST_PENDING_SQL, &[Value::Text("m".to_owned())]);
        assert!(p.contains("idx_mesh_queue_mesh_status_created"), "{p}");
        assert!(!p.contains("SCAN") && !p.contains("TEMP B-TREE"), "{p}");
    }
}
