//! Rules of the coordinator inbox: stamping at queue time, fingerprint and
//! event-id dedup, the drain window (name filter, order, limit), peek, delivery
//! exactly once, ack, delete, clear, retract, mesh isolation, and a property over
//! interleaved queues, drains and peeks. The routing rules proper (re-attribution,
//! sibling sessions, backlogs, system scope, enforce-mode quarantine) are in
//! [`super::inbox_routing`].
//!
//! Every event carries a label as its metadata task id ([`inbox_event`]), so each
//! label has its own fingerprint and drains are compared by label.

use std::cell::Cell;

use agentmesh_core::events::names::{
    AGENT_GENERATING_COMPLETED, AGENT_READY, AGENT_STOPPED, MESH_DISPATCH_BLOCKED,
};
use agentmesh_core::events::{
    CoordinatorIdentity, DrainCounters, EmitHint, PendingEvent, ProtocolVersion, Scope,
    pending_event_fingerprint,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::json;

use super::support::*;
use crate::{DrainRequest, DuplicateReason, EventSettle, InboxEvent, Store};

const COMPLETED: &str = AGENT_GENERATING_COMPLETED;
const READY: &str = AGENT_READY;
const DISPATCH_BLOCKED: &str = MESH_DISPATCH_BLOCKED;

/// Queueing stamps v2 by event name (a completion unicast to its coordinator, agent:ready broadcast), keeps an eventId already stamped, and the count counts undrained events.
pub fn inbox_queue_stamps_the_v2_envelope_by_event_name(store: &dyn Store) {
    let owner = coordinator("mach_A", "run_1", Some("coord-s1"));
    assert_pending_count(store, MESH, 0, "before anything was queued");

    let (done_id, done) = queue_event(store, MESH, completion_for(MESH, "t1", 1, &owner), at(1));
    assert_eq!(done.envelope.protocol_version, Some(ProtocolVersion::V2), "expected a completion stamped v2");
    let done_event_id = done.envelope.event_id.clone().unwrap_or_default();
    assert!(
        !done_event_id.trim().is_empty(),
        "expected a stamped completion to get an eventId, got {done:?}"
    );
    assert_eq!(
        done.envelope.scope,
        Some(Scope::Unicast),
        "expected agent:generating_completed stamped unicast"
    );
    assert_eq!(
        done.envelope.intended_for.as_ref(),
        Some(&owner),
        "expected the completion addressed to targetCoordinatorDaemonId + targetCoordinatorSessionId + the hint's run id"
    );
    assert_eq!(
        done.envelope.dispatched_by.as_ref(),
        Some(&owner),
        "expected the completion dispatched by its coordinator"
    );

    let (ready_id, ready) =
        queue_event(store, MESH, targeted_at(inbox_event(MESH, READY, "r1", at(2)), &owner), at(2));
    assert_eq!(ready.envelope.protocol_version, Some(ProtocolVersion::V2), "expected agent:ready stamped v2");
    assert_eq!(ready.envelope.scope, Some(Scope::Broadcast), "expected agent:ready stamped broadcast");
    assert_eq!(ready.envelope.intended_for, None, "expected a broadcast to carry no intendedFor");
    let ready_event_id = ready.envelope.event_id.clone().unwrap_or_default();
    assert!(
        !ready_event_id.trim().is_empty() && ready_event_id != done_event_id,
        "expected every stamped event to get its own eventId, got {ready_event_id:?} after {done_event_id:?}"
    );

    // A relayed event arrives stamped: it keeps its eventId and its envelope, whatever the hint says.
    let relayed = PendingEvent::from_value(json!({
        "event": COMPLETED,
        "meshId": MESH,
        "nodeLabel": "Node 'n2'",
        "nodeId": "n2",
        "metadataEvent": { "taskId": "t2", "finalSummary": "relayed summary" },
        "queuedAt": at(3).millis(),
        "targetCoordinatorDaemonId": "mach_A",
        "protocolVersion": "2.0",
        "eventId": "evt-relayed-1",
        "scope": "unicast",
        "dispatchedBy": owner.to_json(),
        "intendedFor": owner.to_json(),
    }))
    .unwrap_or_else(|err| panic!("expected the relayed event to parse, got {err}"));
    let hint = EmitHint { scope: Some(Scope::System), ..EmitHint::default() };
    let (relayed_id, stored) = queue_event(store, MESH, (relayed.clone(), hint), at(3));
    assert_eq!(stored.envelope, relayed.envelope, "expected an already stamped event to keep its envelope");

    let ids = [done_id.clone(), ready_id, relayed_id];
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "expected distinct row ids, got {ids:?}"
    );
    assert_pending_count(store, MESH, 3, "after three events were queued");

    let peeked = peek(store, MESH, &drain_request(&owner));
    assert_eq!(row_ids(&peeked), ids, "expected the owner to see the three events under their row ids");
    let stored_done = &peeked[0];
    assert_eq!(
        stored_done.event.parse()["protocolVersion"],
        json!("2.0"),
        "expected the stored completion to be v2"
    );
    assert_eq!(
        stored_done.event.parse()["eventId"],
        json!(done_event_id),
        "expected the stored eventId as returned"
    );
    assert_eq!(stored_done.event.parse()["scope"], json!("unicast"), "expected the stored scope as returned");
    assert_eq!(
        stored_done.event.parse()["intendedFor"],
        owner.to_json(),
        "expected the stored addressee as returned"
    );
    assert_eq!(
        stored_done.fingerprint.as_deref(),
        Some(pending_event_fingerprint(&done).as_str()),
        "expected the completion stored under its content fingerprint"
    );
    assert_eq!(stored_done.queued_at_ms, at(1).millis(), "expected the completion's queuedAt");
    assert_eq!(
        peeked[1].event.parse()["scope"],
        json!("broadcast"),
        "expected the stored agent:ready to be a broadcast"
    );
    assert_eq!(
        peeked[2].event.parse()["eventId"],
        json!("evt-relayed-1"),
        "expected the relayed eventId stored as given"
    );

    let mut one = drain_request(&owner);
    one.limit = Some(1);
    assert_labels(&drain(store, MESH, &one, at(4)).events, &["t1"], "a drain of one");
    assert_pending_count(store, MESH, 2, "after one of three events was drained");
    assert_eq!(
        row_ids(&peek(store, MESH, &drain_request(&owner))),
        ids[1..],
        "expected the drained row gone"
    );
}

/// A fingerprint in use refuses a new event with it (Duplicate(Fingerprint)), whether that event is still queued or already drained.
pub fn inbox_a_used_fingerprint_refuses_a_new_event_drained_or_not(store: &dyn Store) {
    let me = me();
    queue_completion(store, MESH, "t1", 1, &me);

    // A second producer reports the same completion: another node, a later time, the same task.
    let mut again = inbox_event(MESH, COMPLETED, "t1", at(2));
    again.node_id = Some("n2".to_owned());
    assert_duplicate(
        store,
        MESH,
        targeted_at(again.clone(), &me),
        at(2),
        DuplicateReason::Fingerprint,
        "its fingerprint belongs to an undrained event",
    );
    assert_pending_count(store, MESH, 1, "after a duplicate was refused");

    assert_labels(&drain(store, MESH, &drain_request(&me), at(3)).events, &["t1"], "the drain");
    assert_duplicate(
        store,
        MESH,
        targeted_at(again, &me),
        at(4),
        DuplicateReason::Fingerprint,
        "its fingerprint belongs to a drained event",
    );
    assert_pending_count(store, MESH, 0, "after a duplicate of a drained event was refused");
    assert_labels(&drain(store, MESH, &drain_request(&me), at(5)).events, &[], "a drain after the refusal");

    // A weak report of the same task has a fingerprint of its own.
    let mut weak = inbox_event(MESH, COMPLETED, "t1", at(6));
    weak.metadata_event.insert("evidenceLevel".to_owned(), json!("weak"));
    queue_event(store, MESH, targeted_at(weak, &me), at(6));
    assert_pending_count(store, MESH, 1, "after a weak completion of the same task was queued");
}

/// An event queued again under a drained eventId but a new fingerprint is skipped by the drain: not delivered, marked drained, counted in v2DedupSkipped; so is a second row of one eventId within a drain.
pub fn inbox_a_drained_event_id_is_skipped_when_queued_again(store: &dyn Store) {
    let me = me();
    let (_, stored) = queue_event(store, MESH, completion_for(MESH, "t1", 1, &me), at(1));
    let first = drain(store, MESH, &drain_request(&me), at(2));
    assert_labels(&first.events, &["t1"], "the first drain");

    let mut relayed = stored.clone();
    relayed.metadata_event.insert("taskId".to_owned(), json!("t1-relayed"));
    relayed.queued_at = at(3);
    let (_, requeued) = queue_event(store, MESH, (relayed, EmitHint::default()), at(3));
    assert_eq!(
        requeued.envelope.event_id, stored.envelope.event_id,
        "expected the re-queued event to keep its eventId"
    );
    assert_pending_count(store, MESH, 1, "after the event was queued again");
    assert_labels(&peek(store, MESH, &drain_request(&me)), &[], "a peek (a drain would skip it)");

    let skipped = drain(store, MESH, &drain_request(&me), at(4));
    assert_labels(&skipped.events, &[], "the drain after the re-queue");
    assert_eq!(
        skipped.counters,
        drain_counters(0, 0, 1),
        "expected the re-queued event counted in v2DedupSkipped alone"
    );
    assert!(skipped.quarantined.is_empty(), "expected nothing quarantined, got {:?}", skipped.quarantined);
    assert_pending_count(store, MESH, 0, "after the skipped event was marked drained");
    let after = drain(store, MESH, &drain_request(&me), at(5));
    assert_eq!(
        after.counters,
        DrainCounters::default(),
        "expected a marked event to be no candidate any more"
    );

    // Two undrained rows of one eventId: the first is delivered, the second skipped.
    let (_, t2) = queue_event(store, MESH, completion_for(MESH, "t2", 6, &me), at(6));
    let mut copy = t2.clone();
    copy.metadata_event.insert("taskId".to_owned(), json!("t2-copy"));
    copy.queued_at = at(7);
    queue_event(store, MESH, (copy, EmitHint::default()), at(7));
    let batch = drain(store, MESH, &drain_request(&me), at(8));
    assert_labels(&batch.events, &["t2"], "a drain of two rows with one eventId");
    assert_eq!(batch.counters, drain_counters(1, 0, 1), "expected one delivery and one dedup skip");
    assert_pending_count(store, MESH, 0, "after both rows of one eventId were handled");
}

/// An only_events drain reaches a matching event behind 150 non-matching ones; Some(empty) drains nothing.
pub fn inbox_only_events_reach_past_non_matching_events(store: &dyn Store) {
    let me = me();
    for i in 0..150 {
        let ready = inbox_event(MESH, READY, &format!("ready-{i:03}"), at(i));
        queue_event(store, MESH, dispatched_by(ready, &me), at(i));
    }
    queue_completion(store, MESH, "done", 200, &me);

    let nothing = DrainRequest { only_events: Some(Vec::new()), ..drain_request(&me) };
    let empty = drain(store, MESH, &nothing, at(201));
    assert_labels(&empty.events, &[], "a drain with an empty only_events");
    assert_eq!(empty.counters, DrainCounters::default(), "expected an empty only_events to route nothing");
    assert_pending_count(store, MESH, 151, "after a drain with an empty only_events");
    assert_labels(&peek(store, MESH, &nothing), &[], "a peek with an empty only_events");

    let completions = DrainRequest { only_events: Some(vec![COMPLETED.to_owned()]), ..drain_request(&me) };
    assert_labels(&peek(store, MESH, &completions), &["done"], "a peek of completions only");
    let matching = drain(store, MESH, &completions, at(202));
    assert_labels(&matching.events, &["done"], "a drain of completions only");
    assert_pending_count(store, MESH, 150, "after the one completion was drained");

    let readies = DrainRequest { only_events: Some(vec![READY.to_owned()]), ..drain_request(&me) };
    let first = drain(store, MESH, &readies, at(203));
    let expected: Vec<String> = (0..100).map(|i| format!("ready-{i:03}")).collect();
    assert_eq!(labels(&first.events), expected, "expected the 100 oldest agent:ready events");
}

/// An only_events drain of the coordinator's own unicasts takes the matching ones from between the ones it leaves, and leaves those queued, in order, for the next drain.
pub fn inbox_only_events_take_matches_from_between_the_events_they_leave(store: &dyn Store) {
    let me = me();
    for (i, name) in [COMPLETED, AGENT_STOPPED, COMPLETED, AGENT_STOPPED, COMPLETED].into_iter().enumerate() {
        let secs = i as i64 + 1;
        queue_event(
            store,
            MESH,
            targeted_at(inbox_event(MESH, name, &format!("e{secs}"), at(secs)), &me),
            at(secs),
        );
    }
    let completions = DrainRequest { only_events: Some(vec![COMPLETED.to_owned()]), ..drain_request(&me) };
    let first = drain(store, MESH, &completions, at(10));
    assert_labels(&first.events, &["e1", "e3", "e5"], "a drain of completions from between failures");
    assert_pending_count(store, MESH, 2, "after the completions were drained");
    let rest = drain(store, MESH, &drain_request(&me), at(11));
    assert_labels(&rest.events, &["e2", "e4"], "the next drain");
    assert_labels(&drain(store, MESH, &drain_request(&me), at(12)).events, &[], "a third drain");
}

/// A peek returns what a drain would deliver now (routing, mode and limit applied) and marks nothing: the drain afterwards returns the same events.
pub fn inbox_peek_shows_what_a_drain_would_deliver_and_changes_nothing(store: &dyn Store) {
    let me = me();
    queue_completion(store, MESH, "u1", 1, &me);
    queue_event(store, MESH, dispatched_by(inbox_event(MESH, READY, "b1", at(2)), &elsewhere()), at(2));
    queue_event(store, MESH, dispatched_by(inbox_event(MESH, COMPLETED, "x1", at(3)), &elsewhere()), at(3));
    queue_event(store, MESH, v1_completion(MESH, "v1", 4), at(4));
    let ledger_before = ledger_entries(store, MESH);

    let first = peek(store, MESH, &drain_request(&me));
    assert_labels(&first, &["u1", "b1", "v1"], "a peek in accept mode");
    assert_eq!(peek(store, MESH, &drain_request(&me)), first, "expected a second peek to see the same");
    let enforce = DrainRequest { enforce: true, ..drain_request(&me) };
    assert_labels(&peek(store, MESH, &enforce), &["u1", "b1"], "a peek in enforce mode");
    let limited = DrainRequest { limit: Some(1), ..drain_request(&me) };
    assert_labels(&peek(store, MESH, &limited), &["u1"], "a peek with limit 1");
    assert_pending_count(store, MESH, 4, "after the peeks");
    assert_eq!(ledger_entries(store, MESH), ledger_before, "expected peeks to write nothing to the ledger");

    let drained = drain(store, MESH, &drain_request(&me), at(5));
    assert_eq!(drained.events, first, "expected the drain to deliver exactly what the peek showed");
    assert_pending_count(store, MESH, 1, "after the drain (the other machine's unicast stays)");
    assert_labels(&peek(store, MESH, &drain_request(&me)), &[], "a peek after the drain");
    assert_labels(&peek(store, MESH, &drain_request(&elsewhere())), &["x1"], "a peek by the other machine");
}

/// Delivered events are delivered once: a second drain, by the same or any other coordinator, returns nothing.
pub fn inbox_delivered_events_are_never_delivered_again(store: &dyn Store) {
    let me = me();
    queue_completion(store, MESH, "t1", 1, &me);
    queue_event(store, MESH, dispatched_by(inbox_event(MESH, READY, "r1", at(2)), &me), at(2));
    queue_event(store, MESH, v1_completion(MESH, "v1", 3), at(3));

    let first = drain(store, MESH, &drain_request(&me), at(4));
    assert_labels(&first.events, &["t1", "r1", "v1"], "the first drain");
    for (who, drainer) in [
        ("the same coordinator", me),
        ("a restarted run", coordinator("mach_A", "run_2", None)),
        ("another machine", elsewhere()),
    ] {
        let again = drain(store, MESH, &drain_request(&drainer), at(5));
        assert_labels(&again.events, &[], &format!("a later drain by {who}"));
        assert_eq!(
            again.counters,
            DrainCounters::default(),
            "expected drained events to be no candidates for {who}"
        );
    }
    assert_pending_count(store, MESH, 0, "after everything was delivered");
}

/// Ack marks the given rows drained and returns how many it changed; an acked row
/// is never handed out again and keeps its fingerprint.
pub fn inbox_ack_counts_what_it_changes(store: &dyn Store) {
    let me = me();
    let ids: Vec<String> = (1..=5).map(|i| queue_completion(store, MESH, &format!("e{i}"), i, &me)).collect();
    // Out of order, and one of them twice: each row counts once.
    let two = [ids[1].clone(), ids[0].clone(), ids[1].clone()];
    let acked = ok(store.settle_pending_events(MESH, EventSettle::Ack(&two)), "ack of e2, e1 and e2 again");
    assert_eq!(acked, 2, "expected ack of two undrained rows (one named twice) to change 2");
    assert_pending_count(store, MESH, 3, "after two rows were acked");
    let again = ok(
        store.settle_pending_events(MESH, EventSettle::Ack(&[ids[0].clone(), "no-such-row".to_owned()])),
        "re-ack",
    );
    assert_eq!(again, 0, "expected ack of a drained row and an unknown id to change nothing");

    assert_labels(
        &drain(store, MESH, &drain_request(&me), at(12)).events,
        &["e3", "e4", "e5"],
        "the drain after the acks",
    );
    assert_duplicate(
        store,
        MESH,
        completion_for(MESH, "e2", 15, &me),
        at(15),
        DuplicateReason::Fingerprint,
        "e2 was acked",
    );
}

/// Deleting events by id removes them, drained or not, with their place in the inbox and
/// their fingerprints (the original's `deletePendingEventsById`): it counts the rows it
/// deleted, a deleted event is never drained, its fingerprint takes a new event, and an
/// unknown id or another mesh's event deletes nothing.
pub fn inbox_events_are_deleted_by_id(store: &dyn Store) {
    let me = me();
    let ids: Vec<String> = (1..=3).map(|i| queue_completion(store, MESH, &format!("e{i}"), i, &me)).collect();
    let theirs = queue_completion(store, OTHER_MESH, "e9", 4, &me);
    assert_labels(
        &drain(store, MESH, &DrainRequest { limit: Some(1), ..drain_request(&me) }, at(5)).events,
        &["e1"],
        "the drain of one event",
    );
    assert_eq!(ok(store.settle_pending_events(MESH, EventSettle::Delete(&[])), "delete of no ids"), 0);
    let named = [ids[0].clone(), ids[1].clone(), ids[1].clone(), "no-such-row".to_owned(), theirs.clone()];
    let deleted = ok(
        store.settle_pending_events(MESH, EventSettle::Delete(&named)),
        "delete of e1, e2, an unknown and B's",
    );
    assert_eq!(deleted, 2, "expected the drained e1 and the undrained e2 deleted, nothing else");
    assert_pending_count(store, MESH, 1, "after e2 was deleted");
    assert_pending_count(store, OTHER_MESH, 1, "in the other mesh");
    assert_eq!(
        ok(store.settle_pending_events(MESH, EventSettle::Delete(&named)), "the same delete again"),
        0
    );
    assert_labels(
        &drain(store, MESH, &drain_request(&me), at(8)).events,
        &["e3"],
        "the drain after the delete",
    );
    // The fingerprints of deleted events are free again; e3's, drained, is not.
    queue_event(store, MESH, completion_for(MESH, "e1", 20, &me), at(20));
    queue_event(store, MESH, completion_for(MESH, "e2", 21, &me), at(21));
    assert_duplicate(
        store,
        MESH,
        completion_for(MESH, "e3", 22, &me),
        at(22),
        DuplicateReason::Fingerprint,
        "e3 was drained, not deleted",
    );
    assert_labels(
        &drain(store, OTHER_MESH, &drain_request(&me), at(23)).events,
        &["e9"],
        "the other mesh's drain",
    );
}

/// Meshes are isolated: another mesh never sees, drains, acks or retracts a mesh's events, and fingerprints and drained eventIds count per mesh.
pub fn inbox_meshes_are_isolated(store: &dyn Store) {
    let me = me();
    let (a_id, a_event) = queue_event(store, MESH, completion_for(MESH, "t1", 1, &me), at(1));
    let blocked = inbox_event(MESH, DISPATCH_BLOCKED, "t1", at(2));
    queue_event(store, MESH, targeted_at(blocked, &me), at(2));

    assert_pending_count(store, OTHER_MESH, 0, "in the other mesh");
    assert_labels(&peek(store, OTHER_MESH, &drain_request(&me)), &[], "a peek in the other mesh");
    assert_labels(
        &drain(store, OTHER_MESH, &drain_request(&me), at(3)).events,
        &[],
        "a drain in the other mesh",
    );
    let ids = [a_id.clone()];
    assert_eq!(
        ok(store.settle_pending_events(OTHER_MESH, EventSettle::Ack(&ids)), "ack elsewhere"),
        0,
        "expected no ack across meshes"
    );
    assert_eq!(
        ok(
            store.settle_pending_events(OTHER_MESH, EventSettle::RetractDispatchBlocked("t1")),
            "retract elsewhere"
        ),
        0,
        "expected no retract across meshes"
    );
    assert_pending_count(store, MESH, 2, "after the other mesh acked and retracted");

    // The same completion in the other mesh is no duplicate.
    queue_event(store, OTHER_MESH, completion_for(OTHER_MESH, "t1", 4, &me), at(4));
    assert_labels(
        &drain(store, MESH, &drain_request(&me), at(5)).events,
        &["t1", "t1"],
        "the drain of the first mesh",
    );
    // An eventId drained in the first mesh is not drained in the other.
    let mut relayed = a_event;
    relayed.mesh_id = OTHER_MESH.to_owned();
    relayed.metadata_event.insert("taskId".to_owned(), json!("t1-relayed"));
    relayed.queued_at = at(6);
    queue_event(store, OTHER_MESH, (relayed, EmitHint::default()), at(6));
    let other = drain(store, OTHER_MESH, &drain_request(&me), at(7));
    assert_labels(&other.events, &["t1", "t1-relayed"], "the drain of the other mesh");
    assert_eq!(
        other.counters.v2_dedup_skipped, 0,
        "expected eventIds deduplicated per mesh, counters {:?}",
        other.counters
    );
}

/// Retract deletes the undelivered mesh:dispatch_blocked events of one task and counts them; a delivered one and other tasks' events stay.
pub fn inbox_retract_removes_only_undelivered_dispatch_blocked_events_of_the_task(store: &dyn Store) {
    let me = me();
    let blocked = |task: &str, secs: i64| {
        let mut event = inbox_event(MESH, DISPATCH_BLOCKED, task, at(secs));
        event.metadata_event.insert("reason".to_owned(), json!("pin_expired"));
        targeted_at(event, &me)
    };
    let (delivered_id, delivered) = queue_event(store, MESH, blocked("t1", 1), at(1));
    assert_eq!(
        delivered.envelope.scope,
        Some(Scope::Unicast),
        "expected mesh:dispatch_blocked stamped unicast"
    );
    let first = drain(store, MESH, &drain_request(&me), at(2));
    assert_eq!(row_ids(&first.events), [delivered_id], "expected the first alert delivered");

    queue_event(store, MESH, blocked("t1", 3), at(3));
    queue_event(store, MESH, blocked("t1", 4), at(4));
    let (other_task, _) = queue_event(store, MESH, blocked("t2", 5), at(5));
    let (completion, _) = queue_event(store, MESH, completion_for(MESH, "t1", 6, &me), at(6));

    assert_eq!(
        ok(store.settle_pending_events(MESH, EventSettle::RetractDispatchBlocked("t1")), "retract of t1"),
        2,
        "expected t1's two queued alerts retracted"
    );
    assert_pending_count(store, MESH, 2, "after the retract");
    assert_eq!(
        ok(store.settle_pending_events(MESH, EventSettle::RetractDispatchBlocked("t1")), "a second retract"),
        0,
        "expected nothing left to retract"
    );
    assert_eq!(
        ok(store.settle_pending_events(MESH, EventSettle::RetractDispatchBlocked("t9")), "retract of t9"),
        0,
        "expected nothing for a task without alerts"
    );
    assert_duplicate(
        store,
        MESH,
        blocked("t1", 1),
        at(7),
        DuplicateReason::Fingerprint,
        "the delivered alert is kept",
    );

    let rest = drain(store, MESH, &drain_request(&me), at(8));
    assert_eq!(
        row_ids(&rest.events),
        [other_task, completion],
        "expected t2's alert and t1's completion left"
    );
}

/// Drains hand out events oldest first by queuedAt, whatever the queue order, at most `limit` per drain (100 when unset).
pub fn inbox_drains_oldest_first_at_most_limit_events(store: &dyn Store) {
    let me = me();
    for secs in [30, 10, 50, 20, 40] {
        queue_completion(store, MESH, &format!("at-{secs}"), secs, &me);
    }
    let two = DrainRequest { limit: Some(2), ..drain_request(&me) };
    let first = drain(store, MESH, &two, at(60));
    assert_labels(&first.events, &["at-10", "at-20"], "the first drain of two");
    let queued: Vec<i64> = first.events.iter().map(|e| e.queued_at_ms).collect();
    assert_eq!(queued, [at(10).millis(), at(20).millis()], "expected each event's queuedAt");
    assert_labels(&drain(store, MESH, &two, at(61)).events, &["at-30", "at-40"], "the second drain of two");
    assert_labels(&drain(store, MESH, &two, at(62)).events, &["at-50"], "the third drain of two");

    for i in 0..120 {
        queue_completion(store, MESH, &format!("bulk-{i:03}"), 100 + i, &me);
    }
    let full = drain(store, MESH, &drain_request(&me), at(300));
    let expected: Vec<String> = (0..100).map(|i| format!("bulk-{i:03}")).collect();
    assert_eq!(labels(&full.events), expected, "expected the default limit of 100, oldest first");
    assert_pending_count(store, MESH, 20, "after a drain of 100 of 120");
    let rest: Vec<String> = (100..120).map(|i| format!("bulk-{i:03}")).collect();
    assert_eq!(
        labels(&drain(store, MESH, &drain_request(&me), at(301)).events),
        rest,
        "expected the last 20"
    );
}

// ── The routing property ─────────────────────────────────────────────────────

/// The three coordinators of the property, on two machines: 0 and 1 on `mach_A`
/// (under two id forms), 2 on `mach_B`.
///
/// In the `sessions` layout no coordinator has a real run id (the daemon-form
/// fallback), so 0 and 1 are sibling sessions of one machine and each unicast
/// may go to its addressee alone. In the `restarts` layout every coordinator has
/// a real run id, so 0 and 1 are two runs on one machine: a unicast for either
/// may be re-attributed to the other while its addressee is not live (never
/// drained, ended, or not seen for [`crate::COORDINATOR_PRESENCE_TTL_MS`]), and
/// never to machine B.
fn property_coordinators(restarts: bool) -> [CoordinatorIdentity; 3] {
    if restarts {
        [
            coordinator("mach_A", "run-a0", None),
            coordinator("daemon_mach_A", "run-a1", Some("coord-s1")),
            coordinator("standalone_mach_B", "run-b", Some("coord-s2")),
        ]
    } else {
        [
            coordinator("mach_A", "mach_A", Some("coord-s0")),
            coordinator("daemon_mach_A", "daemon_mach_A", Some("coord-s1")),
            coordinator("mach_B", "mach_B", Some("coord-s2")),
        ]
    }
}

/// Whether the model lets a unicast addressed to coordinator `to` go to
/// `drainer` at some time: to its addressee, or re-attributed on its machine.
fn may_receive(restarts: bool, to: usize, drainer: usize) -> bool {
    let machine = |c: usize| if c < 2 { 'A' } else { 'B' };
    to == drainer || (restarts && machine(to) == machine(drainer))
}

/// The model of a coordinator's presence record: when it was last seen (a drain
/// refreshes a record older than an eighth of the TTL) and whether it ended.
#[derive(Debug, Clone, Copy, Default)]
struct PresenceModel {
    last_seen_ms: Option<i64>,
    ended: bool,
}

impl PresenceModel {
    fn live_at(self, now_ms: i64) -> bool {
        !self.ended
            && self.last_seen_ms.is_some_and(|seen| seen >= now_ms - crate::COORDINATOR_PRESENCE_TTL_MS)
    }

    fn drained_at(&mut self, now_ms: i64) {
        let fresh = !self.ended
            && self.last_seen_ms.is_some_and(|seen| seen >= now_ms - crate::COORDINATOR_PRESENCE_TTL_MS / 8);
        if !fresh {
            self.last_seen_ms = Some(self.last_seen_ms.map_or(now_ms, |seen| seen.max(now_ms)));
            self.ended = false;
        }
    }
}

/// One step of the property.
#[derive(Debug, Clone)]
enum Step {
    /// Queue a completion for coordinator `to`, through the target fields or the envelope alone.
    Unicast { to: usize, targeted: bool },
    /// Queue an agent:ready dispatched by coordinator `by` (no target: everyone's).
    Broadcast { by: usize },
    /// Drain as coordinator `by`.
    Drain { by: usize, limit: Option<u32> },
    /// Peek as coordinator `by`.
    Peek { by: usize, limit: Option<u32> },
    /// Let 50 seconds pass (presence goes stale after a few).
    Pause,
    /// Coordinator `by` exits gracefully.
    End { by: usize },
}

/// A random step: unicasts most often, then drains, broadcasts and peeks, with a
/// limit of 1 to 3 or the default.
fn step() -> impl Strategy<Value = Step> {
    let limit = prop::option::of(1u32..4);
    prop_oneof![
        3 => (0usize..3, any::<bool>()).prop_map(|(to, targeted)| Step::Unicast { to, targeted }),
        1 => (0usize..3).prop_map(|by| Step::Broadcast { by }),
        2 => (0usize..3, limit.clone()).prop_map(|(by, limit)| Step::Drain { by, limit }),
        1 => (0usize..3, limit).prop_map(|(by, limit)| Step::Peek { by, limit }),
        1 => Just(Step::Pause),
        1 => (0usize..3).prop_map(|by| Step::End { by }),
    ]
}

/// An event of the model: its label, row id, addressee (`None` for broadcast) and
/// the coordinator it went to.
struct Modelled {
    label: String,
    row: String,
    to: Option<usize>,
    delivered_to: Option<usize>,
}

/// What the model says a drain by `by` delivers now: the undelivered events it may
/// receive, oldest first, at most `limit`. A broadcast is anyone's until the first
/// drain delivers it, and then drained for everyone: one row, delivered once. A
/// unicast for another coordinator goes to `by` only while its addressee is not
/// live at `now_ms`.
fn expected_for(
    model: &[Modelled],
    presence: &[PresenceModel; 3],
    now_ms: i64,
    restarts: bool,
    by: usize,
    limit: Option<u32>,
) -> Vec<usize> {
    let limit = limit.map_or(100, |l| l as usize);
    let receives = |to: usize| to == by || (may_receive(restarts, to, by) && !presence[to].live_at(now_ms));
    (0..model.len())
        .filter(|&i| model[i].delivered_to.is_none() && model[i].to.is_none_or(receives))
        .take(limit)
        .collect()
}

/// Runs one case of the property in a mesh of its own.
fn run_property_case(
    store: &dyn Store,
    mesh: &str,
    restarts: bool,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let coordinators = property_coordinators(restarts);
    let mut model: Vec<Modelled> = Vec::new();
    let request = |by: usize, limit: Option<u32>| DrainRequest { limit, ..drain_request(&coordinators[by]) };
    let check = |model: &[Modelled],
                 got: &[InboxEvent],
                 expected: &[usize],
                 what: &str|
     -> Result<(), TestCaseError> {
        let want: Vec<&str> = expected.iter().map(|&i| model[i].label.as_str()).collect();
        prop_assert_eq!(labels(got), want, "{} in {}", what, mesh);
        for (event, &i) in got.iter().zip(expected) {
            prop_assert_eq!(&event.id, &model[i].row, "row id of {} in {}", &model[i].label, mesh);
        }
        Ok(())
    };

    let mut presence = [PresenceModel::default(); 3];
    let mut paused = 0;
    for (n, step) in steps.iter().enumerate() {
        let now = at(n as i64 + 1 + paused);
        let label = format!("e{n:02}");
        match *step {
            Step::Unicast { to, targeted } => {
                let event = inbox_event(mesh, COMPLETED, &label, now);
                let addressed = if targeted {
                    targeted_at(event, &coordinators[to])
                } else {
                    dispatched_by(event, &coordinators[to])
                };
                let (row, _) = queue_event(store, mesh, addressed, now);
                model.push(Modelled { label, row, to: Some(to), delivered_to: None });
            }
            Step::Broadcast { by } => {
                let (row, _) = queue_event(
                    store,
                    mesh,
                    dispatched_by(inbox_event(mesh, READY, &label, now), &coordinators[by]),
                    now,
                );
                model.push(Modelled { label, row, to: None, delivered_to: None });
            }
            Step::Drain { by, limit } => {
                let expected = expected_for(&model, &presence, now.millis(), restarts, by, limit);
                let outcome = drain(store, mesh, &request(by, limit), now);
                check(&model, &outcome.events, &expected, &format!("step {n}: drain by coordinator {by}"))?;
                for i in expected {
                    model[i].delivered_to = Some(by);
                }
                presence[by].drained_at(now.millis());
            }
            Step::Peek { by, limit } => {
                // A peek reads no clock: it judges liveness at the newest presence
                // instant recorded for the mesh.
                let newest = presence.iter().filter_map(|p| p.last_seen_ms).max().unwrap_or(i64::MIN / 2);
                let expected = expected_for(&model, &presence, newest, restarts, by, limit);
                let got = peek(store, mesh, &request(by, limit));
                check(&model, &got, &expected, &format!("step {n}: peek by coordinator {by}"))?;
            }
            Step::Pause => paused += 49,
            Step::End { by } => {
                let had = store
                    .coordinator_presence(mesh, &coordinators[by], true, now)
                    .expect("end_coordinator must not error");
                prop_assert_eq!(had, presence[by].last_seen_ms.is_some(), "end_coordinator of {}", by);
                if had {
                    presence[by].ended = true;
                }
            }
        }
    }

    let end = at(steps.len() as i64 + 1 + paused);
    for by in 0..coordinators.len() {
        let expected = expected_for(&model, &presence, end.millis(), restarts, by, None);
        let outcome = drain(store, mesh, &request(by, None), end);
        presence[by].drained_at(end.millis());
        check(&model, &outcome.events, &expected, &format!("final drain by coordinator {by}"))?;
        for i in expected {
            model[i].delivered_to = Some(by);
        }
    }
    for event in &model {
        if let Some(to) = event.to {
            let went = event.delivered_to;
            prop_assert!(
                went.is_some_and(|by| may_receive(restarts, to, by)),
                "expected unicast {} for coordinator {} delivered after every coordinator drained, it went to {:?}",
                event.label,
                to,
                went
            );
        }
    }
    prop_assert_eq!(pending_count(store, mesh), 0, "undrained events left in {}", mesh);
    Ok(())
}

/// For any interleaving of unicasts (3 coordinators on 2 machines), broadcasts, drains, peeks, pauses and coordinator exits, each drain and peek hands out exactly what the routing model says: every event at most once, a unicast only on its addressee's terms (another run on its machine inherits it only while it is not live), and every unicast once all have drained.
pub fn inbox_property_every_event_reaches_its_coordinators_at_most_once(store: &dyn Store) {
    let config = Config { cases: 32, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let case = Cell::new(0u32);
    let strategy = (any::<bool>(), prop::collection::vec(step(), 1..40));
    let result = runner.run(&strategy, |(restarts, steps)| {
        let n = case.get();
        case.set(n + 1);
        run_property_case(store, &format!("mesh-prop-{n}"), restarts, &steps)
    });
    if let Err(failure) = result {
        panic!("expected the inbox to follow the routing model: {failure}");
    }
}
