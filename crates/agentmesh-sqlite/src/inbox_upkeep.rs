//! Upkeep of the coordinator inbox beside the queue-and-drain path: the one-time
//! import of the original's `*.pending-events.jsonl` inboxes, JSONL export, and
//! the retention sweep.
//!
//! The database is the inbox's one source of truth. JSONL is only a way in (the
//! legacy files, imported once and deleted) and a way out (export); neither is
//! ever kept as a second live copy. Queueing and draining live in `inbox`.
//!
//! Every step here is written so that an interruption loses nothing:
//!
//! - a legacy file is claimed by renaming it to `<file>.migrating`, imported in one
//!   transaction, and deleted only after that transaction committed; a failed
//!   import is rolled back and the file put back under its name, and a claimed file
//!   left behind by a crash is imported on the next run. Re-importing is harmless:
//!   the unique (mesh_id, fingerprint) index turns every event already stored into
//!   a no-op;
//! - an undrained event that expires is removed in the same transaction that
//!   writes its `event_held` ledger entry.

use agentmesh_store::ids::mint_at;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use agentmesh_core::Timestamp;
use agentmesh_core::events::held::retention_entry;
use agentmesh_core::events::names::NEVER_EXPIRE_EVENTS;
use agentmesh_store::inbox_sweep::{self, CHUNK, Cursor};
use agentmesh_store::legacy::{
    LegacyEventsReport, MIGRATING_SUFFIX, claimed_pending_events_file_name, is_pending_events_file_name,
    parse_legacy_pending_events,
};
use agentmesh_store::{PruneReport, StoreError, StoreResult};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, params, params_from_iter};
use serde_json::Value;

use crate::payload::Json;
use crate::{Res, SqliteStore, ledger};

/// Skipped lines logged one by one per legacy file; the rest are only counted.
const SKIPPED_LINES_LOGGED: usize = 20;

// ── Legacy JSONL import ─────────────────────────────────────────────────────

/// What became of one legacy file.
enum FileOutcome {
    /// Imported and deleted.
    Removed { imported: u64, skipped: u64 },
    /// Imported, but the claimed file could not be deleted; importing it again is
    /// a no-op.
    ImportedNotRemoved { imported: u64, skipped: u64 },
    /// Not imported; left for the next run.
    Retained,
    /// The claimed file disappeared: another process imported it.
    Vanished,
}

/// Imports every legacy inbox file in `dir`; see
/// [`SqliteStore::import_legacy_pending_events`].
pub(crate) fn import_legacy_dir(
    store: &SqliteStore,
    dir: &Path,
    now: Timestamp,
) -> StoreResult<LegacyEventsReport> {
    let mut report = LegacyEventsReport::default();
    let names = match list_file_names(dir) {
        Ok(names) => names,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(report),
        Err(err) => return Err(StoreError::LegacyFile { path: dir.to_owned(), problem: err.to_string() }),
    };
    let mut left_claimed = Vec::new();
    let mut fresh = Vec::new();
    for name in names {
        if let Some(original) = claimed_pending_events_file_name(&name) {
            left_claimed.push(original.to_owned());
        } else if is_pending_events_file_name(&name) {
            fresh.push(name);
        }
    }
    // Files a crashed run left claimed go first: claiming a fresh file of the same
    // name would otherwise overwrite them.
    for original in &left_claimed {
        tracing::info!(file = %dir.join(original).display(), "importing a legacy inbox file left claimed");
        tally(&mut report, import_claimed(store, dir, original, now));
    }
    for original in &fresh {
        let file = dir.join(original);
        let held = claimed_path(dir, original);
        if held.exists() {
            // A claimed copy of this file was kept above (its import failed); the
            // two are imported separately on a later run.
            tracing::warn!(file = %file.display(), "legacy inbox file left in place: a claimed copy exists");
            report.files_scanned += 1;
            report.files_retained += 1;
            continue;
        }
        if let Err(err) = std::fs::rename(&file, &held) {
            tracing::debug!(file = %file.display(), %err, "legacy inbox file not claimed; another process holds it");
            continue;
        }
        tally(&mut report, import_claimed(store, dir, original, now));
    }
    if report.files_scanned > 0 {
        tracing::info!(
            dir = %dir.display(),
            files_scanned = report.files_scanned,
            events_imported = report.events_imported,
            lines_skipped = report.lines_skipped,
            files_removed = report.files_removed,
            files_retained = report.files_retained,
            "legacy inbox files imported"
        );
    }
    Ok(report)
}

/// The UTF-8 names of the entries of `dir`, sorted so that imports run in a
/// stable order.
fn list_file_names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        match entry {
            Ok(entry) => {
                if let Ok(name) = entry.file_name().into_string() {
                    names.push(name);
                }
            }
            Err(err) => tracing::warn!(dir = %dir.display(), %err, "a directory entry could not be read"),
        }
    }
    names.sort();
    Ok(names)
}

fn claimed_path(dir: &Path, original: &str) -> PathBuf {
    dir.join(format!("{original}{MIGRATING_SUFFIX}"))
}

fn tally(report: &mut LegacyEventsReport, outcome: FileOutcome) {
    match outcome {
        FileOutcome::Removed { imported, skipped } => {
            report.files_scanned += 1;
            report.events_imported += imported;
            report.lines_skipped += skipped;
            report.files_removed += 1;
        }
        FileOutcome::ImportedNotRemoved { imported, skipped } => {
            report.files_scanned += 1;
            report.events_imported += imported;
            report.lines_skipped += skipped;
            report.files_retained += 1;
        }
        FileOutcome::Retained => {
            report.files_scanned += 1;
            report.files_retained += 1;
        }
        FileOutcome::Vanished => {}
    }
}

/// Imports the claimed file `<original>.migrating` in one transaction, then
/// deletes it; on any failure puts it back.
fn import_claimed(store: &SqliteStore, dir: &Path, original: &str, now: Timestamp) -> FileOutcome {
    let held = claimed_path(dir, original);
    let bytes = match std::fs::read(&held) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == ErrorKind::NotFound => return FileOutcome::Vanished,
        Err(err) => {
            tracing::warn!(file = %held.display(), %err, "legacy inbox file unreadable; kept for the next run");
            release(dir, original);
            return FileOutcome::Retained;
        }
    };
    let parsed = parse_legacy_pending_events(&bytes, now);
    for skipped in parsed.skipped.iter().take(SKIPPED_LINES_LOGGED) {
        tracing::warn!(
            file = %dir.join(original).display(),
            line = skipped.line,
            problem = %skipped.problem,
            "legacy inbox line skipped"
        );
    }
    if parsed.skipped.len() > SKIPPED_LINES_LOGGED {
        tracing::warn!(
            file = %dir.join(original).display(),
            more = parsed.skipped.len() - SKIPPED_LINES_LOGGED,
            "further legacy inbox lines skipped"
        );
    }
    let imported = store.write(|tx| {
        let mut imported = 0;
        for event in &parsed.events {
            if crate::inbox::insert_row(tx, &mint_at(now), event)? {
                imported += 1;
            }
        }
        Ok(imported)
    });
    let imported = match imported {
        Ok(imported) => imported,
        Err(err) => {
            tracing::warn!(file = %held.display(), error = %err, "legacy inbox import failed; kept for the next run");
            release(dir, original);
            return FileOutcome::Retained;
        }
    };
    let skipped = parsed.skipped.len() as u64;
    match std::fs::remove_file(&held) {
        Ok(()) => FileOutcome::Removed { imported, skipped },
        Err(err) if err.kind() == ErrorKind::NotFound => FileOutcome::Removed { imported, skipped },
        Err(err) => {
            tracing::warn!(file = %held.display(), %err, "legacy inbox imported but not deleted");
            FileOutcome::ImportedNotRemoved { imported, skipped }
        }
    }
}

/// Puts a claimed file back under its original name, unless a file of that name
/// appeared meanwhile (then the claimed one stays claimed, to be imported on the
/// next run, rather than overwrite it).
fn release(dir: &Path, original: &str) {
    let held = claimed_path(dir, original);
    let file = dir.join(original);
    if file.exists() {
        tracing::warn!(file = %held.display(), "claimed legacy inbox file stays claimed: its name is taken");
        return;
    }
    if let Err(err) = std::fs::rename(&held, &file) {
        tracing::warn!(file = %held.display(), %err, "claimed legacy inbox file could not be renamed back");
    }
}

// ── Export ──────────────────────────────────────────────────────────────────

/// Undrained events of a mesh, oldest first. The queue holds them lane by lane,
/// so this reads them from it and sorts (an export is an occasional operator
/// action).
const EXPORT_UNDRAINED: &str = "SELECT e.payload
     FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
     WHERE q.mesh_id = +?1 ORDER BY q.queued_at ASC, q.id ASC";
/// Every event of a mesh, oldest first. No index orders drained rows (no hot path
/// reads them in order, and each index costs every write), so this one sorts; an
/// export is an occasional operator action.
const EXPORT_ALL: &str =
    "SELECT payload FROM mesh_pending_events WHERE mesh_id = +?1 ORDER BY queued_at ASC, id ASC";

/// The stored payloads of a mesh's events, oldest first.
fn export_payloads(conn: &Connection, mesh_id: &str, include_drained: bool) -> Res<Vec<String>> {
    let sql = if include_drained { EXPORT_ALL } else { EXPORT_UNDRAINED };
    let mut stmt = conn.prepare_cached(sql)?;
    let payloads =
        stmt.query_map([mesh_id], |r| r.get::<_, Json>(0).map(String::from))?.collect::<Result<_, _>>()?;
    Ok(payloads)
}

/// Writes a mesh's events to `out` as JSONL; see
/// [`SqliteStore::export_pending_events`].
pub(crate) fn export(
    store: &SqliteStore,
    mesh_id: &str,
    include_drained: bool,
    out: &mut dyn Write,
) -> StoreResult<u64> {
    // The rows are read first and written after the connection is released, so
    // a slow reader of `out` never holds up the store.
    let payloads = store.read(|conn| export_payloads(conn, mesh_id, include_drained))?;
    let io = |err: std::io::Error| StoreError::Backend(Box::new(err));
    let mut written = 0;
    for payload in payloads {
        let event: Value = match serde_json::from_str(&payload) {
            Ok(event @ Value::Object(_)) => event,
            _ => {
                tracing::warn!(mesh_id, "pending event with an unreadable payload left out of the export");
                continue;
            }
        };
        serde_json::to_writer(&mut *out, &event).map_err(|err| io(err.into()))?;
        out.write_all(b"\n").map_err(io)?;
        written += 1;
    }
    out.flush().map_err(io)?;
    Ok(written)
}

// ── Retention ───────────────────────────────────────────────────────────────

/// `?start, ?start+1, ...` for the never-expire names.
fn never_expire_list(start: usize) -> String {
    (0..NEVER_EXPIRE_EVENTS.len()).map(|i| format!("?{}", start + i)).collect::<Vec<_>>().join(", ")
}

fn never_expire_values() -> impl Iterator<Item = SqlValue> {
    NEVER_EXPIRE_EVENTS.iter().map(|name| SqlValue::Text((*name).to_owned()))
}

/// One chunk of a mesh's expirable undrained rows in queue order (lane by lane,
/// oldest first in each) after the (lane, queued_at, id) cursor in ?3, ?4, ?5;
/// walks the queue.
fn expire_chunk_sql() -> String {
    format!(
        "SELECT q.id, q.event, e.payload, q.queued_at, q.lane
           FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
          WHERE q.mesh_id = +?1 AND q.queued_at < +?2
            AND (q.lane, q.queued_at, q.id) > (+?3, +?4, +?5)
            AND q.event NOT IN ({})
          ORDER BY q.lane ASC, q.queued_at ASC, q.id ASC LIMIT {CHUNK}",
        never_expire_list(6)
    )
}

fn exempt_count_sql() -> String {
    format!(
        "SELECT COUNT(*) FROM mesh_inbox_queue q
          WHERE mesh_id = +?1 AND queued_at < +?2 AND event IN ({})",
        never_expire_list(3)
    )
}

/// Drained events (event rows without a queue entry) queued before ?1; a
/// caller adds its mesh filter.
const DELETE_DRAINED: &str = "DELETE FROM mesh_pending_events AS e
      WHERE e.queued_at < ?1
        AND NOT EXISTS (SELECT 1 FROM mesh_inbox_queue q
                         WHERE q.mesh_id = e.mesh_id AND q.lane = e.lane
                           AND q.queued_at = e.queued_at AND q.id = e.id)";

/// The sweep; see [`agentmesh_store::Store::prune_pending_events`].
///
/// Drained rows (event rows without a queue entry) go in one statement, and one
/// more per mesh with an events window of its own. There is
/// no index on their age (a drain never needs one, and every index costs every
/// write), so this scans the table; the sweep runs hourly at most. Undrained rows
/// are walked per mesh through the queue, in transactions of at most [`CHUNK`] rows: if the sweep
/// stops halfway, every chunk that committed did so with its ledger entries.
pub(crate) fn prune(
    store: &SqliteStore,
    drained_older_than: Timestamp,
    undrained_older_than: Timestamp,
    now: Timestamp,
) -> StoreResult<PruneReport> {
    let drained_expired = store.write(|tx| {
        // Meshes with an events window of their own go by it, one by one.
        let own: Vec<(String, Option<Timestamp>)> = crate::archive::own_windows(tx)?
            .into_iter()
            .filter(|(_, windows)| windows.events.is_some())
            .map(|(mesh_id, windows)| (mesh_id, windows.drained_cutoff(drained_older_than, now)))
            .collect();
        let apart = serde_json::to_string(&own.iter().map(|(mesh_id, _)| mesh_id).collect::<Vec<_>>())?;
        let mut deleted = tx
            .prepare_cached(&format!(
                "{DELETE_DRAINED} AND e.mesh_id NOT IN (SELECT value FROM json_each(?2))"
            ))?
            .execute(params![drained_older_than.millis(), apart])?;
        for (mesh_id, cutoff) in &own {
            if let Some(cutoff) = cutoff {
                deleted += tx
                    .prepare_cached(&format!("{DELETE_DRAINED} AND e.mesh_id = ?2"))?
                    .execute(params![cutoff.millis(), mesh_id])?;
            }
        }
        Ok(deleted as u64)
    })?;
    let meshes: Vec<String> = store.read(|conn| {
        let mut stmt =
            conn.prepare_cached("SELECT DISTINCT mesh_id FROM mesh_inbox_queue WHERE queued_at < ?1")?;
        let meshes =
            stmt.query_map([undrained_older_than.millis()], |r| r.get(0))?.collect::<Result<_, _>>()?;
        Ok(meshes)
    })?;
    let chunk_sql = expire_chunk_sql();
    let exempt_sql = exempt_count_sql();
    let mut report = inbox_sweep::expire_undrained(
        &meshes,
        |mesh_id, cursor| {
            store.write(|tx| expire_chunk(tx, &chunk_sql, mesh_id, undrained_older_than, cursor, now))
        },
        |mesh_id| {
            store.read(|conn| {
                let mut args = vec![
                    SqlValue::Text(mesh_id.to_owned()),
                    SqlValue::Integer(undrained_older_than.millis()),
                ];
                args.extend(never_expire_values());
                let n: i64 =
                    conn.prepare_cached(&exempt_sql)?.query_row(params_from_iter(args), |r| r.get(0))?;
                Ok(n as u64)
            })
        },
    )?;
    report.drained_expired = drained_expired;
    inbox_sweep::log(&report);
    Ok(report)
}

/// One expired undrained row.
struct Expired {
    lane: String,
    id: String,
    event: String,
    payload: String,
    queued_at: i64,
}

/// Removes one chunk of a mesh's expirable rows, each with its `event_held`
/// entry, in the caller's transaction. Returns how many and the last row's
/// cursor.
fn expire_chunk(
    conn: &Connection,
    sql: &str,
    mesh_id: &str,
    older_than: Timestamp,
    cursor: &Cursor,
    now: Timestamp,
) -> Res<(u64, Option<Cursor>)> {
    let mut args = vec![
        SqlValue::Text(mesh_id.to_owned()),
        SqlValue::Integer(older_than.millis()),
        SqlValue::Text(cursor.0.clone()),
        SqlValue::Integer(cursor.1),
        SqlValue::Text(cursor.2.clone()),
    ];
    args.extend(never_expire_values());
    let rows: Vec<Expired> = conn
        .prepare_cached(sql)?
        .query_map(params_from_iter(args), |r| {
            Ok(Expired {
                id: r.get(0)?,
                event: r.get(1)?,
                payload: r.get::<_, Json>(2)?.0,
                queued_at: r.get(3)?,
                lane: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let last = rows.last().map(|r| (r.lane.clone(), r.queued_at, r.id.clone()));
    // Only a row still queued (so undrained) goes; the delete trigger takes its
    // queue entry with it.
    let mut delete = conn.prepare_cached(
        "DELETE FROM mesh_pending_events
          WHERE mesh_id = ?1 AND id = ?2
            AND EXISTS (SELECT 1 FROM mesh_inbox_queue
                         WHERE mesh_id = ?1 AND lane = ?3 AND queued_at = ?4 AND id = ?2)",
    )?;
    let mut expired = 0;
    for row in &rows {
        if delete.execute(params![mesh_id, row.id, row.lane, row.queued_at])? == 1 {
            let id = mint_at(now);
            ledger::append(
                conn,
                &retention_entry(mesh_id, &row.id, &row.event, &row.payload, row.queued_at, id, now),
            )?;
            expired += 1;
        }
    }
    Ok((expired, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(conn: &Connection, sql: &str) -> String {
        let n = conn.prepare(sql).unwrap().parameter_count();
        let args: Vec<SqlValue> = (0..n).map(|_| SqlValue::Integer(0)).collect();
        crate::query_plan(conn, sql, &args)
    }

    /// The per-mesh walks of the sweep are ranges of the queue in its order: no
    /// table scan, no sort. An undrained export reads the queue too (and sorts,
    /// since the queue holds the events lane by lane).
    #[test]
    fn undrained_walks_use_the_queue() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        for sql in [expire_chunk_sql(), exempt_count_sql(), EXPORT_UNDRAINED.to_owned()] {
            let plan = plan(&conn, &sql);
            assert!(plan.contains("SEARCH q USING PRIMARY KEY (mesh_id=?"), "{sql}\n{plan}");
            if sql != EXPORT_UNDRAINED {
                assert!(!plan.contains("TEMP B-TREE"), "{sql}\n{plan}");
            }
        }
    }

    #[test]
    fn the_never_expire_list_binds_every_name() {
        assert_eq!(never_expire_list(3).matches('?').count(), NEVER_EXPIRE_EVENTS.len());
        assert!(never_expire_list(3).starts_with("?3, ?4"));
        assert_eq!(never_expire_values().count(), NEVER_EXPIRE_EVENTS.len());
    }
}
