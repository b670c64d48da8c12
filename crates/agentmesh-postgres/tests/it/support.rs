//! A fresh installation per test: a schema of its own on the server of
//! `agentmesh_test_support` (each test starts with
//! `agentmesh_test_support::require_postgres!()`), dropped with everything in
//! it when the test's handle drops.

use agentmesh_postgres::{PgOptions, PgStore};
use agentmesh_test_support::postgres::Schema;

/// A schema no other test uses on the server at `url`.
pub(crate) fn fresh_schema(url: &str) -> Schema {
    Schema::fresh(url, "am_test")
}

/// The options of a store in `schema` on the server at `url`, with a small pool
/// (tests open many).
pub(crate) fn options(url: &str, schema: &str) -> PgOptions {
    let mut options = PgOptions::new(url).schema(schema);
    options.max_connections = 4;
    options
}

/// A store in a fresh schema; the schema is dropped after the store.
pub(crate) struct TestDb {
    pub store: PgStore,
    // Dropped after the store (fields drop in order), so its connections close first.
    _schema: Schema,
}

impl TestDb {
    /// A store in a fresh schema on the server at `url`.
    pub(crate) fn new(url: &str) -> TestDb {
        let schema = fresh_schema(url);
        let store = PgStore::open(&options(url, schema.name())).expect("a fresh PostgreSQL store");
        TestDb { store, _schema: schema }
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
pub(crate) fn assert_statements_shardable() {
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
