//! [`WriteSignal`]: how a waiting watch learns that something was written.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::WakeUp;

/// A generation counter bumped after every write a [`crate::LocalMesh`] commits.
///
/// A watcher reads the generation, drains, and when it found nothing waits for
/// the generation to move past what it read; a write that lands between its drain
/// and its wait has already moved it, so no wake-up is lost. Synchronous waiters
/// block on a condition variable; asynchronous ones register a listener (the
/// daemon's readiness), called after every bump, and one-shot wakers
/// ([`WakeUp::on_wake`]: the daemon's waiting watches).
///
/// It is the [`WakeUp`] of a store whose writes all go through this process's
/// `LocalMesh`: every write concerns every mesh, and writes of other processes
/// are left to the watch's poll.
#[derive(Default)]
pub struct WriteSignal {
    generation: Mutex<u64>,
    bumped: Condvar,
    listeners: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
    wakers: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for WriteSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteSignal").field("generation", &self.generation()).finish_non_exhaustive()
    }
}

impl WriteSignal {
    /// A signal at generation 0 with no listeners.
    pub fn new() -> WriteSignal {
        WriteSignal::default()
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        *self.generation.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a write and wakes every waiter and listener.
    pub fn bump(&self) {
        {
            let mut generation = self.generation.lock().unwrap_or_else(PoisonError::into_inner);
            *generation += 1;
        }
        self.bumped.notify_all();
        for listener in self.listeners.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            listener();
        }
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(PoisonError::into_inner));
        for wake in wakers {
            wake();
        }
    }

    /// Calls `listener` after every future bump.
    pub fn listen(&self, listener: impl Fn() + Send + Sync + 'static) {
        self.listeners.lock().unwrap_or_else(PoisonError::into_inner).push(Box::new(listener));
    }

    /// Blocks until the generation is past `seen` or `timeout` ran out; returns
    /// whether it moved.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut generation = self.generation.lock().unwrap_or_else(PoisonError::into_inner);
        while *generation <= seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            generation = self.bumped.wait_timeout(generation, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        true
    }
}

impl WakeUp for WriteSignal {
    fn mark(&self, _mesh: &str) -> u64 {
        self.generation()
    }

    fn wait_past(&self, _mesh: &str, seen: u64, timeout: Duration) -> bool {
        WriteSignal::wait_past(self, seen, timeout)
    }

    fn on_wake(&self, _mesh: &str, seen: u64, wake: Box<dyn FnOnce() + Send>) {
        // Checked under the wakers' lock: a bump either came before (and is seen
        // here) or takes this waker with it.
        let mut wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        if self.generation() > seen {
            drop(wakers);
            wake();
        } else {
            wakers.push(wake);
        }
    }

    fn notify(&self) {
        self.bump();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_bump_wakes_a_waiter_and_listeners() {
        let signal = Arc::new(WriteSignal::new());
        let heard = Arc::new(AtomicUsize::new(0));
        let h = Arc::clone(&heard);
        signal.listen(move || {
            h.fetch_add(1, Ordering::SeqCst);
        });
        let seen = signal.generation();
        let s = Arc::clone(&signal);
        let writer = std::thread::spawn(move || s.bump());
        assert!(signal.wait_past(seen, Duration::from_secs(30)));
        writer.join().unwrap();
        assert_eq!(heard.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_waker_is_called_once_by_the_next_bump_or_at_once_after_one() {
        let signal = WriteSignal::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = || {
            let c = Arc::clone(&calls);
            Box::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
            }) as Box<dyn FnOnce() + Send>
        };
        let seen = signal.mark("m");
        signal.on_wake("m", seen, counter());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        signal.notify();
        signal.notify();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one call, by the first bump");
        signal.on_wake("m", seen, counter());
        assert_eq!(calls.load(Ordering::SeqCst), 2, "a bump past the mark came before: called at once");
    }

    #[test]
    fn a_bump_before_the_wait_is_not_lost_and_no_bump_times_out() {
        let signal = WriteSignal::new();
        let seen = signal.generation();
        signal.bump();
        assert!(signal.wait_past(seen, Duration::ZERO));
        assert!(!signal.wait_past(signal.generation(), Duration::from_millis(1)));
    }
}
