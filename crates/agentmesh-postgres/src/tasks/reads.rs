//! Reads of the queue.

use agentmesh_core::{Task, TaskStatus, Timestamp};
use agentmesh_store::{ActiveAssignment, StatusCount};
use postgres::Row;

use super::rows::decode;
use crate::Res;
use crate::db::{Db, unsigned};

/// Decodes rows of `(id, payload)`.
fn decode_rows(rows: &[Row]) -> Res<Vec<Task>> {
    rows.iter().map(|r| decode(r.get(0), r.get(1))).collect()
}

/// The task `task_id`, read without a lock: a read never makes a claim step
/// over the row (its `SKIP LOCKED`) nor waits for a write holding it.
pub(crate) fn find(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<Option<Task>> {
    let row =
        db.query_opt("SELECT payload FROM mesh_queue WHERE mesh_id = $1 AND id = $2", &[&mesh_id, &task_id])?;
    row.map(|r| decode(task_id, r.get(0))).transpose()
}

/// The mesh's tasks in enqueue order, of the given statuses (all when none).
pub(crate) fn entries(db: &Db<'_>, mesh_id: &str, statuses: &[TaskStatus]) -> Res<Vec<Task>> {
    let rows = if statuses.is_empty() {
        db.query(
            "SELECT id, payload FROM mesh_queue WHERE mesh_id = $1 ORDER BY created_at ASC, row_id ASC",
            &[&mesh_id],
        )?
    } else {
        let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        db.query(
            "SELECT id, payload FROM mesh_queue WHERE mesh_id = $1 AND status = ANY($2)
              ORDER BY created_at ASC, row_id ASC",
            &[&mesh_id, &statuses],
        )?
    };
    decode_rows(&rows)
}

/// When the mesh's oldest pending task was enqueued. `created_at` is the ISO form
/// every writer uses (see `Timestamp::iso`), so the smallest string is the
/// earliest instant; a value that does not parse counts as no answer.
pub(crate) fn oldest_pending_created_at(db: &Db<'_>, mesh_id: &str) -> Res<Option<Timestamp>> {
    let row = db.query_one(
        "SELECT MIN(created_at) FROM mesh_queue WHERE mesh_id = $1 AND status = 'pending'",
        &[&mesh_id],
    )?;
    let oldest: Option<String> = row.get(0);
    Ok(oldest.as_deref().and_then(Timestamp::parse_iso))
}

pub(crate) fn stats(db: &Db<'_>, mesh_id: &str) -> Res<Vec<StatusCount>> {
    let rows =
        db.query("SELECT status, COUNT(*) FROM mesh_queue WHERE mesh_id = $1 GROUP BY status", &[&mesh_id])?;
    let counts: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut out = Vec::new();
    for status in TaskStatus::ALL {
        if let Some((_, n)) = counts.iter().find(|(s, _)| s == status.as_str()) {
            out.push(StatusCount { status, count: unsigned(*n) });
        }
    }
    Ok(out)
}

pub(crate) fn active_assignments(db: &Db<'_>, mesh_id: &str) -> Res<Vec<ActiveAssignment>> {
    let rows = db.query(
        "SELECT id, payload FROM mesh_queue WHERE mesh_id = $1 AND status = 'assigned'
          ORDER BY dispatch_ts ASC NULLS FIRST, row_id ASC",
        &[&mesh_id],
    )?;
    Ok(decode_rows(&rows)?.into_iter().map(ActiveAssignment::from).collect())
}

/// The tasks assigned to `session_id` in a mesh. Session ids match after
/// trimming ASCII whitespace, as the original compared them: a row written with
/// its session padded still belongs to that session.
pub(super) fn assigned_to_session(db: &Db<'_>, mesh_id: &str, session_id: &str) -> Res<Vec<Task>> {
    let session = session_id.trim();
    if session.is_empty() {
        return Ok(Vec::new());
    }
    let rows = db.query(
        "SELECT id, payload FROM mesh_queue
          WHERE mesh_id = $1 AND status = 'assigned'
            AND btrim(assigned_session_id, ' ' || chr(9) || chr(10) || chr(11) || chr(12) || chr(13)) = $2
          ORDER BY row_id ASC",
        &[&mesh_id, &session],
    )?;
    decode_rows(&rows)
}

/// The (mesh, task) of every assigned task whose lease ran out before `now`, in
/// every mesh, soonest expired first.
pub(crate) fn expired_leases(db: &Db<'_>, now: Timestamp) -> Res<Vec<(String, String)>> {
    let rows = db.query(
        "/* all meshes */ SELECT mesh_id, id FROM mesh_queue
          WHERE status = 'assigned' AND lease_expires_ms IS NOT NULL AND lease_expires_ms < $1
          ORDER BY lease_expires_ms, mesh_id, id",
        &[&now.millis()],
    )?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
