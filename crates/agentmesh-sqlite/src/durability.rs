//! What an acknowledged write survives, and the numbers a rollback must never
//! hand out twice.
//!
//! **[`Durability::Full`], the default.** Every connection runs
//! `synchronous = FULL`: in WAL mode a COMMIT syncs the WAL before it returns,
//! and before the commit becomes visible to any reader (SQLite updates the WAL
//! index only after the sync). The writer answers its callers after the COMMIT,
//! so an acknowledged write is on stable storage, and so is everything another
//! connection could have read. Writers that arrive together share one
//! transaction and therefore one sync (the `writes` module's group commit).
//!
//! **[`Durability::ProcessCrashOnly`].** `synchronous = NORMAL`: a COMMIT
//! appends to the WAL without a sync (the WAL is synced before a checkpoint
//! copies it back). A crash of the process loses nothing, since the kernel has
//! the pages, but a power loss or a kernel panic may roll back every
//! transaction since the WAL was last synced (by a checkpoint, which the
//! `checkpointer` starts every 10,000 pages, or by the kernel writing its cache
//! back in its own time), including ones readers saw and callers were answered
//! for. The power-loss test (`tests/powerloss.rs`) loses about half the
//! acknowledged writes of its runs in this mode, and none by default.
//! Rolled-back rows are lost; what must not happen is that the numbers they
//! carried are handed out again with another meaning:
//!
//! - a **fencing epoch** a claim handed a worker: a second worker given the
//!   same epoch for the same task would pass every fencing check;
//! - a **ledger sequence number** a follower read: the follower's cursor would
//!   skip the entry that takes the number again.
//!
//! So the store keeps two ceilings in `mesh_meta` (`epoch_ceiling`,
//! `ledger_seq_ceiling`), each written in a transaction of its own that is
//! synced (run with `synchronous = FULL`) before any number above the old
//! ceiling can be seen. The writer checks them after each COMMIT: when the
//! highest number handed out so far comes within [`HEADROOM`] of a ceiling,
//! it raises that ceiling to the highest number plus twice the headroom, before
//! it answers anyone. A number is therefore always below the synced ceiling
//! before it is handed out (unless one transaction alone uses more than the
//! headroom, when the ceiling is synced before that transaction's callers are
//! answered). On opening the file the store starts above the ceilings: the
//! ledger's sequence floor is raised to the sequence ceiling, and every epoch a
//! claim hands out in this run is above the epoch ceiling read at open
//! ([`Ceilings::lift`]). Numbers between the last ones used and the
//! ceiling are skipped, never reused.
//!
//! Ids (tasks, ledger entries, events, sessions) need none of this: each
//! carries random bits (see `agentmesh_store::ids`), so an id minted again
//! after a rollback is a different id.

use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use agentmesh_core::Task;
pub use agentmesh_store::Durability;
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::Res;

/// How far below its ceiling a number may climb before the ceiling is raised.
#[cfg(not(test))]
pub(crate) const HEADROOM: u64 = 1 << 20;
/// Small in unit tests, so that they see the ceilings raised.
#[cfg(test)]
pub(crate) const HEADROOM: u64 = 8;

/// How a store opens its file: [`crate::SqliteStore::open_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// What an acknowledged write survives.
    pub durability: Durability,
    /// The name of a registered SQLite VFS every connection of the store uses
    /// (`None`: SQLite's default). For tests that put a layer under SQLite.
    pub vfs: Option<String>,
}

impl OpenOptions {
    /// Options with `durability` and the default VFS.
    pub fn with_durability(durability: Durability) -> OpenOptions {
        OpenOptions { durability, vfs: None }
    }

    /// Opens a connection to `path` with `flags`, through the chosen VFS.
    pub(crate) fn connect(&self, path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
        match &self.vfs {
            Some(vfs) => Connection::open_with_flags_and_vfs(path, flags, vfs.as_str()),
            None => Connection::open_with_flags(path, flags),
        }
    }

    /// Opens a read-write connection to `path`, creating the file if need be.
    pub(crate) fn connect_rw(&self, path: &Path) -> rusqlite::Result<Connection> {
        self.connect(path, OpenFlags::default())
    }

    /// The `synchronous` setting of every connection.
    pub(crate) fn synchronous(&self) -> &'static str {
        match self.durability {
            Durability::Full => "FULL",
            Durability::ProcessCrashOnly => "NORMAL",
        }
    }
}

/// The ceilings, read on opening the file. A store that syncs every commit
/// only starts above them (the file may have run in the other mode before); one
/// that answers before it syncs also keeps raising them.
#[derive(Debug)]
pub(crate) struct Ceilings {
    /// Whether this store answers before it syncs, and so keeps the ceilings.
    relaxed: bool,
    /// Every epoch handed out before this store opened is at most this.
    epoch_floor: u64,
    /// The synced ceilings.
    epoch_ceiling: AtomicU64,
    seq_ceiling: AtomicI64,
    /// The highest epoch a claim of this store handed out.
    epoch_handed: AtomicU64,
    /// The highest ledger number when it was last read, and the write
    /// connection's count of changed rows then: each row changed since adds at
    /// most one number, so the two bound the highest number without a read.
    seq_read: AtomicI64,
    changes_read: AtomicU64,
}

/// The `mesh_meta` keys of the ceilings, and of the ledger's sequence floor
/// (every number handed out is above it; see `ledger`).
pub(crate) const EPOCH_CEILING: &str = "epoch_ceiling";
pub(crate) const SEQ_CEILING: &str = "ledger_seq_ceiling";
pub(crate) const SEQ_FLOOR: &str = "ledger_seq_floor";

impl Ceilings {
    /// Reads the ceilings on opening `conn` (the write connection, outside any
    /// transaction) and starts above them; a relaxed store raises them for this
    /// run, synced.
    pub(crate) fn open(conn: &Connection, durability: Durability) -> Res<Ceilings> {
        let epoch_floor = u64::try_from(read(conn, EPOCH_CEILING)?).unwrap_or(0);
        let seq_floor = read(conn, SEQ_CEILING)?;
        let ceilings = Ceilings {
            relaxed: durability == Durability::ProcessCrashOnly,
            epoch_floor,
            epoch_ceiling: AtomicU64::new(epoch_floor),
            seq_ceiling: AtomicI64::new(seq_floor),
            epoch_handed: AtomicU64::new(epoch_floor),
            seq_read: AtomicI64::new(0),
            changes_read: AtomicU64::new(0),
        };
        if seq_floor > highest_seq(conn)? {
            synced(conn, |tx| {
                tx.execute(
                    "INSERT INTO mesh_meta (key, value) VALUES ('ledger_seq_floor', ?1)
                     ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)",
                    [seq_floor],
                )?;
                Ok(())
            })?;
        }
        if ceilings.relaxed {
            ceilings.raise(conn, ceilings.read_seq(conn)?)?;
        }
        Ok(ceilings)
    }

    /// No floors, nothing kept: for tests of the writer on a file without the
    /// store's schema.
    #[cfg(test)]
    pub(crate) fn none() -> Ceilings {
        Ceilings {
            relaxed: false,
            epoch_floor: 0,
            epoch_ceiling: AtomicU64::new(0),
            seq_ceiling: AtomicI64::new(0),
            epoch_handed: AtomicU64::new(0),
            seq_read: AtomicI64::new(0),
            changes_read: AtomicU64::new(0),
        }
    }

    /// Lifts a task a claim is about to take to the epoch floor (the ceiling of
    /// the runs before), so the
    /// core's claim, which hands out the epoch one above the task's, hands out
    /// a number no earlier run did. (A pending task has no holder whose epoch
    /// this could change.)
    pub(crate) fn lift(&self, task: &mut Task) {
        if task.epoch() < self.epoch_floor {
            task.dispatch_nonce = Some(self.epoch_floor);
        }
    }

    /// Notes an epoch a claim hands out, in a transaction not committed yet
    /// ([`Ceilings::after_commit`] runs before the claim is answered).
    pub(crate) fn note_epoch(&self, epoch: u64) {
        self.epoch_handed.fetch_max(epoch, Ordering::Relaxed);
    }

    /// Before the COMMIT of the transaction open on `conn`: a bound of the
    /// highest ledger number it leaves, for [`Ceilings::after_commit`]. The
    /// number is read (inside the transaction) only when the bound comes within
    /// [`HEADROOM`] of the ceiling; a store that syncs reads nothing.
    pub(crate) fn before_commit(&self, conn: &Connection) -> Res<Seen> {
        if !self.relaxed {
            return Ok(Seen(None));
        }
        // Far below the ceiling, the bound will do; near it, the number is read.
        let since = conn.total_changes().saturating_sub(self.changes_read.load(Ordering::Relaxed));
        let bound =
            self.seq_read.load(Ordering::Relaxed).saturating_add(i64::try_from(since).unwrap_or(i64::MAX));
        if bound.saturating_add(headroom_i64()) <= self.seq_ceiling.load(Ordering::Relaxed) {
            return Ok(Seen(Some(bound)));
        }
        Ok(Seen(Some(self.read_seq(conn)?)))
    }

    /// Reads the highest ledger number on `conn` and notes it with the
    /// connection's count of changed rows.
    fn read_seq(&self, conn: &Connection) -> Res<i64> {
        let seq = highest_seq(conn)?;
        self.seq_read.store(seq, Ordering::Relaxed);
        self.changes_read.store(conn.total_changes(), Ordering::Relaxed);
        Ok(seq)
    }

    /// After a COMMIT on `conn`, before its callers are answered: raises a
    /// ceiling the numbers handed out came within [`HEADROOM`] of (`seen` is
    /// what [`Ceilings::before_commit`] read).
    pub(crate) fn after_commit(&self, conn: &Connection, seen: Seen) -> Res<()> {
        let Seen(Some(seq)) = seen else { return Ok(()) };
        let seq_near = seq.saturating_add(headroom_i64()) > self.seq_ceiling.load(Ordering::Relaxed);
        let epoch_near = self.epoch_handed.load(Ordering::Relaxed).saturating_add(HEADROOM)
            > self.epoch_ceiling.load(Ordering::Relaxed);
        if seq_near || epoch_near {
            self.raise(conn, seq)?;
        }
        Ok(())
    }

    /// Writes both ceilings twice the headroom above the highest numbers, in a
    /// synced transaction of its own (never below what another process wrote).
    fn raise(&self, conn: &Connection, seq: i64) -> Res<()> {
        let epoch = self.epoch_handed.load(Ordering::Relaxed).saturating_add(2 * HEADROOM);
        let seq = seq.saturating_add(2 * headroom_i64());
        let (epoch, seq) = synced(conn, |tx| {
            let epoch = write_max(tx, EPOCH_CEILING, i64::try_from(epoch).unwrap_or(i64::MAX))?;
            let seq = write_max(tx, SEQ_CEILING, seq)?;
            Ok((epoch, seq))
        })?;
        self.epoch_ceiling.store(u64::try_from(epoch).unwrap_or(0), Ordering::Relaxed);
        self.seq_ceiling.store(seq, Ordering::Relaxed);
        Ok(())
    }
}

/// What [`Ceilings::before_commit`] read: the highest ledger number, in a
/// store that keeps the ceilings.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub(crate) struct Seen(Option<i64>);

fn headroom_i64() -> i64 {
    i64::try_from(HEADROOM).unwrap_or(i64::MAX)
}

/// The highest ledger sequence number written, or kept as the floor.
fn highest_seq(conn: &Connection) -> Res<i64> {
    let max: Option<i64> = conn
        .prepare_cached(
            "SELECT MAX(COALESCE((SELECT MAX(seq) FROM mesh_event_ledger), 0),
                        COALESCE((SELECT value FROM mesh_meta WHERE key = 'ledger_seq_floor'), 0))",
        )?
        .query_row([], |r| r.get(0))?;
    Ok(max.unwrap_or(0))
}

fn read(conn: &Connection, key: &str) -> Res<i64> {
    let value: Option<i64> = conn
        .prepare_cached("SELECT value FROM mesh_meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?;
    Ok(value.unwrap_or(0))
}

/// Stores `value` under `key` unless a larger one is there; returns the one kept.
fn write_max(conn: &Connection, key: &str, value: i64) -> Res<i64> {
    Ok(conn
        .prepare_cached(
            "INSERT INTO mesh_meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)
             RETURNING value",
        )?
        .query_row(rusqlite::params![key, value], |r| r.get(0))?)
}

/// Runs `f` in an immediate transaction whose COMMIT syncs the WAL, whatever
/// the connection's setting, and puts the setting back.
fn synced<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
    let setting: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    conn.execute_batch("PRAGMA synchronous = FULL; BEGIN IMMEDIATE")?;
    let out = f(conn).and_then(|value| {
        conn.execute_batch("COMMIT")?;
        Ok(value)
    });
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    conn.execute_batch(&format!("PRAGMA synchronous = {setting}"))?;
    out
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use agentmesh_core::RequeueOptions;
    use agentmesh_core::ledger::SliceQuery;
    use agentmesh_store::ClaimOutcome;
    use agentmesh_store::conformance::support::{at, claim, enqueue, new_task, worker};
    use agentmesh_store::prelude::*;

    use super::*;
    use crate::SqliteStore;

    const MESH: &str = "m";

    fn open(path: &Path, durability: Durability) -> SqliteStore {
        SqliteStore::open_with(path, &OpenOptions::with_durability(durability)).unwrap()
    }

    /// The highest sequence number the mesh's ledger shows.
    fn head_seq(store: &SqliteStore) -> u64 {
        let query = SliceQuery { after_seq: Some(0), limit: Some(1), ..SliceQuery::default() };
        store.ledger_slice(MESH, &query).unwrap().cursor.head_seq.unwrap_or(0)
    }

    /// Claims `id` (which must be pending) and returns the epoch handed out.
    fn claim_epoch(store: &SqliteStore, id: &str, secs: i64) -> u64 {
        match claim(store, MESH, &worker("n1", "w1"), at(secs)) {
            ClaimOutcome::Claimed(task) if task.id == id => task.epoch(),
            other => panic!("expected {id} claimed, got {other:?}"),
        }
    }

    fn requeue(store: &SqliteStore, id: &str, secs: i64) {
        let opts = RequeueOptions { force: true, ..RequeueOptions::default() };
        store.task_command(MESH, id, agentmesh_store::TaskCommand::Requeue(&opts), at(secs)).unwrap();
    }

    /// The database file and its WAL as they are on disk now: what a power
    /// loss would leave had nothing been synced since.
    struct Disk(Vec<(PathBuf, Option<Vec<u8>>)>);

    impl Disk {
        fn take(db: &Path) -> Disk {
            let files = [db.to_owned(), suffixed(db, "-wal")];
            Disk(files.into_iter().map(|f| (f.clone(), std::fs::read(&f).ok())).collect())
        }

        /// Puts the files back as they were taken; the shared-memory index,
        /// which does not outlive a power loss, is removed.
        fn restore(&self, db: &Path) {
            for (file, bytes) in &self.0 {
                match bytes {
                    Some(bytes) => std::fs::write(file, bytes).unwrap(),
                    None => drop(std::fs::remove_file(file)),
                }
            }
            drop(std::fs::remove_file(suffixed(db, "-shm")));
        }
    }

    fn suffixed(db: &Path, suffix: &str) -> PathBuf {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    #[test]
    fn every_connection_syncs_as_its_mode_says() {
        let dir = tempfile::tempdir().unwrap();
        let full = open(&dir.path().join("full.db"), Durability::Full);
        assert_eq!(full.pragma("synchronous").unwrap(), "2", "FULL on the read connections too");
        assert_eq!(full.durability(), Durability::Full);
        let relaxed = open(&dir.path().join("relaxed.db"), Durability::ProcessCrashOnly);
        assert_eq!(relaxed.pragma("synchronous").unwrap(), "1", "NORMAL");
        assert_eq!(Store::profile(&relaxed).durability, Durability::ProcessCrashOnly);
    }

    #[test]
    fn the_ceilings_stay_ahead_of_every_number_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ahead.db");
        let store = open(&path, Durability::ProcessCrashOnly);
        enqueue(&store, MESH, new_task("t1"), at(10));
        for stretch in 0..3 {
            let mut epoch = 0;
            for round in 0..12 {
                epoch = claim_epoch(&store, "t1", 20 + round);
                requeue(&store, "t1", 20 + round);
            }
            let ceilings: Vec<(String, i64)> = store
                .read(|conn| {
                    let mut stmt = conn
                        .prepare("SELECT key, value FROM mesh_meta WHERE key LIKE '%ceiling' ORDER BY key")?;
                    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                    Ok(rows.collect::<Result<_, _>>()?)
                })
                .unwrap();
            let (epoch_ceiling, seq_ceiling) = (ceilings[0].1, ceilings[1].1);
            assert_eq!(ceilings[0].0, EPOCH_CEILING);
            assert!(
                u64::try_from(epoch_ceiling).unwrap() >= epoch + HEADROOM,
                "after stretch {stretch}: epoch {epoch}, ceiling {epoch_ceiling}"
            );
            let seq = head_seq(&store);
            assert!(
                u64::try_from(seq_ceiling).unwrap() >= seq + HEADROOM,
                "seq {seq}, ceiling {seq_ceiling}"
            );
        }
    }

    #[test]
    fn a_rollback_to_the_last_sync_never_hands_out_an_epoch_or_a_sequence_number_twice() {
        for reopened in Durability::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("lost.db");
            let store = open(&path, Durability::ProcessCrashOnly);
            enqueue(&store, MESH, new_task("t1"), at(10));
            // Synced last when the store opened: a power loss may take
            // everything after.
            let disk = Disk::take(&path);
            let mut handed = Vec::new();
            for round in 0..5 {
                handed.push(claim_epoch(&store, "t1", 20 + round));
                requeue(&store, "t1", 20 + round);
            }
            let seen = head_seq(&store);
            drop(store);
            disk.restore(&path);

            let store = open(&path, reopened);
            let task = store.find_task(MESH, "t1").unwrap().unwrap();
            assert_eq!(task.epoch(), 0, "the claims were rolled back");
            let epoch = claim_epoch(&store, "t1", 40);
            assert!(
                handed.iter().all(|old| epoch > *old),
                "reopened {reopened}: epoch {epoch} handed out again (before: {handed:?})"
            );
            let seq = head_seq(&store);
            assert!(seq > seen, "reopened {reopened}: sequence {seq} handed out again (seen up to {seen})");
        }
    }
}
