//! The archive: finished tasks and old ledger entries moved out of the hot
//! tables by the retention policy ([`agentmesh_store::archive`]), in tables of
//! the same schema (`mesh_queue_archive`, `mesh_event_ledger_archive`,
//! `mesh_archive_meta`; see `migrations/0008_archive.sql`).
//!
//! Every move is one transaction: the rows leave the hot table and enter the
//! archive together, or not at all. A mesh's finished tasks move under the
//! mesh's graph lock, each locked `FOR UPDATE SKIP LOCKED` (a task another
//! write holds waits for the next step), with their own dependency edges; an
//! enqueue therefore counts an archived completed dependency as met, and
//! refuses an id the archive holds, before the move or after it (see `tasks`).
//!
//! A mesh's ledger leaves in the order its pages by sequence read it, `(txid,
//! seq)`, and only below the horizon those pages read to (see `ledger`), so
//! every archived entry of a mesh comes before every hot one in that order and
//! a page by sequence reads the archive, then the hot ledger, with nothing
//! skipped. A move continues after the last archived entry, takes entries
//! while they are older than the window, and never passes the smallest
//! cursor of the mesh's webhook subscriptions. An export's drop removes a
//! prefix of the archive in the same order, and records the last entry it
//! dropped (its number and its transaction id): a cursor on it is still
//! served, a cursor on an entry no longer kept has expired.
//!
//! A mesh's own windows are in `agentmesh_meta`, under `retention:<mesh>`.

use std::collections::HashMap;

use agentmesh_core::ledger::LedgerSlice;
use agentmesh_core::retention::{self, ARCHIVABLE, ArchiveMark, MeshRetention, RetentionPolicy, Window};
use agentmesh_core::{LedgerEntry, SliceQuery, Task, Timestamp};
use agentmesh_store::archive::{ArchiveReport, ArchiveState, ArchivedPage, cursor_expired};
use agentmesh_store::{ArchivedTasks, StoreResult};
use postgres::Row;
use postgres::types::ToSql;

use crate::db::{Db, Owned, corrupt, unsigned};
use crate::ledger::cursor_txid;
use crate::{Fail, Lock, PgStore, Res};

/// The `agentmesh_meta` key prefix of a mesh's own retention windows.
const RETENTION_PREFIX: &str = "retention:";

/// Every mesh with a task or a ledger entry, one index seek each.
const MESHES: &str = "/* all meshes */ WITH RECURSIVE
     q(id) AS ((SELECT mesh_id FROM mesh_queue ORDER BY mesh_id LIMIT 1)
               UNION ALL
               SELECT (SELECT n.mesh_id FROM mesh_queue n WHERE n.mesh_id > q.id ORDER BY n.mesh_id LIMIT 1)
                 FROM q WHERE q.id IS NOT NULL),
     l(id) AS ((SELECT mesh_id FROM mesh_event_ledger ORDER BY mesh_id LIMIT 1)
               UNION ALL
               SELECT (SELECT n.mesh_id FROM mesh_event_ledger n WHERE n.mesh_id > l.id ORDER BY n.mesh_id LIMIT 1)
                 FROM l WHERE l.id IS NOT NULL)
     SELECT id FROM q WHERE id IS NOT NULL UNION SELECT id FROM l WHERE id IS NOT NULL ORDER BY 1";

/// Every mesh's own windows.
const WINDOWS: &str = "SELECT key, value FROM agentmesh_meta WHERE key LIKE 'retention:%'";

/// The position of the smallest cursor of mesh `$1`'s webhook subscriptions
/// (none: the mesh has none; a cursor at the start is `0`).
const FOLLOWED_THROUGH: &str = concat!(
    "SELECT p.txid::text, p.seq FROM (
         SELECT h.seq, ",
    cursor_txid!("h.seq"),
    " AS txid
           FROM (SELECT (w.payload::jsonb ->> 'cursor')::bigint AS seq
                   FROM mesh_webhooks w WHERE w.mesh_id = $1) h) p
      ORDER BY p.txid, p.seq LIMIT 1"
);

/// The position of the last entry of mesh `$1` that left the hot ledger: the
/// archive's last, else the last an export dropped.
const ARCHIVED_THROUGH: &str = "SELECT x.txid, x.seq FROM (
         (SELECT 0 AS rank, a.txid::text AS txid, a.seq FROM mesh_event_ledger_archive a
           WHERE a.mesh_id = $1 ORDER BY a.txid DESC, a.seq DESC LIMIT 1)
         UNION ALL
         (SELECT 1, t.value::text, d.value FROM mesh_archive_meta d
            JOIN mesh_archive_meta t ON t.mesh_id = d.mesh_id AND t.key = 'dropped_txid'
           WHERE d.mesh_id = $1 AND d.key = 'dropped_through')) x
      ORDER BY x.rank LIMIT 1";

/// Up to `$6` entries of mesh `$1` after the position (`$2`, `$3`), below the
/// horizon, at or before the position (`$4`, `$5`) when `$4` is given, in page
/// order.
const LEDGER_CANDIDATES: &str = "SELECT txid::text, seq, timestamp FROM mesh_event_ledger
     WHERE mesh_id = $1 AND (txid, seq) > ($2::text::xid8, $3)
       AND ($4::text IS NULL OR (txid, seq) <= ($4::text::xid8, $5))
       AND txid < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY txid, seq LIMIT $6";

/// Moves the entries of mesh `$1` after the position (`$2`, `$3`) through the
/// position (`$4`, `$5`) to the archive.
const MOVE_LEDGER: &str = "WITH moved AS (
         DELETE FROM mesh_event_ledger
          WHERE mesh_id = $1 AND (txid, seq) > ($2::text::xid8, $3) AND (txid, seq) <= ($4::text::xid8, $5)
         RETURNING mesh_id, seq, id, timestamp, kind, node_id, session_id, provider_type, payload, txid)
     INSERT INTO mesh_event_ledger_archive
         (mesh_id, seq, id, timestamp, kind, node_id, session_id, provider_type, payload, txid)
     SELECT mesh_id, seq, id, timestamp, kind, node_id, session_id, provider_type, payload, txid FROM moved
     ON CONFLICT DO NOTHING";

/// Up to `$4` finished tasks of mesh `$1` in status `$2` created and last
/// changed before `$3`, oldest first, locked unless another write holds them.
const TASK_CANDIDATES: &str = "SELECT id, payload FROM mesh_queue
     WHERE mesh_id = $1 AND status = $2 AND created_at < $3 AND updated_at < $3
     ORDER BY created_at LIMIT $4 FOR UPDATE SKIP LOCKED";

const ARCHIVE_TASKS: &str =
    "INSERT INTO mesh_queue_archive (mesh_id, id, status, updated_at, archived_at, task)
     SELECT $1::text, u.id, u.status, u.updated_at, $2::bigint, u.task
       FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS u(id, status, updated_at, task)
     ON CONFLICT (mesh_id, id) DO UPDATE SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
         archived_at = EXCLUDED.archived_at, task = EXCLUDED.task";

const DELETE_EDGES: &str = "DELETE FROM mesh_task_deps WHERE mesh_id = $1 AND task_id = ANY($2::text[])";

const DELETE_TASKS: &str = "DELETE FROM mesh_queue WHERE mesh_id = $1 AND id = ANY($2::text[])";

/// A place in a mesh's page order by sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    txid: u64,
    seq: i64,
}

impl Position {
    const START: Position = Position { txid: 0, seq: 0 };

    /// The position in a row's columns `at` (the txid as text) and `at + 1`.
    fn of(row: &Row, at: usize) -> Res<Position> {
        let txid: String = row.get(at);
        let txid = txid.parse().map_err(|e| corrupt("a ledger transaction id", e))?;
        Ok(Position { txid, seq: row.get(at + 1) })
    }

    fn txid(self) -> String {
        self.txid.to_string()
    }
}

/// The `agentmesh_meta` key of a mesh's own windows.
fn retention_key(mesh_id: &str) -> String {
    format!("{RETENTION_PREFIX}{mesh_id}")
}

fn decode_windows(mesh_id: &str, text: &str) -> Res<MeshRetention> {
    serde_json::from_str(text).map_err(|e| corrupt(format!("retention of mesh {mesh_id}"), e))
}

fn decode_task(task_id: &str, json: &str) -> Res<Task> {
    Task::from_json(json).map_err(|e| corrupt(format!("archived task {task_id}"), e))
}

/// Every mesh with windows of its own, with them.
pub(crate) fn own_windows(db: &Db<'_>) -> Res<HashMap<String, MeshRetention>> {
    let mut windows = HashMap::new();
    for row in db.query(WINDOWS, &[])? {
        let key: String = row.get(0);
        let mesh_id = key.strip_prefix(RETENTION_PREFIX).unwrap_or(&key).to_owned();
        let value = decode_windows(&mesh_id, row.get(1))?;
        windows.insert(mesh_id, value);
    }
    Ok(windows)
}

/// One step of retention; see [`agentmesh_store::ArchiveStore::archive_expired`].
pub(crate) fn step(
    store: &PgStore,
    defaults: &RetentionPolicy,
    now: Timestamp,
    limit: u32,
) -> StoreResult<ArchiveReport> {
    let (meshes, windows) = store.read(|db| {
        let meshes: Vec<String> = db.query(MESHES, &[])?.iter().map(|r| r.get(0)).collect();
        Ok((meshes, own_windows(db)?))
    })?;
    let mut report = ArchiveReport::default();
    let mut tasks_left = u64::from(limit);
    let mut entries_left = u64::from(limit);
    for mesh_id in &meshes {
        let policy = defaults.with(&windows.get(mesh_id).copied().unwrap_or_default());
        if policy.tasks != Window::Off {
            if tasks_left == 0 {
                report.more = true;
            } else {
                let graph = Lock::Graph { exclusive: true };
                let (moved, more) = store.write_with(mesh_id, &[graph], |db| {
                    move_tasks(db, mesh_id, policy.tasks, now, tasks_left)
                })?;
                report.tasks += moved;
                tasks_left -= moved;
                report.more |= more;
            }
        }
        if let Some(cutoff) = policy.ledger.cutoff(now) {
            if entries_left == 0 {
                report.more = true;
            } else {
                let (moved, more) = store.write_with(mesh_id, &[Lock::Archive], |db| {
                    move_ledger(db, mesh_id, cutoff, entries_left)
                })?;
                report.ledger_entries += moved;
                entries_left -= moved;
                report.more |= more;
            }
        }
    }
    Ok(report)
}

/// Moves up to `left` of the mesh's finished tasks that outlived `window` to
/// the archive, with their own dependency edges; returns how many, and
/// whether more were left.
fn move_tasks(db: &Db<'_>, mesh_id: &str, window: Window, now: Timestamp, left: u64) -> Res<(u64, bool)> {
    let Some(cutoff) = window.cutoff(now) else { return Ok((0, false)) };
    let cutoff = cutoff.iso();
    let (mut ids, mut statuses, mut updated, mut json) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut more = false;
    'statuses: for status in ARCHIVABLE {
        let want = left - ids.len() as u64;
        if want == 0 {
            more = true;
            break;
        }
        let fetch = i64::try_from(want + 1).unwrap_or(i64::MAX);
        for row in db.query(TASK_CANDIDATES, &[&mesh_id, &status.as_str(), &cutoff, &fetch])? {
            let id: String = row.get(0);
            let task = crate::tasks::decode(&id, row.get(1))?;
            if !retention::task_expired(task.status, &task.updated_at, window, now) {
                continue;
            }
            if ids.len() as u64 == left {
                more = true;
                break 'statuses;
            }
            statuses.push(task.status.as_str().to_owned());
            updated.push(task.updated_at.clone());
            json.push(serde_json::to_string(&task)?);
            ids.push(id);
        }
    }
    let moved = ids.len() as u64;
    if moved > 0 {
        let mesh: Owned = std::sync::Arc::new(mesh_id.to_owned());
        let ids: Owned = std::sync::Arc::new(ids);
        db.defer(
            ARCHIVE_TASKS,
            vec![
                mesh.clone(),
                std::sync::Arc::new(now.millis()),
                ids.clone(),
                std::sync::Arc::new(statuses),
                std::sync::Arc::new(updated),
                std::sync::Arc::new(json),
            ],
            None,
        );
        db.defer(DELETE_EDGES, vec![mesh.clone(), ids.clone()], None);
        db.defer(DELETE_TASKS, vec![mesh, ids], None);
    }
    Ok((moved, more))
}

/// Moves up to `left` of the mesh's ledger entries older than `cutoff` to the
/// archive, in page order from the last one archived; returns how many, and
/// whether more were left.
fn move_ledger(db: &Db<'_>, mesh_id: &str, cutoff: Timestamp, left: u64) -> Res<(u64, bool)> {
    let (cap, after) = db.query_pair((FOLLOWED_THROUGH, &[&mesh_id]), (ARCHIVED_THROUGH, &[&mesh_id]))?;
    let cap = cap.first().map(|r| Position::of(r, 0)).transpose()?;
    let after = after.first().map(|r| Position::of(r, 0)).transpose()?.unwrap_or(Position::START);
    if cap.is_some_and(|cap| cap <= after) {
        return Ok((0, false));
    }
    let cap_txid = cap.map(Position::txid);
    let cap_seq = cap.map_or(0, |c| c.seq);
    let fetch = i64::try_from(left + 1).unwrap_or(i64::MAX);
    let rows =
        db.query(LEDGER_CANDIDATES, &[&mesh_id, &after.txid(), &after.seq, &cap_txid, &cap_seq, &fetch])?;
    let mut through = None;
    let mut moved = 0;
    let mut more = false;
    for row in &rows {
        let timestamp: &str = row.get(2);
        if Timestamp::parse_iso(timestamp).is_none_or(|at| at >= cutoff) {
            break;
        }
        if moved == left {
            more = true;
            break;
        }
        through = Some(Position::of(row, 0)?);
        moved += 1;
    }
    if let Some(through) = through {
        db.defer(
            MOVE_LEDGER,
            vec![
                std::sync::Arc::new(mesh_id.to_owned()),
                std::sync::Arc::new(after.txid()),
                std::sync::Arc::new(after.seq),
                std::sync::Arc::new(through.txid()),
                std::sync::Arc::new(through.seq),
            ],
            None,
        );
    }
    Ok((moved, more))
}

/// An archived task, as archived, with its position.
pub(crate) fn task(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<Option<(u64, Task)>> {
    let row = db.query_opt(
        "SELECT pos, task FROM mesh_queue_archive WHERE mesh_id = $1 AND id = $2",
        &[&mesh_id, &task_id],
    )?;
    row.map(|r| Ok((unsigned(r.get(0)), decode_task(task_id, r.get(1))?))).transpose()
}

/// A page of the mesh's archived tasks in archive order, leaving out any the
/// hot table holds.
pub(crate) fn tasks_page(db: &Db<'_>, mesh_id: &str, after: u64, limit: u32) -> Res<Vec<(u64, Task)>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let rows = db.query(
        "SELECT a.pos, a.id, a.task FROM mesh_queue_archive a
          WHERE a.mesh_id = $1 AND a.pos > $2
            AND NOT EXISTS (SELECT 1 FROM mesh_queue q WHERE q.mesh_id = a.mesh_id AND q.id = a.id)
          ORDER BY a.pos LIMIT $3",
        &[&mesh_id, &after, &i64::from(limit)],
    )?;
    rows.iter().map(|r| Ok((unsigned(r.get(0)), decode_task(r.get(1), r.get(2))?))).collect()
}

/// The number of the last entry the mesh's export dropped (0: none), the
/// database's id, and whether an entry numbered `$2` is kept, hot or archived.
const PAGE_STATE: &str =
    "SELECT (SELECT value FROM mesh_archive_meta WHERE mesh_id = $1 AND key = 'dropped_through'),
        (SELECT value FROM agentmesh_meta WHERE key = 'database_id'),
        EXISTS (SELECT 1 FROM mesh_event_ledger c WHERE c.mesh_id = $1 AND c.seq = $2)
            OR EXISTS (SELECT 1 FROM mesh_event_ledger_archive a WHERE a.mesh_id = $1 AND a.seq = $2)";

const PAGE_COLUMNS: &str = "id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload, seq";

/// A page of the mesh's archived ledger; see
/// [`agentmesh_store::ArchiveStore::archived_ledger`]. Its statements see one
/// snapshot.
pub(crate) fn ledger_page(db: &Db<'_>, mesh_id: &str, query: &SliceQuery) -> Res<ArchivedPage> {
    let limit = query.effective_limit();
    let after_seq = query.after_seq.map(|s| i64::try_from(s).unwrap_or(i64::MAX));
    let state = db.query_one(PAGE_STATE, &[&mesh_id, &after_seq.unwrap_or(0)])?;
    let dropped: i64 = state.get::<_, Option<i64>>(0).unwrap_or(0);
    let origin: Option<String> = state.get(1);
    let kept: bool = state.get(2);
    let after_id = query.after_id.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    let kind = query.kind.as_deref().filter(|k| !k.trim().is_empty()).map(str::to_owned);

    let at: Option<String>;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&mesh_id];
    let mut sql = format!("SELECT {PAGE_COLUMNS} FROM mesh_event_ledger_archive WHERE mesh_id = $1");
    let mut cursor_archived = false;
    if let Some(after) = &after_seq {
        // Every kept entry comes after every dropped one: a cursor on an
        // entry no longer kept, other than the last one dropped, has expired.
        if *after > 0 && dropped > 0 && *after != dropped && !kept {
            return Err(Fail(cursor_expired(mesh_id, unsigned(*after), unsigned(dropped))));
        }
        params.push(after);
        sql.push_str(&format!(" AND (txid, seq) > ({}, $2)", cursor_txid!("$2")));
    } else if let Some(after_id) = &after_id {
        at = db
            .query_opt(
                "SELECT timestamp FROM mesh_event_ledger_archive WHERE mesh_id = $1 AND id = $2",
                &[&mesh_id, after_id],
            )?
            .map(|r| r.get(0));
        let Some(at) = &at else {
            let mut slice = page(mesh_id, query, Vec::new(), false);
            slice.origin = origin;
            return Ok(ArchivedPage { slice, cursor_archived: false });
        };
        cursor_archived = true;
        params.push(at);
        params.push(after_id);
        sql.push_str(" AND (timestamp, id) > ($2, $3)");
    }
    if let Some(since) = &query.since {
        params.push(since);
        sql.push_str(&format!(" AND timestamp >= ${}", params.len()));
    }
    if let Some(kind) = &kind {
        params.push(kind);
        sql.push_str(&format!(" AND kind = ${}", params.len()));
    }
    let fetch = i64::from(limit) + 1;
    params.push(&fetch);
    let order = if after_seq.is_some() { "txid, seq" } else { "timestamp, id" };
    sql.push_str(&format!(" ORDER BY {order} LIMIT ${}", params.len()));
    let mut rows: Vec<(LedgerEntry, i64)> = db
        .query(&sql, &params)?
        .iter()
        .map(|r| Ok((crate::ledger::entry_from_row(r)?, r.get(8))))
        .collect::<Res<_>>()?;
    let has_more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let mut slice = page(mesh_id, query, rows, has_more);
    slice.origin = origin;
    Ok(ArchivedPage { slice, cursor_archived })
}

/// An archive page as a slice.
fn page(mesh_id: &str, query: &SliceQuery, rows: Vec<(LedgerEntry, i64)>, has_more: bool) -> LedgerSlice {
    let rows = rows.into_iter().map(|(entry, seq)| (entry, unsigned(seq))).collect();
    agentmesh_store::archive::page(mesh_id, query, rows, has_more, ("postgres", "mesh_event_ledger_archive"))
}

/// Drops the mesh's archived tasks through `through.tasks_through` and its
/// archived entries through the position of `through.ledger_through`, never
/// past a webhook subscription's cursor; returns the marks it dropped through.
pub(crate) fn drop_through(db: &Db<'_>, mesh_id: &str, through: &ArchiveMark) -> Res<ArchiveMark> {
    let tasks_through = i64::try_from(through.tasks_through).unwrap_or(i64::MAX);
    db.defer(
        "DELETE FROM mesh_queue_archive WHERE mesh_id = $1 AND pos <= $2",
        vec![std::sync::Arc::new(mesh_id.to_owned()), std::sync::Arc::new(tasks_through)],
        None,
    );
    let mut dropped = ArchiveMark { tasks_through: through.tasks_through, ledger_through: 0 };
    if through.ledger_through == 0 {
        return Ok(dropped);
    }
    let ledger_through = i64::try_from(through.ledger_through).unwrap_or(i64::MAX);
    let (mark, cap) = db.query_pair(
        (concat!("SELECT (", cursor_txid!("$2"), ")::text, $2"), &[&mesh_id, &ledger_through]),
        (FOLLOWED_THROUGH, &[&mesh_id]),
    )?;
    let mut upto = match mark.first() {
        Some(row) => Position::of(row, 0)?,
        None => return Ok(dropped),
    };
    if let Some(cap) = cap.first().map(|r| Position::of(r, 0)).transpose()? {
        upto = upto.min(cap);
    }
    let last = db.query_opt(
        "WITH gone AS (
             DELETE FROM mesh_event_ledger_archive
              WHERE mesh_id = $1 AND (txid, seq) <= ($2::text::xid8, $3)
             RETURNING txid, seq)
         SELECT txid::text, seq FROM gone ORDER BY txid DESC, seq DESC LIMIT 1",
        &[&mesh_id, &upto.txid(), &upto.seq],
    )?;
    if let Some(row) = last {
        let last = Position::of(&row, 0)?;
        let txid = i64::try_from(last.txid).unwrap_or(i64::MAX);
        db.defer(
            "INSERT INTO mesh_archive_meta (mesh_id, key, value) VALUES ($1, 'dropped_through', $2), ($1, 'dropped_txid', $3)
             ON CONFLICT (mesh_id, key) DO UPDATE SET value = EXCLUDED.value",
            vec![std::sync::Arc::new(mesh_id.to_owned()), std::sync::Arc::new(last.seq), std::sync::Arc::new(txid)],
            None,
        );
        dropped.ledger_through = unsigned(last.seq);
    }
    Ok(dropped)
}

/// Sets a mesh's own retention windows (an empty set: the daemon's), with a
/// `retention_changed` ledger entry.
pub(crate) fn set_retention(db: &Db<'_>, mesh_id: &str, windows: &MeshRetention, now: Timestamp) -> Res<()> {
    let key = retention_key(mesh_id);
    if windows.is_empty() {
        db.execute("DELETE FROM agentmesh_meta WHERE key = $1", &[&key])?;
    } else {
        let value = serde_json::to_string(windows)?;
        db.execute(
            "INSERT INTO agentmesh_meta (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&key, &value],
        )?;
    }
    let entry = retention::changed_entry(mesh_id, windows, agentmesh_store::ids::mint_at(now), now);
    crate::ledger::append(db, &entry)?;
    Ok(())
}

/// The mesh's archive and retention settings, of one snapshot.
pub(crate) fn state(db: &Db<'_>, mesh_id: &str) -> Res<ArchiveState> {
    let key = retention_key(mesh_id);
    let row = db.query_one(
        "SELECT (SELECT COUNT(*) FROM mesh_queue_archive WHERE mesh_id = $1),
                (SELECT MAX(pos) FROM mesh_queue_archive WHERE mesh_id = $1),
                (SELECT COUNT(*) FROM mesh_event_ledger_archive WHERE mesh_id = $1),
                (SELECT seq FROM mesh_event_ledger_archive WHERE mesh_id = $1 ORDER BY txid DESC, seq DESC LIMIT 1),
                (SELECT value FROM mesh_archive_meta WHERE mesh_id = $1 AND key = 'dropped_through'),
                (SELECT value FROM agentmesh_meta WHERE key = $2)",
        &[&mesh_id, &key],
    )?;
    let retention = match row.get::<_, Option<&str>>(5) {
        Some(text) => decode_windows(mesh_id, text)?,
        None => MeshRetention::default(),
    };
    let tasks_end = row.get::<_, Option<i64>>(1).map_or(0, unsigned);
    let ledger_end = row.get::<_, Option<i64>>(3).map_or(0, unsigned);
    Ok(ArchiveState {
        retention,
        tasks: unsigned(row.get(0)),
        ledger_entries: unsigned(row.get(2)),
        ledger_through: ledger_end,
        dropped_through: row.get::<_, Option<i64>>(4).map_or(0, unsigned),
        end: ArchiveMark { tasks_through: tasks_end, ledger_through: ledger_end },
    })
}

impl agentmesh_store::ArchiveStore for PgStore {
    fn archive_expired(
        &self,
        policy: &RetentionPolicy,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<ArchiveReport> {
        step(self, policy, now, limit)
    }

    fn archived_tasks(&self, mesh_id: &str, query: ArchivedTasks<'_>) -> StoreResult<Vec<(u64, Task)>> {
        self.read(|db| match query {
            ArchivedTasks::Id(task_id) => Ok(task(db, mesh_id, task_id)?.into_iter().collect()),
            ArchivedTasks::After { after, limit } => tasks_page(db, mesh_id, after, limit),
        })
    }

    fn archived_ledger(&self, mesh_id: &str, query: &SliceQuery) -> StoreResult<ArchivedPage> {
        self.snapshot(|db| ledger_page(db, mesh_id, query))
    }

    fn drop_archived(&self, mesh_id: &str, through: &ArchiveMark) -> StoreResult<ArchiveMark> {
        self.write_with(mesh_id, &[Lock::Archive], |db| drop_through(db, mesh_id, through))
    }

    fn archive_state(
        &self,
        mesh_id: &str,
        set: Option<&MeshRetention>,
        now: Timestamp,
    ) -> StoreResult<ArchiveState> {
        if let Some(windows) = set {
            self.write(mesh_id, |db| set_retention(db, mesh_id, windows, now))?;
        }
        self.snapshot(|db| state(db, mesh_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement of the archive names its mesh, but the list of meshes.
    #[test]
    fn the_archive_s_statements_each_name_their_mesh() {
        for sql in [
            FOLLOWED_THROUGH,
            ARCHIVED_THROUGH,
            LEDGER_CANDIDATES,
            MOVE_LEDGER,
            TASK_CANDIDATES,
            ARCHIVE_TASKS,
            DELETE_EDGES,
            DELETE_TASKS,
            PAGE_STATE,
        ] {
            assert_eq!(crate::shard::shard_violation(sql), None, "{sql}");
        }
        assert!(MESHES.contains(crate::shard::ALL_MESHES));
    }

    #[test]
    fn positions_order_by_transaction_then_number() {
        let early = Position { txid: 5, seq: 9 };
        let late = Position { txid: 6, seq: 2 };
        assert!(early < late);
        assert_eq!(early.min(late), early);
        assert!(Position::START < early);
    }
}
