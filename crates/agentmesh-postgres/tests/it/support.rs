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

/// Every statement a test prepared must name its mesh (see
/// `agentmesh_postgres::shard`): checked as each test's store goes, so the
/// statements of every rule run in this process are checked.
impl Drop for TestDb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert_statements_shardable();
        }
    }
}

/// Panics naming every prepared statement that would not route to one shard.
pub fn assert_statements_shardable() {
    let bad: Vec<String> = agentmesh_postgres::shard::prepared_statements()
        .into_iter()
        .filter_map(|sql| {
            agentmesh_postgres::shard::shard_violation(&sql).map(|why| format!("{why}:\n{sql}"))
        })
        .collect();
    assert!(bad.is_empty(), "statements that cross meshes:\n{}", bad.join("\n\n"));
}

impl std::ops::Deref for TestDb {
    type Target = PgStore;

    fn deref(&self) -> &PgStore {
        &self.store
    }
}
