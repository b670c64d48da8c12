//! Running an operation again after contention.
//!
//! A [retryable](crate::StoreError::is_retryable) error means the operation
//! changed nothing and may be run again as it was. [`retrying`] and
//! [`retrying_submitted`] do that a bounded number of times, waiting a little
//! longer before each new attempt ([`BACKOFF`]); the last error is returned when
//! every attempt met contention, or as soon as the next wait would end past the
//! request's [deadline](crate::deadline): one budget for every attempt. Callers that act for a client (the API's
//! `LocalMesh`) and the daemon's upkeep passes go through here; nothing else
//! retries, so one request is never retried twice over.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{StoreResult, Submitted, submit};

/// The waits before the second, third, ... attempt. One attempt more than
/// waits: after the last wait the operation runs once more, and its error is
/// final. (A backend has usually waited already before reporting contention:
/// SQLite's busy timeout.)
pub const BACKOFF: [Duration; 3] =
    [Duration::from_millis(10), Duration::from_millis(40), Duration::from_millis(160)];

/// Runs `op`, and again after each wait of [`BACKOFF`] while it fails with a
/// retryable error and the wait ends before this thread's
/// [deadline](crate::deadline). Blocks the calling thread while it waits.
pub fn retrying<T>(mut op: impl FnMut() -> StoreResult<T>) -> StoreResult<T> {
    let mut waits = BACKOFF.iter();
    loop {
        match op() {
            Err(err) if err.is_retryable() => match next_wait(&mut waits, crate::deadline::current()) {
                Some(wait) => std::thread::sleep(wait),
                None => return Err(err),
            },
            done => return done,
        }
    }
}

/// The next wait of `waits`, unless there is none left or it would end past
/// `deadline`.
fn next_wait(waits: &mut std::slice::Iter<'_, Duration>, deadline: Option<Instant>) -> Option<Duration> {
    let wait = *waits.next()?;
    match deadline {
        Some(at) if Instant::now() + wait >= at => None,
        _ => Some(wait),
    }
}

/// [`retrying`] for submitted writes: `submit` hands the write to the store
/// afresh for each attempt, with `deadline` as the write's, and the waits hold
/// no executor thread (each is a short sleep on a thread of its own, only when
/// contention happened).
pub async fn retrying_submitted<T: Send + 'static>(
    deadline: Option<Instant>,
    mut submit: impl FnMut() -> Submitted<T>,
) -> StoreResult<T> {
    let mut waits = BACKOFF.iter();
    loop {
        match crate::deadline::within(deadline, &mut submit).await {
            Err(err) if err.is_retryable() => match next_wait(&mut waits, deadline) {
                Some(wait) => sleep(wait).await?,
                None => return Err(err),
            },
            done => return done,
        }
    }
}

/// A wait that holds no executor thread: a thread of its own sleeps, then wakes
/// the awaiting task.
fn sleep(wait: Duration) -> impl Future<Output = StoreResult<()>> {
    submit::on_thread(move || {
        std::thread::sleep(wait);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::StoreError;

    #[test]
    fn contention_is_retried_until_the_operation_succeeds() {
        let calls = Cell::new(0);
        let out = retrying(|| {
            calls.set(calls.get() + 1);
            if calls.get() < 3 { Err(StoreError::Busy) } else { Ok(7) }
        });
        assert_eq!(out.unwrap(), 7);
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn contention_that_outlasts_the_backoff_is_returned() {
        let calls = Cell::new(0);
        let out: StoreResult<()> = retrying(|| {
            calls.set(calls.get() + 1);
            Err(StoreError::Busy)
        });
        assert!(matches!(out, Err(StoreError::Busy)));
        assert_eq!(calls.get(), BACKOFF.len() + 1, "one attempt, then one after each wait");
    }

    #[test]
    fn no_attempt_starts_whose_wait_would_end_past_the_deadline() {
        let calls = Cell::new(0);
        let deadline = Instant::now() + Duration::from_millis(30);
        let began = Instant::now();
        let out: StoreResult<()> = crate::deadline::within(Some(deadline), || {
            retrying(|| {
                calls.set(calls.get() + 1);
                Err(StoreError::Busy)
            })
        });
        assert!(matches!(out, Err(StoreError::Busy)));
        // 10 ms, then 40 ms would pass the deadline: two attempts, one wait.
        assert_eq!(calls.get(), 2);
        assert!(began.elapsed() < Duration::from_millis(30), "waited {:?}", began.elapsed());
    }

    #[test]
    fn a_submitted_write_runs_with_the_deadline_it_was_submitted_with() {
        let deadline = Instant::now() + Duration::from_secs(3);
        let seen = submit::wait(retrying_submitted(Some(deadline), || {
            submit::on_thread(|| Ok(crate::deadline::current()))
        }));
        assert_eq!(seen.unwrap(), Some(deadline));
        let workers = submit::Workers::new("deadline-test", 1);
        let seen = submit::wait(crate::deadline::within(Some(deadline), || {
            workers.submit(|| Ok(crate::deadline::current()))
        }));
        assert_eq!(seen.unwrap(), Some(deadline));
    }

    #[test]
    fn a_final_error_is_never_retried() {
        let calls = Cell::new(0);
        let out: StoreResult<()> = retrying(|| {
            calls.set(calls.get() + 1);
            Err(StoreError::NoAssignedTask { mesh_id: "m".into(), session_id: "s".into() })
        });
        assert!(matches!(out, Err(StoreError::NoAssignedTask { .. })));
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn submitted_writes_are_submitted_again_after_contention() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&calls);
        let out = submit::wait(retrying_submitted(None, move || {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            submit::on_thread(move || if n < 2 { Err(StoreError::Busy) } else { Ok(n) })
        }));
        assert_eq!(out.unwrap(), 2);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
