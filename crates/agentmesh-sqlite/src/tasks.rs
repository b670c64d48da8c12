//! The work queue: `mesh_queue` rows, their projected columns, dependency edges,
//! claims and the task lifecycle.
//!
//! The JSON `payload` of a row is the task (the original's queue entry) and the
//! source of truth. Every write also rewrites the row's projected columns from it
//! ([`Projection`]), so a claim selects candidates through indexes in claim order
//! and decodes only the winner. Readiness is maintained, not recomputed per claim:
//! `deps_unmet` counts a task's dependencies that are not completed and is updated
//! whenever one of them changes status; `hold` folds it together with the block and
//! the parking into one indexed number (0 = claimable as far as the task goes).

use agentmesh_core::TaskPriority;
use agentmesh_core::claim::check_gates;
use agentmesh_core::ledger::kinds;
use agentmesh_core::lifecycle::{self, match_completion};
use agentmesh_core::{
    CandidateFacts, ClaimRefusal, Claimant, LedgerEntry, NewTask, NodeLoad, RequeueOptions, Requeued, Task,
    TaskMode, TaskStatus, Timestamp, daemon_id, enqueue,
};
use agentmesh_store::{
    ActiveAssignment, ClaimOptions, ClaimOutcome, CompletionReport, Outcome, StatusCount, StoreError,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Statement, ToSql, params, params_from_iter};
use serde_json::json;

use crate::{Fail, Res, ledger};

/// A row whose payload cannot be decoded is parked here and never claimed.
const HOLD_UNREADABLE: i64 = 9;
/// The SQL form of [`hold_of`], for updates that recompute it in place.
const HOLD_SQL: &str = "CASE WHEN hold = 9 THEN 9 WHEN deps_unmet > 0 OR blocked = 1 THEN 1 \
                        WHEN parked = 1 THEN 2 ELSE 0 END";
/// How many candidates a refusal diagnosis looks at per stream.
const DIAGNOSIS_LIMIT: usize = 256;

/// The claim hold of a task: 1 when a dependency is unmet or it is blocked, 2 when
/// parked, else 0. Mirrored by [`HOLD_SQL`].
fn hold_of(deps_unmet: i64, blocked: bool, parked: bool) -> i64 {
    if deps_unmet > 0 || blocked {
        1
    } else if parked {
        2
    } else {
        0
    }
}

/// The projected columns of a task row.
struct Projection {
    payload: String,
    priority_rank: i64,
    blocked: bool,
    parked: bool,
    readonly: bool,
    task_mode: Option<&'static str>,
    required_tags: Option<String>,
    not_before_ms: Option<i64>,
    lease_expires_ms: Option<i64>,
}

impl Projection {
    fn of(task: &Task) -> Projection {
        Projection {
            payload: task.to_json(),
            priority_rank: task.priority_rank(),
            blocked: task.blocked_reason.as_deref().is_some_and(|r| !r.is_empty()),
            parked: task.is_parked(),
            readonly: task.is_readonly(),
            task_mode: task.task_mode.map(TaskMode::as_str),
            required_tags: (!task.tags_required().is_empty())
                .then(|| serde_json::to_string(task.tags_required()).expect("strings serialize")),
            not_before_ms: task.not_before_millis(),
            lease_expires_ms: task
                .lease_expires_at
                .as_deref()
                .and_then(Timestamp::parse_iso)
                .map(Timestamp::millis),
        }
    }
}

fn corrupt(id: &str, err: impl std::fmt::Display) -> Fail {
    Fail(StoreError::Corrupt { what: format!("task {id}"), problem: err.to_string() })
}

fn decode(id: &str, payload: &str) -> Res<Task> {
    Task::from_json(payload).map_err(|e| corrupt(id, e))
}

fn not_found(mesh_id: &str, task_id: &str) -> Fail {
    Fail(StoreError::TaskNotFound { mesh_id: mesh_id.to_owned(), task_id: task_id.to_owned() })
}

// ── Rows ────────────────────────────────────────────────────────────────────

/// A task as loaded for a change, with the readiness count the change keeps.
struct Loaded {
    task: Task,
    deps_unmet: i64,
    /// Where the row is, so that writing it back seeks the table alone.
    rowid: i64,
}

fn load(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Option<Loaded>> {
    let mut stmt = conn
        .prepare_cached("SELECT payload, deps_unmet, rowid FROM mesh_queue WHERE id = ?1 AND mesh_id = ?2")?;
    let row: Option<(String, i64, i64)> =
        stmt.query_row(params![task_id, mesh_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()?;
    match row {
        Some((payload, deps_unmet, rowid)) => {
            Ok(Some(Loaded { task: decode(task_id, &payload)?, deps_unmet, rowid }))
        }
        None => Ok(None),
    }
}

fn load_required(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Loaded> {
    load(conn, mesh_id, task_id)?.ok_or_else(|| not_found(mesh_id, task_id))
}

/// Binds the values of a task row, in column order: `?1` id through `?24`
/// mission_id, as both the insert and the update statements take them. Text is
/// bound from the task's own strings, without copies of its own.
fn bind_row(stmt: &mut Statement<'_>, task: &Task, deps_unmet: i64) -> rusqlite::Result<()> {
    let p = Projection::of(task);
    let hold = hold_of(deps_unmet, p.blocked, p.parked);
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
        &p.payload,
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
fn insert_row(conn: &Connection, task: &Task, deps_unmet: i64) -> Res<()> {
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
const UPDATE_AT: &str = "UPDATE mesh_queue SET
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
fn update_row(conn: &Connection, task: &Task, deps_unmet: i64, rowid: i64) -> Res<()> {
    let mut stmt = conn.prepare_cached(UPDATE_AT)?;
    bind_row(&mut stmt, task, deps_unmet)?;
    stmt.raw_bind_parameter(25, rowid)?;
    let n = stmt.raw_execute()?;
    if n == 0 {
        return Err(not_found(&task.mesh_id, &task.id));
    }
    Ok(())
}

/// Replaces a task's dependency edges with its `dependsOn` and returns how many of
/// them are not completed (a missing task counts as not completed).
fn write_edges(conn: &Connection, task: &Task) -> Res<i64> {
    conn.prepare_cached("DELETE FROM mesh_task_deps WHERE mesh_id = ?1 AND task_id = ?2")?
        .execute(params![task.mesh_id, task.id])?;
    if task.dependencies().is_empty() {
        return Ok(0);
    }
    add_edges(conn, task)
}

/// Adds a new task's dependency edges and counts the unmet ones.
fn add_edges(conn: &Connection, task: &Task) -> Res<i64> {
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO mesh_task_deps (mesh_id, task_id, depends_on_id) VALUES (?1, ?2, ?3)",
    )?;
    for dep in task.dependencies() {
        insert.execute(params![task.mesh_id, task.id, dep])?;
    }
    count_unmet(conn, &task.mesh_id, &task.id)
}

fn count_unmet(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<i64> {
    let mut stmt = conn.prepare_cached(
        "SELECT COUNT(*) FROM mesh_task_deps d
           LEFT JOIN mesh_queue q ON q.id = d.depends_on_id AND q.mesh_id = d.mesh_id
          WHERE d.mesh_id = ?1 AND d.task_id = ?2 AND (q.status IS NULL OR q.status <> 'completed')",
    )?;
    Ok(stmt.query_row(params![mesh_id, task_id], |r| r.get(0))?)
}

/// Ids of the tasks that depend on `task_id`.
fn dependents(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Vec<String>> {
    let mut stmt =
        conn.prepare_cached("SELECT task_id FROM mesh_task_deps WHERE mesh_id = ?1 AND depends_on_id = ?2")?;
    let ids = stmt.query_map(params![mesh_id, task_id], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
    Ok(ids)
}

/// Recounts the unmet dependencies of one task and its hold.
fn refresh_readiness(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<()> {
    let unmet = count_unmet(conn, mesh_id, task_id)?;
    conn.prepare_cached(&format!(
        "UPDATE mesh_queue SET deps_unmet = ?3, hold = {} WHERE mesh_id = ?1 AND id = ?2",
        HOLD_SQL.replace("deps_unmet", "?3")
    ))?
    .execute(params![mesh_id, task_id, unmet])?;
    Ok(())
}

/// Keeps the dependents of `task_id` current after its completed-ness changed.
fn refresh_dependents(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<()> {
    for dependent in dependents(conn, mesh_id, task_id)? {
        refresh_readiness(conn, mesh_id, &dependent)?;
    }
    Ok(())
}

/// Writes a task after a lifecycle change, keeping dependents current.
fn save(conn: &Connection, before: &Loaded, after: &Task) -> Res<()> {
    update_row(conn, after, before.deps_unmet, before.rowid)?;
    let was_completed = before.task.status == TaskStatus::Completed;
    if was_completed != (after.status == TaskStatus::Completed) {
        refresh_dependents(conn, &after.mesh_id, &after.id)?;
    }
    Ok(())
}

fn task_entry(kind: &str, task: &Task, payload: serde_json::Value, now: Timestamp) -> LedgerEntry {
    LedgerEntry {
        id: ledger::new_entry_id(now),
        mesh_id: task.mesh_id.clone(),
        timestamp: now.iso(),
        kind: kind.to_owned(),
        node_id: task.assigned_node_id.clone(),
        session_id: task.assigned_session_id.clone(),
        provider_type: task.assigned_provider_type.clone(),
        payload,
    }
}

fn record(conn: &Connection, kind: &str, task: &Task, payload: serde_json::Value, now: Timestamp) -> Res<()> {
    ledger::append(conn, &task_entry(kind, task, payload, now))?;
    Ok(())
}

/// Blocks the pending dependents of a task that failed or was cancelled.
fn block_dependents(conn: &Connection, failed: &Task, now: Timestamp) -> Res<()> {
    for id in dependents(conn, &failed.mesh_id, &failed.id)? {
        let Some(dep) = load(conn, &failed.mesh_id, &id)? else { continue };
        if let Some(blocked) = lifecycle::block_for_failed_dependency(&dep.task, &failed.id, now) {
            save(conn, &dep, &blocked)?;
            record(
                conn,
                kinds::TASK_BLOCKED,
                &blocked,
                json!({"taskId": blocked.id, "reason": blocked.blocked_reason, "dependencyId": failed.id}),
                now,
            )?;
        }
    }
    Ok(())
}

/// Lifts the blocks a requeued task had left on its dependents.
fn unblock_dependents(conn: &Connection, requeued: &Task, now: Timestamp) -> Res<()> {
    for id in dependents(conn, &requeued.mesh_id, &requeued.id)? {
        let Some(dep) = load(conn, &requeued.mesh_id, &id)? else { continue };
        if let Some(unblocked) = lifecycle::unblock_for_requeued_dependency(&dep.task, &requeued.id, now) {
            save(conn, &dep, &unblocked)?;
            record(
                conn,
                kinds::TASK_UNBLOCKED,
                &unblocked,
                json!({"taskId": unblocked.id, "dependencyId": requeued.id}),
                now,
            )?;
        }
    }
    Ok(())
}

// ── Enqueue and raw queue operations ───────────────────────────────────────

/// Characters of a task's message the `task_dispatched` entry keeps; the task holds
/// the whole text.
const LEDGER_MESSAGE_CHARS: usize = 120;

fn excerpt(message: &str) -> String {
    match message.char_indices().nth(LEDGER_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message.to_owned(),
    }
}

fn id_taken(conn: &Connection, task_id: &str) -> Res<bool> {
    let mut stmt = conn.prepare_cached("SELECT 1 FROM mesh_queue WHERE id = ?1")?;
    Ok(stmt.query_row([task_id], |_| Ok(())).optional()?.is_some())
}

/// The mesh that holds the task `task_id`, whichever it is: task ids are unique
/// per database, across meshes.
fn mesh_holding(conn: &Connection, task_id: &str) -> Res<Option<String>> {
    let mut stmt = conn.prepare_cached("SELECT mesh_id FROM mesh_queue WHERE id = ?1")?;
    Ok(stmt.query_row([task_id], |r| r.get(0)).optional()?)
}

/// The refusal of `task`, whose id is taken, naming the mesh that holds it.
fn duplicate_id(conn: &Connection, task: &Task) -> Fail {
    match mesh_holding(conn, &task.id) {
        Ok(existing) => Fail(StoreError::DuplicateTaskId {
            task_id: task.id.clone(),
            existing_mesh_id: existing.unwrap_or_else(|| task.mesh_id.clone()),
        }),
        Err(err) => err,
    }
}

/// Enqueues one validated task with its ledger entry.
pub(crate) fn enqueue(
    conn: &Connection,
    mesh_id: &str,
    new: &NewTask,
    fresh_id: &str,
    now: Timestamp,
) -> Res<Task> {
    let task = enqueue::prepare_task(mesh_id, new, fresh_id, now)?;
    // A taken id is caught by the row's primary key (see `insert_row`); the whole
    // transaction then rolls back, edges included.
    if !task.dependencies().is_empty() {
        let mut lookup_error = None;
        let cycle = enqueue::find_dependency_cycle(&task.id, task.dependencies(), |id| {
            dependents(conn, &task.mesh_id, id).unwrap_or_else(|e| {
                lookup_error = Some(e);
                Vec::new()
            })
        });
        if let Some(err) = lookup_error {
            return Err(err);
        }
        if let Some(path) = cycle {
            return Err(Fail(StoreError::DependencyCycle { path }));
        }
    }
    let unmet = if task.dependencies().is_empty() { 0 } else { add_edges(conn, &task)? };
    insert_row(conn, &task, unmet)?;
    let mut payload = json!({"taskId": task.id, "message": excerpt(&task.message)});
    for (key, value) in [
        ("taskMode", task.task_mode.map(|m| json!(m.as_str()))),
        ("priority", task.priority.map(|p| json!(p.as_str()))),
        ("targetNodeId", task.target_node_id.as_ref().map(|v| json!(v))),
        ("targetSessionId", task.target_session_id.as_ref().map(|v| json!(v))),
        ("dependsOn", task.depends_on.as_ref().map(|v| json!(v))),
        ("missionId", task.mission_id.as_ref().map(|v| json!(v))),
    ] {
        if let Some(value) = value {
            payload[key] = value;
        }
    }
    record(conn, kinds::TASK_DISPATCHED, &task, payload, now)?;
    Ok(task)
}

/// Inserts tasks as they are, skipping ids that exist; returns how many were new.
pub(crate) fn import_entries(conn: &Connection, entries: &[Task]) -> Res<u64> {
    let mut imported = Vec::new();
    for task in entries {
        if id_taken(conn, &task.id)? {
            continue;
        }
        write_edges(conn, task)?;
        insert_row(conn, task, 0)?;
        imported.push(task);
    }
    // Counted after every row is in, since entries may name each other in any order.
    for task in &imported {
        refresh_readiness(conn, &task.mesh_id, &task.id)?;
        refresh_dependents(conn, &task.mesh_id, &task.id)?;
    }
    Ok(imported.len() as u64)
}

/// Tasks in a mesh.
pub(crate) fn mesh_task_count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt = conn.prepare_cached("SELECT COUNT(*) FROM mesh_queue WHERE mesh_id = ?1")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
}

/// Replaces the whole queue of a mesh.
pub(crate) fn replace_queue(conn: &Connection, mesh_id: &str, entries: &[Task]) -> Res<()> {
    delete_queue(conn, mesh_id)?;
    for (i, task) in entries.iter().enumerate() {
        if task.mesh_id != mesh_id {
            return Err(Fail(StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
                format!("entries[{i}].meshId"),
                format!("belongs to mesh {:?}, not {mesh_id:?}", task.mesh_id),
            ))));
        }
        if id_taken(conn, &task.id)? {
            return Err(duplicate_id(conn, task));
        }
        write_edges(conn, task)?;
        insert_row(conn, task, 0)?;
    }
    for task in entries {
        refresh_readiness(conn, mesh_id, &task.id)?;
    }
    Ok(())
}

/// Deletes every task of a mesh with its edges.
pub(crate) fn delete_queue(conn: &Connection, mesh_id: &str) -> Res<u64> {
    conn.execute("DELETE FROM mesh_task_deps WHERE mesh_id = ?1", [mesh_id])?;
    Ok(conn.execute("DELETE FROM mesh_queue WHERE mesh_id = ?1", [mesh_id])? as u64)
}

/// Inserts a task as given.
pub(crate) fn insert_entry(conn: &Connection, task: &Task) -> Res<()> {
    if task.id.trim().is_empty() {
        return Err(Fail(StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
            "id",
            "must not be blank",
        ))));
    }
    if id_taken(conn, &task.id)? {
        return Err(duplicate_id(conn, task));
    }
    let unmet = write_edges(conn, task)?;
    insert_row(conn, task, unmet)?;
    if task.status == TaskStatus::Completed {
        refresh_dependents(conn, &task.mesh_id, &task.id)?;
    }
    Ok(())
}

/// Rewrites a task as given, stamping `updatedAt`.
pub(crate) fn update_entry(conn: &Connection, entry: &Task, now: Timestamp) -> Res<Task> {
    let before = load_required(conn, &entry.mesh_id, &entry.id)?;
    let mut task = entry.clone();
    task.updated_at = now.iso();
    let unmet = write_edges(conn, &task)?;
    save(conn, &Loaded { deps_unmet: unmet, ..before }, &task)?;
    Ok(task)
}

// ── Reads ───────────────────────────────────────────────────────────────────

fn decode_rows(rows: Vec<(String, String)>) -> Res<Vec<Task>> {
    rows.into_iter().map(|(id, payload)| decode(&id, &payload)).collect()
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

pub(crate) fn revision(conn: &Connection, mesh_id: &str) -> Res<String> {
    let mut stmt = conn
        .prepare_cached("SELECT id, status, updated_at FROM mesh_queue WHERE mesh_id = ?1 ORDER BY id ASC")?;
    let lines = stmt
        .query_map([mesh_id], |r| {
            Ok(format!("{}\t{}\t{}", r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(lines.join("\n"))
}

pub(crate) fn has_active_assignment(
    conn: &Connection,
    mesh_id: &str,
    session_id: &str,
    node_id: &str,
) -> Res<bool> {
    let mut stmt = conn.prepare_cached(
        "SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
          WHERE mesh_id = ?1 AND status = 'assigned'
            AND (assigned_session_id = ?2 OR assigned_node_id = ?3) LIMIT 1",
    )?;
    Ok(stmt.query_row(params![mesh_id, session_id, node_id], |_| Ok(())).optional()?.is_some())
}

pub(crate) fn node_assignment_count(conn: &Connection, mesh_id: &str, node_id: &str) -> Res<u64> {
    let mut stmt = conn.prepare_cached(
        "SELECT COUNT(*) FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
          WHERE mesh_id = ?1 AND status = 'assigned' AND assigned_node_id = ?2",
    )?;
    Ok(stmt.query_row(params![mesh_id, node_id], |r| r.get::<_, i64>(0))? as u64)
}

pub(crate) fn pending_count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt =
        conn.prepare_cached("SELECT COUNT(*) FROM mesh_queue WHERE mesh_id = ?1 AND status = 'pending'")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
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
    Ok(decode_rows(rows)?
        .into_iter()
        .map(|t| ActiveAssignment {
            epoch: t.epoch(),
            id: t.id,
            node_id: t.assigned_node_id,
            session_id: t.assigned_session_id,
            provider_type: t.assigned_provider_type,
            message: t.message,
            dispatch_timestamp: t.dispatch_timestamp,
            lease_expires_at: t.lease_expires_at,
        })
        .collect())
}

/// The tasks assigned to `session_id` in a mesh. Session ids match after
/// trimming, as the original compared them: a row written with its session padded
/// still belongs to that session.
fn assigned_to_session(conn: &Connection, mesh_id: &str, session_id: &str) -> Res<Vec<Task>> {
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

pub(crate) fn find_assigned_by_session(
    conn: &Connection,
    mesh_id: &str,
    session_id: &str,
    occurred_at: Option<&str>,
    task_id: Option<&str>,
) -> Res<Option<Task>> {
    let assigned = assigned_to_session(conn, mesh_id, session_id)?;
    Ok(match_completion(&assigned, task_id, occurred_at).cloned())
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

// ── Claim ───────────────────────────────────────────────────────────────────

/// The candidate columns a claim reads, without the payload.
struct Candidate {
    id: String,
    rowid: i64,
    required_tags: Vec<String>,
    not_before_ms: Option<i64>,
    task_mode: Option<TaskMode>,
    readonly: bool,
    target_node_id: Option<String>,
    target_session_id: Option<String>,
}

impl Candidate {
    fn facts(&self, hold: i64) -> CandidateFacts<'_> {
        CandidateFacts {
            required_tags: &self.required_tags,
            dependencies_met: hold != 1,
            not_before_ms: self.not_before_ms,
            parked: hold == 2,
            task_mode: self.task_mode,
            readonly: self.readonly,
            target_node_id: self.target_node_id.as_deref(),
            target_session_id: self.target_session_id.as_deref(),
        }
    }
}

/// One ordered stream of candidates: a claim tier at one hold value.
#[derive(Clone, Copy)]
enum Tier {
    Session,
    Node,
    Open,
}

const TIERS: [Tier; 3] = [Tier::Session, Tier::Node, Tier::Open];

/// The SQL of one stream.
///
/// Written so that SQLite plans it once. In an ordered query SQLite compares the
/// value bound to an equality term while planning and re-prepares the statement
/// whenever that binding changes, which the statement cache does on every reuse.
/// So `hold` is a literal and the bound values are wrapped in a unary `+`, which
/// keeps them usable as index keys but out of that comparison.
fn stream_sql(tier: Tier, hold: i64, readonly_only: bool, forms: usize) -> String {
    let mut sql = format!(
        "SELECT id, required_tags, not_before_ms, task_mode, readonly, target_node_id, target_session_id, rowid,
                payload, deps_unmet
           FROM mesh_queue WHERE mesh_id = +?1 AND status = 'pending' AND hold = {hold} AND "
    );
    match tier {
        Tier::Session => sql.push_str("target_session_id = +?2"),
        Tier::Node => {
            sql.push_str("target_session_id IS NULL AND target_node_id IN (");
            sql.push_str(&in_list(2, forms));
            sql.push(')');
        }
        Tier::Open => sql.push_str("target_session_id IS NULL AND target_node_id IS NULL"),
    }
    if readonly_only {
        sql.push_str(" AND readonly = 1");
    }
    sql.push_str(" ORDER BY priority_rank DESC, created_at ASC, rowid ASC");
    sql
}

/// What every stream of one claim shares.
struct ClaimScope<'a> {
    mesh_id: &'a str,
    claimant: &'a Claimant,
    /// The claimant's node in every id form.
    forms: &'a [String],
}

/// What a stream's visitor says of a candidate.
enum Visit {
    /// Go on to the next candidate.
    Next,
    /// Stop the walk.
    Stop,
    /// Stop the walk and load this candidate.
    Take,
}

/// Walks one stream in claim order, calling `visit` until it stops the walk or
/// `limit` rows were seen. Returns the candidate `visit` took, loaded from the row
/// the walk already read (its payload is the only one decoded).
fn scan(
    conn: &Connection,
    scope: &ClaimScope<'_>,
    (tier, hold, readonly_only): (Tier, i64, bool),
    limit: usize,
    mut visit: impl FnMut(&Candidate) -> Visit,
) -> Res<Option<Loaded>> {
    let sql = stream_sql(tier, hold, readonly_only, scope.forms.len());
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut args: Vec<Value> = vec![Value::Text(scope.mesh_id.to_owned())];
    match tier {
        Tier::Session => args.push(Value::Text(scope.claimant.session_id.clone())),
        Tier::Node => args.extend(scope.forms.iter().map(|f| Value::Text(f.clone()))),
        Tier::Open => {}
    }
    let mut rows = stmt.query(params_from_iter(args.iter()))?;
    let mut seen = 0;
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        let tags: Option<String> = row.get(1)?;
        let mode: Option<String> = row.get(3)?;
        let candidate = Candidate {
            required_tags: match tags {
                Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(&id, e))?,
                None => Vec::new(),
            },
            not_before_ms: row.get(2)?,
            task_mode: mode.and_then(|m| m.parse().ok()),
            readonly: row.get(4)?,
            target_node_id: row.get(5)?,
            target_session_id: row.get(6)?,
            rowid: row.get(7)?,
            id,
        };
        seen += 1;
        match visit(&candidate) {
            Visit::Take => {
                let payload: String = row.get(8)?;
                let task = decode(&candidate.id, &payload)?;
                return Ok(Some(Loaded { task, deps_unmet: row.get(9)?, rowid: candidate.rowid }));
            }
            Visit::Stop => break,
            Visit::Next if seen >= limit => break,
            Visit::Next => {}
        }
    }
    Ok(None)
}

/// `+?start, +?start+1, ...`: parameters for an `IN` list (see [`stream_sql`] for the `+`).
fn in_list(start: usize, n: usize) -> String {
    (0..n).map(|i| format!("+?{}", start + i)).collect::<Vec<_>>().join(", ")
}

/// What a claim learns before it walks any candidates, in one statement.
struct Survey {
    /// The session holds an assigned task (the claim's first gate).
    session_assigned: bool,
    /// Some assigned task runs on the claimant's node (any id form).
    node_busy: bool,
    /// The session-pinned and node-pinned streams hold a candidate at hold 0:
    /// a stream without one is not walked.
    session_pinned: bool,
    node_pinned: bool,
}

/// The SQL of [`survey`] for a node with `forms` id forms: `?1` mesh, `?2`
/// session, `?3...` the node's forms (bound as `+?`, see [`stream_sql`]).
fn survey_sql(forms: usize) -> String {
    let node = if forms == 0 { String::from("NULL") } else { in_list(3, forms) };
    format!(
        "SELECT
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
                    WHERE mesh_id = +?1 AND status = 'assigned' AND assigned_session_id = +?2),
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
                    WHERE mesh_id = +?1 AND status = 'assigned' AND assigned_node_id IN ({node})),
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_claim_session
                    WHERE mesh_id = +?1 AND status = 'pending' AND hold = 0 AND target_session_id = +?2),
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_claim_node
                    WHERE mesh_id = +?1 AND status = 'pending' AND hold = 0
                      AND target_session_id IS NULL AND target_node_id IN ({node}))"
    )
}

fn survey(conn: &Connection, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<Survey> {
    let mut stmt = conn.prepare_cached(&survey_sql(forms.len()))?;
    stmt.raw_bind_parameter(1, mesh_id)?;
    stmt.raw_bind_parameter(2, &claimant.session_id)?;
    for (i, form) in forms.iter().enumerate() {
        stmt.raw_bind_parameter(i + 3, form)?;
    }
    let mut rows = stmt.raw_query();
    let row =
        rows.next()?.ok_or_else(|| Fail(StoreError::Backend("the claim survey returned no row".into())))?;
    Ok(Survey {
        session_assigned: row.get(0)?,
        node_busy: row.get(1)?,
        session_pinned: row.get(2)?,
        node_pinned: row.get(3)?,
    })
}

/// Whether the provider's parallel cap is reached on the claimant's node. All id
/// forms of the node count as one node.
fn cap_reached(conn: &Connection, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<bool> {
    let provider = claimant.provider_type.as_deref().map(str::trim).filter(|p| !p.is_empty());
    let (Some(provider), Some(max)) = (provider, claimant.provider_max_parallel) else { return Ok(false) };
    if forms.is_empty() {
        return Ok(false);
    }
    let mut args: Vec<Value> = vec![Value::Text(mesh_id.to_owned())];
    args.extend(forms.iter().map(|f| Value::Text(f.clone())));
    args.push(Value::Text(provider.to_owned()));
    let sql = format!(
        "SELECT COUNT(*) FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
          WHERE mesh_id = ?1 AND status = 'assigned'
            AND assigned_node_id IN ({}) AND assigned_provider_type = ?{}",
        in_list(2, forms.len()),
        forms.len() + 2
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let active: i64 = stmt.query_row(params_from_iter(args.iter()), |r| r.get(0))?;
    Ok(active >= i64::from(max))
}

/// Claims the next task for `claimant` in one transaction.
///
/// Candidates come tier by tier (session-pinned, node-pinned, open), each in
/// priority then age order, straight from the claim indexes and only among tasks
/// whose hold is 0. The first candidate that passes every gate wins; only its
/// payload is decoded. When none passes, a bounded look at the other candidates
/// names the reason of the one that got furthest.
pub(crate) fn claim(
    conn: &Connection,
    mesh_id: &str,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
) -> Res<ClaimOutcome> {
    if claimant.session_id.trim().is_empty() {
        return Err(Fail(StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
            "sessionId",
            "must not be blank",
        ))));
    }
    if claimant.node_id.trim().is_empty() {
        return Err(Fail(StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
            "nodeId",
            "must not be blank",
        ))));
    }
    let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
    let survey = survey(conn, mesh_id, claimant, &forms)?;
    if survey.session_assigned {
        return Ok(ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned));
    }
    let load =
        NodeLoad { node_busy: survey.node_busy, cap_reached: cap_reached(conn, mesh_id, claimant, &forms)? };
    let scope = ClaimScope { mesh_id, claimant, forms: &forms };

    let mut best: Option<ClaimRefusal> = None;
    let mut winner: Option<Loaded> = None;
    if !load.cap_reached {
        for tier in TIERS {
            let empty = match tier {
                Tier::Session => !survey.session_pinned,
                Tier::Node => !survey.node_pinned,
                Tier::Open => false,
            };
            if empty {
                continue;
            }
            winner = scan(conn, &scope, (tier, 0, load.node_busy), usize::MAX, |c| {
                // The tier queries select only this claimant's rows; gate 6 still
                // checks every pin exactly.
                match check_gates(&c.facts(0), claimant, load, now) {
                    Ok(()) => Visit::Take,
                    Err(reason) => {
                        best = Some(ClaimRefusal::furthest(best, reason));
                        Visit::Next
                    }
                }
            })?;
            if winner.is_some() {
                break;
            }
        }
    }
    if let Some(before) = winner {
        let after = lifecycle::claim(&before.task, claimant, opts.lease_ms, now)?;
        save(conn, &before, &after)?;
        record(
            conn,
            kinds::TASK_CLAIMED,
            &after,
            json!({
                "taskId": after.id,
                "epoch": after.epoch(),
                "dispatchTimestamp": after.dispatch_timestamp,
                "leaseExpiresAt": after.lease_expires_at,
            }),
            now,
        )?;
        return Ok(ClaimOutcome::Claimed(after));
    }
    Ok(ClaimOutcome::Refused(diagnose(conn, &scope, load, now, best)?))
}

/// Names the refusal when no candidate passed: the reason of the candidate that got
/// furthest through the gates, looking at up to [`DIAGNOSIS_LIMIT`] candidates of
/// each stream the winner scan did not fully cover, deepest possible first.
fn diagnose(
    conn: &Connection,
    scope: &ClaimScope<'_>,
    load: NodeLoad,
    now: Timestamp,
    mut best: Option<ClaimRefusal>,
) -> Res<ClaimRefusal> {
    let depth = |b: &Option<ClaimRefusal>| b.map_or(0, |r| r.depth());
    // Streams by hold, with the deepest gate a candidate in them can reach.
    let ready_max = if load.cap_reached {
        ClaimRefusal::ParallelCapReached.depth()
    } else {
        ClaimRefusal::NodeBusyWithActiveAssignment.depth()
    };
    let ready_covered = !load.cap_reached && !load.node_busy;
    let streams = [
        (0, ready_max, ready_covered),
        (2, ClaimRefusal::TaskParked.depth(), false),
        (1, ClaimRefusal::DependenciesUnsatisfied.depth(), false),
    ];
    for (hold, max_depth, covered) in streams {
        if covered || depth(&best) >= max_depth {
            continue;
        }
        for tier in TIERS {
            scan(conn, scope, (tier, hold, false), DIAGNOSIS_LIMIT, |c| {
                if let Err(reason) = check_gates(&c.facts(hold), scope.claimant, load, now) {
                    best = Some(ClaimRefusal::furthest(best, reason));
                }
                if depth(&best) >= max_depth { Visit::Stop } else { Visit::Next }
            })?;
            if depth(&best) >= max_depth {
                break;
            }
        }
    }
    Ok(best.unwrap_or(ClaimRefusal::NoPendingCandidates))
}

// ── Lifecycle ───────────────────────────────────────────────────────────────

fn refusal_entry(
    kind: &str,
    task: &Task,
    session_id: &str,
    reason: &str,
    presented: Option<u64>,
    now: Timestamp,
) -> LedgerEntry {
    let mut entry = task_entry(
        kind,
        task,
        json!({
            "taskId": task.id,
            "reason": reason,
            "sessionId": session_id,
            "presentedEpoch": presented,
            "currentEpoch": task.epoch(),
            "status": task.status.as_str(),
        }),
        now,
    );
    entry.session_id = Some(session_id.to_owned());
    entry
}

/// Checks that `session_id` holds `task` at `epoch`. On refusal, the refusal is
/// recorded in the ledger (committed with the transaction) and returned.
fn check_holder(
    conn: &Connection,
    kind: &str,
    task: &Task,
    session_id: &str,
    epoch: Option<u64>,
    action: agentmesh_core::TaskAction,
    now: Timestamp,
) -> Res<Option<StoreError>> {
    let refusal = if epoch.is_some_and(|e| e != task.epoch()) {
        Some((
            "stale_epoch",
            StoreError::StaleEpoch {
                task_id: task.id.clone(),
                presented: epoch.unwrap_or_default(),
                current: task.epoch(),
            },
        ))
    } else if task.status != TaskStatus::Assigned {
        Some((
            "not_assigned",
            StoreError::InvalidTransition(agentmesh_core::InvalidTransition {
                task_id: task.id.clone(),
                from: task.status,
                action,
            }),
        ))
    } else if !task
        .assigned_session_id
        .as_deref()
        .is_some_and(|s| daemon_id::session_ids_equivalent(s, session_id))
    {
        Some((
            "other_session",
            StoreError::NotAssignedToSession { task_id: task.id.clone(), session_id: session_id.to_owned() },
        ))
    } else {
        None
    };
    match refusal {
        Some((reason, err)) => {
            ledger::append(conn, &refusal_entry(kind, task, session_id, reason, epoch, now))?;
            Ok(Some(err))
        }
        None => Ok(None),
    }
}

/// Records a completion or failure. The outer `Res` fails the transaction; the
/// inner `Err` is a refusal that was recorded and must still be committed.
pub(crate) fn complete(
    conn: &Connection,
    mesh_id: &str,
    report: &CompletionReport,
    now: Timestamp,
) -> Res<Result<Task, StoreError>> {
    if report.session_id.trim().is_empty() {
        return Err(Fail(StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
            "sessionId",
            "must not be blank",
        ))));
    }
    let before = match &report.task_id {
        Some(id) => load_required(conn, mesh_id, id)?,
        None => {
            let assigned = assigned_to_session(conn, mesh_id, &report.session_id)?;
            let Some(task) = match_completion(&assigned, None, report.occurred_at.as_deref()) else {
                return Ok(Err(StoreError::NoAssignedTask {
                    mesh_id: mesh_id.to_owned(),
                    session_id: report.session_id.clone(),
                }));
            };
            load_required(conn, mesh_id, &task.id)?
        }
    };
    let action = match report.outcome {
        Outcome::Completed { .. } => agentmesh_core::TaskAction::Complete,
        Outcome::Failed { .. } => agentmesh_core::TaskAction::Fail,
    };
    if let Some(refused) = check_holder(
        conn,
        kinds::COMPLETION_REFUSED,
        &before.task,
        &report.session_id,
        report.epoch,
        action,
        now,
    )? {
        return Ok(Err(refused));
    }
    let after = match &report.outcome {
        Outcome::Completed { summary } => lifecycle::complete(&before.task, summary.as_deref(), now)?,
        Outcome::Failed { reason, summary } => {
            lifecycle::fail(&before.task, reason, summary.as_deref(), now)?
        }
    };
    save(conn, &before, &after)?;
    let mut payload = json!({"taskId": after.id, "epoch": after.epoch(), "summary": after.final_summary});
    let kind = if after.status == TaskStatus::Completed {
        kinds::TASK_COMPLETED
    } else {
        payload["reason"] = json!(after.failure_reason);
        kinds::TASK_FAILED
    };
    record(conn, kind, &after, payload, now)?;
    if after.status == TaskStatus::Failed {
        block_dependents(conn, &after, now)?;
    }
    notify_coordinator(conn, &after, now)?;
    Ok(Ok(after))
}

/// Queues the completion (`agent:generating_completed`) or failure
/// (`agent:stopped`) of a task for the coordinator that enqueued it, with the
/// worker's summary and the coordinator-facing text, in the transaction that
/// records the outcome. A task enqueued without a coordinator daemon gets an
/// unaddressed event, which any coordinator of the mesh drains.
fn notify_coordinator(conn: &Connection, task: &Task, now: Timestamp) -> Res<()> {
    use agentmesh_core::events::{EmitHint, MessageOptions, PendingEvent, build_coordinator_message, names};
    let name = if task.status == TaskStatus::Completed {
        names::AGENT_GENERATING_COMPLETED
    } else {
        names::AGENT_STOPPED
    };
    let node = task.assigned_node_id.clone().unwrap_or_default();
    let node_label = if node.is_empty() { "Remote agent".to_owned() } else { format!("Node '{node}'") };
    let mut metadata = serde_json::Map::new();
    metadata.insert("taskId".into(), json!(task.id));
    for (key, value) in [
        ("targetSessionId", &task.assigned_session_id),
        ("providerType", &task.assigned_provider_type),
        ("finalSummary", &task.final_summary),
        ("reason", &task.failure_reason),
        ("meshCoordinatorSessionId", &task.source_coordinator_session_id),
    ] {
        if let Some(v) = value {
            metadata.insert(key.into(), json!(v));
        }
    }
    metadata.insert("dispatchNonce".into(), json!(task.epoch()));
    let mut event = PendingEvent::new(name, task.mesh_id.clone(), node_label.clone(), metadata, now);
    event.node_id = task.assigned_node_id.clone();
    event.coordinator_message =
        Some(build_coordinator_message(name, &node_label, &event.metadata_event, &MessageOptions::default()))
            .filter(|m| !m.is_empty());
    event.target_coordinator_daemon_id = task.source_coordinator_daemon_id.clone();
    event.target_coordinator_session_id = task.source_coordinator_session_id.clone();
    let hint = EmitHint { coordinator_run_id: task.source_coordinator_run_id.clone(), ..EmitHint::default() };
    crate::inbox::queue(conn, &task.mesh_id, event, &hint, None, now)?;
    Ok(())
}

/// Extends a lease; refusals are recorded like completion refusals.
pub(crate) fn heartbeat(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    session_id: &str,
    epoch: u64,
    lease_ms: i64,
    now: Timestamp,
) -> Res<Result<Task, StoreError>> {
    let before = load_required(conn, mesh_id, task_id)?;
    if let Some(refused) = check_holder(
        conn,
        kinds::HEARTBEAT_REFUSED,
        &before.task,
        session_id,
        Some(epoch),
        agentmesh_core::TaskAction::Heartbeat,
        now,
    )? {
        return Ok(Err(refused));
    }
    let after = lifecycle::heartbeat(&before.task, lease_ms, now)?;
    save(conn, &before, &after)?;
    Ok(Ok(after))
}

pub(crate) fn cancel(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    reason: Option<&str>,
    now: Timestamp,
) -> Res<Task> {
    let before = load_required(conn, mesh_id, task_id)?;
    let after = lifecycle::cancel(&before.task, reason, now)?;
    save(conn, &before, &after)?;
    let mut entry = task_entry(
        kinds::TASK_CANCELLED,
        &after,
        json!({"taskId": after.id, "reason": reason, "previousStatus": before.task.status.as_str()}),
        now,
    );
    entry.node_id = before.task.assigned_node_id.clone();
    entry.session_id = before.task.assigned_session_id.clone();
    ledger::append(conn, &entry)?;
    block_dependents(conn, &after, now)?;
    Ok(after)
}

pub(crate) fn set_priority(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    priority: TaskPriority,
    reason: Option<&str>,
    now: Timestamp,
) -> Res<Task> {
    let before = load_required(conn, mesh_id, task_id)?;
    let after = lifecycle::reprioritize(&before.task, priority, now)?;
    save(conn, &before, &after)?;
    let was = before.task.priority.unwrap_or(TaskPriority::Normal);
    record(
        conn,
        kinds::TASK_PRIORITY_CHANGED,
        &after,
        json!({"taskId": after.id, "from": was.as_str(), "to": priority.as_str(), "reason": reason}),
        now,
    )?;
    Ok(after)
}

pub(crate) fn requeue(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    opts: &RequeueOptions,
    now: Timestamp,
) -> Res<Requeued> {
    let before = load_required(conn, mesh_id, task_id)?;
    let out = lifecycle::requeue(&before.task, opts, now)?;
    save(conn, &before, out.task())?;
    match &out {
        Requeued::Pending(t) => {
            record(
                conn,
                kinds::TASK_REQUEUED,
                t,
                json!({
                    "taskId": t.id,
                    "reason": opts.reason,
                    "requeueCount": t.requeue_count,
                    "previousStatus": before.task.status.as_str(),
                    "forced": opts.force,
                }),
                now,
            )?;
            unblock_dependents(conn, t, now)?;
        }
        Requeued::RetriesExhausted(t) => {
            record(
                conn,
                kinds::TASK_FAILED,
                t,
                json!({"taskId": t.id, "epoch": t.epoch(), "reason": t.failure_reason}),
                now,
            )?;
            block_dependents(conn, t, now)?;
            notify_coordinator(conn, t, now)?;
        }
    }
    Ok(out)
}

pub(crate) fn reclaim(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    reason: &str,
    now: Timestamp,
) -> Res<Task> {
    let before = load_required(conn, mesh_id, task_id)?;
    let after = lifecycle::reclaim(&before.task, reason, now)?;
    save(conn, &before, &after)?;
    let age_ms = before
        .task
        .dispatch_timestamp
        .as_deref()
        .and_then(Timestamp::parse_iso)
        .map(|t| now.millis() - t.millis());
    let mut entry = task_entry(
        kinds::TASK_RECLAIMED,
        &after,
        json!({
            "taskId": after.id,
            "reason": reason,
            "ageMs": age_ms,
            "reclaimCount": after.stranded_reclaim_count,
            "outcome": if after.status == TaskStatus::Failed { "failed" } else { "requeued" },
        }),
        now,
    );
    entry.node_id = before.task.assigned_node_id.clone();
    entry.session_id = before.task.assigned_session_id.clone();
    entry.provider_type = before.task.assigned_provider_type.clone();
    ledger::append(conn, &entry)?;
    if after.status == TaskStatus::Failed {
        block_dependents(conn, &after, now)?;
        notify_coordinator(conn, &after, now)?;
    }
    Ok(after)
}

/// Reclaims the task when, in this transaction, it is assigned and its lease ran
/// out before `now`; `None` otherwise.
pub(crate) fn reclaim_if_lease_expired(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    now: Timestamp,
) -> Res<Option<Task>> {
    let Some(current) = load(conn, mesh_id, task_id)? else {
        return Ok(None);
    };
    let lapsed = current.task.status == TaskStatus::Assigned
        && current
            .task
            .lease_expires_at
            .as_deref()
            .and_then(Timestamp::parse_iso)
            .is_some_and(|lease| lease.millis() < now.millis());
    if !lapsed {
        return Ok(None);
    }
    reclaim(conn, mesh_id, task_id, lifecycle::LEASE_EXPIRED_REASON, now).map(Some)
}

// ── Migration ───────────────────────────────────────────────────────────────

/// Fills the projected columns and dependency edges of every existing row (used
/// when upgrading a database the original wrote). Rows whose payload cannot be
/// decoded are kept as they are and held out of claims.
pub(crate) fn backfill_projection(conn: &rusqlite::Transaction<'_>) -> Res<()> {
    let rows: Vec<(i64, String, String)> = conn
        .prepare("SELECT rowid, id, payload FROM mesh_queue")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut readable = Vec::new();
    for (rowid, id, payload) in rows {
        match Task::from_json(&payload) {
            Ok(task) => {
                write_edges(conn, &task)?;
                update_row(conn, &task, 0, rowid)?;
                readable.push(task);
            }
            Err(err) => {
                tracing::warn!(task_id = %id, %err, "task payload unreadable; held out of claims");
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

    use crate::query_plan as plan;

    /// Every claim stream is an index range in claim order: no sort, no table scan,
    /// whatever the queue depth.
    #[test]
    fn claim_streams_walk_their_index_in_claim_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        conn.execute_batch("ANALYZE").unwrap();
        let t = |s: &str| Value::Text(s.to_owned());
        let cases = [
            (stream_sql(Tier::Open, 0, false, 0), vec![t("m")], "idx_mesh_queue_claim_open"),
            (stream_sql(Tier::Open, 1, true, 0), vec![t("m")], "idx_mesh_queue_claim_open_readonly"),
            (stream_sql(Tier::Session, 2, false, 0), vec![t("m"), t("s")], "idx_mesh_queue_claim_session"),
        ];
        for (sql, args, index) in cases {
            let p = plan(&conn, &sql, &args);
            assert!(p.contains(index), "{sql}\n{p}");
            assert!(!p.contains("TEMP B-TREE"), "{sql}\n{p}");
        }
        let p = plan(&conn, &stream_sql(Tier::Node, 0, false, 1), &[t("m"), t("n")]);
        assert!(p.contains("idx_mesh_queue_claim_node"), "{p}");
    }

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

    /// Every read of assigned rows goes through the one assigned-rows index and
    /// never needs the table to decide which rows match.
    #[test]
    fn assigned_reads_use_the_assigned_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        conn.execute_batch("ANALYZE").unwrap();
        let t = |s: &str| Value::Text(s.to_owned());
        let p = plan(&conn, &survey_sql(2), &[t("m"), t("s"), t("n"), t("n2")]);
        for search in ["(mesh_id=? AND assigned_session_id=?)", "(mesh_id=?)"] {
            assert!(p.contains(&format!("USING COVERING INDEX idx_mesh_queue_assigned {search}")), "{p}");
        }
        assert!(p.contains("idx_mesh_queue_claim_session"), "{p}");
        assert!(p.contains("idx_mesh_queue_claim_node"), "{p}");
        let p = plan(
            &conn,
            "SELECT mesh_id, id FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
              WHERE status = 'assigned' AND lease_expires_ms IS NOT NULL AND lease_expires_ms < ?1",
            &[Value::Integer(0)],
        );
        assert!(p.contains("USING COVERING INDEX idx_mesh_queue_assigned"), "{p}");
    }

    /// A claim's statements are planned once: changing the mesh, session or node
    /// bound to them never forces SQLite to re-prepare them.
    #[test]
    fn claim_statements_are_not_re_prepared_per_claim() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        for sql in [
            stream_sql(Tier::Open, 0, false, 0),
            stream_sql(Tier::Session, 0, false, 0),
            stream_sql(Tier::Node, 1, true, 1),
            survey_sql(2),
        ] {
            for i in 0..20 {
                let mut stmt = conn.prepare_cached(&sql).unwrap();
                let args: Vec<Value> =
                    (0..stmt.parameter_count()).map(|p| Value::Text(format!("v{p}-{i}"))).collect();
                let mut rows = stmt.query(params_from_iter(args.iter())).unwrap();
                while rows.next().unwrap().is_some() {}
            }
            let stmt = conn.prepare_cached(&sql).unwrap();
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0, "{sql}");
        }
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
