//! The inbox's retention sweep and held-event requeues, which the conformance
//! suite does not exercise.

use agentmesh_core::LedgerQuery;
use agentmesh_core::events::names::AGENT_GENERATING_COMPLETED;
use agentmesh_store::conformance::support::{
    at, coordinator, drain, drain_request, inbox_event, queue_event, targeted_at,
};
use agentmesh_store::{DrainRequest, HeldRequeue, InboxStore, LedgerStore, PruneReport};

use crate::support::TestDb;

/// The sweep deletes old drained events, expires old undrained ones of every
/// mesh with an `event_held` entry each, keeps the never-expiring ones; a held
/// event requeued comes back once.
#[test]
fn the_retention_sweep_holds_expired_events_and_a_requeue_brings_one_back() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let store = &db.store;
    let me = coordinator("mach_A", "run_1", None);
    let one = DrainRequest { limit: Some(1), ..drain_request(&me) };
    let queue = |mesh: &str, name: &str, label: &str, secs: i64| {
        queue_event(store, mesh, targeted_at(inbox_event(mesh, name, label, at(secs)), &me), at(secs)).0
    };
    let drained = queue("m1", "mesh:dispatch_blocked", "a", 0);
    let held = queue("m1", "mesh:dispatch_blocked", "b", 1);
    queue("m1", AGENT_GENERATING_COMPLETED, "c", 2);
    queue("m2", "mesh:dispatch_blocked", "d", 0);
    let first = drain(store, "m1", &one, at(5));
    assert_eq!(first.events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), [drained.as_str()]);

    let report = store.prune_pending_events(at(100), at(100), at(200)).expect("the sweep runs");
    assert_eq!(report, PruneReport { drained_expired: 1, undrained_expired: 2, terminal_exempt: 1 });
    assert_eq!(store.pending_event_count("m1").unwrap(), 1);
    assert_eq!(store.pending_event_count("m2").unwrap(), 0);

    let held_kind = LedgerQuery { kinds: vec!["event_held".to_owned()], ..LedgerQuery::default() };
    let entries = store.read_ledger_ordered("m1", &held_kind).unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].payload.to_string().contains(&held), "{:?}", entries[0]);
    assert_eq!(store.read_ledger_ordered("m2", &held_kind).unwrap().len(), 1);

    assert_eq!(store.requeue_held_event("m1", &entries[0].id, at(300)).unwrap(), HeldRequeue::Requeued);
    assert_eq!(store.pending_event_count("m1").unwrap(), 2);
    // Queued again, the event is a duplicate of itself.
    assert_eq!(store.requeue_held_event("m1", &entries[0].id, at(301)).unwrap(), HeldRequeue::NotNeeded);
    let requeued = LedgerQuery { kinds: vec!["event_held_requeued".to_owned()], ..LedgerQuery::default() };
    assert_eq!(store.read_ledger_ordered("m1", &requeued).unwrap().len(), 2);
    assert!(store.requeue_held_event("m2", &entries[0].id, at(302)).is_err(), "another mesh's entry");

    // The requeued event keeps its queue time, so the next sweep holds it again.
    let again = store.prune_pending_events(at(100), at(100), at(400)).unwrap();
    assert_eq!(again, PruneReport { drained_expired: 0, undrained_expired: 1, terminal_exempt: 1 });
}

/// An event an enforce-mode drain quarantined keeps its row; a requeue puts
/// that row back on the queue, and an accept-mode drain then delivers it.
#[test]
fn a_quarantined_event_requeued_is_delivered_again() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let store = &db.store;
    let me = coordinator("mach_A", "run_1", None);
    let mut bare = inbox_event("m1", "task_completed", "bare", at(1));
    bare.metadata_event.insert("finalSummary".to_owned(), serde_json::json!("summary of bare"));
    let (id, _) = queue_event(store, "m1", (bare, agentmesh_core::events::EmitHint::default()), at(1));
    let enforce = DrainRequest { enforce: true, ..drain_request(&me) };
    let held = drain(store, "m1", &enforce, at(2));
    assert_eq!(held.quarantined, std::slice::from_ref(&id));
    assert_eq!(store.pending_event_count("m1").unwrap(), 0);

    let held_kind = LedgerQuery { kinds: vec!["event_held".to_owned()], ..LedgerQuery::default() };
    let entries = store.read_ledger_ordered("m1", &held_kind).unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(store.requeue_held_event("m1", &entries[0].id, at(3)).unwrap(), HeldRequeue::Requeued);
    assert_eq!(
        store.requeue_held_event("m1", &entries[0].id, at(4)).unwrap(),
        HeldRequeue::NotNeeded,
        "it is queued already"
    );
    let again = drain(store, "m1", &drain_request(&me), at(5));
    assert_eq!(again.events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), [id.as_str()]);
}
