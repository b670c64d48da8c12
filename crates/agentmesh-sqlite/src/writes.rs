//! The one connection, and how writers share its transactions (group commit by
//! combining).
//!
//! A COMMIT costs more than most operations (it appends the transaction's pages to
//! the WAL, and writes that touch the same pages share them), so writers that
//! arrive together share one. They do it by *combining*: whoever holds the
//! connection runs, back to back in its transaction, the operations other writers
//! queued for it, instead of the connection being passed from thread to thread
//! (each pass a wake-up on the critical path).
//!
//! There are two kinds of writes:
//!
//! - A *queued* write ([`Writes::write_queued`]) owns what its operation needs
//!   (`'static`), so any thread may run it. It puts its operation in a *slot* on the
//!   `pending` queue and tries to take the connection. If it gets it, it becomes the
//!   *combiner* and runs queued slots, oldest first, a batch at a time, until its
//!   own is done; otherwise it sleeps until its slot is done. The hot paths (claim,
//!   completion, heartbeat, enqueue, event queue and drain) are queued writes.
//! - A *direct* write ([`Writes::write`]) borrows from its caller, so only its own
//!   thread runs it. It waits for the connection, runs its operation first, and
//!   then the slots queued meanwhile, in the same transaction.
//!
//! In a batch the first operation runs directly and each further one inside
//! `SAVEPOINT op`. A failed (or panicking) operation is undone alone
//! (`ROLLBACK TO op`, or the whole transaction when it ran first), so it leaves
//! nothing and its batch-mates are unaffected. Whoever lets go of the connection
//! (a combiner, a direct writer or a reader) then wakes the writer of the oldest
//! slot still queued, which tries to take the connection in turn; so a writer
//! never sleeps on a queue nobody is working on.
//!
//! **Invariant:** a write returns only once the transaction it ran in is closed:
//! committed (the caller gets its operation's own result) or failed (every caller
//! in it gets the error, whatever its operation returned). So when a write returns
//! `Ok`, its change is committed exactly as durably as a transaction of its own
//! would be, and an answer computed from another writer's uncommitted change (a
//! refused claim, say) is never handed out unless that change committed too.
//!
//! **Invariant:** no transaction is open while nobody holds the connection: whoever
//! runs a batch commits it before letting go. So a read, which takes the connection
//! like anybody else, sees only committed data.
//!
//! Other processes sharing the file see a batch as one transaction. It holds
//! SQLite's write lock for at most `MAX_BATCH_WRITES` operations, far within their
//! busy timeout.

use std::any::Any;
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::{self, Thread};

use agentmesh_store::StoreError;
use rusqlite::Connection;

use crate::{Fail, Res, WriteStats};

/// A transaction holds at most this many operations.
const MAX_BATCH_WRITES: usize = 32;

/// An operation as a batch runs it: `None` when it succeeded, why it failed
/// otherwise. Its own result goes wherever its writer looks for it.
type Op<'a> = dyn FnMut(&Connection) -> Option<Failure> + 'a;

/// A queued write's operation: it runs once, on whichever thread holds the
/// connection.
type QueuedOp = dyn FnOnce(&Connection) -> Option<Failure> + Send;

/// The store's connection and the writers waiting for it.
pub(crate) struct Writes {
    db: Mutex<Db>,
    /// Slots of queued writes waiting to run, oldest first.
    pending: Mutex<VecDeque<Arc<Slot>>>,
    /// Whether operations may share a transaction; when off, each commits alone.
    group_commit: AtomicBool,
}

impl Writes {
    pub(crate) fn new(conn: Connection) -> Writes {
        Writes {
            db: Mutex::new(Db { conn, stats: WriteStats::default() }),
            pending: Mutex::new(VecDeque::new()),
            group_commit: AtomicBool::new(true),
        }
    }

    pub(crate) fn set_group_commit(&self, enabled: bool) {
        self.group_commit.store(enabled, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> WriteStats {
        self.lock().stats
    }

    /// Runs `f` on the connection outside any write transaction, so it sees only
    /// committed data.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
        let db = self.lock();
        db.undo_stray_transaction();
        f(&db.conn)
    }

    /// A direct write: runs `f` on this thread in an immediate transaction, with
    /// the writes queued meanwhile, and returns once that transaction is committed
    /// (with `f`'s result) or has failed (with the failure). A panic in `f` reaches
    /// the caller, after its changes are undone.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
        let mut f = Some(f);
        let mut result = None;
        let mut op = |conn: &Connection| {
            let f = f.take().expect("an operation runs once");
            settle(f(conn), &mut result)
        };
        let mut end = None;
        {
            let mut db = self.lock();
            db.undo_stray_transaction();
            let mut jobs = vec![Job::Direct { op: &mut op, end: &mut end }];
            jobs.extend(self.take_queued(MAX_BATCH_WRITES - 1).into_iter().map(Job::Queued));
            self.run_batch(&mut db, jobs);
        }
        answer(end.expect("a direct write ends in its own batch"), result)
    }

    /// A queued write: like [`Writes::write`], but `f` may run on whichever thread
    /// holds the connection, so writers that arrive together share a transaction
    /// without handing the connection from one to the next.
    pub(crate) fn write_queued<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Res<T> + Send + 'static,
    ) -> Res<T> {
        let result = Arc::new(Mutex::new(None));
        let slot = {
            let result = Arc::clone(&result);
            let op = move |conn: &Connection| settle(f(conn), &mut lock(&result));
            Arc::new(Slot {
                op: Mutex::new(Some(Box::new(op))),
                thread: thread::current(),
                done: AtomicBool::new(false),
                end: Mutex::new(None),
            })
        };
        self.pending_queue().push_back(Arc::clone(&slot));
        while !slot.done.load(Ordering::Acquire) {
            let db = match self.db.try_lock() {
                Ok(db) => db,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    thread::park();
                    continue;
                }
            };
            let mut db = Held { db: Some(db), writes: self };
            db.undo_stray_transaction();
            while !slot.done.load(Ordering::Acquire) {
                let batch = self.take_queued(MAX_BATCH_WRITES);
                if batch.is_empty() {
                    break;
                }
                self.run_batch(&mut db, batch.into_iter().map(Job::Queued).collect());
            }
        }
        let end = lock(&slot.end).take().expect("a done slot has its end");
        let result = lock(&result).take();
        answer(end, result)
    }

    /// Takes the connection, waiting for it.
    fn lock(&self) -> Held<'_> {
        // A panic while the connection is held can only come from this module's
        // bookkeeping (operations run under `catch_unwind`), and the next holder
        // undoes a transaction such a panic left open, so a poisoned lock is safe
        // to reuse.
        Held { db: Some(lock(&self.db)), writes: self }
    }

    fn pending_queue(&self) -> MutexGuard<'_, VecDeque<Arc<Slot>>> {
        lock(&self.pending)
    }

    /// Up to `max` queued slots, oldest first.
    fn take_queued(&self, max: usize) -> Vec<Arc<Slot>> {
        let mut pending = self.pending_queue();
        let n = pending.len().min(max);
        pending.drain(..n).collect()
    }

    /// Runs `jobs` in as few transactions as their outcomes allow, and ends each
    /// once the transaction it ran in is closed.
    fn run_batch(&self, db: &mut Db, jobs: Vec<Job<'_>>) {
        let group = self.group_commit.load(Ordering::Relaxed);
        let mut txn = Txn::default();
        for mut job in jobs {
            if !txn.open {
                if let Err(Fail(err)) = db.exec("BEGIN IMMEDIATE") {
                    job.end(End::Failed(err));
                    continue;
                }
                txn.open = true;
            }
            let first = txn.jobs.is_empty();
            if !first && let Err(Fail(err)) = db.exec("SAVEPOINT op") {
                job.end(End::Failed(err));
                continue;
            }
            let failure = match panic::catch_unwind(AssertUnwindSafe(|| job.run(&db.conn))) {
                Ok(failure) => failure,
                Err(payload) => {
                    job.panicked(payload);
                    Some(Failure::panicked())
                }
            };
            let succeeded = failure.is_none();
            txn.jobs.push(job);
            if db.conn.is_autocommit() {
                // SQLite rolled the whole transaction back (some errors do).
                txn.fail(db, &failure.unwrap_or_else(Failure::rolled_back));
                continue;
            }
            let ended = match (first, failure) {
                (true, None) => Ok(()),
                (false, None) => db.exec("RELEASE op"),
                (true, Some(_)) => {
                    // Alone in its transaction: undo all of it; the operation's own
                    // result (an error) is its answer.
                    db.rollback();
                    txn.close();
                    continue;
                }
                (false, Some(_)) => db.exec("ROLLBACK TO op").and_then(|()| db.exec("RELEASE op")),
            };
            match ended {
                Ok(()) => txn.succeeded += u32::from(succeeded),
                Err(Fail(err)) => {
                    txn.fail(db, &Failure::of(&err));
                    continue;
                }
            }
            if !group {
                txn.commit(db);
            }
        }
        if txn.open {
            txn.commit(db);
        }
    }
}
/// One operation of a batch.
enum Job<'a> {
    /// A direct write's, run on its own thread; its end is read there.
    Direct { op: &'a mut Op<'a>, end: &'a mut Option<End> },
    /// A queued write's.
    Queued(Arc<Slot>),
}

impl Job<'_> {
    fn run(&mut self, conn: &Connection) -> Option<Failure> {
        match self {
            Job::Direct { op, .. } => op(conn),
            Job::Queued(slot) => {
                let op = lock(&slot.op).take();
                // A slot is queued once and taken off the queue once, so its
                // operation is always there.
                op.map_or_else(|| Some(Failure::rolled_back()), |op| op(conn))
            }
        }
    }

    /// Records the panic of its operation: it goes on in the writer's thread.
    fn panicked(&mut self, payload: Box<dyn Any + Send>) {
        match self {
            Job::Direct { end, .. } => **end = Some(End::Panicked(payload)),
            Job::Queued(slot) => *lock(&slot.end) = Some(End::Panicked(payload)),
        }
    }

    /// Ends the job with `end`, unless its operation panicked (the panic stays its
    /// answer), and wakes a queued write's writer.
    fn end(self, end: End) {
        match self {
            Job::Direct { end: slot_end, .. } => {
                if !matches!(slot_end, Some(End::Panicked(_))) {
                    *slot_end = Some(end);
                }
            }
            Job::Queued(slot) => {
                {
                    let mut slot_end = lock(&slot.end);
                    if !matches!(*slot_end, Some(End::Panicked(_))) {
                        *slot_end = Some(end);
                    }
                }
                slot.done.store(true, Ordering::Release);
                slot.thread.unpark();
            }
        }
    }
}

/// The transaction a batch has open, and the jobs that ran in it.
#[derive(Default)]
struct Txn<'a> {
    open: bool,
    jobs: Vec<Job<'a>>,
    /// Jobs whose operation succeeded: their changes commit with the transaction.
    succeeded: u32,
}

impl Txn<'_> {
    /// Commits, and gives every job its own result; if the COMMIT fails, rolls back
    /// and gives every job the failure.
    fn commit(&mut self, db: &mut Db) {
        match db.exec("COMMIT") {
            Ok(()) => {
                db.stats.commits += 1;
                db.stats.writes += u64::from(self.succeeded);
                self.close();
            }
            Err(Fail(err)) => self.fail(db, &Failure::of(&err)),
        }
    }

    /// Rolls back (unless SQLite already did) and gives every job the failure.
    fn fail(&mut self, db: &mut Db, failure: &Failure) {
        db.rollback();
        for job in self.jobs.drain(..) {
            job.end(End::Failed(failure.error()));
        }
        self.open = false;
        self.succeeded = 0;
    }

    /// Closes the transaction (committed, or rolled back with only a job that
    /// failed alone in it) and gives every job its own result.
    fn close(&mut self) {
        for job in self.jobs.drain(..) {
            job.end(End::Ran);
        }
        self.open = false;
        self.succeeded = 0;
    }
}

/// A queued write's operation and how it ended, shared by its writer and
/// whichever thread runs it.
struct Slot {
    /// The operation, until it runs.
    op: Mutex<Option<Box<QueuedOp>>>,
    /// The writer, to wake when the slot is done.
    thread: Thread,
    /// Set once `end` is final.
    done: AtomicBool,
    end: Mutex<Option<End>>,
}

/// How a write ended.
enum End {
    /// The operation ran and its transaction committed (or it failed alone): its
    /// own result is the answer.
    Ran,
    /// It did not run, or its transaction failed.
    Failed(StoreError),
    /// The operation panicked; the panic goes on in its writer.
    Panicked(Box<dyn Any + Send>),
}

/// Keeps an operation's result for its writer; returns why it failed, if it did.
fn settle<T>(out: Res<T>, result: &mut Option<Res<T>>) -> Option<Failure> {
    let failure = out.as_ref().err().map(|e| Failure::of(&e.0));
    *result = Some(out);
    failure
}

/// A write's answer: its operation's result, unless its transaction failed or it
/// panicked.
fn answer<T>(end: End, result: Option<Res<T>>) -> Res<T> {
    match end {
        End::Panicked(payload) => panic::resume_unwind(payload),
        End::Failed(err) => Err(Fail(err)),
        End::Ran => result.expect("an operation that ran has its result"),
    }
}

/// Locks `mutex`, also when poisoned: nothing holding these locks leaves them
/// inconsistent (operations run under `catch_unwind`, and a transaction a panic
/// left open is undone by the next holder of the connection).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The connection, held; letting go wakes the writer of the oldest queued slot.
struct Held<'a> {
    db: Option<MutexGuard<'a, Db>>,
    writes: &'a Writes,
}

impl Deref for Held<'_> {
    type Target = Db;
    fn deref(&self) -> &Db {
        self.db.as_ref().expect("held until dropped")
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Db {
        self.db.as_mut().expect("held until dropped")
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        drop(self.db.take());
        // After letting go, so that a writer that queued while the connection was
        // held either is woken here or finds the connection free.
        let next = self.writes.pending_queue().front().map(|slot| slot.thread.clone());
        if let Some(thread) = next {
            thread.unpark();
        }
    }
}

/// The connection and its commit counts: what the mutex guards.
pub(crate) struct Db {
    pub(crate) conn: Connection,
    stats: WriteStats,
}

impl Db {
    /// Runs one statement through the statement cache: `Transaction` would parse
    /// BEGIN and COMMIT again for every write.
    fn exec(&self, sql: &str) -> Res<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Rolls back the open transaction, unless SQLite already did.
    fn rollback(&self) {
        if !self.conn.is_autocommit()
            && let Err(err) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::error!(%err, "rollback failed");
        }
    }

    /// Undoes a transaction nobody owns: one a panic in this module's bookkeeping
    /// left open.
    fn undo_stray_transaction(&self) {
        self.rollback();
    }
}

/// Why an operation or a transaction failed, kept to tell each writer in it.
#[derive(Debug, Clone)]
struct Failure {
    /// The cause was a busy or locked database, which callers may retry.
    busy: bool,
    /// The cause and its sources.
    message: String,
}

impl Failure {
    fn of(cause: &StoreError) -> Failure {
        let mut message = cause.to_string();
        let mut source = std::error::Error::source(cause);
        while let Some(err) = source {
            message.push_str(": ");
            message.push_str(&err.to_string());
            source = err.source();
        }
        Failure { busy: matches!(cause, StoreError::Busy), message }
    }

    fn panicked() -> Failure {
        Failure { busy: false, message: String::from("a write operation panicked") }
    }

    fn rolled_back() -> Failure {
        Failure { busy: false, message: String::from("the transaction was rolled back") }
    }

    fn error(&self) -> StoreError {
        if self.busy {
            StoreError::Busy
        } else {
            StoreError::Backend(Box::new(BatchNotCommitted(self.message.clone())))
        }
    }
}

/// What a writer gets when the transaction it shared was not committed, because of
/// another write in it or of the COMMIT itself.
#[derive(Debug, thiserror::Error)]
#[error("the transaction this write ran in was not committed: {0}")]
struct BatchNotCommitted(String);

#[cfg(test)]
mod tests {
    //! The combining protocol, step by step. Each test holds the connection while
    //! its writers queue up, so which writes share a transaction is decided by the
    //! test, never by timing.

    use std::thread;

    use super::*;

    /// Writes on a temp file with a `notes` table.
    fn writes() -> (tempfile::TempDir, Writes) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("notes.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE notes (note TEXT PRIMARY KEY)").unwrap();
        (dir, Writes::new(conn))
    }

    fn note(c: &Connection, note: &str) -> Res<()> {
        c.execute("INSERT INTO notes (note) VALUES (?1)", [note])?;
        Ok(())
    }

    /// The committed notes, read through a connection of their own.
    fn committed_notes(dir: &tempfile::TempDir) -> Vec<String> {
        let conn = Connection::open(dir.path().join("notes.db")).unwrap();
        let mut stmt = conn.prepare("SELECT note FROM notes ORDER BY note").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    /// Spawns a queued write of `op` and returns once it is queued behind the
    /// `queued` writes before it (the connection must be held meanwhile).
    fn queue<'scope, T: Send + 'static>(
        s: &'scope thread::Scope<'scope, '_>,
        writes: &'scope Writes,
        queued: usize,
        op: impl FnOnce(&Connection) -> Res<T> + Send + 'static,
    ) -> thread::ScopedJoinHandle<'scope, Res<T>> {
        let handle = s.spawn(move || writes.write_queued(op));
        while writes.pending_queue().len() <= queued {
            thread::yield_now();
        }
        handle
    }

    /// Queues one write noting each of `notes`, in that order (the connection must be
    /// held meanwhile).
    fn queue_notes<'scope>(
        s: &'scope thread::Scope<'scope, '_>,
        writes: &'scope Writes,
        notes: [&'static str; 3],
    ) -> Vec<thread::ScopedJoinHandle<'scope, Res<()>>> {
        notes.into_iter().enumerate().map(|(i, n)| queue(s, writes, i, move |c| note(c, n))).collect()
    }

    #[test]
    fn an_uncontended_writer_commits_every_write_on_its_own() {
        let (dir, writes) = writes();
        writes.write(|c| note(c, "a")).unwrap();
        assert_eq!(committed_notes(&dir), ["a"], "a direct write is committed when it returns");
        writes.write_queued(|c| note(c, "b")).unwrap();
        assert_eq!(committed_notes(&dir), ["a", "b"], "a queued write is committed when it returns");
        assert_eq!(writes.stats(), WriteStats { writes: 2, commits: 2 });
    }

    #[test]
    fn writes_queued_while_the_connection_is_held_share_one_commit() {
        let (dir, writes) = writes();
        thread::scope(|s| {
            let held = writes.lock();
            let handles = queue_notes(s, &writes, ["a", "b", "c"]);
            assert!(committed_notes(&dir).is_empty(), "nothing runs while the connection is held");
            drop(held);
            for h in handles {
                h.join().unwrap().unwrap();
            }
        });
        assert_eq!(committed_notes(&dir), ["a", "b", "c"]);
        assert_eq!(writes.stats(), WriteStats { writes: 3, commits: 1 });
    }

    #[test]
    fn a_failed_write_inside_a_batch_leaves_nothing_and_its_batch_mates_commit() {
        let (dir, writes) = writes();
        writes.write(|c| note(c, "taken")).unwrap();
        let failing = |c: &Connection| -> Res<()> {
            note(c, "half")?;
            note(c, "taken") // A duplicate: the operation fails after writing.
        };
        let (first, a, second, c) = thread::scope(|s| {
            let held = writes.lock();
            let first = queue(s, &writes, 0, failing);
            let a = queue(s, &writes, 1, |c| note(c, "a"));
            let second = queue(s, &writes, 2, failing);
            let c = queue(s, &writes, 3, |c| note(c, "c"));
            drop(held);
            (first.join().unwrap(), a.join().unwrap(), second.join().unwrap(), c.join().unwrap())
        });
        assert!(first.is_err(), "the first write of the batch fails alone");
        assert!(second.is_err(), "a later write of the batch fails alone");
        assert!(a.is_ok() && c.is_ok());
        assert_eq!(committed_notes(&dir), ["a", "c", "taken"], "no half of a failed write is left");
        assert_eq!(writes.stats(), WriteStats { writes: 3, commits: 2 }, "a and c shared one commit");
    }

    #[test]
    fn a_panicking_write_is_undone_alone_and_its_panic_reaches_its_caller() {
        let (dir, writes) = writes();
        thread::scope(|s| {
            let held = writes.lock();
            let a = queue(s, &writes, 0, |c| note(c, "a"));
            let b = queue(s, &writes, 1, |c| -> Res<()> {
                note(c, "b")?;
                panic!("b's operation panics inside a's batch");
            });
            let c = queue(s, &writes, 2, |c| note(c, "c"));
            drop(held);
            assert!(b.join().is_err(), "the panic reaches b's caller");
            assert!(a.join().unwrap().is_ok() && c.join().unwrap().is_ok());
        });
        assert_eq!(committed_notes(&dir), ["a", "c"]);

        let alone = panic::catch_unwind(AssertUnwindSafe(|| {
            writes.write(|c| -> Res<()> {
                note(c, "d")?;
                panic!("d's operation panics alone");
            })
        }));
        assert!(alone.is_err());
        assert!(!writes.db.is_poisoned(), "a panicking operation does not poison the connection's lock");
        writes.write(|c| note(c, "e")).unwrap();
        assert_eq!(committed_notes(&dir), ["a", "c", "e"]);
    }

    #[test]
    fn a_failed_commit_fails_every_write_of_its_batch() {
        let (dir, writes) = writes();
        writes
            .write(|c| {
                Ok(c.execute_batch(
                    "CREATE TABLE parents (id INTEGER PRIMARY KEY);
                     CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);
                     PRAGMA foreign_keys = ON;",
                )?)
            })
            .unwrap();
        writes.read(|c| Ok(c.execute_batch("PRAGMA foreign_keys = ON")?)).unwrap();
        let (a, b) = thread::scope(|s| {
            let held = writes.lock();
            let a = queue(s, &writes, 0, |c| note(c, "a"));
            // A deferred foreign key is checked by COMMIT, so b's operation succeeds
            // and the COMMIT of the batch fails.
            let b = queue(s, &writes, 1, |c| Ok(c.execute("INSERT INTO children (parent) VALUES (42)", [])?));
            drop(held);
            (a.join().unwrap(), b.join().unwrap())
        });
        let a_err = a.expect_err("a's write shared the failed commit");
        assert!(b.is_err(), "the COMMIT of b's batch failed");
        let message = std::error::Error::source(&a_err.0).map(ToString::to_string).unwrap_or_default();
        assert!(message.contains("not committed") && message.contains("FOREIGN KEY"), "{message}");
        assert!(committed_notes(&dir).is_empty());
        writes.write_queued(|c| note(c, "after")).unwrap();
        assert_eq!(committed_notes(&dir), ["after"]);
    }

    #[test]
    fn a_direct_write_takes_the_writes_queued_meanwhile_into_its_transaction() {
        let (dir, writes) = writes();
        let held = writes.lock();
        thread::scope(|s| {
            let a = queue(s, &writes, 0, |c| note(c, "a"));
            let b = queue(s, &writes, 1, |c| note(c, "b"));
            // Nobody else can take the connection: this thread holds it and hands it
            // straight to its own direct write.
            let mut db = held;
            let mut d = |c: &Connection| settle(note(c, "d"), &mut None);
            let mut end = None;
            let mut jobs = vec![Job::Direct { op: &mut d, end: &mut end }];
            jobs.extend(writes.take_queued(MAX_BATCH_WRITES - 1).into_iter().map(Job::Queued));
            writes.run_batch(&mut db, jobs);
            drop(db);
            assert!(matches!(end, Some(End::Ran)));
            assert!(a.join().unwrap().is_ok() && b.join().unwrap().is_ok());
        });
        assert_eq!(committed_notes(&dir), ["a", "b", "d"]);
        assert_eq!(writes.stats(), WriteStats { writes: 3, commits: 1 });
    }

    #[test]
    fn with_group_commit_off_every_write_commits_on_its_own() {
        let (dir, writes) = writes();
        writes.set_group_commit(false);
        thread::scope(|s| {
            let held = writes.lock();
            let handles = queue_notes(s, &writes, ["a", "b", "c"]);
            drop(held);
            for h in handles {
                h.join().unwrap().unwrap();
            }
        });
        assert_eq!(committed_notes(&dir), ["a", "b", "c"]);
        assert_eq!(writes.stats(), WriteStats { writes: 3, commits: 3 });
    }
}
