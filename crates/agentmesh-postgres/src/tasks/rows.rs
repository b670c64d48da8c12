//! Task rows: the projected columns written from the payload, loading and
//! saving a row, dependency edges and the readiness they maintain.

use std::sync::Arc;

use agentmesh_core::{Task, TaskStatus};
use agentmesh_store::StoreError;

use crate::columns::statement_row;
use crate::db::{Db, Owned, Write};
use crate::{Fail, Res};

pub(super) use agentmesh_store::projection::{Projection, hold_of};

pub(super) fn corrupt(id: &str, err: impl std::fmt::Display) -> Fail {
    crate::db::corrupt(format!("task {id}"), err)
}

/// The task of a stored payload (see [`crate::payload`]).
pub(crate) fn decode(id: &str, stored: &[u8]) -> Res<Task> {
    agentmesh_store::packed::unpack_task(id, stored).map_err(Fail)
}

/// A task as loaded for a change, with the readiness count the change keeps.
pub(crate) struct Loaded {
    pub(super) task: Task,
    pub(super) deps_unmet: i64,
    /// Where the row is (its `row_id`), so that writing it back needs no id lookup.
    pub(super) row_id: i64,
    /// What is known of the tasks that depend on it.
    pub(super) dependents: Dependents,
}

/// What a loaded task's change knows of the tasks that depend on it.
pub(super) enum Dependents {
    /// Their ids, read with it.
    Read(Vec<String>),
    /// Nothing yet: read when the change needs them.
    Unread,
    /// Taken to be none, for a task loaded from this store's memory rather
    /// than its row (see `remembered`): when the change needs them, a
    /// statement that fails the transaction unless there are none goes out
    /// ahead of its writes.
    /// Whether the check went out already is kept in the cell.
    NoneChecked(std::cell::Cell<bool>),
}

impl Loaded {
    /// The ids of the tasks that depend on this one: those read with it, or
    /// read now (or none, checked by the commit, see [`Dependents::NoneChecked`]).
    pub(super) fn dependents(&self, db: &Db<'_>) -> Res<Vec<String>> {
        match &self.dependents {
            Dependents::Read(ids) => Ok(ids.clone()),
            Dependents::Unread => dependents(db, &self.task.mesh_id, &self.task.id),
            Dependents::NoneChecked(sent) => {
                if !sent.replace(true) {
                    super::remembered::check_no_dependents(db, &self.task);
                }
                Ok(Vec::new())
            }
        }
    }
}

/// Loads a task for a change, locking its row until the transaction ends,
/// with the ids of its dependents. Both go out in one round trip; the
/// dependents are read by a statement of their own that starts once the lock
/// is held, so an enqueue that added a dependent while this waited for the
/// row is seen (its `FOR KEY SHARE` on this row is what this waited for).
pub(super) fn load(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<Option<Loaded>> {
    let (mut rows, dependents) = db.query_pair(
        (
            "SELECT payload, deps_unmet, row_id FROM mesh_queue WHERE mesh_id = $1 AND id = $2 FOR UPDATE",
            &[&mesh_id, &task_id],
        ),
        (DEPENDENTS, &[&mesh_id, &task_id]),
    )?;
    match rows.pop() {
        Some(row) => Ok(Some(Loaded {
            task: decode(task_id, row.get(0))?,
            deps_unmet: row.get(1),
            row_id: row.get(2),
            dependents: Dependents::Read(dependents.iter().map(|r| r.get(0)).collect()),
        })),
        None => Ok(None),
    }
}

/// The ids of the tasks that depend on `$2`, in id order (the order a change
/// visits and locks them).
const DEPENDENTS: &str =
    "SELECT task_id FROM mesh_task_deps WHERE mesh_id = $1 AND depends_on_id = $2 ORDER BY task_id";

statement_row! {
    /// A task row's columns after its mesh, `$2` id through `$24` mission_id,
    /// as the insert and the update take them ([`TaskRow::values`]).
    pub(super) struct TaskRow {
        id: String,
        status: &'static str,
        target_node_id: Option<String>,
        target_session_id: Option<String>,
        assigned_node_id: Option<String>,
        assigned_session_id: Option<String>,
        created_at: String,
        updated_at: String,
        payload: Vec<u8>,
        priority_rank: i64,
        deps_unmet: i64,
        blocked: i64,
        parked: i64,
        hold: i64,
        readonly: i64,
        task_mode: Option<&'static str>,
        required_tags: Option<String>,
        not_before_ms: Option<i64>,
        assigned_provider_type: Option<String>,
        dispatch_ts: Option<String>,
        epoch: i64,
        lease_expires_ms: Option<i64>,
        mission_id: Option<String>,
    }
}

impl TaskRow {
    /// The row of `task` with its readiness count.
    pub(super) fn of(task: &Task, deps_unmet: i64) -> TaskRow {
        let p = Projection::of(task);
        TaskRow {
            id: task.id.clone(),
            status: task.status.as_str(),
            target_node_id: task.target_node_id.clone(),
            target_session_id: task.target_session_id.clone(),
            assigned_node_id: task.assigned_node_id.clone(),
            assigned_session_id: task.assigned_session_id.clone(),
            created_at: task.created_at.clone(),
            updated_at: task.updated_at.clone(),
            payload: crate::payload::stored_task(&p.payload, task.status),
            priority_rank: p.priority_rank,
            deps_unmet,
            blocked: i64::from(p.blocked),
            parked: i64::from(p.parked),
            hold: hold_of(deps_unmet, p.blocked, p.parked),
            readonly: i64::from(p.readonly),
            task_mode: p.task_mode,
            required_tags: p.required_tags,
            not_before_ms: p.not_before_ms,
            assigned_provider_type: task.assigned_provider_type.clone(),
            dispatch_ts: task.dispatch_timestamp.clone(),
            epoch: i64::try_from(task.epoch()).unwrap_or(i64::MAX),
            lease_expires_ms: p.lease_expires_ms,
            mission_id: task.mission_id.clone(),
        }
    }
}

/// The parameters of a one-row statement of `task`: its mesh, then its row.
fn row_values(task: &Task, deps_unmet: i64) -> Vec<Owned> {
    TaskRow::of(task, deps_unmet).values(&task.mesh_id)
}

/// Inserts a row; the caller has written its dependency edges and counted them.
/// An id its mesh holds already, hot or archived, is refused
/// ([`StoreError::DuplicateTaskId`]): the insert itself looks into the archive.
pub(super) fn insert_row(db: &Db<'_>, task: &Task, deps_unmet: i64) -> Res<()> {
    let n = db.execute_owned(
        "INSERT INTO mesh_queue (
             id, mesh_id, status, target_node_id, target_session_id, assigned_node_id,
             assigned_session_id, created_at, updated_at, payload, priority_rank, deps_unmet,
             blocked, parked, hold, readonly, task_mode, required_tags, not_before_ms,
             assigned_provider_type, dispatch_ts, epoch, lease_expires_ms, mission_id)
         SELECT $2::text, $1::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text,
                $10::bytea, $11::bigint, $12::bigint, $13::bigint, $14::bigint, $15::bigint, $16::bigint,
                $17::text, $18::text, $19::bigint, $20::text, $21::text, $22::bigint, $23::bigint, $24::text
          WHERE NOT EXISTS (SELECT 1 FROM mesh_queue_archive a WHERE a.mesh_id = $1 AND a.id = $2)
         ON CONFLICT (mesh_id, id) DO NOTHING",
        &row_values(task, deps_unmet),
    )?;
    if n == 0 {
        return Err(duplicate_id(task));
    }
    Ok(())
}

/// The statement that rewrites a row by its `row_id` (`$25`), the mesh (`$1`)
/// and id (`$2`) still to match, and `$extra` conditions after them.
macro_rules! update_row {
    ($extra:literal) => {
        concat!(
            "UPDATE mesh_queue SET
                 status = $3, target_node_id = $4, target_session_id = $5, assigned_node_id = $6,
                 assigned_session_id = $7, created_at = $8, updated_at = $9, payload = $10,
                 priority_rank = $11, deps_unmet = $12, blocked = $13, parked = $14, hold = $15,
                 readonly = $16, task_mode = $17, required_tags = $18, not_before_ms = $19,
                 assigned_provider_type = $20, dispatch_ts = $21, epoch = $22,
                 lease_expires_ms = $23, mission_id = $24
             WHERE mesh_id = $1 AND row_id = $25 AND id = $2",
            $extra,
            " RETURNING 1"
        )
    };
}

/// Rewrites a row. Returns a row when it rewrote one, so a row missing from
/// the mesh fails the write (see [`crate::db::Write`]).
static UPDATE_ROW: Write = Write { bodies: &[update_row!("")], checked: true };

/// [`UPDATE_ROW`] of a task no task may depend on: it fails, as a row missing
/// would, when one does (see `remembered`).
static UPDATE_ROW_WITHOUT_DEPENDENTS: Write = Write {
    bodies: &[update_row!(
        " AND NOT EXISTS (SELECT 1 FROM mesh_task_deps WHERE mesh_id = $1 AND depends_on_id = $2)"
    )],
    checked: true,
};

/// Rewrites a loaded row from its task, with its readiness count. The write
/// goes out with the operation's next statement (see [`Db::defer_write`]); a
/// row missing from the mesh fails it on the server, as
/// [`StoreError::TaskNotFound`], so it needs no check on the client and may go
/// out with the COMMIT.
pub(super) fn update_row(db: &Db<'_>, task: &Task, deps_unmet: i64, row_id: i64) {
    let mut values = row_values(task, deps_unmet);
    values.push(Arc::new(row_id));
    let (mesh_id, task_id) = (task.mesh_id.clone(), task.id.clone());
    db.defer_write(
        &UPDATE_ROW,
        values,
        Some(Arc::new(move || StoreError::task_not_found(&mesh_id, &task_id))),
    );
}

/// Writes a task loaded from memory whose change takes it to have no
/// dependents ([`Dependents::NoneChecked`]): the row's update checks it, and
/// fails the transaction as stale when one depends on it (no statement of
/// its own, see `remembered`).
fn update_row_without_dependents(db: &Db<'_>, task: &Task, before: &Loaded) {
    let mut values = row_values(task, before.deps_unmet);
    values.push(Arc::new(before.row_id));
    db.defer_write(&UPDATE_ROW_WITHOUT_DEPENDENTS, values, Some(super::remembered::stale()));
}

/// Replaces a task's dependency edges with its `dependsOn` and returns how many of
/// them are not completed (a missing task counts as not completed).
pub(super) fn write_edges(db: &Db<'_>, task: &Task) -> Res<i64> {
    db.execute("DELETE FROM mesh_task_deps WHERE mesh_id = $1 AND task_id = $2", &[&task.mesh_id, &task.id])?;
    if task.dependencies().is_empty() {
        return Ok(0);
    }
    add_edges(db, task)
}

/// Adds a new task's dependency edges and counts the unmet ones. The
/// dependencies that exist are locked `FOR KEY SHARE` first, and counted by the
/// next statement: a completion of one of them (which locks it `FOR UPDATE`)
/// either committed before the count, which sees it, or waits for this
/// transaction and then finds the new edge among the dependents it refreshes.
/// One that does not exist yet counts as unmet; its enqueue waits for the
/// graph lock this one holds. All three statements go out in one round trip.
pub(super) fn add_edges(db: &Db<'_>, task: &Task) -> Res<i64> {
    let deps: Vec<String> = task.dependencies().to_vec();
    db.defer(
        "INSERT INTO mesh_task_deps (mesh_id, task_id, depends_on_id)
         SELECT $1, $2, dep FROM unnest($3::text[]) AS dep
         ON CONFLICT (mesh_id, task_id, depends_on_id) DO NOTHING",
        vec![Arc::new(task.mesh_id.clone()), Arc::new(task.id.clone()), Arc::new(deps.clone())],
        None,
    );
    db.defer(
        "SELECT 1 FROM mesh_queue WHERE mesh_id = $1 AND id = ANY($2::text[]) ORDER BY id FOR KEY SHARE",
        vec![Arc::new(task.mesh_id.clone()), Arc::new(deps)],
        None,
    );
    count_unmet(db, &task.mesh_id, &task.id)
}

/// The condition of an unmet edge `d` whose dependency's hot row is `q` (left
/// joined): the dependency is not completed, or it is in neither the hot table
/// nor, completed, in the archive (an archived completed task stays met).
macro_rules! unmet_edge {
    () => {
        "(q.status <> 'completed'
          OR (q.status IS NULL AND NOT EXISTS (
                 SELECT 1 FROM mesh_queue_archive a
                  WHERE a.mesh_id = d.mesh_id AND a.id = d.depends_on_id AND a.status = 'completed')))"
    };
}

/// Counts a task's unmet dependencies.
pub(super) fn count_unmet(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<i64> {
    let row = db.query_one(
        concat!(
            "SELECT COUNT(*) FROM mesh_task_deps d
               LEFT JOIN mesh_queue q ON q.mesh_id = d.mesh_id AND q.id = d.depends_on_id
              WHERE d.mesh_id = $1 AND d.task_id = $2 AND ",
            unmet_edge!()
        ),
        &[&mesh_id, &task_id],
    )?;
    Ok(row.get(0))
}

/// Ids of the tasks that depend on `task_id`, in id order (the order a change
/// visits them).
pub(super) fn dependents(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<Vec<String>> {
    let rows = db.query(DEPENDENTS, &[&mesh_id, &task_id])?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Recounts a task's unmet dependencies and recomputes its hold as
/// [`hold_of`] does, keeping an unreadable row's hold (9).
const REFRESH_READINESS: &str = concat!(
    "UPDATE mesh_queue SET deps_unmet = c.unmet,
         hold = CASE WHEN hold = 9 THEN 9 WHEN c.unmet > 0 OR blocked = 1 THEN 1
                     WHEN parked = 1 THEN 2 ELSE 0 END
     FROM (SELECT COUNT(*) AS unmet FROM mesh_task_deps d
             LEFT JOIN mesh_queue q ON q.mesh_id = d.mesh_id AND q.id = d.depends_on_id
            WHERE d.mesh_id = $1 AND d.task_id = $2 AND ",
    unmet_edge!(),
    ") c
     WHERE mesh_id = $1 AND id = $2"
);

/// Recounts the unmet dependencies of one task and its hold. The row is locked
/// first and counted by the next statement (both in one round trip), so two
/// completions of its dependencies count one after the other, the second
/// seeing the first.
pub(super) fn refresh_readiness(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<()> {
    db.query_pair(
        ("SELECT 1 FROM mesh_queue WHERE mesh_id = $1 AND id = $2 FOR UPDATE", &[&mesh_id, &task_id]),
        (REFRESH_READINESS, &[&mesh_id, &task_id]),
    )?;
    Ok(())
}

/// Keeps the dependents of `task_id` current after its completed-ness changed.
pub(super) fn refresh_dependents(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<()> {
    for dependent in dependents(db, mesh_id, task_id)? {
        refresh_readiness(db, mesh_id, &dependent)?;
    }
    Ok(())
}

/// Writes a task after a lifecycle change, keeping dependents current.
pub(super) fn save(db: &Db<'_>, before: &Loaded, after: &Task) -> Res<()> {
    let was_completed = before.task.status == TaskStatus::Completed;
    let completion_changed = was_completed != (after.status == TaskStatus::Completed);
    if let Dependents::NoneChecked(sent) = &before.dependents
        && completion_changed
        && !sent.replace(true)
    {
        update_row_without_dependents(db, after, before);
        return Ok(());
    }
    update_row(db, after, before.deps_unmet, before.row_id);
    if completion_changed {
        for dependent in before.dependents(db)? {
            refresh_readiness(db, &after.mesh_id, &dependent)?;
        }
    }
    Ok(())
}

/// Whether the mesh holds a task `task_id`, hot or archived (task ids are
/// unique per mesh).
pub(super) fn id_taken(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<bool> {
    let row = db.query_one(
        "SELECT EXISTS (SELECT 1 FROM mesh_queue WHERE mesh_id = $1 AND id = $2)
             OR EXISTS (SELECT 1 FROM mesh_queue_archive WHERE mesh_id = $1 AND id = $2)",
        &[&mesh_id, &task_id],
    )?;
    Ok(row.get(0))
}

/// The refusal of `task`, whose id its mesh holds already.
pub(super) fn duplicate_id(task: &Task) -> Fail {
    Fail(StoreError::DuplicateTaskId {
        task_id: task.id.clone(),
        existing_mesh_id: task.mesh_id.clone(),
        scope: agentmesh_store::IdScope::Mesh,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_of_orders_unmet_and_blocked_before_parked() {
        assert_eq!(hold_of(0, false, false), 0);
        assert_eq!(hold_of(2, false, true), 1);
        assert_eq!(hold_of(0, true, true), 1);
        assert_eq!(hold_of(0, false, true), 2);
    }
}
