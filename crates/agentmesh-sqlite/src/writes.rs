//! The writer: one thread that owns the store's write connection, and the
//! read-only connections beside it.
//!
//! Every write is a request on one channel. The writer thread takes what is
//! queued (at most [`MAX_BATCH_WRITES`]), runs it in one `BEGIN IMMEDIATE`
//! transaction, COMMITs, and only then answers each caller: a thread blocked on
//! its reply, or the [`Submitted`] future of an async caller, woken from the
//! writer thread. Writers that arrive together so share one COMMIT (group
//! commit), which costs more than most operations. Each operation runs exactly
//! once. Where a COMMIT syncs (`Durability::Full`), it costs more than all the
//! rest of a small write: the writer waits up to [`GATHER_WAIT`] for the callers
//! on their way (those inside a write that have not queued it, and as many as
//! its last batch held), and a caller skips the queue (below) only when the
//! last batch was a lone one.
//!
//! The connection sits behind a lock, held by whoever uses it: the writer thread
//! for a batch, and two kinds of caller while nobody else does.
//!
//! - **An uncontended synchronous write** ([`Writes::write_queued`] when no other
//!   thread is inside it, nothing is queued and the connection is free) would
//!   be a batch of one: it runs on its caller's thread, in a transaction of its
//!   own, sparing the two hand-offs between threads (which cost as much as the
//!   SQL of a small write). Writes that arrive together go to the channel and
//!   share a commit. Async callers always go to the channel: their threads run
//!   other tasks.
//! - **A point read** ([`Writes::read_point`]: a few rows by key, in one
//!   statement) runs on the write connection between its transactions, whose
//!   page cache holds what the last writes touched; a read-only connection
//!   starts with a cold cache after every write of another connection.
//!
//! Neither waits: a caller that finds the connection held takes the channel or
//! a read-only connection. The writer waits for them at most as long as one
//! small write or one point read takes.
//!
//! The first operation of a transaction runs without a savepoint; each further
//! one runs inside `SAVEPOINT op`. A failing (or panicking) operation is undone
//! alone: `ROLLBACK TO op`, or, when it ran first, the whole transaction, which
//! then held nothing else. A savepoint is paid only when writers arrive
//! together, never by an uncontended write.
//!
//! A write whose operation borrows from its caller ([`Writes::write`]) cannot
//! travel to another thread: it is queued like the others, and when its turn
//! comes the writer lends it the connection, waits for it back and goes on. It
//! runs in a transaction of its own. These are the rare writes (imports,
//! cancels, upkeep); the hot paths own their arguments.
//!
//! Reads ([`Writes::read`]) never wait for the writer: they run on a small pool
//! of read-only connections, opened as needed, each read in one deferred
//! transaction so that it sees one snapshot. WAL lets them run beside the
//! writer's transaction. A bulk read ([`Writes::read_bulk`]: a whole queue
//! listed, the counts by status) runs on the store's bulk-read thread, below the
//! writers' CPU priority, so that on a machine with fewer cores than busy
//! threads it takes the CPU the writes leave.
//!
//! **Invariant:** a write returns only once the transaction it ran in is closed:
//! committed (the caller gets its operation's own result) or failed (every caller
//! in it gets the error, whatever its operation returned). So when a write returns
//! `Ok`, its change is committed exactly as durably as a transaction of its own
//! would be, an answer computed from another writer's uncommitted change (a
//! refused claim, say) is never handed out unless that change committed too, and
//! a read that starts after a write returned sees it.
//!
//! Other processes sharing the file see a batch as one transaction. It holds
//! SQLite's write lock for at most `MAX_BATCH_WRITES` operations, far within their
//! busy timeout.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use agentmesh_store::{FullStorage, StoreError};
use rusqlite::{Connection, OpenFlags};

use crate::durability::Ceilings;
use crate::{Fail, OpenOptions, Res, WriteStats};

/// A transaction holds at most this many operations.
const MAX_BATCH_WRITES: usize = 32;
/// How long the writer keeps looking for the next request after a write before
/// it sleeps. Waking a sleeping thread costs tens of microseconds on a virtual
/// machine, paid on every write when writes come one after the other; a writer
/// that just wrote looks a little longer, yielding its core meanwhile. An idle
/// store never lingers.
const WRITER_LINGER: Duration = Duration::from_millis(1);
/// How long a caller that found nobody else waiting for the writer looks for its
/// answer, yielding its core, before it sleeps: its write is answered within
/// tens of microseconds, and a core that went idle meanwhile takes about as long
/// again to wake on a virtual machine.
const CALLER_LINGER: Duration = Duration::from_micros(100);
/// How long a batch whose COMMIT syncs waits, at most, for the callers on their
/// way: the synchronous callers inside a write that have not queued it yet, and
/// as many as the last batch held (answered, they are likely to write again at
/// once). A sync costs about as much (150 µs on the machines we measured), and
/// each caller that makes the batch spares one.
const GATHER_WAIT: Duration = Duration::from_micros(100);
/// Read-only connections a store opens at most.
const MAX_READERS: usize = 4;

/// The store's writer thread, the channel that feeds it, and the readers.
pub(crate) struct Writes {
    /// The writer's queue; `None` once the store is dropped.
    requests: Option<Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    readers: Arc<Readers>,
    /// The thread that runs bulk reads ([`Writes::read_bulk`]); `None` once the
    /// store is dropped.
    bulk: Option<(Sender<BulkRead>, JoinHandle<()>)>,
    /// The write connection, for a write or a point read on the caller's thread
    /// while nobody else uses it; `None` once the store is dropped, so that the
    /// writer thread closes it.
    conn: Option<Arc<Mutex<Connection>>>,
}

/// What the writer thread and the store's handle share.
struct Shared {
    stats: Mutex<WriteStats>,
    /// Whether operations may share a transaction; when off, each commits alone.
    group_commit: AtomicBool,
    /// Requests sent and not yet taken by the writer.
    queued: AtomicUsize,
    /// Threads inside [`Writes::write_queued`] or [`Writes::write`].
    sync_writers: AtomicUsize,
    /// Looked at after every COMMIT, before its callers are answered.
    ceilings: Arc<Ceilings>,
    /// Whether a COMMIT syncs, so that a batch waits a moment for callers on
    /// their way ([`GATHER_WAIT`]).
    gather: bool,
    /// How many writes the writer thread's last batch held: the callers it
    /// answered, who are likely to write again at once.
    last_batch: AtomicUsize,
}

impl Writes {
    /// Starts the writer thread on `conn`, the write connection to the database
    /// file at `path`.
    pub(crate) fn new(
        conn: Connection,
        path: &Path,
        options: &OpenOptions,
        ceilings: Arc<Ceilings>,
    ) -> Res<Writes> {
        let shared = Arc::new(Shared {
            stats: Mutex::new(WriteStats::default()),
            group_commit: AtomicBool::new(true),
            queued: AtomicUsize::new(0),
            sync_writers: AtomicUsize::new(0),
            ceilings,
            gather: options.durability == crate::Durability::Full,
            last_batch: AtomicUsize::new(0),
        });
        let (requests, queue) = mpsc::channel();
        let readers = Arc::new(Readers::new(path, options));
        let (bulk, bulk_queue) = mpsc::channel::<BulkRead>();
        let bulk_thread = thread::Builder::new()
            .name("agentmesh-sqlite-bulk-reads".into())
            .spawn(move || run_bulk_reads(&bulk_queue))
            .map_err(crate::backend)?;
        let conn = Arc::new(Mutex::new(conn));
        let db = Db { conn: Arc::clone(&conn), shared: Arc::clone(&shared), path: path.to_owned() };
        let writer = thread::Builder::new()
            .name("agentmesh-sqlite-writer".into())
            .spawn(move || run_writer(db, &queue))
            .map_err(crate::backend)?;
        Ok(Writes {
            requests: Some(requests),
            writer: Some(writer),
            shared,
            readers: Arc::clone(&readers),
            bulk: Some((bulk, bulk_thread)),
            conn: Some(conn),
        })
    }

    pub(crate) fn set_group_commit(&self, enabled: bool) {
        self.shared.group_commit.store(enabled, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> WriteStats {
        *lock(&self.shared.stats)
    }

    /// Runs `f` on a read-only connection, in one deferred transaction: it sees
    /// everything committed when it starts (every write that returned), and
    /// waits for no writer.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
        read_on(&self.readers, f)
    }

    /// Like [`Writes::read`], for a read of many rows (a whole queue listed, the
    /// counts by status): it runs on the store's bulk-read thread, whose CPU
    /// priority is below the writers' ([`BULK_READ_NICENESS`]), and this thread
    /// waits for its answer. Where busy threads outnumber cores, the writer and
    /// the callers it answers then get the CPU first, and the read takes what is
    /// left. A panic in `f` goes on in this thread.
    pub(crate) fn read_bulk<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Res<T> + Send + 'static,
    ) -> Res<T> {
        let Some((bulk, _)) = &self.bulk else { return Err(writer_gone()) };
        let (answer, answered) = mpsc::sync_channel(1);
        let readers = Arc::clone(&self.readers);
        let job: BulkRead = Box::new(move || {
            let out = panic::catch_unwind(AssertUnwindSafe(|| read_on(&readers, f)));
            let _ = answer.send(out);
        });
        bulk.send(job).map_err(|_| writer_gone())?;
        match answered.recv().map_err(|_| writer_gone())? {
            Ok(out) => out,
            Err(payload) => panic::resume_unwind(payload),
        }
    }
}

/// A read handed to the bulk-read thread.
type BulkRead = Box<dyn FnOnce() + Send>;

/// The nice value of the bulk-read thread (0 is the writers'): the kernel gives
/// it about a tenth of the CPU share of a thread at 0 when both want a core.
const BULK_READ_NICENESS: i32 = 10;

/// The bulk-read thread: lowers its own CPU priority, then runs the reads handed
/// to it until the store is dropped.
fn run_bulk_reads(queue: &Receiver<BulkRead>) {
    #[cfg(target_os = "linux")]
    if let Err(err) = rustix::process::setpriority_process(None, BULK_READ_NICENESS) {
        tracing::debug!(%err, "the bulk-read thread keeps the writers' CPU priority");
    }
    while let Ok(read) = queue.recv() {
        read();
    }
}

/// Runs `f` on one of `readers`, in one deferred transaction.
fn read_on<T>(readers: &Readers, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
    let reader = readers.take()?;
    exec(&reader, "BEGIN")?;
    let out = f(&reader);
    // A read changes nothing: ending it either way only lets its snapshot go.
    if let Err(err) = exec(&reader, "COMMIT") {
        tracing::debug!(err = %err.0, "a read's transaction did not end cleanly");
    }
    out
}

impl Writes {
    /// A write that borrows from its caller: the writer lends this thread the
    /// connection when the write's turn comes (at once, when it is the only write
    /// in flight, as in [`Writes::write_queued`]), and `f` runs here in an
    /// immediate transaction of its own. Returns once that transaction is
    /// committed (with `f`'s result) or has failed (with the failure). A panic in
    /// `f` reaches the caller, after its changes are undone.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
        let inside = Inside::enter(&self.shared.sync_writers);
        if let Some(idle) = self.uncontended(&inside) {
            return alone(&idle, &self.shared, f);
        }
        let (give, given) = mpsc::sync_channel(1);
        let (back, taken_back) = mpsc::sync_channel(1);
        self.send(Request::Lend(Lend { give, back: taken_back }))?;
        recv_lingering(&given, CALLER_LINGER).ok_or_else(writer_gone)?;
        let _turn = Turn(back);
        let conn = self.conn.as_deref().ok_or_else(writer_gone)?;
        alone(&lock(conn), &self.shared, f)
    }

    /// A write that owns what it needs: the writer thread runs it, in one
    /// transaction with the writes queued beside it, and this thread waits for
    /// the answer, given after the COMMIT.
    pub(crate) fn write_queued<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Res<T> + Send + 'static,
    ) -> Res<T> {
        // The only write in flight, nothing queued and the connection free: this
        // write would be a batch of one. It runs here, sparing the two hand-offs
        // between threads. Writers that arrive together go to the writer
        // thread, which gives them one commit.
        let inside = Inside::enter(&self.shared.sync_writers);
        if let Some(idle) = self.uncontended(&inside) {
            return alone(&idle, &self.shared, f);
        }
        let reply = Arc::new(Reply::new(Some(Waiter::Thread(thread::current()))));
        let alone = self.shared.queued.load(Ordering::Relaxed) == 0;
        self.send(Request::Write(Box::new(Queued {
            deadline: agentmesh_store::deadline::current(),
            f: Some(f),
            result: None,
            panic: None,
            reply: Arc::clone(&reply),
        })))?;
        if alone {
            let began = Instant::now();
            while began.elapsed() < CALLER_LINGER {
                if let Some(outcome) = reply.take() {
                    return outcome.answer();
                }
                thread::yield_now();
            }
        }
        loop {
            if let Some(outcome) = reply.take() {
                return outcome.answer();
            }
            thread::park();
        }
    }

    /// Like [`Writes::write_queued`], for an async caller: the returned future
    /// resolves, woken from the writer thread, with what `write_queued` would
    /// have returned. A panic of `f` goes on in whoever polls the future.
    pub(crate) fn submit_queued<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Res<T> + Send + 'static,
    ) -> Res<Submitted<T>> {
        let reply = Arc::new(Reply::new(None));
        self.send(Request::Write(Box::new(Queued {
            deadline: agentmesh_store::deadline::current(),
            f: Some(f),
            result: None,
            panic: None,
            reply: Arc::clone(&reply),
        })))?;
        Ok(Submitted { reply })
    }

    /// The write connection, when the write of the thread `inside` is the only
    /// one in flight: no other thread is writing, nothing is queued and nobody
    /// holds the connection.
    fn uncontended(&self, inside: &Inside<'_>) -> Option<MutexGuard<'_, Connection>> {
        if !inside.alone || self.shared.queued.load(Ordering::Relaxed) != 0 {
            return None;
        }
        // Where a COMMIT syncs and the writer's last batch was shared, the
        // others are on their way: the write joins their batch, and its sync.
        if self.shared.gather && self.shared.last_batch.load(Ordering::Relaxed) > 1 {
            return None;
        }
        self.conn.as_deref().and_then(try_lock)
    }

    fn send(&self, request: Request) -> Res<()> {
        let requests = self.requests.as_ref().ok_or_else(writer_gone)?;
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        requests.send(request).map_err(|_| writer_gone())
    }
}

impl Drop for Writes {
    /// Closes the readers, then lets the writer thread finish what is queued and
    /// close the write connection (should it be the file's last, SQLite then
    /// checkpoints and removes the WAL, unless there is no room for it).
    fn drop(&mut self) {
        if let Some((bulk, thread)) = self.bulk.take() {
            drop(bulk);
            if thread.thread().id() != thread::current().id() && thread.join().is_err() {
                tracing::error!("the SQLite bulk-read thread panicked");
            }
        }
        lock(&self.readers.idle).clear();
        drop(self.conn.take());
        drop(self.requests.take());
        let Some(writer) = self.writer.take() else { return };
        // The last handle may go from the writer thread itself (a woken task
        // dropped there): it then ends on its own, once this drop returns.
        if writer.thread().id() != thread::current().id() && writer.join().is_err() {
            tracing::error!("the SQLite writer thread panicked");
        }
    }
}

fn writer_gone() -> Fail {
    Fail(StoreError::Backend("the store's writer thread is gone".into()))
}

/// What the writer thread is asked to do.
enum Request {
    /// Run a write that owns its operation.
    Write(Box<dyn Job>),
    /// Lend the connection to the thread of a write that borrows.
    Lend(Lend),
}

/// A loan of the connection: the writer says through `give` that the
/// borrower's turn has come, and waits on `back` until it is over.
struct Lend {
    give: SyncSender<()>,
    back: Receiver<()>,
}

/// A borrower's turn with the connection; over when dropped, also by a panic.
struct Turn(SyncSender<()>);

impl Drop for Turn {
    fn drop(&mut self) {
        // The writer waits for it; it is gone only when the store is.
        let _ = self.0.send(());
    }
}

/// The writer thread: takes a request, and what else is queued, runs the batch
/// and answers; ends once the store is dropped and the queue is empty, closing
/// the connection.
fn run_writer(db: Db, queue: &Receiver<Request>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH_WRITES);
    loop {
        let Some(first) = recv_lingering(queue, WRITER_LINGER) else { break };
        db.shared.queued.fetch_sub(1, Ordering::Relaxed);
        let mut lend = None;
        match first {
            Request::Write(job) => batch.push(job),
            Request::Lend(loan) => lend = Some(loan),
        }
        let began = Instant::now();
        while lend.is_none() && batch.len() < MAX_BATCH_WRITES {
            let request = match queue.try_recv() {
                Ok(request) => request,
                // Callers still on their way to the queue share the sync if
                // the batch waits a moment for them.
                Err(_)
                    if db.shared.gather
                        && (db.shared.sync_writers.load(Ordering::Acquire) > batch.len()
                            || db.shared.last_batch.load(Ordering::Relaxed) > batch.len())
                        && began.elapsed() < GATHER_WAIT =>
                {
                    thread::yield_now();
                    continue;
                }
                Err(_) => break,
            };
            db.shared.queued.fetch_sub(1, Ordering::Relaxed);
            match request {
                Request::Write(job) => batch.push(job),
                Request::Lend(loan) => lend = Some(loan),
            }
        }
        if !batch.is_empty() {
            db.shared.last_batch.store(batch.len(), Ordering::Relaxed);
            db.run_batch(&lock(&db.conn), std::mem::take(&mut batch));
        }
        if let Some(loan) = lend {
            lend_out(&loan);
        }
    }
    crate::space::before_close(&lock(&db.conn), &db.path);
}

/// The next message, looked for during `linger` while yielding the core, then
/// waited for asleep; `None` once the sender is gone.
fn recv_lingering<T>(rx: &Receiver<T>, linger: Duration) -> Option<T> {
    let began = Instant::now();
    while began.elapsed() < linger {
        match rx.try_recv() {
            Ok(message) => return Some(message),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => thread::yield_now(),
        }
    }
    rx.recv().ok()
}

/// Gives a borrower its turn with the connection and waits until it is over
/// (or the borrower stopped waiting before it began).
fn lend_out(loan: &Lend) {
    if loan.give.send(()).is_ok() {
        recv_lingering(&loan.back, WRITER_LINGER);
    }
}

/// A write's operation and the way to its caller.
trait Job: Send {
    /// Runs the operation; `None` when it succeeded, why it failed otherwise.
    fn run(&mut self, conn: &Connection) -> Option<Failure>;
    /// Answers the caller, once the operation's transaction is closed.
    fn end(self: Box<Self>, end: End);
    /// The deadline of the request the write serves, if it has one.
    fn deadline(&self) -> Option<Instant>;
}

struct Queued<F, T> {
    /// The submitting thread's deadline ([`agentmesh_store::deadline`]).
    deadline: Option<Instant>,
    f: Option<F>,
    result: Option<Res<T>>,
    panic: Option<Box<dyn Any + Send>>,
    reply: Arc<Reply<T>>,
}

impl<F, T> Job for Queued<F, T>
where
    F: FnOnce(&Connection) -> Res<T> + Send,
    T: Send,
{
    fn run(&mut self, conn: &Connection) -> Option<Failure> {
        let f = self.f.take()?;
        match panic::catch_unwind(AssertUnwindSafe(|| f(conn))) {
            Ok(out) => {
                let failure = out.as_ref().err().map(|e| Failure::of(&e.0));
                self.result = Some(out);
                failure
            }
            Err(payload) => {
                self.panic = Some(payload);
                Some(Failure::panicked())
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn end(self: Box<Self>, end: End) {
        let Queued { result, panic, reply, .. } = *self;
        let outcome = match (panic, end) {
            (Some(payload), _) => Outcome::Panicked(payload),
            (None, End::Failed(err)) => Outcome::Done(Err(Fail(err))),
            (None, End::Ran) => {
                Outcome::Done(result.unwrap_or_else(|| Err(Fail(Failure::rolled_back().error()))))
            }
        };
        reply.give(outcome);
    }
}

/// How a write's transaction ended.
enum End {
    /// It ran and its transaction committed (or it failed alone): its own result
    /// is the answer.
    Ran,
    /// It did not run, or its transaction failed.
    Failed(StoreError),
}

/// A write's answer, on its way from the writer thread to its caller.
enum Outcome<T> {
    Done(Res<T>),
    /// The operation panicked; the panic goes on in the caller.
    Panicked(Box<dyn Any + Send>),
}

impl<T> Outcome<T> {
    fn answer(self) -> Res<T> {
        match self {
            Outcome::Done(out) => out,
            Outcome::Panicked(payload) => panic::resume_unwind(payload),
        }
    }
}

/// Who waits for a reply.
enum Waiter {
    /// A thread, parked until the reply is there.
    Thread(Thread),
    /// An async task, through the waker it last polled with.
    Task(Waker),
}

/// Where the writer leaves a write's answer.
struct Reply<T> {
    state: Mutex<(Option<Outcome<T>>, Option<Waiter>)>,
}

impl<T> Reply<T> {
    fn new(waiter: Option<Waiter>) -> Reply<T> {
        Reply { state: Mutex::new((None, waiter)) }
    }

    fn give(&self, outcome: Outcome<T>) {
        let waiter = {
            let mut state = lock(&self.state);
            state.0 = Some(outcome);
            state.1.take()
        };
        match waiter {
            Some(Waiter::Thread(thread)) => thread.unpark(),
            Some(Waiter::Task(waker)) => waker.wake(),
            None => {}
        }
    }

    fn take(&self) -> Option<Outcome<T>> {
        lock(&self.state).0.take()
    }
}

/// A submitted write, until its transaction is closed.
pub(crate) struct Submitted<T> {
    reply: Arc<Reply<T>>,
}

impl<T> Future for Submitted<T> {
    type Output = Res<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Res<T>> {
        let mut state = lock(&self.reply.state);
        match state.0.take() {
            Some(outcome) => {
                drop(state);
                Poll::Ready(outcome.answer())
            }
            None => {
                state.1 = Some(Waiter::Task(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

/// Locks `mutex`, also when poisoned: nothing holding these locks leaves them
/// inconsistent (operations run under `catch_unwind`, outside every lock).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs one statement through the statement cache: `Transaction` would parse
/// BEGIN and COMMIT again for every write.
fn exec(conn: &Connection, sql: &str) -> Res<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// What the writer thread works with.
struct Db {
    /// Locked by whoever uses it: the writer thread for a batch, a borrowing
    /// write for its transaction, an uncontended write or a point read while
    /// nobody else does.
    conn: Arc<Mutex<Connection>>,
    shared: Arc<Shared>,
    /// The database file.
    path: PathBuf,
}

impl Db {
    /// Runs `jobs` in as few transactions as their outcomes allow, and answers
    /// each once the transaction it ran in is closed.
    fn run_batch(&self, conn: &Connection, jobs: Vec<Box<dyn Job>>) {
        let group = self.shared.group_commit.load(Ordering::Relaxed);
        let mut txn = Txn::default();
        for mut job in jobs {
            if !txn.open {
                // The wait for another process's write lock ends with the
                // deadline of the request this write serves.
                let began =
                    agentmesh_store::deadline::within(job.deadline(), || exec(conn, "BEGIN IMMEDIATE"));
                if let Err(Fail(err)) = began {
                    job.end(End::Failed(err));
                    continue;
                }
                txn.open = true;
            }
            let first = txn.jobs.is_empty();
            if !first && let Err(Fail(err)) = exec(conn, "SAVEPOINT op") {
                job.end(End::Failed(err));
                continue;
            }
            let failure = job.run(conn);
            let succeeded = failure.is_none();
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (some errors do).
                txn.jobs.push(job);
                txn.fail(conn, &failure.unwrap_or_else(Failure::rolled_back));
                continue;
            }
            let ended = match (first, failure) {
                (true, None) => Ok(()),
                (false, None) => exec(conn, "RELEASE op"),
                (true, Some(_)) => {
                    // Alone in its transaction: undo all of it; the operation's own
                    // result (an error) is its answer.
                    rollback(conn);
                    txn.open = false;
                    job.end(End::Ran);
                    continue;
                }
                (false, Some(_)) => exec(conn, "ROLLBACK TO op").and_then(|()| exec(conn, "RELEASE op")),
            };
            txn.jobs.push(job);
            match ended {
                Ok(()) => txn.succeeded += u64::from(succeeded),
                Err(Fail(err)) => {
                    txn.fail(conn, &Failure::of(&err));
                    continue;
                }
            }
            if !group {
                txn.commit(self, conn);
            }
        }
        if txn.open {
            txn.commit(self, conn);
        }
    }
}

impl Shared {
    fn count_committed(&self, writes: u64) {
        let mut stats = lock(&self.stats);
        stats.commits += 1;
        stats.writes += writes;
    }
}

/// Runs `f` in an immediate transaction of its own on the connection held, and
/// commits it. Returns once that transaction is committed (with `f`'s result) or
/// has failed (with the failure). A panic in `f` goes on, after its changes are
/// undone.
fn alone<T>(conn: &Connection, shared: &Shared, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
    exec(conn, "BEGIN IMMEDIATE")?;
    let out = match panic::catch_unwind(AssertUnwindSafe(|| f(conn))) {
        Ok(out) => out,
        Err(payload) => {
            rollback(conn);
            panic::resume_unwind(payload);
        }
    };
    if conn.is_autocommit() {
        // SQLite rolled the transaction back (some errors do).
        return Err(out.err().unwrap_or_else(|| Fail(Failure::rolled_back().error())));
    }
    match out {
        Ok(value) => {
            match shared.ceilings.before_commit(conn).and_then(|seen| Ok((seen, exec(conn, "COMMIT")?))) {
                Ok((seen, ())) => {
                    shared.count_committed(1);
                    shared.ceilings.after_commit(conn, seen)?;
                    Ok(value)
                }
                Err(Fail(err)) => {
                    rollback(conn);
                    Err(Fail(Failure::of(&err).error()))
                }
            }
        }
        Err(err) => {
            rollback(conn);
            Err(err)
        }
    }
}

/// A thread counted in [`Shared::sync_writers`] while it holds this.
struct Inside<'a> {
    count: &'a AtomicUsize,
    /// Whether no other thread was counted when this one entered.
    alone: bool,
}

impl<'a> Inside<'a> {
    fn enter(count: &'a AtomicUsize) -> Inside<'a> {
        let before = count.fetch_add(1, Ordering::AcqRel);
        Inside { count, alone: before == 0 }
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The write connection if nobody holds it (a lock poisoned by a panic is
/// taken over: every transaction is closed before the lock is let go).
fn try_lock(conn: &Mutex<Connection>) -> Option<MutexGuard<'_, Connection>> {
    match conn.try_lock() {
        Ok(held) => Some(held),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Rolls back the open transaction of the write connection, unless SQLite
/// already did.
fn rollback(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(err) = conn.execute_batch("ROLLBACK")
    {
        tracing::error!(%err, "rollback failed");
    }
}

/// The transaction a batch has open, and the jobs that ran in it.
#[derive(Default)]
struct Txn {
    open: bool,
    jobs: Vec<Box<dyn Job>>,
    /// Jobs whose operation succeeded: their changes commit with the transaction.
    succeeded: u64,
}

impl Txn {
    /// Commits, and gives every job its own result; if the COMMIT fails, rolls back
    /// and gives every job the failure.
    fn commit(&mut self, db: &Db, conn: &Connection) {
        match db.shared.ceilings.before_commit(conn).and_then(|seen| Ok((seen, exec(conn, "COMMIT")?))) {
            Ok((seen, ())) => {
                db.shared.count_committed(self.succeeded);
                // Committed, but a number in it may not be below a synced
                // ceiling yet: nobody is answered before it is.
                let settled = db.shared.ceilings.after_commit(conn, seen);
                for job in self.jobs.drain(..) {
                    job.end(match &settled {
                        Ok(()) => End::Ran,
                        Err(Fail(err)) => End::Failed(Failure::of(err).error()),
                    });
                }
                self.open = false;
                self.succeeded = 0;
            }
            Err(Fail(err)) => self.fail(conn, &Failure::of(&err)),
        }
    }

    /// Rolls back (unless SQLite already did) and gives every job the failure.
    fn fail(&mut self, conn: &Connection, failure: &Failure) {
        rollback(conn);
        for job in self.jobs.drain(..) {
            job.end(End::Failed(failure.error()));
        }
        self.open = false;
        self.succeeded = 0;
    }
}

/// The read-only connections, opened as reads need them.
struct Readers {
    path: PathBuf,
    options: OpenOptions,
    idle: Mutex<Vec<Connection>>,
    /// Connections open, idle or lent to a read.
    open: Mutex<usize>,
    returned: Condvar,
}

/// A read-only connection lent to one read; back to the pool when dropped.
struct Reader<'a> {
    conn: Option<Connection>,
    readers: &'a Readers,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("held until dropped")
    }
}

impl Readers {
    fn new(path: &Path, options: &OpenOptions) -> Readers {
        Readers {
            path: path.to_owned(),
            options: options.clone(),
            idle: Mutex::new(Vec::new()),
            open: Mutex::new(0),
            returned: Condvar::new(),
        }
    }

    /// An idle connection, a new one while fewer than [`MAX_READERS`] are open,
    /// or the first one given back.
    fn take(&self) -> Res<Reader<'_>> {
        loop {
            if let Some(conn) = lock(&self.idle).pop() {
                return Ok(Reader { conn: Some(conn), readers: self });
            }
            let mut open = lock(&self.open);
            if *open < MAX_READERS {
                *open += 1;
                drop(open);
                return match open_reader(&self.path, &self.options) {
                    Ok(conn) => Ok(Reader { conn: Some(conn), readers: self }),
                    Err(err) => {
                        *lock(&self.open) -= 1;
                        Err(err)
                    }
                };
            }
            // Given back connections go to `idle` under `open`'s lock, so none is
            // missed between the look above and this wait.
            if lock(&self.idle).is_empty() {
                drop(self.returned.wait(open).unwrap_or_else(|e| e.into_inner()));
            }
        }
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // A read that panicked may have left its transaction open.
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let _open = lock(&self.readers.open);
        lock(&self.readers.idle).push(conn);
        self.readers.returned.notify_one();
    }
}

/// A read-only connection to `path` with the store's per-connection settings.
fn open_reader(path: &Path, options: &OpenOptions) -> Res<Connection> {
    let flags =
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let mut conn = options.connect(path, flags)?;
    crate::configure_connection(&mut conn, options)?;
    crate::archive::attach_readable(&conn, path)?;
    Ok(conn)
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
        let message = crate::with_causes(cause);
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
    //! The writer step by step. A test that needs writes to share a batch holds
    //! the writer inside an operation until they are queued, so which writes share
    //! a transaction is decided by the test, never by timing.

    use std::sync::atomic::AtomicUsize;

    use agentmesh_store::submit::wait;

    use super::*;

    /// Writes on a temp file with a `notes` table.
    fn writes() -> (tempfile::TempDir, Writes) {
        writes_with("PRAGMA journal_mode = WAL; CREATE TABLE notes (note TEXT PRIMARY KEY)")
    }

    /// Writes on a temp file made by `schema`.
    fn writes_with(schema: &str) -> (tempfile::TempDir, Writes) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("notes.db")).unwrap();
        conn.execute_batch(schema).unwrap();
        let options = OpenOptions::default();
        let writes =
            Writes::new(conn, &dir.path().join("notes.db"), &options, Arc::new(Ceilings::none())).unwrap();
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

    /// Holds the writer thread inside an operation (which notes `held`) until the
    /// returned sender is used or dropped.
    fn hold_writer(writes: &Writes) -> (SyncSender<()>, Submitted<()>) {
        let (release, released) = mpsc::sync_channel(0);
        let (started, running) = mpsc::sync_channel(0);
        let held = writes
            .submit_queued(move |c| {
                note(c, "held")?;
                started.send(()).unwrap();
                let _ = released.recv();
                Ok(())
            })
            .unwrap();
        running.recv().unwrap();
        (release, held)
    }

    /// Waits until `n` requests are queued for the writer.
    fn until_queued(writes: &Writes, n: usize) {
        while writes.shared.queued.load(Ordering::Relaxed) < n {
            thread::yield_now();
        }
    }

    #[test]
    fn an_uncontended_writer_commits_every_write_on_its_own() {
        let (dir, writes) = writes();
        writes.write(|c| note(c, "a")).unwrap();
        assert_eq!(committed_notes(&dir), ["a"], "a lent write is committed when it returns");
        writes.write_queued(|c| note(c, "b")).unwrap();
        assert_eq!(committed_notes(&dir), ["a", "b"], "a queued write is committed when it returns");
        assert_eq!(writes.stats(), WriteStats { writes: 2, commits: 2 });
    }

    #[test]
    fn an_uncontended_write_runs_on_its_callers_thread_and_a_contended_one_on_the_writers() {
        let (dir, writes) = writes();
        let on = |name: &'static str| {
            move |c: &Connection| -> Res<thread::ThreadId> {
                note(c, name)?;
                Ok(thread::current().id())
            }
        };
        assert_eq!(writes.write_queued(on("alone")).unwrap(), thread::current().id());
        let (release, held) = hold_writer(&writes);
        thread::scope(|s| {
            let caller = s.spawn(|| (thread::current().id(), writes.write_queued(on("queued"))));
            until_queued(&writes, 1);
            drop(release);
            wait(held).unwrap();
            let (caller, ran_on) = caller.join().unwrap();
            assert_ne!(ran_on.unwrap(), caller, "it found the connection held, so the writer ran it");
        });
        assert_eq!(committed_notes(&dir), ["alone", "held", "queued"]);
        assert_eq!(writes.stats(), WriteStats { writes: 3, commits: 3 });
    }

    #[cfg(unix)]
    #[test]
    fn a_bulk_read_runs_on_a_thread_below_the_writers_priority_and_its_panic_reaches_its_caller() {
        let (_dir, writes) = writes();
        writes.write_queued(|c| note(c, "a")).unwrap();
        let (count, ran_on, nice) = writes
            .read_bulk(|c| {
                let count: i64 = c.query_row("SELECT COUNT(*) FROM notes", [], |r| r.get(0))?;
                Ok((count, thread::current().id(), rustix::process::getpriority_process(None).ok()))
            })
            .unwrap();
        assert_eq!(count, 1, "it sees what was committed");
        assert_ne!(ran_on, thread::current().id());
        if cfg!(target_os = "linux") {
            let nice = nice.expect("the thread's nice value");
            assert!(nice >= BULK_READ_NICENESS, "nice {nice}");
        }
        let panicked = panic::catch_unwind(AssertUnwindSafe(|| {
            writes.read_bulk(|_| -> Res<()> { panic!("a bulk read that panics") })
        }));
        assert!(panicked.is_err(), "the panic reaches the caller");
        assert_eq!(
            writes
                .read_bulk(|c| Ok(c.query_row("SELECT COUNT(*) FROM notes", [], |r| r.get::<_, i64>(0))?))
                .unwrap(),
            1
        );
    }

    #[test]
    fn writes_queued_behind_a_running_batch_share_the_next_commit() {
        let (dir, writes) = writes();
        let (release, held) = hold_writer(&writes);
        thread::scope(|s| {
            let handles: Vec<_> = ["a", "b", "c"]
                .into_iter()
                .enumerate()
                .map(|(i, n)| {
                    let writes = &writes;
                    let h = s.spawn(move || writes.write_queued(move |c| note(c, n)));
                    until_queued(writes, i + 1);
                    h
                })
                .collect();
            assert!(committed_notes(&dir).is_empty(), "nothing is committed while the writer is held");
            drop(release);
            wait(held).unwrap();
            for h in handles {
                h.join().unwrap().unwrap();
            }
        });
        assert_eq!(committed_notes(&dir), ["a", "b", "c", "held"]);
        assert_eq!(writes.stats(), WriteStats { writes: 4, commits: 2 });
    }

    #[test]
    fn a_failing_write_in_a_batch_is_undone_alone_and_every_operation_runs_once() {
        let (dir, writes) = writes();
        writes.write(|c| note(c, "taken")).unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = |name: &'static str| {
            let runs = Arc::clone(&runs);
            move |c: &Connection| -> Res<()> {
                runs.fetch_add(1, Ordering::Relaxed);
                note(c, name)?;
                if name.starts_with("fail") {
                    note(c, "taken")?; // A duplicate: the operation fails after writing.
                }
                Ok(())
            }
        };
        let (release, held) = hold_writer(&writes);
        // The batch after the held one: a failing write first (undone with the
        // whole transaction, then empty), then a, a failing one, and c.
        let batch: Vec<_> = ["fail first", "a", "fail later", "c"]
            .into_iter()
            .map(|n| writes.submit_queued(counted(n)).unwrap())
            .collect();
        drop(release);
        wait(held).unwrap();
        let results: Vec<_> = batch.into_iter().map(wait).collect();
        assert!(results[0].is_err(), "the first write of the batch fails alone");
        assert!(results[1].is_ok() && results[3].is_ok(), "its batch-mates commit: {results:?}");
        assert!(results[2].is_err(), "a later write of the batch fails alone");
        assert_eq!(runs.load(Ordering::Relaxed), 4, "no operation ran twice");
        assert_eq!(committed_notes(&dir), ["a", "c", "held", "taken"], "no half of a failed write is left");
        assert_eq!(writes.stats(), WriteStats { writes: 4, commits: 3 }, "a and c shared one commit");
    }

    #[test]
    fn a_panicking_write_is_undone_alone_and_its_panic_reaches_its_caller() {
        let (dir, writes) = writes();
        let (release, held) = hold_writer(&writes);
        let a = writes.submit_queued(|c| note(c, "a")).unwrap();
        let b = writes
            .submit_queued(|c| -> Res<()> {
                note(c, "b")?;
                panic!("b's operation panics inside a's batch");
            })
            .unwrap();
        let c = writes.submit_queued(|c| note(c, "c")).unwrap();
        drop(release);
        wait(held).unwrap();
        assert!(panic::catch_unwind(AssertUnwindSafe(|| wait(b))).is_err(), "the panic reaches b's caller");
        assert!(wait(a).is_ok() && wait(c).is_ok());
        assert_eq!(committed_notes(&dir), ["a", "c", "held"]);

        let alone = panic::catch_unwind(AssertUnwindSafe(|| {
            writes.write(|c| -> Res<()> {
                note(c, "d")?;
                panic!("d's operation panics on its caller's thread");
            })
        }));
        assert!(alone.is_err());
        writes.write(|c| note(c, "e")).expect("the connection came back to the writer");
        writes.write_queued(|c| note(c, "f")).unwrap();
        assert_eq!(committed_notes(&dir), ["a", "c", "e", "f", "held"]);
    }

    #[test]
    fn a_failed_commit_fails_every_write_of_its_batch() {
        let (dir, writes) = writes_with(
            "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; CREATE TABLE notes (note TEXT PRIMARY KEY);
             CREATE TABLE parents (id INTEGER PRIMARY KEY);
             CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);",
        );
        let (release, held) = hold_writer(&writes);
        let a = writes.submit_queued(|c| note(c, "a")).unwrap();
        // A deferred foreign key is checked by COMMIT, so b's operation succeeds
        // and the COMMIT of the batch fails.
        let b = writes
            .submit_queued(|c| Ok(c.execute("INSERT INTO children (parent) VALUES (42)", [])?))
            .unwrap();
        drop(release);
        wait(held).unwrap();
        let a_err = wait(a).expect_err("a's write shared the failed commit");
        assert!(wait(b).is_err(), "the COMMIT of b's batch failed");
        let message = std::error::Error::source(&a_err.0).map(ToString::to_string).unwrap_or_default();
        assert!(message.contains("not committed") && message.contains("FOREIGN KEY"), "{message}");
        assert_eq!(committed_notes(&dir), ["held"]);
        writes.write_queued(|c| note(c, "after")).unwrap();
        assert_eq!(committed_notes(&dir), ["after", "held"]);
    }

    #[test]
    fn a_read_is_answered_while_the_writer_holds_a_transaction_open() {
        let (dir, writes) = writes();
        writes.write_queued(|c| note(c, "before")).unwrap();
        let (release, held) = hold_writer(&writes);
        // The writer is inside its transaction, holding SQLite's write lock, with
        // "held" written and not committed.
        let read = thread::scope(|s| {
            s.spawn(|| {
                writes.read(|c| {
                    Ok(c.query_row("SELECT group_concat(note) FROM notes", [], |r| r.get::<_, String>(0))?)
                })
            })
            .join()
            .unwrap()
        });
        assert_eq!(read.unwrap(), "before", "the read saw what was committed, and did not wait");
        drop(release);
        wait(held).unwrap();
        assert_eq!(committed_notes(&dir), ["before", "held"]);
    }

    #[test]
    fn a_write_is_seen_by_every_read_once_it_returned() {
        let (_dir, writes) = writes();
        let count = |w: &Writes| {
            w.read(|c| Ok(c.query_row("SELECT count(*) FROM notes", [], |r| r.get::<_, i64>(0))?))
        };
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            // Readers busy beside the writes, so the pool holds several connections.
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        count(&writes).unwrap();
                    }
                });
            }
            for i in 0..200_i64 {
                match i % 3 {
                    0 => writes.write_queued(move |c| note(c, &format!("n{i}"))).unwrap(),
                    1 => wait(writes.submit_queued(move |c| note(c, &format!("n{i}"))).unwrap()).unwrap(),
                    _ => writes.write(|c| note(c, &format!("n{i}"))).unwrap(),
                }
                assert_eq!(count(&writes).unwrap(), i + 1, "write {i} is seen as soon as it returned");
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn a_read_cannot_write() {
        let (dir, writes) = writes();
        assert!(writes.read(|c| note(c, "sneaky")).is_err());
        assert!(committed_notes(&dir).is_empty());
    }

    #[test]
    fn a_dropped_store_finishes_its_queue_and_closes_the_file() {
        let (dir, writes) = writes();
        let submitted = writes.submit_queued(|c| note(c, "last")).unwrap();
        drop(writes);
        wait(submitted).expect("a write queued before the drop is still run");
        assert_eq!(committed_notes(&dir), ["last"]);
        assert!(
            !dir.path().join("notes.db-wal").exists(),
            "the last connection checkpointed and removed the WAL"
        );
    }

    #[test]
    fn with_group_commit_off_every_write_commits_on_its_own() {
        let (dir, writes) = writes();
        writes.set_group_commit(false);
        let (release, held) = hold_writer(&writes);
        let queued: Vec<_> =
            ["a", "b", "c"].into_iter().map(|n| writes.submit_queued(move |c| note(c, n)).unwrap()).collect();
        drop(release);
        wait(held).unwrap();
        for q in queued {
            wait(q).unwrap();
        }
        assert_eq!(committed_notes(&dir), ["a", "b", "c", "held"]);
        assert_eq!(writes.stats(), WriteStats { writes: 4, commits: 4 });
    }
}
