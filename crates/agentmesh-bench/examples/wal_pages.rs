//! Which pages one write of the store puts in the WAL: enqueues tasks one call at
//! a time, as the bench's `enqueue` case does, into a fresh store, and copies the
//! database and its WAL while the store is still open (before the checkpoint at
//! close), so the WAL's frames can be read back commit by commit and each page
//! named by `dbstat` (see `bench/wal_pages.py`).
//!
//! ```text
//! cargo run --release -p agentmesh-bench --example wal_pages -- OUT_DIR [TASKS] [full|process-crash-only]
//! python3 bench/wal_pages.py OUT_DIR/mesh-runtime.db
//! ```

use std::path::PathBuf;

use agentmesh_sqlite::{DB_FILE_NAME, Durability, OpenOptions, SqliteStore};
use agentmesh_store::prelude::*;
use anyhow::Context as _;

/// The bench's inputs: the same ids, messages and instants as its `enqueue` case.
#[path = "../src/data.rs"]
#[allow(dead_code, reason = "the example uses part of the bench's inputs")]
mod data;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().context("usage: wal_pages OUT_DIR [TASKS] [DURABILITY]")?);
    let tasks: usize = args.next().map_or(Ok(1_000), |n| n.parse()).context("bad task count")?;
    let durability: Durability =
        args.next().map_or(Ok(Durability::ProcessCrashOnly), |d| d.parse()).context("bad durability")?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(DB_FILE_NAME);
    let store = SqliteStore::open_with(&path, &OpenOptions::with_durability(durability))?;
    let ids = data::UuidGen::new(0xa000 + tasks as u32).take(tasks);
    for (i, id) in ids.iter().enumerate() {
        store.enqueue(data::MESH_ID, &data::new_task(id, i, None), data::at(i))?;
    }
    std::fs::create_dir_all(&out)?;
    for suffix in ["", "-wal"] {
        let from = PathBuf::from(format!("{}{suffix}", path.display()));
        let to = out.join(format!("{DB_FILE_NAME}{suffix}"));
        std::fs::copy(&from, &to).with_context(|| format!("failed to copy {}", from.display()))?;
    }
    eprintln!("{tasks} enqueues ({durability}); copied {DB_FILE_NAME} and its WAL to {}", out.display());
    drop(store);
    Ok(())
}
