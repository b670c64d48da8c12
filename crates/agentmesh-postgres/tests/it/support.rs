//! A fresh installation per test: a schema of its own in the test database,
//! dropped (with everything in it) when the test's handle drops.

use agentmesh_postgres::{PgOptions, PgStore};

/// The server the tests use.
pub fn database_url() -> String {
    std::env::var("AGENTMESH_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A schema name no other test uses.
pub fn fresh_schema() -> String {
    format!("am_test_{}", uuid::Uuid::new_v4().simple())
}

/// The options of a store in `schema`, with a small pool (tests open many).
pub fn options(schema: &str) -> PgOptions {
    let mut options = PgOptions::new(database_url()).schema(schema);
    options.max_connections = 4;
    options
}

/// Drops `schema` when dropped.
pub struct SchemaGuard(pub String);

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        match postgres::Client::connect(&database_url(), postgres::NoTls) {
            Ok(mut client) => {
                if let Err(err) =
                    client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.0))
                {
                    eprintln!("could not drop test schema {}: {err}", self.0);
                }
            }
            Err(err) => eprintln!("could not connect to drop test schema {}: {err}", self.0),
        }
    }
}

/// A store in a fresh schema; the schema is dropped after the store.
pub struct TestDb {
    pub store: PgStore,
    // Dropped after the store (fields drop in order), so its connections close first.
    _schema: SchemaGuard,
}

impl TestDb {
    pub fn new() -> TestDb {
        let schema = fresh_schema();
        let guard = SchemaGuard(schema.clone());
        let store = PgStore::open(&options(&schema)).expect("a fresh PostgreSQL store");
        TestDb { store, _schema: guard }
    }
}

impl std::ops::Deref for TestDb {
    type Target = PgStore;

    fn deref(&self) -> &PgStore {
        &self.store
    }
}
