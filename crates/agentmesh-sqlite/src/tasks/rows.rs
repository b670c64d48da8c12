//! Task rows: the projected columns written from the payload, loading and
//! saving a row by rowid, dependency edges and the readiness they maintain.

use agentmesh_core::{Task, TaskStatus};
use agentmesh_store::StoreError;
use rusqlite::{Connection, OptionalExtension, Statement, ToSql, params};

use crate::payload::{Bytes, Stored};
use crate::{Fail, Res};

/// A row whose payload cannot be decoded is parked here and never claimed.
pub(super) const HOLD_UNREADABLE: i64 = 9;
/// The SQL form of `hold_of`, for updates that recompute it in place.
pub(super) const HOLD_SQL: &str = "CASE WHEN hold = 9 THEN 9 WHEN deps_unmet > 0 OR blocked = 1 THEN 1 \
                        WHEN parked = 1 THEN 2 ELSE 0 END";

pub(super) use agentmesh_store::projection::{Projection, hold_of};

pub(super) fn corrupt(id: &str, err: impl std::fmt::Display) -> Fail {
    Fail(StoreError::Corrupt { what: format!("task {id}"), problem: err.to_string() })
}

/// The task of a stored payload (see [`crate::payload`]).
pub(crate) fn decode(id: &str, stored: &[u8]) -> Res<Task> {
    agentmesh_store::packed::unpack_task(id, stored).map_err(Fail)
}

/// A task as loaded for a change, with the readiness count the change keeps.
pub(crate) struct Loaded {
    pub(super) task: Task,
    pub(super) deps_unmet: i64,
    /// Where the row is, so that writing it back seeks the table alone.
    pub(super) rowid: i64,
}

pub(super) fn load(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Option<Loaded>> {
    let mut stmt = conn
        .prepare_cached("SELECT payload, deps_unmet, rowid FROM mesh_queue WHERE id = ?1 AND mesh_id = ?2")?;
    let row: Option<(Bytes, i64, i64)> =
        stmt.query_row(params![task_id, mesh_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()?;
    match row {
        Some((payload, deps_unmet, rowid)) => {
            Ok(Some(Loaded { task: decode(task_id, &payload.0)?, deps_unmet, rowid }))
        }
        None => Ok(None),
    }
}

/// Binds the values of a task row, in column order: `?1` id through `?24`
/// mission_id, as both the insert and the update statements take them. Text is
/// bound from the task's own strings, without copies of its own.
pub(super) fn bind_row(stmt: &mut Statement<'_>, task: &Task, deps_unmet: i64) -> rusqlite::Result<()> {
    let p = Projection::of(task);
    let hold = hold_of(deps_unmet, p.blocked, p.parked);
    let payload = Stored::of_task(&p.payload, task.status);
    let values: [&dyn ToSql; 24] = [
        &task.id,
        &task.mesh_id,
        &task.status.as_str(),
        &task.target_node_id,
        &task.target_session_id,
        &task.assigned_node_id,
        &task.assigned_session_id,
        &task.created_at,
        &task.updated_at,
        &payload,
        &p.priority_rank,
        &deps_unmet,
        &p.blocked,
        &p.parked,
        &hold,
        &p.readonly,
        &p.task_mode,
        &p.required_tags,
        &p.not_before_ms,
        &task.assigned_provider_type,
        &task.dispatch_timestamp,
        &(task.epoch() as i64),
        &p.lease_expires_ms,
        &task.mission_id,
    ];
    for (i, value) in values.into_iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, value)?;
    }
    Ok(())
}

/// Inserts a row; the caller has written its dependency edges and counted them.
pub(super) fn insert_row(conn: &Connection, task: &Task, deps_unmet: i64) -> Res<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO mesh_queue (
             id, mesh_id, status, target_node_id, target_session_id, assigned_node_id,
             assigned_session_id, created_at, updated_at, payload, priority_rank, deps_unmet,
             blocked, parked, hold, readonly, task_mode, required_tags, not_before_ms,
             assigned_provider_type, dispatch_ts, epoch, lease_expires_ms, mission_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                 ?19, ?20, ?21, ?22, ?23, ?24)",
    )?;
    bind_row(&mut stmt, task, deps_unmet)?;
    stmt.raw_execute().map_err(|err| {
        match err.sqlite_error_code() {
            // The only unique key a new row can collide on is the task id.
            Some(rusqlite::ErrorCode::ConstraintViolation) => duplicate_id(conn, task),
            _ => Fail::from(err),
        }
    })?;
    Ok(())
}

/// Rewrites a row by its rowid (`?25`); the id and mesh still have to match.
pub(super) const UPDATE_AT: &str = "UPDATE mesh_queue SET
         status = ?3, target_node_id = ?4, target_session_id = ?5, assigned_node_id = ?6,
         assigned_session_id = ?7, created_at = ?8, updated_at = ?9, payload = ?10,
         priority_rank = ?11, deps_unmet = ?12, blocked = ?13, parked = ?14, hold = ?15,
         readonly = ?16, task_mode = ?17, required_tags = ?18, not_before_ms = ?19,
         assigned_provider_type = ?20, dispatch_ts = ?21, epoch = ?22, lease_expires_ms = ?23,
         mission_id = ?24
     WHERE rowid = ?25 AND id = ?1 AND mesh_id = ?2";

/// Rewrites a loaded row from its task, with its readiness count. The row is
/// found by its rowid, so the update seeks the table without going through the
/// id index first.
pub(super) fn update_row(conn: &Connection, task: &Task, deps_unmet: i64, rowid: i64) -> Res<()> {
    let mut stmt = conn.prepare_cached(UPDATE_AT)?;
    bind_row(&mut stmt, task, deps_unmet)?;
    stmt.raw_bind_parameter(25, rowid)?;
    let n = stmt.raw_execute()?;
    if n == 0 {
        return Err(Fail(StoreError::task_not_found(&task.mesh_id, &task.id)));
    }
    Ok(())
}

/// Replaces a task's dependency edges with its `dependsOn` and returns how many of
/// them are not completed (a missing task counts as not completed).
pub(super) fn write_edges(conn: &Connection, task: &Task) -> Res<i64> {
    conn.prepare_cached("DELETE FROM mesh_task_deps WHERE mesh_id = ?1 AND task_id = ?2")?
        .execute(params![task.mesh_id, task.id])?;
    if task.dependencies().is_empty() {
        return Ok(0);
    }
    add_edges(conn, task)
}

/// Adds a new task's dependency edges and counts the unmet ones.
pub(super) fn add_edges(conn: &Connection, task: &Task) -> Res<i64> {
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO mesh_task_deps (mesh_id, task_id, depends_on_id) VALUES (?1, ?2, ?3)",
    )?;
    for dep in task.dependencies() {
        insert.execute(params![task.mesh_id, task.id, dep])?;
    }
    count_unmet(conn, &task.mesh_id, &task.id)
}

pub(super) fn count_unmet(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<i64> {
    let mut stmt = conn.prepare_cached(
        "SELECT COUNT(*) FROM mesh_task_deps d
           LEFT JOIN mesh_queue q ON q.id = d.depends_on_id AND q.mesh_id = d.mesh_id
          WHERE d.mesh_id = ?1 AND d.task_id = ?2
            AND (q.status <> 'completed'
                 OR (q.status IS NULL AND NOT EXISTS (
                        SELECT 1 FROM archive.archived_tasks a
                         WHERE a.id = d.depends_on_id AND a.mesh_id = d.mesh_id AND a.status = 'completed')))",
    )?;
    Ok(stmt.query_row(params![mesh_id, task_id], |r| r.get(0))?)
}

/// Ids of the tasks that depend on `task_id`, in id order (the order a change
/// visits them; the index holds them so).
pub(super) fn dependents(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_id FROM mesh_task_deps WHERE mesh_id = ?1 AND depends_on_id = ?2 ORDER BY task_id",
    )?;
    let ids = stmt.query_map(params![mesh_id, task_id], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
    Ok(ids)
}

/// Recounts the unmet dependencies of one task and its hold.
pub(super) fn refresh_readiness(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<()> {
    let unmet = count_unmet(conn, mesh_id, task_id)?;
    conn.prepare_cached(&format!(
        "UPDATE mesh_queue SET deps_unmet = ?3, hold = {} WHERE mesh_id = ?1 AND id = ?2",
        HOLD_SQL.replace("deps_unmet", "?3")
    ))?
    .execute(params![mesh_id, task_id, unmet])?;
    Ok(())
}

/// Keeps the dependents of `task_id` current after its completed-ness changed.
pub(super) fn refresh_dependents(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<()> {
    for dependent in dependents(conn, mesh_id, task_id)? {
        refresh_readiness(conn, mesh_id, &dependent)?;
    }
    Ok(())
}

/// Writes a task after a lifecycle change, keeping dependents current.
pub(super) fn save(conn: &Connection, before: &Loaded, after: &Task) -> Res<()> {
    update_row(conn, after, before.deps_unmet, before.rowid)?;
    let was_completed = before.task.status == TaskStatus::Completed;
    if was_completed != (after.status == TaskStatus::Completed) {
        refresh_dependents(conn, &after.mesh_id, &after.id)?;
    }
    Ok(())
}

pub(super) fn id_taken(conn: &Connection, task_id: &str) -> Res<bool> {
    let mut stmt = conn.prepare_cached("SELECT 1 FROM mesh_queue WHERE id = ?1")?;
    Ok(stmt.query_row([task_id], |_| Ok(())).optional()?.is_some())
}

/// The mesh that holds the task `task_id`, whichever it is: task ids are unique
/// per database, across meshes.
pub(super) fn mesh_holding(conn: &Connection, task_id: &str) -> Res<Option<String>> {
    let mut stmt = conn.prepare_cached("SELECT mesh_id FROM mesh_queue WHERE id = ?1")?;
    Ok(stmt.query_row([task_id], |r| r.get(0)).optional()?)
}

/// The refusal of `task`, whose id is taken, naming the mesh that holds it.
pub(super) fn duplicate_id(conn: &Connection, task: &Task) -> Fail {
    match mesh_holding(conn, &task.id) {
        Ok(existing) => Fail(StoreError::DuplicateTaskId {
            task_id: task.id.clone(),
            existing_mesh_id: existing.unwrap_or_else(|| task.mesh_id.clone()),
            scope: agentmesh_store::IdScope::Database,
        }),
        Err(err) => err,
    }
}

// ── Migration ───────────────────────────────────────────────────────────────

/// Fills the projected columns and dependency edges of every existing row (used
/// when upgrading a database the original wrote). Rows whose payload cannot be
/// decoded are kept as they are and held out of claims.
pub(crate) fn backfill_projection(conn: &rusqlite::Transaction<'_>) -> Res<()> {
    let rows: Vec<(i64, String, Bytes)> = conn
        .prepare("SELECT rowid, id, payload FROM mesh_queue")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut readable = Vec::new();
    for (rowid, id, payload) in rows {
        match decode(&id, &payload.0) {
            Ok(task) => {
                write_edges(conn, &task)?;
                update_row(conn, &task, 0, rowid)?;
                readable.push(task);
            }
            Err(err) => {
                tracing::warn!(task_id = %id, err = %err.0, "task payload unreadable; held out of claims");
                conn.execute(
                    "UPDATE mesh_queue SET hold = ?1 WHERE rowid = ?2",
                    params![HOLD_UNREADABLE, rowid],
                )?;
            }
        }
    }
    for task in &readable {
        refresh_readiness(conn, &task.mesh_id, &task.id)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::types::Value;

    use crate::query_plan as plan;

    /// A row that was just loaded or scanned is rewritten through its rowid, never
    /// through the id index.
    #[test]
    fn loaded_rows_are_rewritten_by_rowid() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let mut args: Vec<Value> = (1..=24).map(|_| Value::Null).collect();
        args[0] = Value::Text("t".into());
        args[1] = Value::Text("m".into());
        args.push(Value::Integer(7));
        let p = plan(&conn, UPDATE_AT, &args);
        assert!(p.contains("USING INTEGER PRIMARY KEY (rowid=?)"), "{p}");
        assert!(!p.contains("sqlite_autoindex"), "{p}");
    }

    #[test]
    fn hold_sql_mirrors_hold_of() {
        let conn = Connection::open_in_memory().unwrap();
        for deps_unmet in [0, 2] {
            for blocked in [false, true] {
                for parked in [false, true] {
                    let sql = format!(
                        "SELECT {} FROM (SELECT 0 AS hold, ?1 AS deps_unmet, ?2 AS blocked, ?3 AS parked)",
                        HOLD_SQL
                    );
                    let got: i64 =
                        conn.query_row(&sql, params![deps_unmet, blocked, parked], |r| r.get(0)).unwrap();
                    assert_eq!(got, hold_of(deps_unmet, blocked, parked), "{deps_unmet} {blocked} {parked}");
                }
            }
        }
    }
}
