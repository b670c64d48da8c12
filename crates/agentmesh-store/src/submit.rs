//! Writes submitted without holding the caller's thread.
//!
//! The [`Store`](crate::Store) trait is synchronous, so an async caller (the
//! daemon) would otherwise park one thread per write in flight. The hot-path
//! writes (claim, completion, heartbeat) can also be submitted ([`TaskWrite`]):
//! that hands the write to the store and returns a [`Submitted`] future that
//! resolves once the write's transaction is closed, exactly when the synchronous
//! call would have returned, with the same result. A backend that runs writes on
//! a thread of its own completes the future from there (the SQLite store's
//! writer); the PostgreSQL store runs the synchronous call on a fixed set of
//! [`Workers`] (one thread per pooled connection); the trait's default runs it
//! on a fresh thread.
//!
//! The future is independent of any executor: it only stores the waker it was
//! polled with and is woken through it. Dropping it does not cancel the write.
//! The submitting thread's [deadline](crate::deadline) goes with the write.

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use agentmesh_core::{Claimant, Task, Timestamp};

use crate::{ClaimOptions, ClaimOutcome, CompletionReport, Heartbeat, QueueStore, StoreResult};

/// A write in flight: resolves to its result once its transaction is closed. A
/// panic of the write's operation goes on in whoever polls it.
pub type Submitted<T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send>>;

/// A result on its way from the thread that produces it to the task that awaits
/// it.
fn handoff<T>() -> (Giver<T>, Taker<T>) {
    let shared = Arc::new(Mutex::new(Handoff { outcome: None, waker: None }));
    (Giver { shared: Arc::clone(&shared), given: false }, Taker { shared })
}

/// A fixed set of threads that run submitted writes, for a backend whose
/// writes block their thread (a server round trip): however many writes are in
/// flight, no more threads than this run them, and none is started per write.
/// The threads start on the first write and end once every clone of the set is
/// dropped and the writes already handed over ran.
#[derive(Clone)]
pub struct Workers(Arc<Threads>);

struct Threads {
    name: &'static str,
    size: usize,
    queue: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Job>>>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Workers {
    /// A set of `size` threads (at least one) named `name`.
    pub fn new(name: &'static str, size: usize) -> Workers {
        Workers(Arc::new(Threads { name, size, queue: std::sync::OnceLock::new() }))
    }

    /// Hands `write` to the next free thread; the future resolves with its
    /// result, as [`on_thread`]'s does.
    pub fn submit<T: Send + 'static>(
        &self,
        write: impl FnOnce() -> StoreResult<T> + Send + 'static,
    ) -> Submitted<T> {
        let (giver, taker) = handoff();
        let deadline = crate::deadline::current();
        let job: Job = Box::new(move || {
            giver.give(panic::catch_unwind(AssertUnwindSafe(|| crate::deadline::within(deadline, write))));
        });
        match self.0.queue.get_or_init(|| self.0.start()) {
            Some(queue) if queue.send(job).is_ok() => Box::pin(taker),
            _ => Box::pin(std::future::ready(Err(crate::StoreError::Backend(
                format!("no {} thread could be started", self.0.name).into(),
            )))),
        }
    }
}

/// A hot-path task write, as [`QueueStore::submit_task_write`]
/// takes it: each variant is the synchronous operation of the same name.
#[derive(Debug, Clone)]
pub enum TaskWrite {
    /// [`QueueStore::claim_next`].
    Claim {
        /// Who claims.
        claimant: Claimant,
        /// The claim's options.
        opts: ClaimOptions,
    },
    /// [`QueueStore::complete_task`].
    Complete(CompletionReport),
    /// [`QueueStore::heartbeat`].
    Heartbeat(Heartbeat),
    /// [`QueueStore::complete_and_claim`].
    CompleteAndClaim {
        /// The report of the task done.
        report: CompletionReport,
        /// Who claims next.
        claimant: Claimant,
        /// The claim's options.
        opts: ClaimOptions,
    },
}

/// What a [`TaskWrite`] answered: the answer of its synchronous operation. It
/// is moved once, from the write's thread to its waiter, so its size is left
/// unboxed.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum TaskWritten {
    /// A claim's outcome.
    Claimed(ClaimOutcome),
    /// The task as a completion or a heartbeat left it.
    Task(Task),
    /// A completion's task and the next claim's outcome.
    CompletedAndClaimed(Task, ClaimOutcome),
}

impl TaskWrite {
    /// Runs the write through the store's synchronous operation.
    pub fn run<S: QueueStore + ?Sized>(
        self,
        store: &S,
        mesh_id: &str,
        now: Timestamp,
    ) -> StoreResult<TaskWritten> {
        Ok(match self {
            TaskWrite::Claim { claimant, opts } => {
                TaskWritten::Claimed(store.claim_next(mesh_id, &claimant, &opts, now)?)
            }
            TaskWrite::Complete(report) => TaskWritten::Task(store.complete_task(mesh_id, &report, now)?),
            TaskWrite::Heartbeat(beat) => TaskWritten::Task(store.heartbeat(mesh_id, &beat, now)?),
            TaskWrite::CompleteAndClaim { report, claimant, opts } => {
                let (task, next) = store.complete_and_claim(mesh_id, &report, &claimant, &opts, now)?;
                TaskWritten::CompletedAndClaimed(task, next)
            }
        })
    }
}

/// Submits a claim ([`TaskWrite::Claim`]) and resolves to its outcome.
pub fn claim<S: QueueStore + ?Sized>(
    store: Arc<S>,
    mesh_id: String,
    claimant: Claimant,
    opts: ClaimOptions,
    now: Timestamp,
) -> Submitted<ClaimOutcome> {
    let submitted = store.submit_task_write(mesh_id, TaskWrite::Claim { claimant, opts }, now);
    Box::pin(async move {
        match submitted.await? {
            TaskWritten::Claimed(outcome) => Ok(outcome),
            other => Err(mismatch(&other)),
        }
    })
}

/// Submits a completion ([`TaskWrite::Complete`]) or a heartbeat
/// ([`TaskWrite::Heartbeat`]) and resolves to the task as it left it.
pub fn task<S: QueueStore + ?Sized>(
    store: Arc<S>,
    mesh_id: String,
    write: TaskWrite,
    now: Timestamp,
) -> Submitted<Task> {
    let submitted = store.submit_task_write(mesh_id, write, now);
    Box::pin(async move {
        match submitted.await? {
            TaskWritten::Task(task) => Ok(task),
            other => Err(mismatch(&other)),
        }
    })
}

/// Submits a completion and the next claim ([`TaskWrite::CompleteAndClaim`]).
pub fn complete_and_claim<S: QueueStore + ?Sized>(
    store: Arc<S>,
    mesh_id: String,
    report: CompletionReport,
    claimant: Claimant,
    opts: ClaimOptions,
    now: Timestamp,
) -> Submitted<(Task, ClaimOutcome)> {
    let submitted =
        store.submit_task_write(mesh_id, TaskWrite::CompleteAndClaim { report, claimant, opts }, now);
    Box::pin(async move {
        match submitted.await? {
            TaskWritten::CompletedAndClaimed(task, next) => Ok((task, next)),
            other => Err(mismatch(&other)),
        }
    })
}

/// A backend answered a write with the answer of another kind of write.
fn mismatch(answer: &TaskWritten) -> crate::StoreError {
    crate::StoreError::Backend(format!("a submitted write was answered with {answer:?}").into())
}

impl Threads {
    /// Starts the threads; `None` when not one could be started.
    fn start(&self) -> Option<std::sync::mpsc::Sender<Job>> {
        let (send, receive) = std::sync::mpsc::channel::<Job>();
        let receive = Arc::new(Mutex::new(receive));
        let mut started = 0;
        for _ in 0..self.size.max(1) {
            let receive = Arc::clone(&receive);
            let spawned = std::thread::Builder::new().name(self.name.to_owned()).spawn(move || {
                loop {
                    // The lock is held only while waiting for the next job.
                    let job = receive.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            });
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then_some(send)
    }
}

/// Runs `write` on a new thread and resolves to what it returned: how a store
/// without a writer of its own submits a write.
pub fn on_thread<T: Send + 'static>(write: impl FnOnce() -> StoreResult<T> + Send + 'static) -> Submitted<T> {
    let (giver, taker) = handoff();
    let deadline = crate::deadline::current();
    let spawned = std::thread::Builder::new().name("agentmesh-write".into()).spawn(move || {
        giver.give(panic::catch_unwind(AssertUnwindSafe(|| crate::deadline::within(deadline, write))));
    });
    match spawned {
        Ok(_) => Box::pin(taker),
        Err(err) => Box::pin(std::future::ready(Err(crate::StoreError::Backend(Box::new(err))))),
    }
}

/// Waits for `fut` on this thread, parking it between polls (the waker unparks
/// it): how a synchronous caller waits for a submitted write.
pub fn wait<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

struct Handoff<T> {
    /// The write's result, or the payload of its panic.
    outcome: Option<std::thread::Result<StoreResult<T>>>,
    waker: Option<Waker>,
}

fn lock<T>(shared: &Mutex<Handoff<T>>) -> MutexGuard<'_, Handoff<T>> {
    // Nothing panics while holding this lock (wakers are woken after it is let go).
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The producing side of a [`handoff`].
struct Giver<T> {
    shared: Arc<Mutex<Handoff<T>>>,
    given: bool,
}

impl<T> Giver<T> {
    /// Hands the result over and wakes the task awaiting it.
    fn give(mut self, outcome: std::thread::Result<StoreResult<T>>) {
        self.given = true;
        let waker = {
            let mut shared = lock(&self.shared);
            shared.outcome = Some(outcome);
            shared.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Drop for Giver<T> {
    /// A giver dropped without giving (its thread died) still ends the wait.
    fn drop(&mut self) {
        if !self.given {
            let waker = {
                let mut shared = lock(&self.shared);
                shared.outcome = Some(Err(Box::new("the write ended without a result")));
                shared.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// The awaiting side of a [`handoff`]: a future of the write's result.
struct Taker<T> {
    shared: Arc<Mutex<Handoff<T>>>,
}

impl<T> Future for Taker<T> {
    type Output = StoreResult<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StoreResult<T>> {
        let mut shared = lock(&self.shared);
        match shared.outcome.take() {
            Some(Ok(result)) => Poll::Ready(result),
            Some(Err(payload)) => {
                drop(shared);
                panic::resume_unwind(payload)
            }
            None => {
                shared.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Many writes run on at most the set's threads, each answered with its
    /// own result, none on a thread of its own.
    #[test]
    fn workers_run_every_write_on_a_fixed_set_of_threads() {
        let workers = Workers::new("agentmesh-test-write", 3);
        let threads = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
        let futures: Vec<_> = (0..200u64)
            .map(|n| {
                let threads = Arc::clone(&threads);
                workers.submit(move || {
                    let me = std::thread::current();
                    assert_eq!(me.name(), Some("agentmesh-test-write"));
                    threads.lock().unwrap().insert(format!("{:?}", me.id()));
                    Ok(n * 2)
                })
            })
            .collect();
        let results: Vec<u64> = futures.into_iter().map(|f| wait(f).unwrap()).collect();
        assert_eq!(results, (0..200u64).map(|n| n * 2).collect::<Vec<_>>());
        let used = threads.lock().unwrap().len();
        assert!((1..=3).contains(&used), "{used} threads ran the writes");
    }

    /// A write that panics goes on panicking in whoever awaits it, and the set
    /// keeps running the next writes.
    #[test]
    fn a_panicking_write_leaves_the_workers_running() {
        let workers = Workers::new("agentmesh-test-write", 1);
        let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            wait(workers.submit::<()>(|| panic!("the write broke")))
        }));
        assert!(panicked.is_err());
        assert_eq!(wait(workers.submit(|| Ok(7))).unwrap(), 7);
    }

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A waker that counts its wakes.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_write_on_a_thread_resolves_to_its_result_and_wakes_its_task() {
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let mut fut = on_thread(move || {
            gate_rx.recv().unwrap();
            Ok(42)
        });
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&counter));
        assert!(fut.as_mut().poll(&mut Context::from_waker(&waker)).is_pending(), "not before the write ran");
        gate_tx.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while counter.0.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "the task that waited was woken once");
        let ready = fut.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(matches!(ready, Poll::Ready(Ok(42))));
    }

    #[test]
    fn a_panic_of_the_write_reaches_whoever_awaits_it() {
        let fut = on_thread(|| -> StoreResult<()> { panic!("the write panics") });
        let caught = panic::catch_unwind(AssertUnwindSafe(|| wait(fut)));
        let payload = caught.expect_err("the panic goes on in the awaiting task");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the write panics"));
    }

    #[test]
    fn a_giver_dropped_without_giving_ends_the_wait() {
        let (giver, taker) = handoff::<()>();
        drop(giver);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| wait(taker)));
        assert!(caught.is_err(), "a write that vanished is not reported as done");
    }
}
