//! Routing rules of the coordinator inbox: a unicast goes to its coordinator, is
//! re-attributed to a restarted run on the same machine (only once the addressed
//! run is no longer live) and never crosses machines; sibling sessions keep their own events; another coordinator's backlog
//! never starves a drain; system events go to nobody; enforce mode quarantines
//! unversioned events with an `event_held` entry.
//!
//! Events are labelled and compared as in [`super::inbox`].

use agentmesh_core::events::names::{AGENT_GENERATING_COMPLETED, AGENT_READY, AGENT_STOPPED};
use agentmesh_core::events::{DrainCounters, Drainer, EmitHint, PendingEvent, ProtocolVersion, Scope};
use serde_json::{Value, json};

use super::support::*;
use crate::{DrainRequest, Store};

const COMPLETED: &str = AGENT_GENERATING_COMPLETED;
const READY: &str = AGENT_READY;
const UNVERSIONED_HELD: &str = "v2_enforce_unversioned_quarantined";

/// A unicast for run_OLD on mach_A is re-attributed to run_NEW on mach_A and never goes to a coordinator on mach_B, where it stays queued.
pub fn inbox_unicast_is_reattributed_on_its_machine_and_never_crosses_machines(store: &dyn Store) {
    let old = coordinator("mach_A", "run_OLD", None);
    let new = coordinator("mach_A", "run_NEW", None);
    queue_completion(store, MESH, "t1", 1, &old);
    // Addressed by its envelope alone (no coordinator target field), so every machine's drain sees it.
    let old_daemon_form = coordinator("daemon_mach_A", "run_OLD", None);
    queue_event(
        store,
        MESH,
        dispatched_by(inbox_event(MESH, COMPLETED, "t2", at(2)), &old_daemon_form),
        at(2),
    );

    let other_machine = drain(store, MESH, &drain_request(&elsewhere()), at(3));
    assert_labels(&other_machine.events, &[], "a drain by a coordinator on mach_B");
    // v2RoutedAway counts what the drain's routing examined and left queued; a
    // unicast for another machine is stepped over before routing (by its daemon
    // target, or by its addressee's machine) and counts nowhere.
    assert_eq!(
        other_machine.counters,
        drain_counters(0, 0, 0),
        "expected neither unicast for mach_A to reach mach_B's routing"
    );
    assert_pending_count(store, MESH, 2, "after mach_B drained");
    let mut enforcing = drain_request(&elsewhere());
    enforcing.enforce = true;
    assert_labels(&drain(store, MESH, &enforcing, at(4)).events, &[], "an enforce-mode drain on mach_B");
    let daemon_b = DrainRequest {
        drainer: Drainer::daemon_level(&["mach_B"]).expect("a daemon-level drainer"),
        ..drain_request(&elsewhere())
    };
    assert_labels(&drain(store, MESH, &daemon_b, at(5)).events, &[], "a daemon-level drain on mach_B");
    assert_pending_count(store, MESH, 2, "after every drain on mach_B");

    let restarted = drain(store, MESH, &drain_request(&new), at(6));
    assert_labels(&restarted.events, &["t1", "t2"], "the drain by run_NEW on mach_A");
    assert_eq!(
        restarted.counters.v2_reattributed_to_drainer, 2,
        "expected both events counted as re-attributed, counters {:?}",
        restarted.counters
    );
    assert_pending_count(store, MESH, 0, "after run_NEW drained");
}

/// A unicast for one coordinator session stays queued while a sibling session on the same machine drains, and its own session drains it later.
pub fn inbox_sibling_session_unicast_waits_for_its_own_session(store: &dyn Store) {
    // Sessions are told apart where neither side carries a real run id (the
    // daemon-form fallback a coordinator uses until its run id is wired through):
    // with a real run id on either side, a mismatch on one machine is a restart and
    // is re-attributed (see the re-attribution rule).
    let s1 = coordinator("mach_A", "mach_A", Some("coord-s1"));
    let s2 = coordinator("standalone_mach_A", "mach_A", Some("coord-s2"));
    queue_completion(store, MESH, "for-s1", 1, &s1);
    queue_completion(store, MESH, "for-s2", 2, &s2);
    queue_event(store, MESH, dispatched_by(inbox_event(MESH, COMPLETED, "for-s1-too", at(3)), &s1), at(3));

    let sibling = drain(store, MESH, &drain_request(&s2), at(4));
    assert_labels(&sibling.events, &["for-s2"], "the drain by session coord-s2");
    // Stepped over before routing (told apart by session), so counted nowhere.
    assert_eq!(sibling.counters, drain_counters(1, 0, 0), "expected coord-s1's two events not routed here");
    assert_pending_count(store, MESH, 2, "after the sibling session drained");
    assert_labels(&drain(store, MESH, &drain_request(&s2), at(5)).events, &[], "a second drain by coord-s2");
    assert_pending_count(store, MESH, 2, "after the sibling session drained twice");

    let own = drain(store, MESH, &drain_request(&s1), at(6));
    assert_labels(&own.events, &["for-s1", "for-s1-too"], "the drain by session coord-s1");
    assert_pending_count(store, MESH, 0, "after both sessions drained");
}

/// A backlog of 300 unicasts for a coordinator on another machine, queued first, neither starves the drainer's own 3 events nor is consumed by it.
pub fn inbox_a_backlog_for_another_coordinator_never_starves_the_drainer(store: &dyn Store) {
    let me = me();
    let them = elsewhere();
    for i in 0..300 {
        let event = inbox_event(MESH, COMPLETED, &format!("theirs-{i:03}"), at(i));
        // Half carry the coordinator target field, half are addressed by their envelope alone.
        let addressed = if i % 2 == 0 { targeted_at(event, &them) } else { dispatched_by(event, &them) };
        queue_event(store, MESH, addressed, at(i));
    }
    for (i, label) in ["mine-1", "mine-2", "mine-3"].into_iter().enumerate() {
        queue_completion(store, MESH, label, 400 + i as i64, &me);
    }
    assert_pending_count(store, MESH, 303, "after the backlog and the drainer's events were queued");

    let mine = drain(store, MESH, &drain_request(&me), at(500));
    assert_labels(&mine.events, &["mine-1", "mine-2", "mine-3"], "the drain behind the backlog");
    assert_eq!(mine.counters.v2_delivered, 3, "expected three deliveries, counters {:?}", mine.counters);
    assert_pending_count(store, MESH, 300, "after the drainer took its own events");
    assert_labels(&drain(store, MESH, &drain_request(&me), at(501)).events, &[], "a second drain");
    assert_pending_count(store, MESH, 300, "after a second drain");

    let theirs = drain(store, MESH, &drain_request(&them), at(502));
    let expected: Vec<String> = (0..100).map(|i| format!("theirs-{i:03}")).collect();
    assert_eq!(labels(&theirs.events), expected, "expected their own coordinator to get the 100 oldest");
    assert_pending_count(store, MESH, 200, "after their coordinator drained once");
}

/// Enforce mode holds back an unstamped (v1) event: not delivered, marked drained, listed as quarantined, with an event_held ledger entry; accept mode delivers it as a broadcast.
pub fn inbox_enforce_mode_quarantines_v1_events_with_an_event_held_entry(store: &dyn Store) {
    let me = me();
    let (accepted_id, accepted) = queue_event(store, MESH, v1_completion(MESH, "accepted", 1), at(1));
    assert!(accepted.envelope.is_empty(), "expected no identity and no machine id to leave the event v1");
    let other = drain(store, MESH, &drain_request(&elsewhere()), at(2));
    assert_eq!(row_ids(&other.events), [accepted_id], "expected a v1 event delivered to any coordinator");
    assert_eq!(
        other.counters,
        DrainCounters { v1_broadcast_accepted: 1, ..DrainCounters::default() },
        "expected the v1 event counted as a broadcast accepted"
    );
    assert!(
        other.quarantined.is_empty() && held_entries(store, MESH).is_empty(),
        "expected nothing held in accept mode"
    );

    let mut bare = inbox_event(MESH, COMPLETED, "held-bare", at(3));
    bare.metadata_event.insert("finalSummary".to_owned(), json!("summary of held-bare"));
    let (bare_id, _) = queue_event(store, MESH, (bare, EmitHint::default()), at(3));
    queue_completion(store, MESH, "v2-own", 4, &me);
    let versioned = PendingEvent::from_value(json!({
        "event": COMPLETED,
        "meshId": MESH,
        "nodeLabel": "Node 'n1'",
        "metadataEvent": { "taskId": "held-v1" },
        "queuedAt": at(5).millis(),
        "protocolVersion": "1.0",
        "eventId": "evt-v1-held",
    }))
    .unwrap_or_else(|err| panic!("expected the v1.0 event to parse, got {err}"));
    let (versioned_id, stored) = queue_event(store, MESH, (versioned, EmitHint::default()), at(5));
    assert_eq!(
        stored.envelope.protocol_version,
        Some(ProtocolVersion::V1),
        "expected a 1.0 event left unstamped"
    );

    let as_stored = peek(store, MESH, &drain_request(&me));
    assert_labels(&as_stored, &["held-bare", "v2-own", "held-v1"], "an accept-mode peek");
    let enforce = DrainRequest { enforce: true, ..drain_request(&me) };
    assert_labels(&peek(store, MESH, &enforce), &["v2-own"], "an enforce-mode peek");
    assert!(held_entries(store, MESH).is_empty(), "expected a peek to hold nothing back");

    let drained = drain(store, MESH, &enforce, at(6));
    assert_labels(&drained.events, &["v2-own"], "the enforce-mode drain");
    assert_eq!(
        drained.quarantined,
        [bare_id, versioned_id],
        "expected both v1 events quarantined, in queue order"
    );
    assert_eq!(
        drained.counters,
        DrainCounters { v2_delivered: 1, v1_unversioned_quarantined: 2, ..DrainCounters::default() },
        "expected one delivery and two unversioned quarantines"
    );
    assert_pending_count(store, MESH, 0, "after the quarantined events were marked drained");

    let held = held_entries(store, MESH);
    assert_eq!(held.len(), 2, "expected one event_held entry per quarantined event, got {held:?}");
    for (entry, peeked) in held.iter().zip([&as_stored[0], &as_stored[2]]) {
        let p = &entry.payload;
        assert_eq!(
            entry.timestamp,
            at(6).iso(),
            "expected the event_held entry stamped with the drain's now"
        );
        assert_eq!(p["reason"], json!(UNVERSIONED_HELD), "expected the unversioned reason: {p}");
        assert_eq!(p["event"], json!(COMPLETED), "expected the event name: {p}");
        assert_eq!(p["recoverable"], json!(true), "expected the held event marked recoverable: {p}");
        assert_eq!(
            p["heldEvent"],
            peeked.event.parse(),
            "expected the whole stored event under heldEvent: {p}"
        );
    }
    let (bare_held, versioned_held) = (&held[0].payload, &held[1].payload);
    assert_eq!(bare_held["finalSummary"], json!("summary of held-bare"), "expected the summary: {bare_held}");
    assert!(
        bare_held.get("eventId").is_none_or(Value::is_null),
        "expected no eventId for an event without one: {bare_held}"
    );
    assert_eq!(versioned_held["eventId"], json!("evt-v1-held"), "expected the eventId: {versioned_held}");
    assert!(
        versioned_held.get("finalSummary").is_none_or(Value::is_null),
        "expected no finalSummary for an event without one: {versioned_held}"
    );

    let again = drain(store, MESH, &enforce, at(7));
    assert!(again.events.is_empty() && again.quarantined.is_empty(), "expected a held event handled once");
    assert_labels(
        &drain(store, MESH, &drain_request(&me), at(8)).events,
        &[],
        "an accept drain after the hold",
    );
    assert_eq!(held_entries(store, MESH).len(), 2, "expected no further event_held entries");
}

/// A system-scope event is delivered to no coordinator, in accept or enforce mode, and never blocks the events behind it.
pub fn inbox_system_scope_events_go_to_no_coordinator(store: &dyn Store) {
    let me = me();
    let hint =
        EmitHint { scope: Some(Scope::System), dispatched_by: Some(me.clone()), ..EmitHint::default() };
    let (_, system) = queue_event(store, MESH, (inbox_event(MESH, COMPLETED, "sys", at(1)), hint), at(1));
    assert_eq!(system.envelope.scope, Some(Scope::System), "expected the hint's system scope stamped");
    assert_eq!(system.envelope.intended_for, None, "expected a system event to carry no intendedFor");
    queue_event(store, MESH, dispatched_by(inbox_event(MESH, READY, "after", at(2)), &me), at(2));

    let owner = drain(store, MESH, &drain_request(&me), at(3));
    assert_labels(&owner.events, &["after"], "the drain by the dispatching coordinator");
    assert_eq!(owner.counters, drain_counters(1, 1, 0), "expected the system event counted as routed away");
    let daemon_a = DrainRequest {
        drainer: Drainer::daemon_level(&["mach_A"]).expect("a daemon-level drainer"),
        ..drain_request(&me)
    };
    let enforce = DrainRequest { enforce: true, ..drain_request(&me) };
    for (what, request) in [
        ("a daemon-level drain", &daemon_a),
        ("an enforce-mode drain", &enforce),
        ("a drain on mach_B", &drain_request(&elsewhere())),
    ] {
        let outcome = drain(store, MESH, request, at(4));
        assert!(
            outcome.events.is_empty() && outcome.quarantined.is_empty(),
            "expected {what} to take nothing, got {outcome:?}"
        );
        assert_labels(&peek(store, MESH, request), &[], &format!("a peek like {what}"));
    }
    assert_pending_count(store, MESH, 1, "after every drain (the system event stays)");
}

/// Two live coordinator runs on one machine each drain only their own unicasts; neither inherits the other's while it is live.
pub fn inbox_two_live_runs_on_one_machine_keep_their_own_unicasts(store: &dyn Store) {
    let one = coordinator("mach_A", "run_1", None);
    let two = coordinator("daemon_mach_A", "run_2", Some("coord-s2"));
    // Both announce themselves before anything is queued.
    touch(store, MESH, &one, at(1));
    touch(store, MESH, &two, at(1));
    queue_completion(store, MESH, "for-1", 2, &one);
    queue_completion(store, MESH, "for-2", 3, &two);
    queue_event(store, MESH, dispatched_by(inbox_event(MESH, COMPLETED, "for-1-too", at(4)), &one), at(4));

    let by_two = drain(store, MESH, &drain_request(&two), at(5));
    assert_labels(&by_two.events, &["for-2"], "the drain by run_2 while run_1 is live");
    assert_eq!(by_two.counters.v2_reattributed_to_drainer, 0, "counters {:?}", by_two.counters);
    assert_labels(&peek(store, MESH, &drain_request(&two)), &[], "a peek by run_2");
    assert_labels(&peek(store, MESH, &drain_request(&one)), &["for-1", "for-1-too"], "a peek by run_1");
    let by_one = drain(store, MESH, &drain_request(&one), at(6));
    assert_labels(&by_one.events, &["for-1", "for-1-too"], "the drain by run_1");
    assert_eq!(by_one.counters.v2_delivered, 2, "counters {:?}", by_one.counters);
    assert_pending_count(store, MESH, 0, "after both runs drained");

    // A drain is itself a sign of life: a run that only drains keeps its events.
    queue_completion(store, MESH, "later-for-2", 7, &two);
    assert_labels(&drain(store, MESH, &drain_request(&one), at(8)).events, &[], "run_1 after run_2 drained");
    assert_labels(&drain(store, MESH, &drain_request(&two), at(9)).events, &["later-for-2"], "run_2");
}

/// A run that ended, or whose presence went stale, has its unicasts re-attributed to the next run on its machine; a drain or touch makes it live again.
pub fn inbox_an_ended_or_stale_run_has_its_unicasts_reattributed(store: &dyn Store) {
    let old = coordinator("mach_A", "run_OLD", None);
    let new = coordinator("mach_A", "run_NEW", None);
    assert_labels(&drain(store, MESH, &drain_request(&old), at(1)).events, &[], "run_OLD's first drain");
    queue_completion(store, MESH, "a", 2, &old);
    assert_labels(
        &drain(store, MESH, &drain_request(&new), at(3)).events,
        &[],
        "run_NEW while run_OLD is live",
    );

    // A graceful exit hands the events over at once.
    assert!(
        ok(store.coordinator_presence(MESH, &old, true, at(4)), "end_coordinator"),
        "expected run_OLD to have a presence record"
    );
    let inherited = drain(store, MESH, &drain_request(&new), at(5));
    assert_labels(&inherited.events, &["a"], "run_NEW after run_OLD ended");
    assert_eq!(inherited.counters.v2_reattributed_to_drainer, 1, "counters {:?}", inherited.counters);
    assert!(
        !ok(
            store.coordinator_presence(MESH, &coordinator("mach_A", "run_NEVER", None), true, at(5)),
            "end_coordinator"
        ),
        "expected no record for a run never seen"
    );

    // Touched again, run_OLD is live and keeps new events; silent for longer than
    // the TTL, it is gone.
    touch(store, MESH, &old, at(10));
    queue_completion(store, MESH, "b", 11, &old);
    assert_labels(
        &drain(store, MESH, &drain_request(&new), at(12)).events,
        &[],
        "run_NEW while run_OLD is live again",
    );
    let ttl_secs = crate::COORDINATOR_PRESENCE_TTL_MS / 1_000;
    assert_labels(
        &drain(store, MESH, &drain_request(&new), at(10 + ttl_secs)).events,
        &[],
        "run_NEW exactly one TTL after run_OLD was last seen",
    );
    let stale = drain(store, MESH, &drain_request(&new), at(11 + ttl_secs));
    assert_labels(&stale.events, &["b"], "run_NEW once run_OLD's presence is stale");
    assert_eq!(stale.counters.v2_reattributed_to_drainer, 1, "counters {:?}", stale.counters);
    assert_pending_count(store, MESH, 0, "after run_NEW inherited both");
}

fn touch(
    store: &dyn Store,
    mesh: &str,
    identity: &agentmesh_core::events::CoordinatorIdentity,
    now: agentmesh_core::Timestamp,
) {
    ok(store.coordinator_presence(mesh, identity, false, now), "touch_coordinator");
}

/// Undrained events are counted by the coordinator they are addressed to, largest group first; unaddressed events form one group of their own, and drained events and other meshes count nowhere.
pub fn inbox_pending_events_are_counted_by_addressee(store: &dyn Store) {
    let a = coordinator("mach_A", "run-a", None);
    let b = coordinator("mach_B", "run-b", Some("coord-b"));
    queue_completion(store, MESH, "a1", 1, &a);
    queue_completion(store, MESH, "a2", 2, &a);
    queue_completion(store, MESH, "b1", 3, &b);
    queue_event(store, MESH, v1_completion(MESH, "v1", 4), at(4));
    queue_completion(store, OTHER_MESH, "elsewhere", 5, &a);
    let groups = store.pending_events_by_addressee(MESH).expect("the overview reads");
    let part = |p: &Option<String>| p.clone().unwrap_or_else(|| "-".to_owned());
    let seen: Vec<String> = groups
        .iter()
        .map(|g| format!("{} {} {} {}", part(&g.daemon_id), part(&g.run_id), part(&g.session_id), g.count))
        .collect();
    assert_eq!(
        seen,
        ["mach_A run-a - 2", "- - - 1", "mach_B run-b coord-b 1"],
        "expected the two events for run-a first, then one group each"
    );

    drain(store, MESH, &drain_request(&a), at(6));
    let after = store.pending_events_by_addressee(MESH).expect("the overview reads");
    assert!(
        after.iter().all(|g| g.run_id.as_deref() != Some("run-a")),
        "drained events are not counted: {after:?}"
    );
}

/// A presence refresh stamped before the coordinator's end (one still on its way when the coordinator exited) does not bring it back; a later one does.
pub fn inbox_a_late_touch_does_not_revive_an_ended_coordinator(store: &dyn Store) {
    let gone = coordinator("mach_A", "run-gone", None);
    let next = coordinator("mach_A", "run-next", None);
    ok(store.coordinator_presence(MESH, &gone, false, at(1)), "touch");
    ok(store.coordinator_presence(MESH, &gone, true, at(3)), "end");
    ok(store.coordinator_presence(MESH, &gone, false, at(2)), "a touch stamped before the end");
    queue_completion(store, MESH, "left-behind", 4, &gone);
    let inherited = drain(store, MESH, &drain_request(&next), at(5));
    assert_labels(&inherited.events, &["left-behind"], "the next run inherits the ended run's event");

    ok(store.coordinator_presence(MESH, &gone, false, at(6)), "a touch after the end");
    queue_completion(store, MESH, "kept", 7, &gone);
    let sibling = drain(store, MESH, &drain_request(&next), at(8));
    assert_labels(&sibling.events, &[], "a coordinator live again keeps its event");
}

/// A broadcast terminal task event goes only to the coordinator that dispatched it and never to a coordinator on another machine, where it stays queued; a self-fallback one (dispatched by its machine, with no coordinator known) goes to any coordinator on that machine and to none elsewhere; a broadcast progress event still goes to whoever drains first.
pub fn inbox_a_broadcast_terminal_event_reaches_only_its_dispatcher(store: &dyn Store) {
    let me = me();
    let broadcast_by_me =
        EmitHint { scope: Some(Scope::Broadcast), dispatched_by: Some(me.clone()), ..EmitHint::default() };
    let (_, owned) =
        queue_event(store, MESH, (inbox_event(MESH, COMPLETED, "owned", at(1)), broadcast_by_me), at(1));
    assert_eq!(owned.envelope.scope, Some(Scope::Broadcast), "expected the completion stamped broadcast");

    let mut stopped = inbox_event(MESH, AGENT_STOPPED, "self", at(2));
    stopped.target_coordinator_session_id = Some("coord-s1".to_owned());
    let stamped = match ok(
        store.queue_pending_event(MESH, &stopped, &EmitHint::default(), Some("mach_A"), at(2)),
        "queue of a stop with no coordinator on mach_A",
    ) {
        crate::QueueOutcome::Queued { event, .. } => event,
        other => panic!("expected the stop stored, got {other:?}"),
    };
    assert!(stamped.dispatched_by_self_fallback, "expected a self-fallback stamp");
    assert_eq!(stamped.envelope.scope, Some(Scope::Broadcast), "expected the self-fallback stop broadcast");

    queue_event(store, MESH, dispatched_by(inbox_event(MESH, READY, "ready", at(3)), &me), at(3));

    let other_machine = drain(store, MESH, &drain_request(&elsewhere()), at(4));
    assert_labels(&other_machine.events, &["ready"], "a drain by a coordinator on mach_B");
    assert_eq!(
        other_machine.counters,
        drain_counters(1, 2, 0),
        "expected both terminal events routed away from mach_B"
    );
    assert_pending_count(store, MESH, 2, "after mach_B drained");

    let sibling_run = coordinator("mach_A", "run_2", None);
    let sibling = drain(store, MESH, &drain_request(&sibling_run), at(5));
    assert_labels(&sibling.events, &["self"], "a drain by another run on mach_A");
    assert_pending_count(store, MESH, 1, "after another run on mach_A drained");

    let own = drain(store, MESH, &drain_request(&me), at(6));
    assert_labels(&own.events, &["owned"], "the drain by the dispatching coordinator");
    assert_pending_count(store, MESH, 0, "after every coordinator drained");
}

/// A drainer that also answers to another daemon id (`--also-known-as`) takes the unicasts addressed to that id, by target field or by envelope, as a daemon-level drain by that id would; a coordinator live on that id's machine keeps its own, and other machines' unicasts stay queued.
pub fn inbox_also_known_as_widens_a_drain_to_that_ids_unicasts(store: &dyn Store) {
    let aka = "standalone_mach_X";
    queue_completion(store, MESH, "for-aka", 1, &coordinator(aka, aka, None));
    let machine_x = coordinator("mach_X", "mach_X", None);
    queue_event(store, MESH, dispatched_by(inbox_event(MESH, COMPLETED, "for-x", at(2)), &machine_x), at(2));
    let live_x = coordinator("mach_X", "run_X", None);
    ok(store.coordinator_presence(MESH, &live_x, false, at(3)), "presence of run_X on mach_X");
    queue_completion(store, MESH, "for-live-x", 4, &live_x);
    queue_completion(store, MESH, "for-y", 5, &coordinator("mach_Y", "run_Y", None));

    let plain = drain(store, MESH, &drain_request(&me()), at(6));
    assert_labels(&plain.events, &[], "a drain by mach_A alone");
    let widened = DrainRequest { drainer: Drainer::new(me(), &[aka]), ..drain_request(&me()) };
    assert_labels(
        &peek(store, MESH, &widened),
        &["for-aka", "for-x"],
        "a peek by mach_A also known as standalone_mach_X",
    );
    let out = drain(store, MESH, &widened, at(7));
    assert_labels(&out.events, &["for-aka", "for-x"], "a drain by mach_A also known as standalone_mach_X");
    assert_pending_count(store, MESH, 2, "after the widened drain (run_X's and mach_Y's stay)");
}

/// A held entry of the original whose row is gone and whose event cannot be read is answered unrecoverable: nothing is queued or recorded and it stays held, while the next held entry is requeued as usual.
pub fn inbox_an_unrecoverable_held_entry_is_skipped_and_stays_held(store: &dyn Store) {
    let entry = |id: &str, secs: i64, held_event: Value| agentmesh_core::LedgerEntry {
        id: id.to_owned(),
        mesh_id: MESH.to_owned(),
        timestamp: at(secs).iso(),
        kind: "event_held".to_owned(),
        node_id: None,
        session_id: None,
        provider_type: None,
        payload: json!({
            "event": AGENT_STOPPED,
            "reason": "pending_trim_dropped",
            "recoverable": true,
            "heldEvent": held_event,
        }),
    };
    let legacy = entry("held-legacy", 1, json!("{truncated json"));
    let readable = entry(
        "held-readable",
        2,
        json!({
            "event": AGENT_STOPPED, "meshId": MESH, "nodeLabel": "Node 'n1'",
            "metadataEvent": { "taskId": "t-readable" }, "queuedAt": at(2).millis(),
        }),
    );
    store.import_ledger(&[legacy, readable]).expect("the held entries import");
    let before = ledger_entries(store, MESH);

    let outcome = store.requeue_held_event(MESH, "held-legacy", at(3)).expect("an answer, not an error");
    assert_eq!(outcome, crate::HeldRequeue::Unrecoverable);
    assert_eq!(ledger_entries(store, MESH), before, "an unrecoverable entry records nothing");
    assert_eq!(store.pending_event_count(MESH).unwrap(), 0, "and queues nothing");

    let outcome = store.requeue_held_event(MESH, "held-readable", at(4)).expect("the readable entry");
    assert_eq!(outcome, crate::HeldRequeue::Requeued);
    let still: Vec<String> = agentmesh_core::events::held::still_held(ledger_entries(store, MESH))
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(still, ["held-legacy"], "the unrecoverable entry stays held");
    let peeked = peek(store, MESH, &drain_request(&me()));
    assert_eq!(peeked.len(), 1, "the readable event is queued again: {peeked:?}");
}
