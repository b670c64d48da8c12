//! The backend-agnostic conformance suite, run against the SQLite backend: one
//! `#[test]` per rule, each on a fresh database file in its own temp directory.
//! The racing rules share one store between threads and open further stores on
//! the same file, as other processes would.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

use agentmesh_sqlite::SqliteStore;
use agentmesh_store::Store;
use agentmesh_store::conformance::Racers;

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

/// A fresh database file and a store on it that threads share; [`Racers::open`]
/// opens further stores on the same file.
struct RacingDb {
    shared: Arc<SqliteStore>,
    path: PathBuf,
    // Dropped last, after every store opened on the file.
    _dir: tempfile::TempDir,
}

impl RacingDb {
    fn new() -> RacingDb {
        let dir = tempfile::tempdir().expect("a temp directory for the test database");
        let path = dir.path().join("mesh-runtime.db");
        let shared = Arc::new(SqliteStore::open(&path).expect("a fresh SQLite store"));
        RacingDb { shared, path, _dir: dir }
    }
}

impl Racers for RacingDb {
    fn shared(&self) -> Arc<dyn Store> {
        Arc::clone(&self.shared) as Arc<dyn Store>
    }

    fn open(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(&self.path).expect("another store on the same database file"))
    }
}

agentmesh_store::conformance_tests!(TestDb::new(), racing: RacingDb::new());

/// Copying meshes between two files (`agentmesh_store::conformance::transfer`).
mod transfer {
    use super::TestDb;

    agentmesh_store::transfer_conformance_tests!(TestDb::new());
}
