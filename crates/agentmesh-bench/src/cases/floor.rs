//! Group `floor` (ours only): what SQLite itself costs per committed write on this
//! machine, with the store's pragmas and no schema of ours. Each op is one
//! transaction inserting one row of the size of a queued event (about 450 bytes),
//! committed on its own, as `queue_pending_event` commits each event:
//!
//! - `sqlite-commit-floor`: into a table with no index, so every commit writes one
//!   b-tree leaf page to the WAL: the least a durable one-call write can cost here;
//! - `sqlite-commit-floor-4-btrees`: into a table keyed by a text id with two more
//!   indexes, so every commit writes four b-tree pages, as an inbox insert does
//!   (the event row, its id, its fingerprint, its queue entry).
//!
//! Set beside `pending-events-insert`, they say how much of an insert is the
//! storage engine and how much is ours.

use std::time::Instant;

use agentmesh_sqlite::SqliteStore;
use rusqlite::params;

use crate::data::message;
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// Runs the group.
pub fn run(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    for (label, indexed) in [("sqlite-commit-floor", false), ("sqlite-commit-floor-4-btrees", true)] {
        h.run_case(&format!("{label}-{n}"), |h, case| floor(h, case, label, indexed, n));
    }
}

fn floor(h: &mut Harness, case: &CaseStore, label: &str, indexed: bool, n: usize) -> anyhow::Result<()> {
    let conn = SqliteStore::open_bare_connection(&case.dir().join("floor.db"))?;
    conn.execute_batch(if indexed {
        "CREATE TABLE t (id TEXT PRIMARY KEY, lane TEXT, queued_at INTEGER, fingerprint TEXT, payload TEXT);
         CREATE UNIQUE INDEX t_fingerprint ON t (fingerprint);
         CREATE INDEX t_lane ON t (lane, queued_at, id);"
    } else {
        "CREATE TABLE t (id TEXT, lane TEXT, queued_at INTEGER, fingerprint TEXT, payload TEXT);"
    })?;
    let payload =
        format!("{{\"event\":\"task_completed\",\"summary\":{:?},\"pad\":{:?}}}", message(0), message(1));
    let mut timer = Timer::default();
    let started = Instant::now();
    for i in 0..n {
        timer.time(|| -> rusqlite::Result<()> {
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            conn.prepare_cached("INSERT INTO t VALUES (?1, 'u:mach_A|run-1|', ?2, ?3, ?4)")?.execute(
                params![
                    format!("{:016x}-{i:08}", started.elapsed().as_nanos()),
                    i as i64,
                    format!("bench-mesh::task-{i}::event"),
                    payload,
                ],
            )?;
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        })?;
    }
    h.report(label, n, n, &timer);
    let rows: i64 = conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))?;
    h.check(&format!("{}: every row committed", case.label()), rows == n as i64, format!("rows={rows}"));
    Ok(())
}
