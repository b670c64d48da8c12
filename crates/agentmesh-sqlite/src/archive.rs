//! The archive file: finished tasks and old ledger entries moved out of the
//! hot database by the retention policy ([`agentmesh_store::archive`]).
//!
//! It is a second SQLite file beside the database (`<file>-archive`),
//! attached to every connection of the store as `archive`, so a write can
//! look into it in its own transaction (an enqueue refuses an id the archive
//! holds; an archived completed task still counts as a met dependency). It
//! runs with a rollback journal: it is written only by the retention step and
//! an export's drop, a few times a minute at most.
//!
//! A row moves in two transactions, the archive's first: the copy into the
//! archive commits (synced), then the delete from the hot database, guarded
//! by the row being as it was copied. SQLite commits the files of one
//! transaction one after the other, the main file first, so one transaction
//! could lose a row to a crash between them; two never do. A crash between
//! the two leaves a row in both files: readers take the hot one, and the next
//! step deletes it.
//!
//! New files are made with `auto_vacuum = INCREMENTAL`, and every step that
//! moved rows gives a bounded number of free pages back to the file system,
//! so the hot file shrinks with its live rows. A database made before keeps
//! its size and reuses its free pages.

use std::path::Path;

use agentmesh_core::retention::{self, ARCHIVABLE, ArchiveMark, MeshRetention, RetentionPolicy};
use agentmesh_core::{LedgerEntry, LedgerSlice, SliceQuery, Task, TaskStatus, Timestamp};
use agentmesh_store::StoreError;
use agentmesh_store::archive::{ArchiveReport, ArchiveState, ArchivedPage, cursor_expired};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use crate::paths::with_suffix;
use crate::{Fail, Res, SqliteStore, ledger, tasks};

/// The archive file of the database at `path`.
pub(crate) fn file_of(path: &Path) -> std::path::PathBuf {
    with_suffix(path, "-archive")
}

/// The archive's tables. `pos` is the archive's order of tasks (an export's
/// cursor); ledger entries keep their sequence numbers.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS archive.archived_tasks (
    pos INTEGER PRIMARY KEY,
    mesh_id TEXT NOT NULL,
    id TEXT NOT NULL,
    status TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    archived_at INTEGER NOT NULL,
    task TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS archive.archived_tasks_id ON archived_tasks (id, mesh_id);
CREATE INDEX IF NOT EXISTS archive.archived_tasks_mesh ON archived_tasks (mesh_id, pos);
CREATE TABLE IF NOT EXISTS archive.archived_ledger (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    mesh_id TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    kind TEXT NOT NULL,
    node_id TEXT,
    session_id TEXT,
    provider_type TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS archive.archived_ledger_mesh ON archived_ledger (mesh_id, seq);
CREATE INDEX IF NOT EXISTS archive.archived_ledger_slice ON archived_ledger (mesh_id, timestamp, id);
CREATE TABLE IF NOT EXISTS archive.archive_meta (
    mesh_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (mesh_id, key)
) WITHOUT ROWID;
";

/// The `archive_meta` key of the last sequence number an export dropped.
const DROPPED_THROUGH: &str = "dropped_through";

/// Free pages given back to the file system after a step, at most.
const VACUUM_PAGES: u32 = 1_024;

/// How many sequence numbers a ledger step looks through for one mesh.
const LEDGER_WINDOW: i64 = 50_000;

/// Attaches the archive of the database at `path` to the write connection,
/// making it (and its tables) when missing; a new file vacuums incrementally.
pub(crate) fn attach_writable(conn: &Connection, path: &Path, synchronous: &str) -> Res<()> {
    let file = file_of(path);
    crate::paths::create_private_file(&file).map_err(|e| Fail(crate::io_error(e)))?;
    attach(conn, &file)?;
    let pages: i64 = conn.query_row("PRAGMA archive.page_count", [], |r| r.get(0))?;
    if pages == 0 {
        conn.execute_batch("PRAGMA archive.auto_vacuum = INCREMENTAL")?;
    }
    let mode: String = conn.query_row("PRAGMA archive.journal_mode = TRUNCATE", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("truncate") {
        tracing::debug!(mode, "the archive keeps its journal mode");
    }
    conn.execute_batch(&format!("PRAGMA archive.synchronous = {synchronous}"))?;
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;")).inspect_err(|_| {
        let _ = conn.execute_batch("ROLLBACK");
    })?;
    Ok(())
}

/// Attaches the archive of the database at `path` to a read connection (the
/// store's write connection made it when it opened; a bare database without
/// one, as the writer's own tests open, reads without it).
pub(crate) fn attach_readable(conn: &Connection, path: &Path) -> Res<()> {
    let file = file_of(path);
    if file.exists() { attach(conn, &file) } else { Ok(()) }
}

fn attach(conn: &Connection, file: &Path) -> Res<()> {
    let name = file.to_str().ok_or_else(|| {
        Fail(StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
            "path",
            format!("the archive's path is not UTF-8: {}", file.display()),
        )))
    })?;
    conn.execute("ATTACH DATABASE ?1 AS archive", [name])?;
    Ok(())
}

/// The mesh whose archive holds the task `task_id`, if any (task ids are
/// unique per file, across meshes).
pub(crate) fn archived_mesh_of(conn: &Connection, task_id: &str) -> Res<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT mesh_id FROM archive.archived_tasks WHERE id = ?1 LIMIT 1")?
        .query_row([task_id], |r| r.get(0))
        .optional()?)
}

/// Refuses an id the archive holds, as the hot table's key refuses a taken one.
pub(crate) fn refuse_archived_id(conn: &Connection, task_id: &str) -> Res<()> {
    match archived_mesh_of(conn, task_id)? {
        Some(existing_mesh_id) => Err(Fail(StoreError::DuplicateTaskId {
            task_id: task_id.to_owned(),
            existing_mesh_id,
            scope: agentmesh_store::IdScope::Database,
        })),
        None => Ok(()),
    }
}

/// Whether the archive holds a ledger entry with this id.
pub(crate) fn has_entry(conn: &Connection, id: &str) -> Res<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM archive.archived_ledger WHERE id = ?1")?
        .query_row([id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// The `mesh_meta` key of a mesh's own retention windows.
fn retention_key(mesh_id: &str) -> String {
    format!("retention:{mesh_id}")
}

/// A mesh's own retention windows.
fn mesh_retention(conn: &Connection, mesh_id: &str) -> Res<MeshRetention> {
    let text: Option<String> = conn
        .prepare_cached("SELECT CAST(value AS TEXT) FROM mesh_meta WHERE key = ?1")?
        .query_row([retention_key(mesh_id)], |r| r.get(0))
        .optional()?;
    text.map_or_else(|| Ok(MeshRetention::default()), |text| decode_windows(mesh_id, &text))
}

/// A mesh's own windows as `mesh_meta` keeps them (JSON).
fn decode_windows(mesh_id: &str, text: &str) -> Res<MeshRetention> {
    serde_json::from_str(text).map_err(|e| {
        Fail(StoreError::Corrupt { what: format!("retention of mesh {mesh_id}"), problem: e.to_string() })
    })
}

/// Every mesh with windows of its own, with them.
pub(crate) fn own_windows(conn: &Connection) -> Res<Vec<(String, MeshRetention)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT substr(key, 11), CAST(value AS TEXT) FROM mesh_meta WHERE key >= 'retention:' AND key < 'retention;'",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut own = Vec::new();
    for row in rows {
        let (mesh_id, text) = row?;
        let windows = decode_windows(&mesh_id, &text)?;
        own.push((mesh_id, windows));
    }
    Ok(own)
}

/// Every mesh id of `table` (through its index on `mesh_id`, one seek each).
fn meshes(conn: &Connection, table: &str) -> Res<Vec<String>> {
    let sql = format!(
        "WITH RECURSIVE m(id) AS (
             SELECT MIN(mesh_id) FROM {table}
             UNION ALL
             SELECT (SELECT MIN(mesh_id) FROM {table} WHERE mesh_id > m.id) FROM m WHERE m.id IS NOT NULL)
         SELECT id FROM m WHERE id IS NOT NULL"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let ids = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
    Ok(ids)
}

/// The sequence number below which a mesh's webhook subscriptions have sent
/// everything (`None`: the mesh has none).
fn followed_through(conn: &Connection, mesh_id: &str) -> Res<Option<u64>> {
    Ok(crate::webhooks::list(conn, Some(mesh_id))?.iter().map(|hook| hook.cursor).min())
}

/// The tasks and ledger entries of one mesh a step moves.
struct Plan {
    mesh_id: String,
    tasks: Vec<String>,
    /// Sequence numbers `(after, through]` of the mesh's entries to move.
    ledger: Option<(i64, i64)>,
}

/// What a step moves: per mesh, the expired finished tasks and the expired
/// prefix of the ledger, `limit` of each at most.
fn plan(conn: &Connection, defaults: &RetentionPolicy, now: Timestamp, limit: u32) -> Res<(Vec<Plan>, bool)> {
    let mut plans: Vec<Plan> = Vec::new();
    let mut tasks_left = i64::from(limit);
    let mut entries_left = i64::from(limit);
    let mut more = false;
    let mut all = meshes(conn, "mesh_queue")?;
    for mesh in meshes(conn, "mesh_event_ledger")? {
        if !all.contains(&mesh) {
            all.push(mesh);
        }
    }
    for mesh_id in all {
        let policy = defaults.with(&mesh_retention(conn, &mesh_id)?);
        let mut plan = Plan { mesh_id, tasks: Vec::new(), ledger: None };
        if let Some(cutoff) = policy.tasks.cutoff(now).map(Timestamp::iso) {
            let mut stmt = conn.prepare_cached(
                "SELECT id, status, updated_at FROM mesh_queue
                  WHERE mesh_id = ?1 AND status = ?2 AND created_at < ?3 AND updated_at < ?3
                  ORDER BY created_at LIMIT ?4",
            )?;
            for status in ARCHIVABLE {
                if tasks_left <= 0 {
                    more = true;
                    break;
                }
                let rows = stmt
                    .query_map(params![plan.mesh_id, status.as_str(), cutoff, tasks_left + 1], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                for (id, status, updated_at) in rows {
                    let status = status.parse::<TaskStatus>().unwrap_or(TaskStatus::Pending);
                    if !retention::task_expired(status, &updated_at, policy.tasks, now) {
                        continue;
                    }
                    if tasks_left <= 0 {
                        more = true;
                        break;
                    }
                    plan.tasks.push(id);
                    tasks_left -= 1;
                }
            }
        }
        if let Some(cutoff) = policy.ledger.cutoff(now) {
            let after = archived_through(conn, &plan.mesh_id)?;
            let cap = followed_through(conn, &plan.mesh_id)?
                .map_or(i64::MAX, |c| i64::try_from(c).unwrap_or(i64::MAX));
            let mut stmt = conn.prepare_cached(
                "SELECT seq, timestamp FROM mesh_event_ledger NOT INDEXED
                  WHERE seq > ?1 AND seq <= ?2 AND mesh_id = ?3 ORDER BY seq LIMIT ?4",
            )?;
            let rows = stmt
                .query_map(
                    params![after, after.saturating_add(LEDGER_WINDOW), plan.mesh_id, entries_left + 1],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
                )?
                .collect::<Result<Vec<_>, _>>()?;
            let mut through = after;
            for (seq, timestamp) in rows {
                let old = Timestamp::parse_iso(&timestamp).is_some_and(|at| at < cutoff);
                if !old || seq > cap {
                    break;
                }
                if entries_left <= 0 {
                    more = true;
                    break;
                }
                through = seq;
                entries_left -= 1;
            }
            if through > after {
                plan.ledger = Some((after, through));
            }
        }
        if !plan.tasks.is_empty() || plan.ledger.is_some() {
            plans.push(plan);
        }
    }
    Ok((plans, more))
}

/// The newest sequence number of the mesh's archived entries (0: none).
fn archived_through(conn: &Connection, mesh_id: &str) -> Res<i64> {
    let through: Option<i64> = conn
        .prepare_cached("SELECT MAX(seq) FROM archive.archived_ledger WHERE mesh_id = ?1")?
        .query_row([mesh_id], |r| r.get(0))?;
    let dropped = meta(conn, mesh_id, DROPPED_THROUGH)?;
    Ok(through.unwrap_or(0).max(dropped))
}

fn meta(conn: &Connection, mesh_id: &str, key: &str) -> Res<i64> {
    Ok(conn
        .prepare_cached("SELECT value FROM archive.archive_meta WHERE mesh_id = ?1 AND key = ?2")?
        .query_row(params![mesh_id, key], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// One step of retention; see [`agentmesh_store::ArchiveStore::archive_expired`].
pub(crate) fn step(
    store: &SqliteStore,
    defaults: &RetentionPolicy,
    now: Timestamp,
    limit: u32,
) -> Res<ArchiveReport> {
    let (plans, more) = store.writes.read(|conn| plan(conn, defaults, now, limit))?;
    let mut report = ArchiveReport { more, ..ArchiveReport::default() };
    for plan in &plans {
        // The copy commits first: until then the rows are only in the hot file.
        let copied = store.writes.write(|tx| copy(tx, plan, now))?;
        let (tasks, entries) = store.writes.write(|tx| remove(tx, plan, &copied))?;
        report.tasks += tasks;
        report.ledger_entries += entries;
    }
    if !plans.is_empty() {
        store.writes.write(give_back_pages)?;
    }
    Ok(report)
}

/// Copies a plan's rows into the archive (the task as it is now, if it is
/// still finished); returns each copied task's id and last change.
fn copy(tx: &Connection, plan: &Plan, now: Timestamp) -> Res<Vec<(String, String)>> {
    let mut copied = Vec::new();
    let mut insert = tx.prepare_cached(
        "INSERT INTO archive.archived_tasks (mesh_id, id, status, updated_at, archived_at, task)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id, mesh_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at,
             archived_at = excluded.archived_at, task = excluded.task",
    )?;
    for id in &plan.tasks {
        let Some(task) = tasks::find(tx, &plan.mesh_id, id)? else { continue };
        if !ARCHIVABLE.contains(&task.status) {
            continue;
        }
        let json = serde_json::to_string(&task)?;
        insert.execute(params![
            plan.mesh_id,
            task.id,
            task.status.as_str(),
            task.updated_at,
            now.millis(),
            json
        ])?;
        copied.push((task.id, task.updated_at));
    }
    if let Some((after, through)) = plan.ledger {
        tx.prepare_cached(
            "INSERT OR IGNORE INTO archive.archived_ledger
                 (seq, id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload)
             SELECT seq, id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM main.mesh_event_ledger WHERE seq > ?1 AND seq <= ?2 AND mesh_id = ?3",
        )?
        .execute(params![after, through, plan.mesh_id])?;
    }
    Ok(copied)
}

/// Deletes from the hot file what [`copy`] committed to the archive: a task
/// only while it is as it was copied. Returns how many tasks and entries left.
fn remove(tx: &Connection, plan: &Plan, copied: &[(String, String)]) -> Res<(u64, u64)> {
    let mut removed = 0;
    let mut entries = 0;
    let mut delete_task = tx.prepare_cached(
        "DELETE FROM main.mesh_queue WHERE id = ?1 AND mesh_id = ?2 AND updated_at = ?3
            AND status IN ('completed', 'failed', 'cancelled')",
    )?;
    let mut delete_edges =
        tx.prepare_cached("DELETE FROM main.mesh_task_deps WHERE mesh_id = ?1 AND task_id = ?2")?;
    for (id, updated_at) in copied {
        if delete_task.execute(params![id, plan.mesh_id, updated_at])? == 1 {
            delete_edges.execute(params![plan.mesh_id, id])?;
            removed += 1;
        }
    }
    if let Some((after, through)) = plan.ledger {
        entries = tx
            .prepare_cached(
                "DELETE FROM main.mesh_event_ledger WHERE seq > ?1 AND seq <= ?2 AND mesh_id = ?3",
            )?
            .execute(params![after, through, plan.mesh_id])? as u64;
        // Numbers are never handed out twice, even when the newest entry left.
        tx.prepare_cached(
            "INSERT INTO mesh_meta (key, value) VALUES ('ledger_seq_floor', ?1)
             ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)",
        )?
        .execute([through])?;
    }
    Ok((removed, entries))
}

/// Gives free pages of both files back to the file system, a bounded number
/// each (a file made before incremental vacuum keeps its pages for reuse).
fn give_back_pages(tx: &Connection) -> Res<()> {
    for schema in ["main", "archive"] {
        let mode: i64 = tx.query_row(&format!("PRAGMA {schema}.auto_vacuum"), [], |r| r.get(0))?;
        if mode == 2 {
            tx.execute_batch(&format!("PRAGMA {schema}.incremental_vacuum({VACUUM_PAGES})"))?;
        }
    }
    Ok(())
}

/// An archived task, as archived, with its position.
pub(crate) fn task(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Option<(u64, Task)>> {
    let row: Option<(i64, String)> = conn
        .prepare_cached("SELECT pos, task FROM archive.archived_tasks WHERE id = ?1 AND mesh_id = ?2")?
        .query_row(params![task_id, mesh_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    row.map(|(pos, json)| Ok((pos as u64, decode(task_id, &json)?))).transpose()
}

fn decode(task_id: &str, json: &str) -> Res<Task> {
    Task::from_json(json).map_err(|e| {
        Fail(StoreError::Corrupt { what: format!("archived task {task_id}"), problem: e.to_string() })
    })
}

/// A page of the mesh's archived tasks in archive order, leaving out any the
/// hot file holds again (a move cut short between its two transactions).
pub(crate) fn tasks_page(conn: &Connection, mesh_id: &str, after: u64, limit: u32) -> Res<Vec<(u64, Task)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.pos, a.id, a.task FROM archive.archived_tasks a
          WHERE a.mesh_id = ?1 AND a.pos > ?2
            AND NOT EXISTS (SELECT 1 FROM main.mesh_queue q WHERE q.id = a.id AND q.mesh_id = a.mesh_id)
          ORDER BY a.pos LIMIT ?3",
    )?;
    let rows = stmt
        .query_map(params![mesh_id, i64::try_from(after).unwrap_or(i64::MAX), limit], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(|(pos, id, json)| Ok((pos as u64, decode(&id, &json)?))).collect()
}

/// A page of the mesh's archived ledger; see
/// [`agentmesh_store::ArchiveStore::archived_ledger`].
pub(crate) fn ledger_page(conn: &Connection, mesh_id: &str, query: &SliceQuery) -> Res<ArchivedPage> {
    let limit = query.effective_limit();
    let dropped = meta(conn, mesh_id, DROPPED_THROUGH)?;
    let columns = "id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload, seq";
    let mut sql = format!("SELECT {columns} FROM archive.archived_ledger WHERE mesh_id = ?");
    let mut args = vec![Value::Text(mesh_id.to_owned())];
    let mut cursor_archived = false;
    let by_seq = query.after_seq.is_some();
    if let Some(after) = query.after_seq {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        if after > 0 && after < dropped {
            return Err(Fail(cursor_expired(mesh_id, after as u64, dropped as u64)));
        }
        sql.push_str(" AND seq > ?");
        args.push(Value::Integer(after));
    } else if let Some(after_id) = query.after_id.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        let at: Option<String> = conn
            .prepare_cached("SELECT timestamp FROM archive.archived_ledger WHERE id = ?1 AND mesh_id = ?2")?
            .query_row(params![after_id, mesh_id], |r| r.get(0))
            .optional()?;
        let Some(at) = at else {
            return Ok(ArchivedPage {
                slice: page(mesh_id, query, Vec::new(), false),
                cursor_archived: false,
            });
        };
        cursor_archived = true;
        sql.push_str(" AND (timestamp, id) > (?, ?)");
        args.push(Value::Text(at));
        args.push(Value::Text(after_id.to_owned()));
    }
    if let Some(kind) = query.kind.as_deref().filter(|k| !k.trim().is_empty()) {
        sql.push_str(" AND kind = ?");
        args.push(Value::Text(kind.to_owned()));
    }
    if let Some(since) = &query.since {
        sql.push_str(" AND timestamp >= ?");
        args.push(Value::Text(since.clone()));
    }
    sql.push_str(if by_seq { " ORDER BY seq LIMIT ?" } else { " ORDER BY timestamp, id LIMIT ?" });
    args.push(Value::Integer(i64::from(limit) + 1));
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt
        .query_map(params_from_iter(args.iter()), |row| {
            Ok((ledger::entry_from_row(row)?, row.get::<_, i64>(8)?))
        })?
        .collect::<Result<Vec<(LedgerEntry, i64)>, _>>()?;
    let has_more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    Ok(ArchivedPage { slice: page(mesh_id, query, rows, has_more), cursor_archived })
}

/// An archive page as a slice.
fn page(mesh_id: &str, query: &SliceQuery, rows: Vec<(LedgerEntry, i64)>, has_more: bool) -> LedgerSlice {
    let rows = rows.into_iter().map(|(entry, seq)| (entry, seq as u64)).collect();
    agentmesh_store::archive::page(mesh_id, query, rows, has_more, ("local_sqlite", "archived_ledger"))
}

/// Drops the mesh's archived rows up to `through`, never an entry a webhook
/// subscription has not sent; returns the marks it dropped through.
pub(crate) fn drop_through(tx: &Connection, mesh_id: &str, through: &ArchiveMark) -> Res<ArchiveMark> {
    let cap = followed_through(tx, mesh_id)?.unwrap_or(u64::MAX);
    let ledger_through = through.ledger_through.min(cap);
    let tasks_through = i64::try_from(through.tasks_through).unwrap_or(i64::MAX);
    let ledger_through = i64::try_from(ledger_through).unwrap_or(i64::MAX);
    tx.prepare_cached("DELETE FROM archive.archived_tasks WHERE mesh_id = ?1 AND pos <= ?2")?
        .execute(params![mesh_id, tasks_through])?;
    let last_dropped: Option<i64> = tx
        .prepare_cached("SELECT MAX(seq) FROM archive.archived_ledger WHERE mesh_id = ?1 AND seq <= ?2")?
        .query_row(params![mesh_id, ledger_through], |r| r.get(0))?;
    tx.prepare_cached("DELETE FROM archive.archived_ledger WHERE mesh_id = ?1 AND seq <= ?2")?
        .execute(params![mesh_id, ledger_through])?;
    if let Some(last) = last_dropped {
        tx.prepare_cached(
            "INSERT INTO archive.archive_meta (mesh_id, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (mesh_id, key) DO UPDATE SET value = MAX(value, excluded.value)",
        )?
        .execute(params![mesh_id, DROPPED_THROUGH, last])?;
    }
    give_back_pages(tx)?;
    Ok(ArchiveMark { tasks_through: through.tasks_through, ledger_through: last_dropped.unwrap_or(0) as u64 })
}

/// Sets a mesh's own retention windows (an empty set: the daemon's), with a
/// `retention_changed` ledger entry.
pub(crate) fn set_retention(
    tx: &Connection,
    mesh_id: &str,
    windows: &MeshRetention,
    now: Timestamp,
) -> Res<()> {
    if windows.is_empty() {
        tx.prepare_cached("DELETE FROM mesh_meta WHERE key = ?1")?.execute([retention_key(mesh_id)])?;
    } else {
        tx.prepare_cached(
            "INSERT INTO mesh_meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )?
        .execute(params![retention_key(mesh_id), serde_json::to_string(windows)?])?;
    }
    ledger::append(tx, &retention::changed_entry(mesh_id, windows, agentmesh_store::ids::mint_at(now), now))?;
    Ok(())
}

/// The mesh's archive and retention settings.
pub(crate) fn state(conn: &Connection, mesh_id: &str) -> Res<ArchiveState> {
    let (tasks, tasks_end): (i64, Option<i64>) = conn
        .prepare_cached("SELECT COUNT(*), MAX(pos) FROM archive.archived_tasks WHERE mesh_id = ?1")?
        .query_row([mesh_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (entries, ledger_end): (i64, Option<i64>) = conn
        .prepare_cached("SELECT COUNT(*), MAX(seq) FROM archive.archived_ledger WHERE mesh_id = ?1")?
        .query_row([mesh_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(ArchiveState {
        retention: mesh_retention(conn, mesh_id)?,
        tasks: tasks as u64,
        ledger_entries: entries as u64,
        ledger_through: ledger_end.unwrap_or(0) as u64,
        dropped_through: meta(conn, mesh_id, DROPPED_THROUGH)? as u64,
        end: ArchiveMark {
            tasks_through: tasks_end.unwrap_or(0) as u64,
            ledger_through: ledger_end.unwrap_or(0) as u64,
        },
    })
}
