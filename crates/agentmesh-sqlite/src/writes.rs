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
//! - A *submitted* write ([`Writes::submit_queued`]) is a queued write whose
//!   writer is an async task, not a thread: its slot is queued the same way, and
//!   the store's *combiner thread* (started on the first submission) takes the
//!   connection on its behalf and runs queued slots until none is left (and none
//!   came for [`COMBINER_LINGER`]). The task
//!   awaits a [`Submitted`] future, woken when its slot is done; no thread is held
//!   while it waits.
//! - A *direct* write ([`Writes::write`]) borrows from its caller, so only its own
//!   thread runs it. It waits for the connection, runs its operation first, and
//!   then the slots queued meanwhile, in the same transaction.
//!
//! A batch's operations first run back to back with no savepoint between them,
//! and commit together: the usual case. When one of them fails (or panics), the
//! whole transaction is rolled back and the batch runs again from the same state,
//! the first operation directly and each further one inside `SAVEPOINT op`. So an
//! operation may run more than once (operations are `FnMut`, and nothing they do
//! outside the transaction may depend on how often they ran). A failed operation
//! is then undone alone (`ROLLBACK TO op`, or the whole transaction when it ran
//! first), so it leaves nothing and its batch-mates are unaffected.
//!
//! Whoever lets go of the connection (a combiner, a direct writer or a reader)
//! then wakes the writer of the oldest slot still queued (the combiner thread,
//! for a submitted one), which tries to take the connection in turn; so a writer
//! never sleeps on a queue nobody is working on.
//!
//! Every [`WAL_CHECK_INTERVAL`] committed writes, whoever holds the connection
//! checks the WAL file's size after the COMMIT and truncates a WAL past
//! [`WAL_MAX_BYTES`].
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
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use agentmesh_store::{FullStorage, StoreError};
use rusqlite::Connection;

use crate::{Fail, Res, WriteStats};

/// A transaction holds at most this many operations.
const MAX_BATCH_WRITES: usize = 32;
/// How long the combiner thread keeps looking for submitted writes after its
/// queue ran empty before it sleeps. Waking a sleeping thread costs tens of
/// microseconds on a virtual machine, paid twice per request when the daemon's
/// writes come one round trip apart; measured under the HTTP claim/complete load
/// on two cores, lingering 1 ms served about 15% more pairs than sleeping at once.
/// An idle store never lingers: only a pass that ran writes is followed by one.
const COMBINER_LINGER: Duration = Duration::from_millis(1);
/// Committed writes between two checks of the WAL file's size.
const WAL_CHECK_INTERVAL: u64 = 500;
/// A WAL file larger than this is checkpointed and truncated: well past the
/// ~41 MB (10,000 pages) at which the checkpointer keeps it, and past the 40,000
/// pages at which a writer checkpoints by itself, so only a WAL that checkpoints
/// cannot reset (readers of other processes holding it) gets here.
const WAL_MAX_BYTES: u64 = 200 * 1024 * 1024;

/// An operation as a batch runs it: `None` when it succeeded, why it failed
/// otherwise. Its own result goes wherever its writer looks for it.
type Op<'a> = dyn FnMut(&Connection) -> Option<Failure> + 'a;

/// A queued write's operation: it runs on whichever thread holds the connection,
/// again if its batch has to run again.
type QueuedOp = dyn FnMut(&Connection) -> Option<Failure> + Send;

/// The store's connection and the writers waiting for it.
pub(crate) struct Writes {
    db: Mutex<Db>,
    /// Slots of queued writes waiting to run, oldest first.
    pending: Mutex<VecDeque<Arc<Slot>>>,
    /// Whether operations may share a transaction; when off, each commits alone.
    group_commit: AtomicBool,
    /// The thread that runs submitted writes, once one was submitted.
    combiner: Mutex<Option<Thread>>,
}

impl Writes {
    /// The writes of `conn`, the connection to the database file at `path`.
    pub(crate) fn new(conn: Connection, path: &Path) -> Writes {
        let mut wal = path.to_owned().into_os_string();
        wal.push("-wal");
        Writes {
            db: Mutex::new(Db { conn, stats: WriteStats::default(), path: path.to_owned(), wal: wal.into() }),
            pending: Mutex::new(VecDeque::new()),
            group_commit: AtomicBool::new(true),
            combiner: Mutex::new(None),
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
    pub(crate) fn write<T>(&self, mut f: impl FnMut(&Connection) -> Res<T>) -> Res<T> {
        let mut result = None;
        let mut op = |conn: &Connection| settle(f(conn), &mut result);
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
        f: impl FnMut(&Connection) -> Res<T> + Send + 'static,
    ) -> Res<T> {
        let (slot, result) = Slot::new(f, Waiter::Thread(thread::current()));
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

    /// A submitted write: like [`Writes::write_queued`], for an async caller. The
    /// write is queued at once and run by the combiner thread (or by any other
    /// writer holding the connection); the returned future resolves once its
    /// transaction is closed, with what `write_queued` would have returned. A
    /// panic of `f` goes on in whoever polls the future.
    pub(crate) fn submit_queued<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnMut(&Connection) -> Res<T> + Send + 'static,
    ) -> Res<Submitted<T>> {
        let combiner = self.combiner()?;
        let (slot, result) = Slot::new(f, Waiter::Task(Mutex::new(None)));
        self.pending_queue().push_back(Arc::clone(&slot));
        combiner.unpark();
        Ok(Submitted { slot, result })
    }

    /// The combiner thread, started if it is not running yet.
    fn combiner(self: &Arc<Self>) -> Res<Thread> {
        let mut combiner = lock(&self.combiner);
        if let Some(thread) = &*combiner {
            return Ok(thread.clone());
        }
        let writes = Arc::downgrade(self);
        let spawned = thread::Builder::new()
            .name("agentmesh-sqlite-writer".into())
            .spawn(move || combine_submitted(&writes))
            .map_err(|err| Fail(StoreError::Backend(Box::new(err))))?;
        let thread = spawned.thread().clone();
        *combiner = Some(thread.clone());
        Ok(thread)
    }

    /// The combiner thread's turn: unless somebody else holds the connection (and
    /// will wake it when letting go, if a submitted slot is then the oldest), runs
    /// queued slots until none is left.
    fn run_submitted(&self) {
        let db = match self.db.try_lock() {
            Ok(db) => db,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let mut db = Held { db: Some(db), writes: self };
        db.undo_stray_transaction();
        loop {
            let batch = self.take_queued(MAX_BATCH_WRITES);
            if batch.is_empty() {
                break;
            }
            self.run_batch(&mut db, batch.into_iter().map(Job::Queued).collect());
        }
    }

    /// Checkpoints and truncates the WAL when it is larger than `max_bytes`;
    /// returns whether it did.
    pub(crate) fn checkpoint_if_wal_exceeds(&self, max_bytes: u64) -> Res<bool> {
        let db = self.lock();
        db.undo_stray_transaction();
        db.checkpoint_if_wal_exceeds(max_bytes)
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
        if jobs.len() < 2 || !self.group_commit.load(Ordering::Relaxed) {
            return self.run_isolated(db, jobs);
        }
        if let Err(jobs) = run_together(db, jobs) {
            self.run_isolated(db, jobs);
        }
    }

    /// Runs `jobs` one `SAVEPOINT` each, so that a failed one is undone alone.
    fn run_isolated(&self, db: &mut Db, jobs: Vec<Job<'_>>) {
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

/// Runs `jobs` back to back in one transaction, with no savepoint between them,
/// and commits: the usual case, where every operation succeeds. A savepoint is
/// not free: SQLite copies every page an operation then changes into a journal
/// first (measured: an eighth of the writer's instructions under batched
/// claims and completions). When an operation fails, or panics, nothing of the
/// batch is kept: the transaction is rolled back, and the jobs are handed back to
/// run again, one savepoint each, from the same state.
fn run_together<'a>(db: &mut Db, jobs: Vec<Job<'a>>) -> Result<(), Vec<Job<'a>>> {
    if db.exec("BEGIN IMMEDIATE").is_err() {
        return Err(jobs);
    }
    let mut txn = Txn { open: true, jobs: Vec::with_capacity(jobs.len()), succeeded: 0 };
    let mut rest = jobs.into_iter();
    while let Some(mut job) = rest.next() {
        let failed = match panic::catch_unwind(AssertUnwindSafe(|| job.run(&db.conn))) {
            Ok(failure) => failure.is_some(),
            Err(payload) => {
                job.panicked(payload);
                true
            }
        };
        txn.jobs.push(job);
        if failed || db.conn.is_autocommit() {
            db.rollback();
            let mut jobs = std::mem::take(&mut txn.jobs);
            txn.open = false;
            jobs.extend(rest);
            return Err(jobs);
        }
        txn.succeeded += 1;
    }
    txn.commit(db);
    Ok(())
}

impl Drop for Writes {
    /// Lets the combiner thread see that the store is gone, and end; and keeps
    /// the connection, should it be the file's last, from a checkpoint at close
    /// that the filesystem has no room for.
    fn drop(&mut self) {
        if let Some(thread) = lock(&self.combiner).take() {
            thread.unpark();
        }
        let db = self.db.get_mut().unwrap_or_else(|e| e.into_inner());
        crate::space::before_close(&db.conn, &db.path);
    }
}

/// The combiner thread: sleeps until a write is submitted (or the connection is
/// let go with a submitted write oldest in the queue), then runs queued writes;
/// ends once the store is gone.
fn combine_submitted(writes: &Weak<Writes>) {
    loop {
        thread::park();
        let Some(writes) = writes.upgrade() else { return };
        writes.run_submitted();
        // Under load the next submission usually comes within a request's round
        // trip: look for it a little longer before sleeping, yielding the core to
        // any thread that wants it meanwhile.
        let mut until = Instant::now() + COMBINER_LINGER;
        while Instant::now() < until {
            if !writes.pending_queue().is_empty() {
                writes.run_submitted();
                until = Instant::now() + COMBINER_LINGER;
            }
            thread::yield_now();
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
                // The operation stays in its slot until the slot ends, in case its
                // batch has to run again; only one that panicked is gone.
                let mut op = lock(&slot.op).take();
                let failure = op.as_mut().map_or_else(|| Some(Failure::rolled_back()), |op| op(conn));
                *lock(&slot.op) = op;
                failure
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
                lock(&slot.op).take();
                {
                    let mut slot_end = lock(&slot.end);
                    if !matches!(*slot_end, Some(End::Panicked(_))) {
                        *slot_end = Some(end);
                    }
                }
                slot.done.store(true, Ordering::Release);
                slot.wake_writer();
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
                db.count_committed(self.succeeded);
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
    waiter: Waiter,
    /// Set once `end` is final.
    done: AtomicBool,
    end: Mutex<Option<End>>,
}

/// Who waits for a slot.
enum Waiter {
    /// A writer thread, parked until its slot is done or it may take the
    /// connection.
    Thread(Thread),
    /// An async task, woken through the waker it last polled with; the combiner
    /// thread takes the connection on its behalf.
    Task(Mutex<Option<Waker>>),
}

/// Where a queued write's operation leaves its result for its writer.
type ResultCell<T> = Arc<Mutex<Option<Res<T>>>>;

impl Slot {
    /// A slot for `f`, and the cell its result will be in.
    fn new<T: Send + 'static>(
        mut f: impl FnMut(&Connection) -> Res<T> + Send + 'static,
        waiter: Waiter,
    ) -> (Arc<Slot>, ResultCell<T>) {
        let result = Arc::new(Mutex::new(None));
        let cell = Arc::clone(&result);
        let op = move |conn: &Connection| settle(f(conn), &mut lock(&cell));
        let slot = Slot {
            op: Mutex::new(Some(Box::new(op))),
            waiter,
            done: AtomicBool::new(false),
            end: Mutex::new(None),
        };
        (Arc::new(slot), result)
    }

    /// Wakes the writer of a done slot.
    fn wake_writer(&self) {
        match &self.waiter {
            Waiter::Thread(thread) => thread.unpark(),
            Waiter::Task(waker) => {
                let waker = lock(waker).take();
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
        }
    }

    /// Whom to wake so that somebody takes the connection for this slot.
    fn taker(&self, writes: &Writes) -> Option<Thread> {
        match &self.waiter {
            Waiter::Thread(thread) => Some(thread.clone()),
            Waiter::Task(_) => lock(&writes.combiner).clone(),
        }
    }
}

/// A submitted write, until its transaction is closed.
pub(crate) struct Submitted<T> {
    slot: Arc<Slot>,
    result: ResultCell<T>,
}

impl<T> Future for Submitted<T> {
    type Output = Res<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Res<T>> {
        if !self.slot.done.load(Ordering::Acquire) {
            if let Waiter::Task(waker) = &self.slot.waiter {
                *lock(waker) = Some(cx.waker().clone());
            }
            // Looked at again after the waker is in place: a slot that ended in
            // between took no waker to wake.
            if !self.slot.done.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
        let end = lock(&self.slot.end).take().expect("a done slot has its end, taken once");
        let result = lock(&self.result).take();
        Poll::Ready(answer(end, result))
    }
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
        let next = self.writes.pending_queue().front().and_then(|slot| slot.taker(self.writes));
        if let Some(thread) = next {
            thread.unpark();
        }
    }
}

/// The connection and its commit counts: what the mutex guards.
pub(crate) struct Db {
    pub(crate) conn: Connection,
    stats: WriteStats,
    /// The database file.
    path: PathBuf,
    /// The WAL file.
    wal: PathBuf,
}

impl Db {
    /// Counts a COMMIT of `writes` writes; each time the committed writes pass a
    /// multiple of [`WAL_CHECK_INTERVAL`], truncates a WAL past [`WAL_MAX_BYTES`].
    /// Called between transactions.
    fn count_committed(&mut self, writes: u32) {
        let before = self.stats.writes;
        self.stats.commits += 1;
        self.stats.writes += u64::from(writes);
        if self.stats.writes / WAL_CHECK_INTERVAL > before / WAL_CHECK_INTERVAL
            && let Err(Fail(err)) = self.checkpoint_if_wal_exceeds(WAL_MAX_BYTES)
        {
            tracing::warn!(%err, "WAL checkpoint failed");
        }
    }

    /// Checkpoints and truncates the WAL when it is larger than `max_bytes` and
    /// the filesystem has room for the checkpoint; returns whether it did. Called
    /// between transactions.
    fn checkpoint_if_wal_exceeds(&self, max_bytes: u64) -> Res<bool> {
        let size = std::fs::metadata(&self.wal).map(|m| m.len()).unwrap_or(0);
        if size <= max_bytes || !crate::space::room_for_checkpoint(&self.conn, &self.path, "WAL truncation") {
            return Ok(false);
        }
        tracing::info!(wal_bytes = size, "WAL past its threshold; checkpointing");
        self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(true)
    }

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
    /// What kind of cause it was.
    kind: FailureKind,
    /// The cause and its sources.
    message: String,
}

/// The causes every writer of a failed transaction is told apart by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailureKind {
    /// A busy or locked database, which callers may retry.
    Busy,
    /// The disk or the quota is full.
    Full(FullStorage),
    /// Another I/O error of SQLite's (looked at again by the store, which knows
    /// the file).
    Io,
    /// Anything else.
    Other,
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
        let kind = match cause {
            StoreError::Busy => FailureKind::Busy,
            StoreError::StorageFull(full) => FailureKind::Full(*full),
            _ if crate::is_io_failure(cause) => FailureKind::Io,
            _ => FailureKind::Other,
        };
        Failure { kind, message }
    }

    fn panicked() -> Failure {
        Failure { kind: FailureKind::Other, message: String::from("a write operation panicked") }
    }

    fn rolled_back() -> Failure {
        Failure { kind: FailureKind::Other, message: String::from("the transaction was rolled back") }
    }

    fn error(&self) -> StoreError {
        match self.kind {
            FailureKind::Busy => StoreError::Busy,
            FailureKind::Full(full) => StoreError::StorageFull(full),
            FailureKind::Io | FailureKind::Other => StoreError::Backend(Box::new(BatchNotCommitted {
                message: self.message.clone(),
                io: self.kind == FailureKind::Io,
            })),
        }
    }
}

/// What a writer gets when the transaction it shared was not committed, because of
/// another write in it or of the COMMIT itself.
#[derive(Debug, thiserror::Error)]
#[error("the transaction this write ran in was not committed: {message}")]
pub(crate) struct BatchNotCommitted {
    message: String,
    /// The cause was an I/O error of SQLite's.
    pub(crate) io: bool,
}

#[cfg(test)]
mod tests {
    //! The combining protocol, step by step. Each test holds the connection while
    //! its writers queue up, so which writes share a transaction is decided by the
    //! test, never by timing.

    use std::sync::atomic::AtomicUsize;
    use std::thread;

    use agentmesh_store::submit::wait;

    use super::*;

    /// Writes on a temp file with a `notes` table.
    fn writes() -> (tempfile::TempDir, Writes) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("notes.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE notes (note TEXT PRIMARY KEY)").unwrap();
        let writes = Writes::new(conn, &dir.path().join("notes.db"));
        (dir, writes)
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
        op: impl FnMut(&Connection) -> Res<T> + Send + 'static,
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
    fn a_batch_runs_without_savepoints_and_again_with_them_when_a_write_fails() {
        let (dir, writes) = writes();
        writes.write(|c| note(c, "taken")).unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = |name: &'static str| {
            let runs = Arc::clone(&runs);
            move |c: &Connection| {
                runs.fetch_add(1, Ordering::Relaxed);
                note(c, name)
            }
        };
        // Every write succeeds: each runs once, and they commit together.
        thread::scope(|s| {
            let held = writes.lock();
            let a = queue(s, &writes, 0, counted("a"));
            let b = queue(s, &writes, 1, counted("b"));
            drop(held);
            assert!(a.join().unwrap().is_ok() && b.join().unwrap().is_ok());
        });
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        // The last write fails after the others ran: they run again, once more
        // each, and commit exactly once.
        let (c, d, failing) = thread::scope(|s| {
            let held = writes.lock();
            let c = queue(s, &writes, 0, counted("c"));
            let d = queue(s, &writes, 1, counted("d"));
            let failing = queue(s, &writes, 2, |c| note(c, "taken"));
            drop(held);
            (c.join().unwrap(), d.join().unwrap(), failing.join().unwrap())
        });
        assert!(c.is_ok() && d.is_ok() && failing.is_err());
        assert_eq!(
            runs.load(Ordering::Relaxed),
            2 + 4,
            "c and d ran together, then again one savepoint each"
        );
        assert_eq!(committed_notes(&dir), ["a", "b", "c", "d", "taken"]);
        assert_eq!(writes.stats(), WriteStats { writes: 5, commits: 3 });
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

    fn shared_writes() -> (tempfile::TempDir, Arc<Writes>) {
        let (dir, writes) = writes();
        (dir, Arc::new(writes))
    }

    #[test]
    fn a_submitted_write_is_committed_when_its_future_resolves() {
        let (dir, writes) = shared_writes();
        let submitted = writes.submit_queued(|c| note(c, "a").map(|()| 7)).unwrap();
        assert_eq!(wait(submitted).unwrap(), 7);
        assert_eq!(committed_notes(&dir), ["a"]);
        let refused = writes.submit_queued(|c| note(c, "a")).unwrap();
        assert!(wait(refused).is_err(), "a failed operation's error is its future's answer");
        assert_eq!(writes.stats(), WriteStats { writes: 1, commits: 1 });
    }

    #[test]
    fn submitted_and_queued_writes_share_one_commit_and_nothing_runs_before_it() {
        let (dir, writes) = shared_writes();
        thread::scope(|s| {
            let held = writes.lock();
            let a = writes.submit_queued(|c| note(c, "a")).unwrap();
            let b = queue(s, &writes, 1, |c| note(c, "b"));
            let c = writes.submit_queued(|c| note(c, "c")).unwrap();
            // The combiner thread was woken for a and c, but the connection is held.
            thread::sleep(std::time::Duration::from_millis(20));
            assert!(!a.slot.done.load(Ordering::Acquire), "nothing runs while the connection is held");
            assert!(committed_notes(&dir).is_empty());
            drop(held);
            wait(a).unwrap();
            wait(c).unwrap();
            b.join().unwrap().unwrap();
        });
        assert_eq!(committed_notes(&dir), ["a", "b", "c"]);
        assert_eq!(writes.stats(), WriteStats { writes: 3, commits: 1 });
    }

    #[test]
    fn a_submitted_write_oldest_in_the_queue_is_run_once_the_connection_is_let_go() {
        let (dir, writes) = shared_writes();
        // Start the combiner thread, then let it go back to sleep.
        wait(writes.submit_queued(|c| note(c, "warm")).unwrap()).unwrap();
        let held = writes.lock();
        let late = writes.submit_queued(|c| note(c, "late")).unwrap();
        // The wake-up of the submission came while the connection was held, so the
        // combiner gave up its turn; letting go must wake it again.
        thread::sleep(std::time::Duration::from_millis(20));
        drop(held);
        wait(late).unwrap();
        assert_eq!(committed_notes(&dir), ["late", "warm"]);
    }

    #[test]
    fn the_panic_of_a_submitted_write_reaches_whoever_awaits_it_and_is_undone() {
        let (dir, writes) = shared_writes();
        let panicking = writes
            .submit_queued(|c| -> Res<()> {
                note(c, "half")?;
                panic!("the submitted operation panics");
            })
            .unwrap();
        let caught = panic::catch_unwind(AssertUnwindSafe(|| wait(panicking)));
        assert!(caught.is_err(), "the panic reaches the awaiting side");
        wait(writes.submit_queued(|c| note(c, "after")).unwrap()).unwrap();
        assert_eq!(committed_notes(&dir), ["after"]);
    }

    #[test]
    fn a_store_with_a_combiner_thread_is_freed_when_dropped() {
        let (_dir, writes) = shared_writes();
        wait(writes.submit_queued(|c| note(c, "a")).unwrap()).unwrap();
        assert!(lock(&writes.combiner).is_some(), "the first submission started the combiner thread");
        let gone = Arc::downgrade(&writes);
        drop(writes);
        // The thread holds the writes only while it runs a pass, so the connection
        // (and its file) is let go once the last handle is dropped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while gone.upgrade().is_some() && std::time::Instant::now() < deadline {
            thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(gone.upgrade().is_none(), "the combiner thread does not keep the store alive");
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
