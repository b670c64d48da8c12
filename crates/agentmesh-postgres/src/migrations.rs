//! The numbered schema steps of a PostgreSQL installation (`migrations/*.sql`),
//! applied in order, each in its own transaction with the row that records it.
//!
//! Several daemons may open one installation at once: the steps run under a
//! session advisory lock of the schema, so one daemon applies them and the others
//! find them applied.

use std::path::PathBuf;

use agentmesh_store::StoreError;

use crate::{Fail, Res, quote_ident};
use postgres::Client;

/// One schema step.
struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "0001_schema", sql: include_str!("../migrations/0001_schema.sql") },
    Migration {
        version: 2,
        name: "0002_ledger_horizon",
        sql: include_str!("../migrations/0002_ledger_horizon.sql"),
    },
    Migration {
        version: 3,
        name: "0003_inflight_hold",
        sql: include_str!("../migrations/0003_inflight_hold.sql"),
    },
    Migration {
        version: 4,
        name: "0004_mission_source",
        sql: include_str!("../migrations/0004_mission_source.sql"),
    },
    Migration {
        version: 5,
        name: "0005_path_reservations",
        sql: include_str!("../migrations/0005_path_reservations.sql"),
    },
    Migration { version: 6, name: "0006_webhooks", sql: include_str!("../migrations/0006_webhooks.sql") },
    Migration {
        version: 7,
        name: "0007_inbox_envelope_columns",
        sql: include_str!("../migrations/0007_inbox_envelope_columns.sql"),
    },
    Migration { version: 8, name: "0008_archive", sql: include_str!("../migrations/0008_archive.sql") },
    Migration {
        version: 9,
        name: "0009_packed_payloads",
        sql: include_str!("../migrations/0009_packed_payloads.sql"),
    },
];

/// The schema version this build brings an installation to.
pub const LATEST_VERSION: i64 = 9;

/// Creates the schema when missing and applies the steps it lacks. A schema
/// migrated past [`LATEST_VERSION`] (by a newer agentmesh) is refused, unchanged.
pub(crate) fn migrate(conn: &mut Client, schema: &str) -> Res<()> {
    let key = crate::locks::hash(schema, &["migrations"]);
    conn.execute("SELECT pg_advisory_lock($1)", &[&key])?;
    let outcome = apply_missing(conn, schema, LATEST_VERSION);
    let unlocked = conn.execute("SELECT pg_advisory_unlock($1)", &[&key]);
    outcome?;
    unlocked?;
    Ok(())
}

/// Applies the steps the schema lacks, up to version `target`.
fn apply_missing(conn: &mut Client, schema: &str, target: i64) -> Res<()> {
    conn.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS agentmesh_migrations (
             version BIGINT PRIMARY KEY,
             name TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         );",
        schema = quote_ident(schema)
    ))?;
    let current: i64 =
        conn.query_one("SELECT COALESCE(MAX(version), 0) FROM agentmesh_migrations", &[])?.get(0);
    if current > LATEST_VERSION {
        return Err(Fail(StoreError::SchemaTooNew {
            path: PathBuf::from(format!("schema {schema}")),
            found: current,
            supported: LATEST_VERSION,
        }));
    }
    for step in MIGRATIONS.iter().filter(|m| m.version > current && m.version <= target) {
        let mut tx = conn.transaction()?;
        tx.batch_execute(step.sql).map_err(|e| step_failed(step.name, e))?;
        tx.execute(
            "INSERT INTO agentmesh_migrations (version, name) VALUES ($1, $2)",
            &[&step.version, &step.name],
        )?;
        tx.commit()?;
        tracing::info!(schema, step = step.name, "applied PostgreSQL schema step");
    }
    Ok(())
}

fn step_failed(step: &'static str, err: postgres::Error) -> Fail {
    Fail(StoreError::Backend(format!("schema step {step} failed: {}", db_message(&err)).into()))
}

/// The server's message for `err`, or the client's.
pub(crate) fn db_message(err: &postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use agentmesh_store::prelude::*;
    use agentmesh_store::transfer::{RecordKind, Records, TransferStore};

    use super::*;
    use crate::{PgOptions, PgStore};

    /// A schema written before step 9 (payloads as text) reads the same after
    /// it: a task and an event row of version 8, then the store opens (and
    /// migrates) the schema.
    #[test]
    fn payloads_written_as_text_before_step_9_read_the_same_after_it() {
        let url = agentmesh_test_support::require_postgres!();
        let schema = agentmesh_test_support::postgres::Schema::fresh(&url, "am_test");
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
        client.batch_execute(&format!("CREATE SCHEMA {0}; SET search_path TO {0}", schema.name())).unwrap();
        apply_missing(&mut client, schema.name(), 8).expect("the schema at version 8");
        let task = r#"{"id":"t1","meshId":"m","message":"written before payloads were packed, long enough to be worth deflating once the task is finished and rewritten","status":"completed","createdAt":"2025-01-01T00:00:00.000Z","updatedAt":"2025-01-01T00:00:00.000Z"}"#;
        let event = r#"{"event":"agent:ready","meshId":"m","metadataEvent":{"note":"queued by a build before step 9"}}"#;
        client
            .execute(
                "INSERT INTO mesh_queue (mesh_id, id, status, created_at, updated_at, payload)
                 VALUES ('m', 't1', 'completed', '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z', $1)",
                &[&task],
            )
            .unwrap();
        client
            .execute(
                "INSERT INTO mesh_pending_events (mesh_id, id, event, payload, queued_at)
                 VALUES ('m', 'e1', 'agent:ready', $1, 5)",
                &[&event],
            )
            .unwrap();
        drop(client);

        let store = PgStore::open(&PgOptions::new(&url).schema(schema.name())).expect("the store migrates");
        let found = store.find_task("m", "t1").unwrap().expect("the task written before");
        assert!(found.message.starts_with("written before payloads were packed"), "{found:?}");
        let page = store.export_page("m", RecordKind::InboxEvents, None, 10).unwrap();
        let Records::InboxEvents(events) = page.records else { panic!("expected events") };
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].payload, event, "the event's payload as it was written");
        drop(store);

        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
        let row = client
            .query_one(
                &format!(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
                      WHERE attrelid = '{}.mesh_queue'::regclass AND attname = 'payload'",
                    schema.name()
                ),
                &[],
            )
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "bytea");
    }
}
