//! Group `floor` (ours only): what the disk and SQLite itself cost per committed
//! write on this machine, with the store's pragmas and no schema of ours. Every
//! SQLite case here runs in the run's `--durability=` mode: with `full`
//! (`synchronous=FULL`) each COMMIT syncs the WAL before it returns, with
//! `process-crash-only` (`synchronous=NORMAL`) it only appends to it. The same
//! case names therefore measure the synced floor in one run and the unsynced
//! floor in the other; the environment line on stderr says which.
//!
//! - `fdatasync-floor`: the disk's flush floor, with no SQLite at all. A 1 MiB
//!   file is written and synced before the clock starts; each op then writes
//!   4 KiB (one WAL-frame-sized page) at the next of its 256 offsets, in turn,
//!   and `fdatasync`s the file (`File::sync_data`). The file never grows, so the
//!   flush carries the data and no size change, as a WAL rewritten after a
//!   checkpoint does. It runs the same in both modes: it is what a synced commit
//!   cannot go below.
//! - `fdatasync-append-floor`: the same, but each 4 KiB is appended at the end of
//!   the file, as SQLite appends to a WAL that has not started over yet (the
//!   store's WAL grows to 10,000 pages before its first checkpoint, so the
//!   commits of a young store, and those of every commit floor below, append).
//!   The file's new size must reach the disk with the data, so the flush also
//!   writes the inode (on a journaled ext4, a journal commit): measured at 1.2x
//!   to 1.7x `fdatasync-floor` on the shared VM. A synced SQLite commit that
//!   appends pays this, not `fdatasync-floor`.
//!
//! Each op of the two commit floors is one transaction inserting one row of the
//! size of a queued event (about 450 bytes), committed on its own, as
//! `queue_pending_event` commits each event. Before the clock the WAL is grown to
//! 10,000 pages and checkpointed, so the timed commits overwrite a WAL file that
//! already has its size, as the store's do once its WAL has started over (the
//! least a synced commit costs; a young WAL's appends cost more, see
//! `fdatasync-append-floor`):
//!
//! - `sqlite-commit-floor`: into a table with no index, so every commit writes one
//!   b-tree leaf page to the WAL: the least a one-call write can cost here (in
//!   `full` mode the fsync'd-commit floor, about `fdatasync-floor` plus SQLite's
//!   own work; in `process-crash-only` mode the unsynced-commit floor);
//! - `sqlite-commit-floor-4-btrees`: into a table keyed by a text id with two more
//!   indexes, so every commit writes four b-tree pages, as an inbox insert does
//!   (the event row, its id, its fingerprint, its queue entry), and as an enqueue
//!   does (the task row and its indexes, the ledger entry): the floor a one-call
//!   `enqueue` is read against, in the same mode.
//!
//! Set beside `pending-events-insert` and `enqueue`, they say how much of an
//! insert is the disk, how much the storage engine and how much is ours.
//!
//! - `sqlite-enqueue-floor`: the SQL of one `enqueue` and nothing else, on the
//!   store's own schema: a store enqueues one task (its row and its ledger entry
//!   are the templates), then a bare connection to the same file runs, per op,
//!   `BEGIN IMMEDIATE`, the task row's INSERT into `mesh_queue` (every column
//!   bound, a fresh random id, so it lands in the table, its id index, the status
//!   index and the open-claim index), the ledger entry's INSERT into
//!   `mesh_event_ledger` (a fresh time-ordered id, the next sequence number as the
//!   store's statement takes it: the table, its id index, the slice index), and
//!   `COMMIT`. No rules, no JSON, no writer thread: `enqueue` over it is what the
//!   store adds to the seven b-tree inserts an enqueue writes.
//!
//! - `sqlite-drain-floor`: the least a drain of 100 events costs: one
//!   transaction reads the 100 oldest rows of a queue table (id and payload, into
//!   owned strings), deletes them and commits, until the table is empty. Ops are
//!   rows and latency is per drain, as in `pending-events-drain`; a real drain also
//!   routes, deduplicates and records what it took.
//! - `writer-round-trip-floor`: an operation that does nothing, sent through a
//!   store's writer thread (a store opened in the run's mode) as every hot-path
//!   write is and answered after its empty transaction: the hand-off each such
//!   write pays on top of its SQL. An empty transaction writes no WAL frame, so
//!   it syncs nothing in either mode.

use std::fs::File;
use std::io::{Seek as _, SeekFrom, Write as _};
use std::time::Instant;

use agentmesh_sqlite::{OpenOptions, SqliteStore};
use anyhow::Context as _;
use rusqlite::{Connection, params};

use crate::data::{MESH_ID, UuidGen, at, message, new_task};
use crate::harness::{CaseStore, Harness, synchronous_level};
use crate::timing::Timer;

/// Bytes written and flushed by each op of `fdatasync-floor`: one 4 KiB page.
const PAGE: usize = 4096;
/// The pages of the `fdatasync-floor` file, written in turn.
const PAGES: usize = 256;

/// Runs the group.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    for (label, append) in [("fdatasync-floor", false), ("fdatasync-append-floor", true)] {
        h.run_case(&format!("{label}-{n}"), |h, case| fdatasync_floor(h, case, label, append, n));
    }
    for (label, indexed) in [("sqlite-commit-floor", false), ("sqlite-commit-floor-4-btrees", true)] {
        h.run_case(&format!("{label}-{n}"), |h, case| floor(h, case, label, indexed, n));
    }
    h.run_case(&format!("sqlite-enqueue-floor-{n}"), |h, case| enqueue_floor(h, case, n));
    h.run_case(&format!("sqlite-drain-floor-{n}"), |h, case| drain_floor(h, case, n));
    h.run_case(&format!("writer-round-trip-floor-{n}"), |h, case| writer_round_trip(h, case, n));
}

/// `fdatasync-floor`: a 4 KiB write at the next of [`PAGES`] offsets of a file
/// written and synced beforehand, then `fdatasync`, timed together. With
/// `append` (`fdatasync-append-floor`), each write goes at the end of the file
/// instead, so every flush also carries the file's new size.
fn fdatasync_floor(
    h: &mut Harness,
    case: &CaseStore,
    label: &str,
    append: bool,
    n: usize,
) -> anyhow::Result<()> {
    let path = case.dir().join(format!("{label}.bin"));
    let mut file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("failed to create {}", path.display()))?;
    file.write_all(&vec![0u8; PAGE * PAGES])?;
    file.sync_all()?;
    let mut page = [0u8; PAGE];
    let mut timer = Timer::default();
    for i in 0..n {
        page.fill((i % 251) as u8 + 1);
        timer.time(|| -> std::io::Result<()> {
            let page_no = if append { PAGES + i } else { i % PAGES };
            file.seek(SeekFrom::Start((page_no * PAGE) as u64))?;
            file.write_all(&page)?;
            file.sync_data()
        })?;
    }
    h.report(label, n, n, &timer);
    let size = file.metadata()?.len();
    let expected = (PAGE * (PAGES + if append { n } else { 0 })) as u64;
    h.check(
        &format!(
            "{}: the file {}",
            case.label(),
            if append { "grew by every write" } else { "kept its size" }
        ),
        size == expected,
        format!("size={size}"),
    );
    Ok(())
}

fn writer_round_trip(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let options = OpenOptions::with_durability(h.opts().durability);
    let store = SqliteStore::open_with(case.dir().join("round-trip.db"), &options)?;
    let mut timer = Timer::default();
    for _ in 0..n {
        timer.time(|| store.writer_round_trip())?;
    }
    h.report("writer-round-trip-floor", n, n, &timer);
    Ok(())
}

/// A bare connection to `name` in the case's dir with the store's pragmas in the
/// run's durability mode; checks that `synchronous` is the mode's.
fn bare_connection(h: &mut Harness, case: &CaseStore, name: &str) -> anyhow::Result<Connection> {
    let durability = h.opts().durability;
    let conn = SqliteStore::open_bare_connection(&case.dir().join(name), durability)?;
    let synchronous: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0))?;
    let expected = synchronous_level(durability);
    h.check(
        &format!("{}: bare connection synchronous is {expected} ({durability})", case.label()),
        synchronous.to_string() == expected,
        format!("synchronous={synchronous}"),
    );
    Ok(conn)
}

fn floor(h: &mut Harness, case: &CaseStore, label: &str, indexed: bool, n: usize) -> anyhow::Result<()> {
    let conn = bare_connection(h, case, "floor.db")?;
    conn.execute_batch(if indexed {
        "CREATE TABLE t (id TEXT PRIMARY KEY, lane TEXT, queued_at INTEGER, fingerprint TEXT, payload TEXT);
         CREATE UNIQUE INDEX t_fingerprint ON t (fingerprint);
         CREATE INDEX t_lane ON t (lane, queued_at, id);"
    } else {
        "CREATE TABLE t (id TEXT, lane TEXT, queued_at INTEGER, fingerprint TEXT, payload TEXT);"
    })?;
    warm_wal(&conn)?;
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

/// Pages the WAL of a commit floor is grown to before the clock: the store's
/// checkpointer starts the WAL over at 10,000 pages, and so does the bare
/// connection's `wal_autocheckpoint`.
const WARM_WAL_PAGES: usize = 10_000;

/// Grows the WAL of `conn` to [`WARM_WAL_PAGES`] pages (one transaction filling a
/// table of its own, which stays) and checkpoints it completely, so that the next
/// transaction starts the WAL over from its beginning and the timed commits
/// overwrite a file that already has its size, as the store's commits do once its
/// WAL has started over, instead of appending to it (each append's flush also
/// carries the file's new size: see `fdatasync-append-floor`).
fn warm_wal(conn: &Connection) -> anyhow::Result<()> {
    conn.execute_batch("CREATE TABLE warm_up (b BLOB NOT NULL); BEGIN IMMEDIATE;")?;
    for _ in 0..WARM_WAL_PAGES {
        conn.prepare_cached("INSERT INTO warm_up VALUES (zeroblob(3500))")?.execute([])?;
    }
    conn.execute_batch("COMMIT")?;
    let (busy, log, copied): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    anyhow::ensure!(
        busy == 0 && log >= WARM_WAL_PAGES as i64 && copied == log,
        "the warm-up checkpoint copied {copied} of {log} WAL pages (busy={busy})"
    );
    Ok(())
}

/// The next ledger sequence number, as the store's append takes it
/// (`agentmesh_sqlite::ledger::NEXT_SEQ`).
const NEXT_SEQ: &str = "MAX(COALESCE((SELECT MAX(seq) FROM mesh_event_ledger), 0),
                            COALESCE((SELECT value FROM mesh_meta WHERE key = 'ledger_seq_floor'), 0)) + 1";

/// The columns of `table`'s only row and their values.
fn template_row(
    conn: &Connection,
    table: &str,
) -> anyhow::Result<(Vec<String>, Vec<rusqlite::types::Value>)> {
    let mut stmt = conn.prepare(&format!("SELECT * FROM {table}"))?;
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    let mut rows = stmt.query([])?;
    let row = rows.next()?.with_context(|| format!("{table} has no row"))?;
    let values = (0..columns.len()).map(|i| row.get(i)).collect::<rusqlite::Result<_>>()?;
    anyhow::ensure!(rows.next()?.is_none(), "{table} has more than one row");
    Ok((columns, values))
}

/// The position of `name` in `columns`.
fn column(columns: &[String], name: &str) -> anyhow::Result<usize> {
    columns.iter().position(|c| c == name).with_context(|| format!("no column {name}"))
}

/// `sqlite-enqueue-floor`: the two INSERTs of an enqueue, on a bare connection to
/// a store's file, one transaction per op.
fn enqueue_floor(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    use rusqlite::types::Value;
    let mut ids = UuidGen::new(0xf100 + n as u32);
    let first = ids.next_id();
    case.store().enqueue(MESH_ID, &new_task(&first, 0, None), at(0))?;
    let conn = bare_connection(h, case, agentmesh_sqlite::DB_FILE_NAME)?;
    let (task_columns, mut task) = template_row(&conn, "mesh_queue")?;
    let (entry_columns, entry) = template_row(&conn, "mesh_event_ledger")?;
    let (task_id, created, updated) = (
        column(&task_columns, "id")?,
        column(&task_columns, "created_at")?,
        column(&task_columns, "updated_at")?,
    );
    let insert_task = format!(
        "INSERT INTO mesh_queue ({}) VALUES ({})",
        task_columns.join(", "),
        (1..=task_columns.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
    );
    // The entry's own columns but its number, then the number as the store takes it.
    let seq = column(&entry_columns, "seq")?;
    let (entry_id, stamp) = (column(&entry_columns, "id")?, column(&entry_columns, "timestamp")?);
    let mut entry: Vec<(String, Value)> = entry_columns.into_iter().zip(entry).collect();
    let (entry_id, stamp) = (entry_id - usize::from(entry_id > seq), stamp - usize::from(stamp > seq));
    entry.remove(seq);
    let insert_entry = format!(
        "INSERT OR IGNORE INTO mesh_event_ledger ({}, seq) VALUES ({}, {NEXT_SEQ})",
        entry.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>().join(", "),
        (1..=entry.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
    );
    let mut entry: Vec<Value> = entry.into_iter().map(|(_, v)| v).collect();
    let mut timer = Timer::default();
    for i in 1..=n {
        let now = at(i);
        task[task_id] = Value::Text(ids.next_id());
        task[created] = Value::Text(now.iso());
        task[updated] = Value::Text(now.iso());
        entry[entry_id] = Value::Text(agentmesh_store::ids::mint_at(now));
        entry[stamp] = Value::Text(now.iso());
        timer.time(|| -> rusqlite::Result<()> {
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            conn.prepare_cached(&insert_task)?.execute(rusqlite::params_from_iter(&task))?;
            conn.prepare_cached(&insert_entry)?.execute(rusqlite::params_from_iter(&entry))?;
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        })?;
    }
    h.report("sqlite-enqueue-floor", n, n, &timer);
    drop(conn);
    let store = case.store();
    let (pending, entries) =
        (crate::harness::pending_count(store, MESH_ID)?, crate::harness::ledger_count(store, MESH_ID)?);
    h.check(
        &format!("{}: every task and ledger entry committed", case.label()),
        pending == n as u64 + 1 && entries == n as u64 + 1,
        format!("pending={pending} entries={entries}"),
    );
    Ok(())
}

/// Events one drain takes, as `drain_pending_events` takes at most.
const DRAIN_BATCH: i64 = 100;

fn drain_floor(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let mut conn = bare_connection(h, case, "drain-floor.db")?;
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
