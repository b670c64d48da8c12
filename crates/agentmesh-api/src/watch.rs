//! The one watch: a drain that waits for an event, with one timeout rule, one
//! order of looks, and the wake-up behind [`WakeUp`] so a backend can supply
//! its own (a database that notifies on commit, say).
//!
//! A watch drains first (which also settles duplicates and quarantines). When
//! that finds nothing it waits for a write, or for the poll interval (the
//! fallback that notices writes of other processes that share the database),
//! then peeks, and drains again only once the peek shows an event: a caller
//! that went away while its watch waited leaves nothing drained behind it. At
//! the deadline it drains once more, for what a peek does not show (liveness is
//! judged at drain time), and answers with that.
//!
//! [`Watch`] holds these decisions; `LocalMesh`'s [`crate::MeshApi::watch`] drives it on the
//! calling thread, and the daemon's route drives the same one without holding a
//! thread while it waits ([`WakeUp::on_wake`]).

use std::time::{Duration, Instant};

use agentmesh_core::InvalidInput;

use crate::views::DrainView;
use crate::{DEFAULT_WATCH_TIMEOUT, MAX_WATCH_TIMEOUT};

/// How a waiting watch learns that something was written.
///
/// A watcher takes a [`WakeUp::mark`] before it looks; a write notified after
/// the mark makes a wait on it return at once, so no write between the look
/// and the wait is lost.
pub trait WakeUp: Send + Sync {
    /// Where the writes that concern `mesh` stand now.
    fn mark(&self, mesh: &str) -> u64;

    /// Blocks until a write that concerns `mesh` moved it past `seen`, or
    /// `timeout` ran out; returns whether it moved.
    fn wait_past(&self, mesh: &str, seen: u64, timeout: Duration) -> bool;

    /// Calls `wake` once a write that concerns `mesh` moved it past `seen` (at
    /// once when one already has), for waiters that hold no thread. `wake` may
    /// be called late or never when the waiter gave up first; it must be cheap.
    fn on_wake(&self, mesh: &str, seen: u64, wake: Box<dyn FnOnce() + Send>);

    /// Records that a write was committed, waking the waiters it concerns.
    fn notify(&self);
}

/// The one timeout rule: a watch waits at most [`MAX_WATCH_TIMEOUT`]; a longer
/// one is refused, naming `field`, on every transport (a caller learns the
/// limit instead of a silently shorter wait).
pub fn watch_timeout(field: &str, timeout: Duration) -> Result<Duration, InvalidInput> {
    if timeout > MAX_WATCH_TIMEOUT {
        return Err(InvalidInput::new(
            field,
            format!("must be at most {} seconds (a watch may be repeated)", MAX_WATCH_TIMEOUT.as_secs()),
        ));
    }
    Ok(timeout)
}

/// [`watch_timeout`] for a timeout in seconds; [`DEFAULT_WATCH_TIMEOUT`] when
/// none is given.
pub fn watch_timeout_secs(field: &str, secs: Option<u64>) -> Result<Duration, InvalidInput> {
    match secs {
        None => Ok(DEFAULT_WATCH_TIMEOUT),
        Some(secs) => watch_timeout(field, Duration::from_secs(secs)),
    }
}

/// What a watch does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Drain, and answer if that found anything.
    Drain,
    /// Peek, and drain only if that shows an event.
    Peek,
}

/// The decisions of one watch (see the module docs).
#[derive(Debug)]
pub struct Watch {
    deadline: Instant,
    poll: Duration,
    drain_next: bool,
}

impl Watch {
    /// A watch of `timeout` (checked by [`watch_timeout`] before), looking again
    /// unprompted every `poll`.
    pub fn new(timeout: Duration, poll: Duration) -> Watch {
        Watch {
            deadline: Instant::now() + timeout,
            poll: poll.max(Duration::from_millis(1)),
            drain_next: true,
        }
    }

    /// The next look: a drain first, peeks after.
    pub fn look(&self) -> Look {
        if self.drain_next { Look::Drain } else { Look::Peek }
    }

    /// Records what a peek showed; returns whether to drain now.
    pub fn peeked(&mut self, found: bool) -> bool {
        self.drain_next = found;
        found
    }

    /// Records a drain; returns whether to answer with it.
    pub fn drained(&mut self, view: &DrainView) -> bool {
        self.drain_next = false;
        !view.events.is_empty() || !view.quarantined.is_empty()
    }

    /// How long to wait for a write before the next look; `None` at the
    /// deadline, when the watch drains once more and answers with that.
    pub fn wait(&self) -> Option<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        (!left.is_zero()).then(|| left.min(self.poll))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_rule_refuses_past_the_limit_naming_the_field() {
        assert_eq!(watch_timeout_secs("timeoutSecs", None).unwrap(), DEFAULT_WATCH_TIMEOUT);
        assert_eq!(watch_timeout_secs("timeoutSecs", Some(600)).unwrap(), MAX_WATCH_TIMEOUT);
        let err = watch_timeout_secs("timeoutSecs", Some(601)).unwrap_err();
        assert_eq!(err.field, "timeoutSecs");
        assert!(err.problem.contains("at most 600 seconds"), "{err}");
        assert_eq!(watch_timeout("timeout", Duration::from_millis(600_001)).unwrap_err().field, "timeout");
    }

    #[test]
    fn a_watch_drains_first_then_peeks_and_drains_only_what_a_peek_shows() {
        let mut watch = Watch::new(Duration::from_secs(60), Duration::from_secs(1));
        assert_eq!(watch.look(), Look::Drain);
        assert!(!watch.drained(&DrainView::default()), "an empty drain is no answer");
        assert_eq!(watch.look(), Look::Peek);
        assert_eq!(watch.wait(), Some(Duration::from_secs(1)), "the poll bounds a wait");
        assert!(!watch.peeked(false));
        assert_eq!(watch.look(), Look::Peek);
        assert!(watch.peeked(true));
        assert_eq!(watch.look(), Look::Drain);
        let done = Watch::new(Duration::ZERO, Duration::from_secs(1));
        assert_eq!(done.wait(), None, "at the deadline: the last drain");
    }
}
