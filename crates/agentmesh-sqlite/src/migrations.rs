//! Versioned, append-only schema migrations, tracked in `PRAGMA user_version`.
//!
//! Version 1 is the original TypeScript store's schema, written with
//! `IF NOT EXISTS` so a database the original created (user_version 0, tables
//! present) passes through it unchanged; later versions upgrade such a database in
//! place. An applied migration is never edited: changes go into a new step.

use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::{Res, inbox, tasks};

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
];

/// The schema version (`PRAGMA user_version`) of a fully migrated database.
pub const LATEST_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database up to [`LATEST_VERSION`], one transaction per step.
pub(crate) fn migrate(conn: &mut Connection) -> Res<()> {
    migrate_to(conn, LATEST_VERSION)
}

/// Brings the database up to version `target`, one transaction per step.
fn migrate_to(conn: &mut Connection, target: i64) -> Res<()> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (index, step) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        if version <= current || version > target {
            continue;
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(step.sql)?;
        if let Some(after) = step.after {
            after(&tx)?;
        }
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
        tracing::debug!(migration = step.name, "applied migration");
    }
    Ok(())
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
