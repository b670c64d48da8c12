//! Group `pending-events`: the coordinator inbox. Queueing events one call each,
//! then draining them to the end, as the seed harness does; and, ours only,
//! draining a coordinator's events from behind a backlog queued for another
//! coordinator (on another machine, a sibling session, or another live run on
//! the same machine), which must stay queued and should cost the drain little.
//!
//! The seed inserts rows with ids and fingerprints it chooses; `queue_pending_event`
//! mints the row id and event id itself and derives the fingerprint from the
//! content, so item `i` carries task `task-i` (distinct content, distinct
//! fingerprint) and its row id is the one the store returns. Every event is
//! addressed to a coordinator, so the store stamps a v2 unicast envelope and a
//! drain routes each event by address.

use std::collections::HashMap;

use agentmesh_core::events::{CoordinatorIdentity, DrainCounters, Drainer, EmitHint, PendingEvent, Scope};
use agentmesh_store::{DrainRequest, DuplicateReason, QueueOutcome, Store};
use serde_json::{Map, Value};

use crate::data::{MESH_ID, at, message};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// At most this many events per drain: the store's default window, as the original's.
const DRAIN_LIMIT: usize = 100;

/// Runs the group.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    h.run_case(&format!("pending-events-{n}"), |h, case| pending_events(h, case, n));
    let (backlog, mine) = (h.opts().scale(10_000), h.opts().scale(1_000));
    for kind in [Backlog::OtherMachine, Backlog::SiblingSession, Backlog::LiveRun] {
        let label = format!("{}-{backlog}", kind.label());
        h.run_case(&label, |h, case| drain_behind_backlog(h, case, kind, backlog, mine));
    }
}

/// The coordinator an event is addressed to, as an emitter knows it: the target
/// daemon and session on the event, the run id in the emit hint (absent: the
/// daemon id stands in for it).
#[derive(Debug, Clone, Copy)]
struct Address {
    daemon: &'static str,
    run: Option<&'static str>,
    session: Option<&'static str>,
}

impl Address {
    /// The identity the store stamps as the addressee, which is also the identity
    /// of the coordinator that drains its own events.
    fn identity(self) -> CoordinatorIdentity {
        CoordinatorIdentity::from_emit_fields(Some(self.daemon), self.run, self.session)
            .expect("a bench address names a daemon")
    }

    /// A drain request by this coordinator in accept mode, with the default window.
    fn drain_request(self) -> DrainRequest {
        DrainRequest {
            drainer: Drainer::new(self.identity(), &[]),
            only_events: None,
            enforce: false,
            limit: None,
        }
    }
}

/// The draining coordinator of the seed case and the other-machine backlog case.
const COORDINATOR_A: Address = Address { daemon: "mach_A", run: Some("run-1"), session: None };

/// Item `i` addressed to `to`, shaped like the seed harness's: every third a
/// `task_completed`, the rest `task_progress`, with the task, a session and an
/// 80-byte summary in the metadata, queued at instant `i`.
fn event(i: usize, to: Address) -> (PendingEvent, EmitHint) {
    let name = if i.is_multiple_of(3) { "task_completed" } else { "task_progress" };
    let mut metadata = Map::new();
    metadata.insert("taskId".to_owned(), Value::from(format!("task-{i}")));
    metadata.insert("sessionId".to_owned(), Value::from(format!("session-{}", i % 50)));
    metadata.insert("summary".to_owned(), Value::from(&message(i)[..80]));
    let mut event = PendingEvent::new(name, MESH_ID, "", metadata, at(i));
    event.target_coordinator_daemon_id = Some(to.daemon.to_owned());
    event.target_coordinator_session_id = to.session.map(str::to_owned);
    let hint = EmitHint {
        scope: Some(Scope::Unicast),
        coordinator_run_id: to.run.map(str::to_owned),
        ..EmitHint::default()
    };
    (event, hint)
}

/// Queues items `range` addressed to `to`, one call each, timing each call on
/// `timer`; returns the row ids of the queued events and how many were refused.
fn queue_all(
    store: &dyn Store,
    range: std::ops::Range<usize>,
    to: Address,
    timer: &mut Timer,
) -> anyhow::Result<(Vec<String>, usize)> {
    let mut ids = Vec::with_capacity(range.len());
    let mut rejected = 0;
    for i in range {
        let (event, hint) = event(i, to);
        match timer.time(|| store.queue_pending_event(MESH_ID, &event, &hint, None, at(i)))? {
            QueueOutcome::Queued { id, .. } => ids.push(id),
            QueueOutcome::Duplicate(_) => rejected += 1,
        }
    }
    Ok((ids, rejected))
}

/// What draining to the end produced.
#[derive(Debug, Default)]
struct Drained {
    /// Row ids in the order they were handed out.
    order: Vec<String>,
    /// Drain calls that handed out at least one event.
    drains: usize,
    /// Drain calls that handed out more than [`DRAIN_LIMIT`] events.
    overfull: usize,
    /// The counters of every drain, added up.
    counters: DrainCounters,
}

/// Drains with `request` until a drain hands out nothing, timing every call, the
/// last empty one included; `first` is the instant of the first drain, and each
/// further drain is one millisecond later. Stops after `max_drains` non-empty
/// drains, so a store that never runs dry cannot hang the run.
fn drain_to_end(
    store: &dyn Store,
    request: &DrainRequest,
    first: usize,
    max_drains: usize,
    timer: &mut Timer,
) -> anyhow::Result<Drained> {
    let mut out = Drained::default();
    let mut calls = 0;
    loop {
        let batch = timer.time(|| store.drain_pending_events(MESH_ID, request, at(first + calls)))?;
        calls += 1;
        out.counters += batch.counters;
        if batch.events.is_empty() {
            break;
        }
        out.drains += 1;
        if batch.events.len() > DRAIN_LIMIT {
            out.overfull += 1;
        }
        out.order.extend(batch.events.into_iter().map(|e| e.id));
        if out.drains > max_drains {
            break;
        }
    }
    Ok(out)
}

/// Checks that `drained` handed out exactly `ids`, each once, in queue order, at
/// most [`DRAIN_LIMIT`] per drain.
fn check_drained(h: &mut Harness, label: &str, ids: &[String], drained: &Drained) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for id in &drained.order {
        *seen.entry(id.as_str()).or_default() += 1;
    }
    let dupes = seen.values().filter(|c| **c > 1).count();
    let missing = ids.iter().filter(|id| !seen.contains_key(id.as_str())).count();
    h.check(
        &format!("{label}: drained every event exactly once"),
        drained.order.len() == ids.len() && dupes == 0 && missing == 0,
        format!("drained={} dupes={dupes} missing={missing}", drained.order.len()),
    );
    h.check(&format!("{label}: drain order = queuedAt order"), drained.order == ids, "");
    let expected = ids.len().div_ceil(DRAIN_LIMIT);
    h.check(
        &format!("{label}: <={DRAIN_LIMIT} per drain, {expected} drains"),
        drained.overfull == 0 && drained.drains == expected,
        format!("drains={} overfull={}", drained.drains, drained.overfull),
    );
}

/// `pending-events-insert` (N calls of `queue_pending_event`) and
/// `pending-events-drain` (`drain_pending_events` until empty, at most 100 per
/// call; ops are events, latency is per drain call).
fn pending_events(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let (store, label) = (case.store(), case.label());
    let mut insert = Timer::default();
    let (ids, rejected) = queue_all(store, 0..n, COORDINATOR_A, &mut insert)?;
    h.report("pending-events-insert", n, n, &insert);
    h.check(&format!("{label}: all inserts accepted"), rejected == 0, format!("rejected={rejected}"));

    let (again, hint) = event(0, COORDINATOR_A);
    let dup = store.queue_pending_event(MESH_ID, &again, &hint, None, at(n))?;
    h.check(
        &format!("{label}: duplicate fingerprint rejected"),
        dup == QueueOutcome::Duplicate(DuplicateReason::Fingerprint),
        "",
    );
    let count = store.pending_event_count(MESH_ID)?;
    h.check(&format!("{label}: pendingEventCount"), count == n as u64, format!("count={count}"));

    let mut drain = Timer::default();
    let drained = drain_to_end(store, &COORDINATOR_A.drain_request(), n + 1, n + 1, &mut drain)?;
    h.report("pending-events-drain", n, drained.order.len(), &drain);
    check_drained(h, label, &ids, &drained);
    h.check(
        &format!("{label}: every event delivered by address (v2Delivered)"),
        drained.counters.v2_delivered == n as u64 && drained.counters.total() == n as u64,
        format!("{:?}", drained.counters),
    );
    let left = store.pending_event_count(MESH_ID)?;
    h.check(&format!("{label}: nothing left pending"), left == 0, format!("count={left}"));
    Ok(())
}

/// Whose events are queued ahead of the drainer's.
#[derive(Debug, Clone, Copy)]
enum Backlog {
    /// Unicast events for a coordinator on another machine. They are targeted at
    /// that machine's daemon, so the drain's walk steps over them in the index.
    OtherMachine,
    /// Unicast events for a sibling coordinator session on the drainer's machine.
    ///
    /// Both have only the daemon-form stand-in as run id and name different
    /// sessions: the two match by machine and then by session, which differs. The
    /// backlog's run id is the `daemon_mach_A` form and the drainer's the bare
    /// `mach_A`, so the run id strings differ too. Both target the drainer's
    /// daemon; the backlog sits in its addressee's lane of the drain index, which
    /// the drainer does not read.
    SiblingSession,
    /// Unicast events for another live coordinator run on the drainer's machine
    /// (both with real run ids). It announced itself before the backlog was
    /// queued, so it is live and its events are not re-attributed to the drainer.
    LiveRun,
}

impl Backlog {
    /// The case label, without its size.
    fn label(self) -> &'static str {
        match self {
            Backlog::OtherMachine => "pending-events-backlog",
            Backlog::SiblingSession => "pending-events-sibling-backlog",
            Backlog::LiveRun => "pending-events-live-run-backlog",
        }
    }

    /// The result line's case name.
    fn case(self) -> &'static str {
        match self {
            Backlog::OtherMachine => "pending-events-drain-backlog",
            Backlog::SiblingSession => "pending-events-drain-sibling-backlog",
            Backlog::LiveRun => "pending-events-drain-live-run-backlog",
        }
    }

    /// Who the backlog is for, and who drains.
    fn addresses(self) -> (Address, Address) {
        match self {
            Backlog::OtherMachine => {
                (Address { daemon: "mach_B", run: Some("run-2"), session: None }, COORDINATOR_A)
            }
            Backlog::SiblingSession => (
                Address { daemon: "mach_A", run: Some("daemon_mach_A"), session: Some("coord-2") },
                Address { daemon: "mach_A", run: None, session: Some("coord-1") },
            ),
            Backlog::LiveRun => (
                Address { daemon: "mach_A", run: Some("run-2"), session: None },
                Address { daemon: "mach_A", run: Some("run-1"), session: None },
            ),
        }
    }
}

/// `pending-events-drain-backlog` and `pending-events-drain-sibling-backlog`: N
/// events for another coordinator are queued first (untimed), then `mine` for the
/// drainer; the drainer drains until a drain hands out nothing. The result line's
/// n is the backlog, ops the events delivered, latency per drain call.
fn drain_behind_backlog(
    h: &mut Harness,
    case: &CaseStore,
    kind: Backlog,
    backlog: usize,
    mine: usize,
) -> anyhow::Result<()> {
    let (store, label) = (case.store(), case.label());
    let (theirs, me) = kind.addresses();
    // The backlog's coordinator announces itself (a drain would do the same), so
    // it is live throughout the case.
    store.coordinator_presence(MESH_ID, &theirs.identity(), false, at(0))?;
    let mut untimed = Timer::default();
    let (backlog_ids, rejected_backlog) = queue_all(store, 0..backlog, theirs, &mut untimed)?;
    let (my_ids, rejected_mine) = queue_all(store, backlog..backlog + mine, me, &mut untimed)?;
    h.check(
        &format!("{label}: all inserts accepted"),
        rejected_backlog + rejected_mine == 0,
        format!("rejected={}", rejected_backlog + rejected_mine),
    );

    let mut drain = Timer::default();
    let drained = drain_to_end(store, &me.drain_request(), backlog + mine, mine + 1, &mut drain)?;
    h.report(kind.case(), backlog, drained.order.len(), &drain);
    check_drained(h, label, &my_ids, &drained);

    let left = store.pending_event_count(MESH_ID)?;
    h.check(
        &format!("{label}: backlog for {} untouched by {}", theirs.identity().key(), me.identity().key()),
        left == backlog as u64,
        format!("count={left} routedAway={}", drained.counters.v2_routed_away),
    );
    let theirs_first =
        store.peek_pending_events(MESH_ID, &DrainRequest { limit: Some(1), ..theirs.drain_request() })?;
    h.check(
        &format!("{label}: backlog still delivered to its own coordinator"),
        theirs_first.first().map(|e| &e.id) == backlog_ids.first(),
        "",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use agentmesh_core::Timestamp;
    use agentmesh_core::events::{RouteDecision, pending_event_fingerprint, route_event_live, stamp_event};

    use super::*;

    /// Stamps item 0 for `to` as the store would and routes it for `drainer`, with
    /// `to` live.
    fn route(to: Address, drainer: Address) -> RouteDecision {
        let (mut event, hint) = event(0, to);
        stamp_event(&mut event, &hint, "e1", None);
        let drainer = Drainer::new(drainer.identity(), &[]);
        let live = to.identity().key();
        route_event_live(&event.to_value(), &drainer, true, |key| key == live, |_| false).decision
    }

    #[test]
    fn each_backlog_is_routed_away_and_the_drainers_own_events_delivered() {
        for kind in [Backlog::OtherMachine, Backlog::SiblingSession, Backlog::LiveRun] {
            let (theirs, me) = kind.addresses();
            assert!(matches!(route(theirs, me), RouteDecision::RoutedAway { .. }), "{kind:?}");
            assert_eq!(route(me, me), RouteDecision::Deliver, "{kind:?}");
            assert_eq!(route(theirs, theirs), RouteDecision::Deliver, "{kind:?}");
        }
    }

    #[test]
    fn items_are_distinct_and_shaped_like_the_seed() {
        let (a, _) = event(0, COORDINATOR_A);
        let (b, _) = event(1, COORDINATOR_A);
        assert_eq!(a.event, "task_completed");
        assert_eq!(b.event, "task_progress");
        assert_eq!(a.metadata_event["summary"].as_str().map(str::len), Some(80));
        assert_eq!(b.queued_at, Timestamp::from_millis(a.queued_at.millis() + 1));
        assert_ne!(pending_event_fingerprint(&a), pending_event_fingerprint(&b));
    }
}
