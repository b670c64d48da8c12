//! Versioned, append-only schema migrations, tracked in `PRAGMA user_version`.
//! A database whose version is past the last step known here was written by a
//! newer agentmesh and is refused untouched.
//!
//! Version 1 is the original TypeScript store's schema, written with
//! `IF NOT EXISTS` so a database the original created (user_version 0, tables
//! present) passes through it unchanged; later versions upgrade such a database in
//! place. An applied migration is never edited: changes go into a new step.

use std::io::Read;
use std::path::{Path, PathBuf};

use agentmesh_store::StoreError;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::paths::with_suffix;
use crate::{Fail, Res, inbox, ledger, tasks};

/// One migration step: SQL, then an optional data step in Rust.
struct Migration {
    name: &'static str,
    sql: &'static str,
    after: Option<fn(&Transaction<'_>) -> Res<()>>,
}

const MIGRATIONS: &[Migration] = &[
    Migration { name: "0001_original", sql: include_str!("../migrations/0001_original.sql"), after: None },
    Migration { name: "0002_mesh_isolation", sql: "", after: Some(mesh_isolation) },
    Migration {
        name: "0003_claim_projection",
        sql: include_str!("../migrations/0003_claim_projection.sql"),
        after: Some(tasks::backfill_projection),
    },
    Migration {
        name: "0004_ledger_paging",
        sql: include_str!("../migrations/0004_ledger_paging.sql"),
        after: None,
    },
    Migration {
        name: "0005_runtime_tables",
        sql: include_str!("../migrations/0005_runtime_tables.sql"),
        after: None,
    },
    Migration { name: "0006_inbox_v2", sql: include_str!("../migrations/0006_inbox_v2.sql"), after: None },
    Migration {
        name: "0007_inbox_routing",
        sql: include_str!("../migrations/0007_inbox_routing.sql"),
        after: Some(inbox::backfill_route_columns),
    },
    Migration {
        name: "0008_inbox_queue",
        sql: include_str!("../migrations/0008_inbox_queue.sql"),
        after: None,
    },
    Migration {
        name: "0009_assigned_index",
        sql: include_str!("../migrations/0009_assigned_index.sql"),
        after: None,
    },
    Migration {
        name: "0010_ledger_kind_index",
        sql: include_str!("../migrations/0010_ledger_kind_index.sql"),
        after: None,
    },
    Migration { name: "0011_tool_call_role", sql: "", after: Some(tool_call_role) },
    Migration {
        name: "0012_ledger_sequence",
        sql: include_str!("../migrations/0012_ledger_sequence.sql"),
        after: Some(ledger::sequence_existing),
    },
    Migration {
        name: "0013_ledger_by_sequence",
        sql: include_str!("../migrations/0013_ledger_by_sequence.sql"),
        after: Some(ledger::renumbered),
    },
    Migration {
        name: "0014_inflight_hold",
        sql: include_str!("../migrations/0014_inflight_hold.sql"),
        after: None,
    },
    Migration { name: "0015_original_schema", sql: "", after: Some(original_schema) },
    Migration {
        name: "0016_path_reservations",
        sql: include_str!("../migrations/0016_path_reservations.sql"),
        after: None,
    },
    Migration { name: "0017_webhooks", sql: include_str!("../migrations/0017_webhooks.sql"), after: None },
    Migration {
        name: "0018_inbox_envelope_columns",
        sql: include_str!("../migrations/0018_inbox_envelope_columns.sql"),
        after: None,
    },
    Migration {
        name: "0019_packed_payloads",
        sql: include_str!("../migrations/0019_packed_payloads.sql"),
        after: None,
    },
];

/// The schema version (`PRAGMA user_version`) of a fully migrated database.
pub const LATEST_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database up to [`LATEST_VERSION`]; see [`migrate_to`].
pub(crate) fn migrate(conn: &mut Connection) -> Res<()> {
    migrate_to(conn, LATEST_VERSION)
}

/// Brings the database up to version `target`, one `BEGIN IMMEDIATE` transaction
/// per step.
///
/// Several processes may open a new database at once, so each step reads the
/// version inside its transaction, under the write lock, and applies the step that
/// follows it: a process that waited for another one's step finds it done and goes
/// on from there. A database already at `target` takes no lock at all. A version
/// past [`LATEST_VERSION`] is refused ([`StoreError::SchemaTooNew`]) and nothing
/// is written. A failed step names itself and SQLite's reason, never its SQL.
fn migrate_to(conn: &mut Connection, target: i64) -> Res<()> {
    let current = user_version(conn)?;
    refuse_newer(conn, current)?;
    if current == target {
        return Ok(());
    }
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = user_version(&tx)?;
        refuse_newer(&tx, current)?;
        if current >= target {
            return Ok(());
        }
        // A foreign database may hold a negative version: it gets every step.
        let version = current.max(0) + 1;
        let step = &MIGRATIONS[(version - 1) as usize];
        apply(tx, step, version).map_err(|Fail(err)| Fail(step_failed(step.name, err)))?;
        tracing::debug!(migration = step.name, "applied migration");
    }
}

/// Applies `step` and records `version`, then commits.
fn apply(tx: Transaction<'_>, step: &Migration, version: i64) -> Res<()> {
    tx.execute_batch(step.sql)?;
    if let Some(after) = step.after {
        after(&tx)?;
    }
    tx.pragma_update(None, "user_version", version)?;
    tx.commit()?;
    Ok(())
}

/// The schema version recorded in the database.
fn user_version(conn: &Connection) -> Res<i64> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

/// Refuses a database whose schema `version` is past the last this build knows.
fn refuse_newer(conn: &Connection, version: i64) -> Res<()> {
    if version <= LATEST_VERSION {
        return Ok(());
    }
    let path = conn.path().map(PathBuf::from).unwrap_or_default();
    Err(Fail(StoreError::SchemaTooNew { path, found: version, supported: LATEST_VERSION }))
}

/// Refuses the database file at `path` when a newer agentmesh wrote it, before
/// anything opens it for writing: its schema version is read without writing a
/// byte (no journal-mode switch, no WAL or shared-memory file created).
///
/// The version is in the file's header (`user_version`, at offset 60). When a WAL
/// with frames lies beside the file, a newer header may still be in it, so the
/// version is then read through a read-only connection, which reads the WAL and
/// never checkpoints it. A file that is missing, empty or not a SQLite database
/// passes: opening it decides.
pub(crate) fn refuse_newer_file(path: &Path) -> Res<()> {
    let mut header = Vec::with_capacity(100);
    let read = std::fs::File::open(path).and_then(|file| file.take(100).read_to_end(&mut header));
    if read.is_err() || header.len() < 100 || !header.starts_with(b"SQLite format 3\0") {
        return Ok(());
    }
    let wal_frames = std::fs::metadata(with_suffix(path, "-wal")).is_ok_and(|meta| meta.len() > 0);
    if wal_frames {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_millis(u64::from(crate::BUSY_TIMEOUT_MS)))?;
        let version = user_version(&conn)?;
        return refuse_newer(&conn, version);
    }
    let version = i64::from(i32::from_be_bytes([header[60], header[61], header[62], header[63]]));
    if version <= LATEST_VERSION {
        return Ok(());
    }
    Err(Fail(StoreError::SchemaTooNew { path: path.to_owned(), found: version, supported: LATEST_VERSION }))
}

/// Why a migration step failed: its name and SQLite's reason. SQLite's errors about
/// a statement carry the statement itself, which a step's reader has no use for.
#[derive(Debug, thiserror::Error)]
#[error("schema migration {step} failed: {reason}")]
struct StepFailed {
    step: &'static str,
    reason: String,
}

/// Names the failed step in `err`, keeping a busy database [`StoreError::Busy`]
/// (another process holds the lock: the open may be retried).
fn step_failed(step: &'static str, err: StoreError) -> StoreError {
    let StoreError::Backend(source) = err else { return err };
    let reason = match source.downcast::<rusqlite::Error>() {
        Ok(sqlite) => match *sqlite {
            rusqlite::Error::SqlInputError { msg, .. } | rusqlite::Error::SqliteFailure(_, Some(msg)) => msg,
            other => other.to_string(),
        },
        Err(other) => other.to_string(),
    };
    StoreError::Backend(Box::new(StepFailed { step, reason }))
}

fn table_columns(tx: &Transaction<'_>, table: &str) -> Res<Vec<String>> {
    let mut stmt = tx.prepare(&format!("PRAGMA table_info({table})"))?;
    let cols = stmt.query_map([], |r| r.get::<_, String>(1))?.collect::<Result<Vec<_>, _>>()?;
    Ok(cols)
}

/// The original's mesh-isolation migration: older databases lack `mesh_id` on the
/// fingerprint table (added and back-filled from the fingerprint's first `::`
/// segment) and on the idle-session table (ephemeral rows: dropped and recreated).
fn mesh_isolation(tx: &Transaction<'_>) -> Res<()> {
    if !table_columns(tx, "mesh_completion_fingerprints")?.iter().any(|c| c == "mesh_id") {
        tx.execute_batch(
            "ALTER TABLE mesh_completion_fingerprints ADD COLUMN mesh_id TEXT NOT NULL DEFAULT '';
             UPDATE mesh_completion_fingerprints
                SET mesh_id = substr(fingerprint, 1, instr(fingerprint, '::') - 1)
              WHERE instr(fingerprint, '::') > 0 AND mesh_id = '';",
        )?;
    }
    tx.execute_batch(
        "CREATE INDEX IF NOT EXISTS idx_mesh_completion_fingerprints_mesh
             ON mesh_completion_fingerprints(mesh_id, fingerprint);",
    )?;
    if !table_columns(tx, "remote_idle_sessions")?.iter().any(|c| c == "mesh_id") {
        tx.execute_batch(
            "DROP TABLE IF EXISTS remote_idle_sessions;
             CREATE TABLE remote_idle_sessions (
                 mesh_id TEXT NOT NULL,
                 node_id TEXT NOT NULL,
                 session_id TEXT NOT NULL,
                 provider_type TEXT NOT NULL,
                 expires_at INTEGER NOT NULL,
                 metadata TEXT,
                 PRIMARY KEY (mesh_id, node_id, session_id)
             );",
        )?;
    }
    Ok(())
}

/// The original's later `caller_role` column of the tool-call log, added where a
/// database lacks it (a database written by a later original already has it).
fn tool_call_role(tx: &Transaction<'_>) -> Res<()> {
    if !table_columns(tx, "mesh_tool_call_log")?.iter().any(|c| c == "caller_role") {
        tx.execute_batch("ALTER TABLE mesh_tool_call_log ADD COLUMN caller_role TEXT;")?;
    }
    Ok(())
}

/// The original's later schema: missions carry a `source` (added where a database
/// lacks it; rows already there have none), and the dormant
/// `mesh_direct_delivered_events` table the original dropped goes.
fn original_schema(tx: &Transaction<'_>) -> Res<()> {
    if !table_columns(tx, "mesh_missions")?.iter().any(|c| c == "source") {
        tx.execute_batch("ALTER TABLE mesh_missions ADD COLUMN source TEXT;")?;
    }
    tx.execute_batch("DROP TABLE IF EXISTS mesh_direct_delivered_events;")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_to_an_empty_database_and_are_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v, LATEST_VERSION);
        migrate(&mut conn).unwrap();
    }

    /// Version 8 moves the undrained events onto the queue and the drained ones'
    /// event ids into the dedup history; the rows themselves stay as they were.
    #[test]
    fn the_inbox_queue_takes_over_the_drained_flag() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_to(&mut conn, 7).unwrap();
        conn.execute_batch(
            "INSERT INTO mesh_pending_events (id, mesh_id, coordinator_daemon_id, event, payload, queued_at,
                                              drained, event_id, lane)
             VALUES ('r1', 'm', NULL, 'agent:ready', '{}', 10, 0, NULL, ''),
                    ('r2', 'm', 'mach_A', 'agent:stopped', '{}', 20, 1, 'e2', '@mach_A'),
                    ('r3', 'm', 'mach_A', 'agent:stopped', '{}', 30, 0, 'e3', 'u:mach_A|run-1|'),
                    ('r4', 'm', NULL, 'agent:ready', '{}', 40, 1, NULL, '');",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let rows = |sql: &str| -> Vec<String> {
            conn.prepare(sql).unwrap().query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
        };
        assert_eq!(
            rows("SELECT q.id || ' ' || q.lane || ' ' || IFNULL(q.coordinator_daemon_id, '-') || ' ' || q.event
                    FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid AND e.id = q.id
                   ORDER BY q.queued_at"),
            ["r1  - agent:ready", "r3 u:mach_A|run-1| mach_A agent:stopped"]
        );
        assert_eq!(rows("SELECT event_id || ' ' || id FROM mesh_inbox_drained"), ["e2 r2"]);
        assert_eq!(rows("SELECT id FROM mesh_pending_events ORDER BY id"), ["r1", "r2", "r3", "r4"]);
        let tx = conn.transaction().unwrap();
        assert!(!table_columns(&tx, "mesh_pending_events").unwrap().iter().any(|c| c.starts_with("drained")));
        // Removing an event row takes its queue entry or dedup record along.
        tx.execute("DELETE FROM mesh_pending_events WHERE id IN ('r2', 'r3')", []).unwrap();
        let left: i64 = tx
            .query_row(
                "SELECT (SELECT COUNT(*) FROM mesh_inbox_queue) + (SELECT COUNT(*) FROM mesh_inbox_drained)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 1, "only r1's queue entry is left");
    }

    /// Version 12 numbers the entries already in the ledger per mesh in append
    /// order ((timestamp, rowid)) and makes the database's id.
    #[test]
    fn the_ledger_sequence_numbers_existing_entries_in_append_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_to(&mut conn, 11).unwrap();
        conn.execute_batch(
            "INSERT INTO mesh_event_ledger (id, mesh_id, timestamp, kind, payload)
             VALUES ('late', 'm', '2025-01-01T00:00:02.000Z', 'note', '{}'),
                    ('first', 'm', '2025-01-01T00:00:01.000Z', 'note', '{}'),
                    ('other', 'n', '2025-01-01T00:00:01.500Z', 'note', '{}'),
                    ('second', 'm', '2025-01-01T00:00:01.000Z', 'note', '{}');",
        )
        .unwrap();
        migrate_to(&mut conn, 12).unwrap();
        let rows: Vec<(String, i64)> = conn
            .prepare("SELECT id, seq FROM mesh_event_ledger ORDER BY mesh_id, seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let want = [("first", 1), ("second", 2), ("late", 3), ("other", 1)];
        assert_eq!(rows, want.map(|(id, seq)| (id.to_owned(), seq)));
        assert!(ledger::database_id(&conn).unwrap().is_some(), "a database id");
    }

    /// Version 13 makes `seq` the ledger's integer key, one sequence for the
    /// database: every entry is kept with its rowid (its append order) as its
    /// number, the indexes the reads use are there again, the per-mesh floors go,
    /// and the database takes a new id (the numbers are of a new kind).
    #[test]
    fn the_ledger_is_renumbered_in_append_order_under_a_new_origin() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_to(&mut conn, 12).unwrap();
        conn.execute_batch(
            "INSERT INTO mesh_event_ledger (id, mesh_id, timestamp, kind, payload, seq)
             VALUES ('a1', 'm', '2025-01-01T00:00:02.000Z', 'note', '{\"n\":1}', 1),
                    ('b1', 'n', '2025-01-01T00:00:01.000Z', 'note', '{}', 1),
                    ('a2', 'm', '2025-01-01T00:00:03.000Z', 'task_claimed', '{}', 2),
                    ('unnumbered', 'm', '2024-12-31T00:00:00.000Z', 'note', '{}', NULL);
             INSERT INTO mesh_meta (key, value) VALUES ('ledger_seq_floor:n', 7);",
        )
        .unwrap();
        let origin = ledger::database_id(&conn).unwrap();
        migrate(&mut conn).unwrap();
        let rows: Vec<(i64, String, String, String)> = conn
            .prepare("SELECT seq, mesh_id, id, payload FROM mesh_event_ledger ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let row = |seq: i64, mesh: &str, id: &str, payload: &str| {
            (seq, mesh.to_owned(), id.to_owned(), payload.to_owned())
        };
        assert_eq!(
            rows,
            [
                row(1, "m", "a1", "{\"n\":1}"),
                row(2, "n", "b1", "{}"),
                row(3, "m", "a2", "{}"),
                row(4, "m", "unnumbered", "{}"),
            ]
        );
        let column = |sql: &str| -> Vec<rusqlite::types::Value> {
            conn.prepare(sql).unwrap().query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
        };
        let rowids = column("SELECT rowid FROM mesh_event_ledger ORDER BY rowid");
        assert_eq!(rowids, [1, 2, 3, 4].map(rusqlite::types::Value::Integer), "seq is the rowid");
        let indexes = column(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'mesh_event_ledger' ORDER BY name",
        );
        let names = [
            "idx_mesh_event_ledger_mesh_kind",
            "idx_mesh_event_ledger_slice",
            "sqlite_autoindex_mesh_event_ledger_1",
        ];
        assert_eq!(indexes, names.map(|n| rusqlite::types::Value::Text(n.to_owned())));
        let floors: i64 = conn
            .query_row("SELECT COUNT(*) FROM mesh_meta WHERE key LIKE 'ledger_seq_floor%'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(floors, 0);
        let now = ledger::database_id(&conn).unwrap();
        assert!(now.is_some() && now != origin, "a new origin: {origin:?} then {now:?}");
        let taken = conn.execute(
            "INSERT INTO mesh_event_ledger (id, mesh_id, timestamp, kind) VALUES ('a1', 'o', 'x', 'note')",
            [],
        );
        assert!(taken.is_err(), "an entry id stays unique across meshes");
    }

    /// The error chain of `err`, joined as `{:#}` prints it.
    fn chain(err: &StoreError) -> String {
        let mut text = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    }

    #[test]
    fn a_failed_step_names_itself_and_the_reason_but_not_its_sql() {
        let mut conn = Connection::open_in_memory().unwrap();
        let step = Migration {
            name: "0099_broken",
            sql: "CREATE TABLE broken (a INTEGER); INSERT INTO broken (b) SELECT a FROM broken;",
            after: None,
        };
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        let Err(Fail(err)) = apply(tx, &step, 99).map_err(|Fail(err)| Fail(step_failed(step.name, err)))
        else {
            panic!("the step fails");
        };
        let text = chain(&err);
        assert!(
            text.contains("schema migration 0099_broken failed: table broken has no column named b"),
            "{text}"
        );
        assert!(!text.contains("INSERT") && !text.contains("CREATE"), "no SQL: {text}");
        assert_eq!(user_version(&conn).unwrap(), 0, "nothing was applied");
    }

    #[test]
    fn a_newer_schema_version_is_refused_and_nothing_is_applied() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", LATEST_VERSION + 1).unwrap();
        let Err(Fail(err)) = migrate(&mut conn) else { panic!("a newer database is refused") };
        assert!(
            matches!(err, StoreError::SchemaTooNew { found, supported, .. } if found == LATEST_VERSION + 1 && supported == LATEST_VERSION),
            "{err:?}"
        );
        let tables: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0)).unwrap();
        assert_eq!(tables, 0, "no step ran");
    }

    #[test]
    fn pre_isolation_tables_gain_mesh_id() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE mesh_completion_fingerprints (fingerprint TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
             INSERT INTO mesh_completion_fingerprints VALUES ('mesh-a::agent:stopped::t1::genuine', 99), ('bare', 99);
             CREATE TABLE remote_idle_sessions (node_id TEXT, session_id TEXT, provider_type TEXT, expires_at INTEGER);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let meshes: Vec<String> = conn
            .prepare("SELECT mesh_id FROM mesh_completion_fingerprints ORDER BY fingerprint")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(meshes, ["", "mesh-a"]);
        let tx = conn.transaction().unwrap();
        assert!(table_columns(&tx, "remote_idle_sessions").unwrap().contains(&"mesh_id".to_owned()));
    }

    /// The tool-call log gains the original's later `caller_role` column; a log
    /// that has it already (a later original wrote the file) keeps its rows.
    #[test]
    fn the_tool_call_log_gains_a_caller_role_once() {
        for has_role in [false, true] {
            let mut conn = Connection::open_in_memory().unwrap();
            let role = if has_role { ", caller_role TEXT" } else { "" };
            conn.execute_batch(&format!(
                "CREATE TABLE mesh_tool_call_log (id INTEGER PRIMARY KEY AUTOINCREMENT, mesh_id TEXT NOT NULL,
                     tool TEXT NOT NULL, session_id TEXT, called_at INTEGER NOT NULL{role});
                 INSERT INTO mesh_tool_call_log (mesh_id, tool, called_at) VALUES ('m', 'list_tasks', 5);"
            ))
            .unwrap();
            migrate(&mut conn).unwrap();
            let (tool, role): (String, Option<String>) = conn
                .query_row("SELECT tool, caller_role FROM mesh_tool_call_log", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap();
            assert_eq!((tool.as_str(), role), ("list_tasks", None), "has_role: {has_role}");
        }
    }
}
