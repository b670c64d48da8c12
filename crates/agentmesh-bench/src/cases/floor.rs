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
//!
//! - `sqlite-drain-floor`: the least a durable drain of 100 events costs: one
//!   transaction reads the 100 oldest rows of a queue table (id and payload, into
//!   owned strings), deletes them and commits, until the table is empty. Ops are
//!   rows and latency is per drain, as in `pending-events-drain`; a real drain also
//!   routes, deduplicates and records what it took.
//! - `writer-round-trip-floor`: an operation that does nothing, sent through a
//!   store's writer thread as every hot-path write is and answered after its empty
//!   transaction: the hand-off each such write pays on top of its SQL.

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
    h.run_case(&format!("sqlite-drain-floor-{n}"), |h, case| drain_floor(h, case, n));
    h.run_case(&format!("writer-round-trip-floor-{n}"), |h, case| writer_round_trip(h, case, n));
}

fn writer_round_trip(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let store = SqliteStore::open(case.dir().join("round-trip.db"))?;
    let mut timer = Timer::default();
    for _ in 0..n {
        timer.time(|| store.writer_round_trip())?;
    }
    h.report("writer-round-trip-floor", n, n, &timer);
    Ok(())
}

fn floor(h: &mut Harness, case: &CaseStore, label: &str, indexed: bool, n: usize) -> anyhow::Result<()> {
    let conn = SqliteStore::open_bare_connection(
        &case.dir().join("floor.db"),
        agentmesh_sqlite::Durability::ProcessCrashOnly,
    )?;
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

/// Events one drain takes, as `drain_pending_events` takes at most.
const DRAIN_BATCH: i64 = 100;

fn drain_floor(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let mut conn = SqliteStore::open_bare_connection(
        &case.dir().join("drain-floor.db"),
        agentmesh_sqlite::Durability::ProcessCrashOnly,
    )?;
    conn.execute_batch("CREATE TABLE q (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, payload TEXT NOT NULL);")?;
    let payload =
        format!("{{\"event\":\"task_completed\",\"summary\":{:?},\"pad\":{:?}}}", message(0), message(1));
    let tx = conn.transaction()?;
    for i in 0..n {
        tx.prepare_cached("INSERT INTO q (id, payload) VALUES (?1, ?2)")?
            .execute(params![format!("evt-{i:08}"), payload])?;
    }
    tx.commit()?;
    let mut timer = Timer::default();
    let mut drained: Vec<String> = Vec::with_capacity(n);
    loop {
        let batch = timer.time(|| -> rusqlite::Result<Vec<(i64, String, String)>> {
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            let rows: Vec<(i64, String, String)> = conn
                .prepare_cached("SELECT seq, id, payload FROM q ORDER BY seq LIMIT ?1")?
                .query_map([DRAIN_BATCH], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<_, _>>()?;
            if let Some((last, _, _)) = rows.last() {
                conn.prepare_cached("DELETE FROM q WHERE seq <= ?1")?.execute([last])?;
            }
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(rows)
        })?;
        if batch.is_empty() {
            break;
        }
        drained.extend(batch.into_iter().map(|(_, id, _)| id));
    }
    h.report("sqlite-drain-floor", n, drained.len(), &timer);
    let in_order = drained.iter().enumerate().all(|(i, id)| *id == format!("evt-{i:08}"));
    h.check(
        &format!("{}: every row drained once, in order", case.label()),
        drained.len() == n && in_order,
        format!("drained={}", drained.len()),
    );
    Ok(())
}
