//! The backend-agnostic conformance suite, run against the SQLite backend: one
//! `#[test]` per rule, each on a fresh database file in its own temp directory.

use std::ops::Deref;

use agentmesh_sqlite::SqliteStore;

/// A fresh `mesh-runtime.db` in a temp directory that lives as long as the store.
struct TestDb {
    store: SqliteStore,
    // Dropped after the store (fields drop in order), so the file outlives the connection.
    _dir: tempfile::TempDir,
}

impl TestDb {
    fn new() -> TestDb {
        let dir = tempfile::tempdir().expect("a temp directory for the test database");
        let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).expect("a fresh SQLite store");
        TestDb { store, _dir: dir }
    }
}

impl Deref for TestDb {
    type Target = SqliteStore;

    fn deref(&self) -> &SqliteStore {
        &self.store
    }
}

agentmesh_store::conformance_tests!(TestDb::new());
