//! The SQLite store held to the reference model
//! (`agentmesh_store::model`): random operation sequences, with the database
//! file closed and opened again at random steps, run on the model and on a
//! fresh file side by side, every answer and every view compared after each
//! step. A failing sequence is shrunk and kept in
//! `proptest-regressions/it/model.txt`, which later runs replay first.
//!
//! `PROPTEST_CASES` sets how many sequences a run tries (default 48, each up
//! to 60 steps).

use std::path::PathBuf;

use agentmesh_sqlite::SqliteStore;
use agentmesh_store::model::{check, ops};
use proptest::prelude::*;

/// A database file in a temp directory, and the store open on it.
struct FreshFile {
    store: Option<SqliteStore>,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl FreshFile {
    fn new() -> FreshFile {
        let dir = tempfile::tempdir().expect("a temp directory");
        let path = dir.path().join("mesh-runtime.db");
        let store = SqliteStore::open(&path).expect("a fresh SQLite store");
        FreshFile { store: Some(store), path, _dir: dir }
    }
}

impl check::Subject for FreshFile {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        self.store.as_ref().expect("the store is open")
    }

    /// Closes every connection to the file, then opens it again.
    fn reopen(&mut self) {
        drop(self.store.take());
        self.store = Some(SqliteStore::open(&self.path).expect("the file opens again"));
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn model_sqlite_agrees_with_the_reference_model(seq in ops::sequence(1..60, true)) {
        let mut file = FreshFile::new();
        if let Err(difference) = check::run(&mut file, &seq) {
            prop_assert!(false, "{}", difference);
        }
    }
}
