//! The store's one WAL policy: checkpoints off the writer's path, and how big
//! the WAL file may stay.
//!
//! A checkpoint copies the WAL's pages back into the database file and syncs
//! both files. Run by the committing writer (SQLite's autocheckpoint), it holds
//! the connection for the whole copy and both fsyncs: about 50 ms every
//! 10,000 pages on the machines we measured, a stall every writer waits out.
//!
//! So the store's connection checkpoints nothing itself while the WAL is small.
//! Its WAL hook (called after every COMMIT with the WAL's page count) asks the
//! checkpointer thread, which has a connection of its own, for a PASSIVE
//! checkpoint once the WAL holds [`START_PAGES`]. That checkpoint runs beside
//! the writers (a passive checkpoint takes no lock they wait for) and copies
//! what was committed when it began; the thread repeats it while writers keep
//! committing, until fewer than [`CATCH_UP_PAGES`] are left to copy. Then the
//! next COMMIT finishes the job itself with one more passive checkpoint, now
//! short, which backfills the WAL completely, so the writer's next transaction
//! starts the WAL over from its beginning. The WAL therefore stays near
//! [`START_PAGES`] under any load.
//!
//! A checkpoint that copies nothing new (a reader of another process holds the
//! rest of the WAL) or fails ends the thread's round; a later COMMIT asks again.
//! Should the thread fall behind (or be gone), a COMMIT that finds the WAL at
//! [`MAX_PAGES`] checkpoints at once, as an autocheckpoint would.
//!
//! The WAL file is reused from its start, not shrunk, after a checkpoint: the
//! writer connection's `journal_size_limit` ([`WAL_KEEP_BYTES`]) makes SQLite
//! truncate it to that size whenever it starts over, so a WAL that grew while
//! checkpoints could not keep up (a reader of another process held it) gives
//! the space back at the next restart. The file is removed when the last
//! connection closes, after a full checkpoint.
//!
//! A checkpoint needs room: pages it copies past the database file's end make
//! the file grow (see the `space` module). When the filesystem has no room for
//! that growth the thread does not start, and neither the next COMMITs nor one
//! at [`MAX_PAGES`] checkpoint: writes go on appending to the WAL, which needs
//! only their own space, and the room is looked at again once the WAL has grown
//! by [`RECHECK_PAGES`] (or started over). The same holds when the file's last
//! connection closes: SQLite's checkpoint at close is turned off when there is
//! no room for it.
//!
//! Durability is SQLite's own: a checkpoint never copies an uncommitted page,
//! and with `synchronous = NORMAL` it syncs the WAL before it writes the
//! database file and the database file before the WAL is reused.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

use crate::Res;

/// The WAL page count at which the thread starts checkpointing.
const START_PAGES: i32 = 10_000;
/// Pages still to copy under which the thread leaves the rest to the writer.
const CATCH_UP_PAGES: i32 = 256;
/// The WAL page count at which a COMMIT checkpoints on its own.
const MAX_PAGES: i32 = 4 * START_PAGES;
/// How many pages the WAL grows by before the room for a postponed checkpoint is
/// looked at again (about 4 MB).
const RECHECK_PAGES: i32 = 1_000;
/// The size the WAL file is truncated to when it starts over: above the
/// [`START_PAGES`] it keeps to (4 KiB pages), so a WAL of the usual size is
/// reused, not cut and grown again.
const WAL_KEEP_BYTES: i64 = 64 * 1024 * 1024;

/// What the thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the WAL to reach [`START_PAGES`].
    Idle,
    /// Asked to checkpoint, or checkpointing.
    Busy,
    /// Done but for fewer than [`CATCH_UP_PAGES`]: the next COMMIT finishes.
    CaughtUp,
    /// The filesystem had no room for the checkpoint: nobody checkpoints until
    /// the WAL reaches `recheck_at` pages, or starts over.
    NoRoom {
        /// The WAL page count at which to ask the thread again.
        recheck_at: i32,
    },
    /// The store is gone: the thread ends.
    Closed,
}

/// The thread's phase, shared with the WAL hook.
struct Shared {
    phase: Mutex<Phase>,
    changed: Condvar,
    /// The WAL page count when the thread was last asked to checkpoint.
    asked_at: AtomicI32,
}

impl Shared {
    fn new(phase: Phase) -> Shared {
        Shared { phase: Mutex::new(phase), changed: Condvar::new(), asked_at: AtomicI32::new(0) }
    }

    /// Asks the thread to checkpoint a WAL of `pages` pages.
    fn ask(&self, phase: &mut Phase, pages: i32) {
        *phase = Phase::Busy;
        self.asked_at.store(pages, Ordering::Relaxed);
        self.changed.notify_all();
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The checkpointer thread of one store; ends when dropped.
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    /// The thread's connection, also for a checkpoint asked for by a caller.
    conn: Arc<Mutex<Connection>>,
    /// The database file.
    path: PathBuf,
    /// The thread, joined when dropped: once the store is gone, so is every
    /// connection it had to the file.
    thread: Option<thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread on a connection of its own to `path`, and installs the WAL
    /// hook on `writer`, the store's connection.
    pub(crate) fn start(
        path: &Path,
        writer: &mut Connection,
        options: &crate::OpenOptions,
    ) -> Res<Checkpointer> {
        let mut conn = options.connect_rw(path)?;
        crate::configure(&mut conn, options)?;
        let conn = Arc::new(Mutex::new(conn));
        let shared = Arc::new(Shared::new(Phase::Idle));
        let (ours, thread_conn, db) = (Arc::clone(&shared), Arc::clone(&conn), path.to_owned());
        let thread = thread::Builder::new()
            .name("agentmesh-sqlite-checkpoint".into())
            .spawn(move || run(&thread_conn, &db, &ours))
            .map_err(crate::backend)?;
        writer.pragma_update(None, "journal_size_limit", WAL_KEEP_BYTES)?;
        let hook = Arc::clone(&shared);
        writer.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
            after_commit(&hook, pages, || wal.checkpoint_v2(CheckpointMode::PASSIVE).map(drop))
        }))?;
        Ok(Checkpointer { shared, conn, path: path.to_owned(), thread: Some(thread) })
    }

    /// Checkpoints the whole WAL and truncates it to nothing when it is larger
    /// than `max_bytes` and the filesystem has room for the checkpoint; returns
    /// whether it did. Waits for the writer (up to the busy timeout) to finish
    /// its transaction.
    pub(crate) fn checkpoint_if_wal_exceeds(&self, max_bytes: u64) -> Res<bool> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        let conn = lock_conn(&self.conn);
        if size <= max_bytes || !crate::space::room_for_checkpoint(&conn, &self.path, "WAL truncation") {
            return Ok(false);
        }
        tracing::info!(wal_bytes = size, "WAL past its threshold; checkpointing");
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(true)
    }
}

fn lock_conn(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // Nothing panics while holding it: a checkpoint's failure is an error value.
    conn.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        *self.shared.phase() = Phase::Closed;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The WAL hook: called by SQLite after each COMMIT of the writer, with the
/// WAL's page count; `checkpoint` runs a passive checkpoint on the writer.
fn after_commit(
    shared: &Shared,
    pages: i32,
    checkpoint: impl FnOnce() -> rusqlite::Result<()>,
) -> rusqlite::Result<()> {
    let mut phase = shared.phase();
    let finish = match *phase {
        Phase::CaughtUp => true,
        Phase::Idle if pages >= START_PAGES => {
            shared.ask(&mut phase, pages);
            false
        }
        // Another connection started the WAL over: the room is no question now.
        Phase::NoRoom { .. } if pages < START_PAGES => {
            *phase = Phase::Idle;
            false
        }
        Phase::NoRoom { recheck_at } if pages >= recheck_at => {
            shared.ask(&mut phase, pages);
            false
        }
        _ => false,
    };
    let no_room = matches!(*phase, Phase::NoRoom { .. });
    if finish || (pages >= MAX_PAGES && !no_room) {
        if finish {
            *phase = Phase::Idle;
        }
        drop(phase);
        if let Err(err) = checkpoint() {
            // Not the COMMIT's failure: it is durable already. The WAL is simply
            // checkpointed later.
            log_failure(&err, "WAL checkpoint after a commit did not run");
        }
    }
    Ok(())
}

/// Logs a checkpoint that did not run. Busy is expected, not a warning: another
/// connection (of another process on the same file) was checkpointing.
fn log_failure(err: &rusqlite::Error, what: &str) {
    if err.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
        tracing::debug!(%err, "{what}");
    } else {
        tracing::warn!(%err, "{what}");
    }
}

/// The thread: waits to be asked, then checkpoints until it has caught up, when
/// the filesystem has room for it. At the end, keeps its connection, should it be
/// the file's last, from a checkpoint at close without room.
fn run(conn: &Mutex<Connection>, db: &Path, shared: &Shared) {
    loop {
        {
            let mut phase = shared.phase();
            while *phase != Phase::Busy {
                if *phase == Phase::Closed {
                    drop(phase);
                    crate::space::before_close(&lock_conn(conn), db);
                    return;
                }
                phase = shared.changed.wait(phase).unwrap_or_else(|e| e.into_inner());
            }
        }
        let conn = lock_conn(conn);
        if !crate::space::room_for_checkpoint(&conn, db, "background WAL checkpoint") {
            let mut phase = shared.phase();
            if *phase == Phase::Busy {
                let recheck_at = shared.asked_at.load(Ordering::Relaxed).saturating_add(RECHECK_PAGES);
                *phase = Phase::NoRoom { recheck_at };
            }
            continue;
        }
        let caught_up = catch_up(|| conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE));
        drop(conn);
        let mut phase = shared.phase();
        if *phase == Phase::Busy {
            // Stuck (a reader of another process holds the WAL's end, or another
            // connection was checkpointing): idle again, so that a later COMMIT with
            // the WAL still past the start size asks anew.
            *phase = if caught_up { Phase::CaughtUp } else { Phase::Idle };
        }
    }
}

/// Runs passive checkpoints (`checkpoint` returns the WAL's page count and how many
/// of its pages are copied) while writers keep adding pages, until fewer than
/// [`CATCH_UP_PAGES`] are left. `false` when a checkpoint failed or copied nothing
/// new while pages were left.
fn catch_up(mut checkpoint: impl FnMut() -> rusqlite::Result<(i32, i32)>) -> bool {
    let mut copied_before = -1;
    loop {
        match checkpoint() {
            Ok((log, copied)) if log - copied < CATCH_UP_PAGES => return true,
            Ok((_, copied)) if copied > copied_before => copied_before = copied,
            Ok(_) => return false,
            Err(err) => {
                log_failure(&err, "background WAL checkpoint did not run");
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn shared(phase: Phase) -> Shared {
        Shared::new(phase)
    }

    /// Runs the hook after a COMMIT that left `pages` in the WAL; returns whether
    /// the writer checkpointed, and the phase after.
    fn commit(shared: &Shared, pages: i32) -> (bool, Phase) {
        let ran = Cell::new(false);
        after_commit(shared, pages, || {
            ran.set(true);
            Ok(())
        })
        .unwrap();
        (ran.get(), *shared.phase())
    }

    #[test]
    fn a_small_wal_is_left_alone() {
        let s = shared(Phase::Idle);
        assert_eq!(commit(&s, START_PAGES - 1), (false, Phase::Idle));
    }

    #[test]
    fn a_wal_at_the_start_size_is_handed_to_the_thread_not_checkpointed_by_the_writer() {
        let s = shared(Phase::Idle);
        assert_eq!(commit(&s, START_PAGES), (false, Phase::Busy));
        assert_eq!(commit(&s, START_PAGES + 500), (false, Phase::Busy), "asked once, and the writer goes on");
    }

    #[test]
    fn the_writer_finishes_once_the_thread_caught_up() {
        let s = shared(Phase::CaughtUp);
        assert_eq!(commit(&s, START_PAGES + 20), (true, Phase::Idle));
        assert_eq!(commit(&s, 30), (false, Phase::Idle), "after the WAL restarted, it is small again");
    }

    #[test]
    fn the_writer_checkpoints_by_itself_when_the_thread_falls_behind() {
        let s = shared(Phase::Busy);
        assert_eq!(commit(&s, MAX_PAGES), (true, Phase::Busy));
        let closed = shared(Phase::Closed);
        assert_eq!(commit(&closed, MAX_PAGES), (true, Phase::Closed), "also with the thread gone");
    }

    #[test]
    fn the_thread_repeats_while_writers_add_pages_and_stops_when_nothing_moves() {
        let mut rounds = [(12_000, 10_000), (12_500, 12_000), (12_600, 12_500)].into_iter();
        assert!(catch_up(|| Ok(rounds.next().unwrap())), "caught up once fewer than 256 pages are left");
        let mut stuck = [(12_000, 9_000), (12_100, 9_000)].into_iter();
        assert!(!catch_up(|| Ok(stuck.next().unwrap())), "a reader holds the rest: give up, do not spin");
        assert!(!catch_up(|| Err(rusqlite::Error::InvalidQuery)));
    }

    #[test]
    fn without_room_nobody_checkpoints_until_the_wal_grew_or_started_over() {
        let recheck_at = START_PAGES + RECHECK_PAGES;
        let s = shared(Phase::NoRoom { recheck_at });
        assert_eq!(
            commit(&s, MAX_PAGES - 1),
            (false, Phase::Busy),
            "grown past the recheck: the thread looks again"
        );
        let s = shared(Phase::NoRoom { recheck_at });
        assert_eq!(commit(&s, recheck_at - 1), (false, Phase::NoRoom { recheck_at }));
        let s = shared(Phase::NoRoom { recheck_at: MAX_PAGES + RECHECK_PAGES });
        assert_eq!(
            commit(&s, MAX_PAGES),
            (false, Phase::NoRoom { recheck_at: MAX_PAGES + RECHECK_PAGES }),
            "not even at the writer's own limit"
        );
        assert_eq!(commit(&s, 40), (false, Phase::Idle), "a WAL that started over is small again");
    }

    #[test]
    fn a_failed_checkpoint_does_not_fail_the_commit() {
        let s = shared(Phase::CaughtUp);
        let out = after_commit(&s, START_PAGES, || Err(rusqlite::Error::InvalidQuery));
        assert!(out.is_ok());
    }
}
