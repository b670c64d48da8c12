//! The deadline of the request a store operation serves.
//!
//! A caller that answers a client (the API's `LocalMesh`) gives each request one
//! budget, across every attempt [`crate::retry`] makes. The deadline travels
//! with the operation on the thread that runs it ([`within`]), including the
//! thread a submitted write runs on ([`crate::submit`] carries it over), so a
//! backend can bound each wait by what is left ([`remaining`]): a server round
//! trip, a wait for a pooled connection or for a lock. An operation run without
//! one (migrations, imports, the upkeep) waits as long as its
//! backend's own timeouts let it.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The budget of one request when its caller does not say otherwise: the one
/// default the API, the daemon and the PostgreSQL backend's lock timeout
/// follow.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

thread_local! {
    static CURRENT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The deadline of the operation running on this thread, if it has one.
pub fn current() -> Option<Instant> {
    CURRENT.with(Cell::get)
}

/// What is left of this thread's deadline (zero once it passed); `None`
/// without one.
pub fn remaining() -> Option<Duration> {
    current().map(|at| at.saturating_duration_since(Instant::now()))
}

/// Runs `op` with `deadline` as this thread's (none: without one), then puts
/// back what was there before, also when `op` panics.
pub fn within<T>(deadline: Option<Instant>, op: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(deadline)));
    op()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_holds_inside_its_scope_and_nests() {
        assert_eq!(current(), None);
        let outer = Instant::now() + Duration::from_secs(5);
        let inner = Instant::now() + Duration::from_secs(1);
        within(Some(outer), || {
            assert_eq!(current(), Some(outer));
            within(Some(inner), || assert_eq!(current(), Some(inner)));
            assert_eq!(current(), Some(outer));
            assert!(remaining().is_some_and(|left| left <= Duration::from_secs(5)));
        });
        assert_eq!(current(), None);
        let past = Instant::now() - Duration::from_millis(1);
        within(Some(past), || assert_eq!(remaining(), Some(Duration::ZERO)));
    }

    #[test]
    fn a_panic_inside_puts_the_outer_deadline_back() {
        let at = Instant::now() + Duration::from_secs(1);
        let caught = std::panic::catch_unwind(|| within(Some(at), || panic!("boom")));
        assert!(caught.is_err());
        assert_eq!(current(), None);
    }
}
