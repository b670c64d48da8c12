//! Import of a database the original ADHDev daemon wrote (`mesh-runtime.db`, or
//! the older `beads.db`) into this store, row by row, for every mesh it holds.
//!
//! The source file is never changed, and nothing is written beside it: it is
//! copied as plain files (with its `-wal`) to a scratch file beside this store's
//! database, the copy is opened and upgraded by the same migrations as any
//! database (so projected columns and v2 envelope columns are filled in), read,
//! and deleted.
//!
//! Tasks go through the same import path as legacy queue files (ids that exist are
//! skipped, readiness is recounted). Every other table is copied with
//! `INSERT OR IGNORE` over the columns both schemas share, so a row whose key (id,
//! event fingerprint, ...) exists already is skipped and a second import of the
//! same file adds nothing. Each table is one transaction. The tool-call log is not
//! imported: it is the rate guard's short sliding window, not history.

use std::path::{Path, PathBuf};

use agentmesh_store::{StoreError, StoreResult};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags, params_from_iter};
use serde::Serialize;

use crate::{Res, SqliteStore, inbox, ledger, tasks};

/// The tables copied besides the queue, in the order they are imported, with the
/// words reports use for them.
const COPIED_TABLES: &[(&str, &str)] = &[
    ("mesh_event_ledger", "ledger entries"),
    ("mesh_pending_events", "pending events"),
    ("mesh_missions", "missions"),
    ("mesh_direct_dispatches", "direct dispatches"),
    ("mesh_session_delivery", "session deliveries"),
    ("mesh_inflight_hold", "in-flight holds"),
    ("remote_idle_sessions", "idle sessions"),
    ("mesh_completion_fingerprints", "completion fingerprints"),
    ("mesh_completion_conflicts", "completion conflicts"),
    ("mesh_scheduler_cursor", "scheduler cursors"),
];

/// What importing one original database did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginalDbReport {
    /// Every mesh the source holds a task, ledger entry, event or mission of.
    pub meshes: Vec<String>,
    /// One line per kind of row, tasks first.
    pub tables: Vec<TableImport>,
}

/// What became of the rows of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableImport {
    /// The table.
    pub table: String,
    /// What its rows are, in words (`tasks`, `ledger entries`, ...).
    pub what: String,
    /// Rows added to this store.
    pub imported: u64,
    /// Rows already present (same key), left as they were.
    pub skipped: u64,
    /// Rows that could not be read (a task payload that is not a task).
    pub bad: u64,
}

impl SqliteStore {
    /// Imports every row of the original database at `source` into this store;
    /// see the module documentation. Fails with [`StoreError::LegacyFile`] when the
    /// file cannot be copied or is not a database this store can upgrade.
    pub fn import_original_database(&self, source: &Path) -> StoreResult<OriginalDbReport> {
        let scratch = Scratch::copy_of(source, &self.path)?;
        let legacy = |problem: String| StoreError::LegacyFile { path: source.to_owned(), problem };
        // Opening upgrades the copy; closing it again folds its WAL back in.
        drop(SqliteStore::open(&scratch.path).map_err(|e| legacy(e.to_string()))?);
        let src = Connection::open_with_flags(&scratch.path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| legacy(e.to_string()))?;
        let read = |e: rusqlite::Error| legacy(e.to_string());

        let mut report = OriginalDbReport { meshes: meshes(&src).map_err(read)?, tables: Vec::new() };
        report.tables.push(self.import_tasks(&src, source)?);
        for (table, what) in COPIED_TABLES {
            if let Some(line) = self.copy_table(&src, table, what, source)? {
                report.tables.push(line);
            }
        }
        Ok(report)
    }

    fn import_tasks(&self, src: &Connection, source: &Path) -> StoreResult<TableImport> {
        let rows = read_rows(src, "SELECT id, payload FROM mesh_queue ORDER BY created_at, id")
            .map_err(|e| StoreError::LegacyFile { path: source.to_owned(), problem: e.to_string() })?;
        let mut entries = Vec::new();
        let mut bad = 0;
        for row in rows {
            // The scratch copy was upgraded by our migrations, which store a
            // finished task's payload packed.
            let stored = match row.as_slice() {
                [SqlValue::Text(id), SqlValue::Text(payload)] => Some((id, payload.as_bytes())),
                [SqlValue::Text(id), SqlValue::Blob(stored)] => Some((id, stored.as_slice())),
                _ => None,
            };
            match stored {
                Some((id, stored)) => match tasks::decode(id, stored) {
                    Ok(task) => entries.push(task),
                    Err(err) => {
                        tracing::warn!(task_id = %id, err = %err.0, "task row of the original database not imported");
                        bad += 1;
                    }
                },
                _ => bad += 1,
            }
        }
        let imported = self.write(|tx| tasks::import_entries(tx, &entries))?;
        Ok(TableImport {
            table: "mesh_queue".to_owned(),
            what: "tasks".to_owned(),
            imported,
            skipped: entries.len() as u64 - imported,
            bad,
        })
    }

    /// Copies the rows of `table` that are not here yet; `None` when the source has
    /// no such table.
    ///
    /// Event rows keep their state: one undrained in the source is queued here,
    /// and a drained one keeps its event id in the dedup history.
    fn copy_table(
        &self,
        src: &Connection,
        table: &str,
        what: &str,
        source: &Path,
    ) -> StoreResult<Option<TableImport>> {
        let legacy =
            |e: rusqlite::Error| StoreError::LegacyFile { path: source.to_owned(), problem: e.to_string() };
        let theirs = columns(src, table).map_err(legacy)?;
        if theirs.is_empty() {
            return Ok(None);
        }
        let ours = self.read(|conn| Ok(columns(conn, table)?))?;
        let ledger = table == "mesh_event_ledger";
        // A ledger entry is numbered by this database as it is copied in (the
        // copy's numbers and origin are the scratch database's own).
        let shared: Vec<&String> = theirs
            .iter()
            .filter(|c| ours.contains(c) && !(ledger && (*c == "seq" || *c == "origin")))
            .collect();
        let list = shared.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(", ");
        let events = table == "mesh_pending_events";
        // The source is upgraded by the same migrations: its queue says which
        // events are undrained.
        let queued = if events {
            ", EXISTS (SELECT 1 FROM mesh_inbox_queue q WHERE q.mesh_id = t.mesh_id AND q.lane = t.lane
                          AND q.queued_at = t.queued_at AND q.id = t.id)"
        } else {
            ""
        };
        let order = if ledger { " ORDER BY timestamp, seq" } else { "" };
        let rows =
            read_rows(src, &format!("SELECT {list}{queued} FROM \"{table}\" AS t{order}")).map_err(legacy)?;
        let marks = (1..=shared.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ");
        let insert = if ledger {
            // A ledger entry takes the next number here.
            format!("INSERT OR IGNORE INTO \"{table}\" ({list}, seq) VALUES ({marks}, {})", ledger::NEXT_SEQ)
        } else {
            format!("INSERT OR IGNORE INTO \"{table}\" ({list}) VALUES ({marks})")
        };
        let imported = self.write(|tx| -> Res<u64> {
            let mut stmt = tx.prepare(&insert)?;
            let mut added = 0;
            for row in &rows {
                let inserted = stmt.execute(params_from_iter(row[..shared.len()].iter()))? as u64;
                if events && inserted > 0 {
                    let rowid = tx.last_insert_rowid();
                    if row.last() == Some(&SqlValue::Integer(1)) {
                        inbox::enqueue_stored(tx, rowid)?;
                    } else {
                        inbox::record_drained_stored(tx, rowid)?;
                    }
                }
                added += inserted;
            }
            Ok(added)
        })?;
        Ok(Some(TableImport {
            table: table.to_owned(),
            what: what.to_owned(),
            imported,
            skipped: rows.len() as u64 - imported,
            bad: 0,
        }))
    }
}

/// The columns of `table`, in order; empty when there is no such table.
fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
    stmt.query_map([table], |r| r.get(0))?.collect()
}

/// Every row `sql` selects, as plain values.
fn read_rows(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<Vec<SqlValue>>> {
    let mut stmt = conn.prepare(sql)?;
    let width = stmt.column_count();
    stmt.query_map([], |r| (0..width).map(|i| r.get::<_, SqlValue>(i)).collect())?.collect()
}

/// The meshes a database holds rows of, sorted.
fn meshes(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT mesh_id FROM mesh_queue UNION SELECT mesh_id FROM mesh_event_ledger
         UNION SELECT mesh_id FROM mesh_pending_events UNION SELECT mesh_id FROM mesh_missions
         ORDER BY 1",
    )?;
    stmt.query_map([], |r| r.get(0))?.collect()
}

/// A scratch copy of a database file (and its companions), deleted on drop.
struct Scratch {
    path: PathBuf,
}

/// Copies of the source taken before the import gives up on getting one that no
/// writer changed meanwhile.
const COPY_ATTEMPTS: usize = 5;

impl Scratch {
    /// Copies `source` and its `-wal` next to `beside` under a fresh name.
    ///
    /// The source is only ever read as plain files: SQLite opening a WAL-mode
    /// database, even read-only, creates `-wal` and `-shm` files beside it, and
    /// `immutable` would read it without its WAL. The `-shm` is not copied (it is
    /// rebuilt from the WAL). A copy is kept only when the files' sizes and
    /// modification times are the same after it as before, so a copy torn by a
    /// writer (the original's daemon still running) is taken again.
    fn copy_of(source: &Path, beside: &Path) -> StoreResult<Scratch> {
        let dir = beside.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let scratch = Scratch {
            path: dir.join(format!(".adhdev-import-{}.db", agentmesh_store::ids::mint_prefixed(""))),
        };
        let failed = |from: &Path, e: std::io::Error| StoreError::LegacyFile {
            path: from.to_owned(),
            problem: format!("cannot be copied for import: {e}"),
        };
        for _ in 0..COPY_ATTEMPTS {
            let before = stamps(source);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(with_suffix(&scratch.path, suffix));
            }
            for suffix in ["", "-wal"] {
                let from = with_suffix(source, suffix);
                if suffix.is_empty() || from.exists() {
                    let to = with_suffix(&scratch.path, suffix);
                    std::fs::copy(&from, &to).map_err(|e| failed(&from, e))?;
                    // A read-only source gives a read-only copy; the upgrade must
                    // write to it.
                    let mut perms = std::fs::metadata(&to).map_err(|e| failed(&from, e))?.permissions();
                    #[allow(clippy::permissions_set_readonly_false)] // Our own scratch copy, owned by us.
                    perms.set_readonly(false);
                    std::fs::set_permissions(&to, perms).map_err(|e| failed(&from, e))?;
                }
            }
            if stamps(source) == before {
                return Ok(scratch);
            }
            tracing::warn!(source = %source.display(), "the database changed while it was copied; copying it again");
        }
        Err(StoreError::LegacyFile {
            path: source.to_owned(),
            problem: format!(
                "kept changing while it was copied ({COPY_ATTEMPTS} tries); stop the daemon that writes it"
            ),
        })
    }
}

/// The size and modification time of a database file and of its `-wal`, to tell
/// whether a writer changed them.
fn stamps(source: &Path) -> Vec<Option<(u64, Option<std::time::SystemTime>)>> {
    ["", "-wal"]
        .iter()
        .map(|suffix| {
            std::fs::metadata(with_suffix(source, suffix)).ok().map(|m| (m.len(), m.modified().ok()))
        })
        .collect()
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(with_suffix(&self.path, suffix));
        }
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
