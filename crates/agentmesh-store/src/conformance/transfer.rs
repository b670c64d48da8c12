//! Copying meshes ([`TransferStore`]): every kind of record survives an export
//! and an import as it was, pages of any size read the same records in the same
//! order, a second copy copies nothing, and a copy adds no ledger entry.
//!
//! Unlike the other rules these take two fresh stores, a source and a target,
//! which may be of different backends; a backend calls them from its own tests.

use agentmesh_core::{
    CompletionConflict, CompletionFingerprint, DeliveryStatus, DirectDispatch, DispatchStatus, IdleSession,
    LedgerQuery, NewMission, SessionDelivery,
};
use serde_json::json;

use super::support::{MESH, OTHER_MESH, at, dependent_task, lease, new_task, settled, worker};
use crate::transfer::{
    EventRoute, KindTally, PresenceRecord, RecordKind, Records, StoredEvent, ToolCallRecord, TransferStore,
    copy_archive, copy_kind,
};
use crate::{CompletionReport, IdScope, Outcome, RecordedToolCall, Store};

/// Fills `store`'s [`MESH`] with records of every kind: tasks through the queue
/// (a dependency, a claim, a completion) and one as a record (with an unknown
/// payload field), a mission, and the rest as records.
pub fn seed_every_kind<S: TransferStore>(store: &S) {
    store.enqueue(MESH, &new_task("t1"), at(1)).unwrap();
    store.enqueue(MESH, &dependent_task("t2", &["t1"]), at(2)).unwrap();
    store.enqueue(MESH, &dependent_task("t3", &["t2"]), at(3)).unwrap();
    let mut t4 = agentmesh_core::Task::new("t4", MESH, "work on t4", &at(4).iso());
    t4.extra.insert("futureField".into(), json!({"kept": [1, 2, 3]}));
    store.import_page(MESH, &Records::Tasks(vec![t4])).unwrap();
    let claimed = store.claim_next(MESH, &worker("n1", "s1"), &lease(), at(5)).unwrap().expect_claimed();
    store
        .complete_task(
            MESH,
            &CompletionReport {
                session_id: "s1".into(),
                task_id: Some(claimed.id.clone()),
                epoch: Some(claimed.epoch()),
                occurred_at: None,
                outcome: Outcome::Completed { summary: Some("done".into()) },
            },
            at(6),
        )
        .unwrap();
    store.claim_next(MESH, &worker("n2", "s2"), &lease(), at(7)).unwrap().expect_claimed();
    store
        .upsert_mission(
            MESH,
            &NewMission {
                id: "m1".into(),
                title: "Mission".into(),
                goal: Some("goal".into()),
                status: None,
                source: Some("coordinator".into()),
            },
            at(9),
        )
        .unwrap();
    store.enqueue(OTHER_MESH, &new_task("o1"), at(10)).unwrap();

    let event = |id: &str, drained: bool, fingerprint: Option<&str>, queued: i64| StoredEvent {
        id: id.into(),
        mesh_id: MESH.into(),
        coordinator_daemon_id: Some("d1".into()),
        name: "agent:generating_completed".into(),
        payload: format!(
            r#"{{"event":"agent:generating_completed","meshId":"{MESH}","b":1,"a":2,"id":"{id}"}}"#
        ),
        fingerprint: fingerprint.map(str::to_owned),
        queued_at_ms: at(queued).millis(),
        drained,
        route: EventRoute {
            event_id: Some(format!("ev-{id}")),
            intended_for: Some(r#"{"daemonId":"d1","runId":"r1"}"#.into()),
            route_class: 1,
            to_machine: Some("d1".into()),
            to_key: Some("d1/r1".into()),
            to_fallback: 0,
            to_session: None,
            lane: "d1/r1".into(),
        },
    };
    let pages = [
        Records::InboxEvents(vec![event("e1", true, Some("fp-1"), 11), event("e2", false, None, 12)]),
        Records::SchedulerCursor(vec![7]),
        Records::DirectDispatches(vec![DirectDispatch {
            task_id: "t3".into(),
            mesh_id: MESH.into(),
            node_id: Some("n1".into()),
            session_id: Some("s1".into()),
            provider_type: Some("claude-cli".into()),
            message: "do t3".into(),
            task_mode: None,
            via: "pty".into(),
            status: DispatchStatus::Acked,
            dispatched_to_idle_session: true,
            dispatched_at: at(13).iso(),
            updated_at: at(14).iso(),
        }]),
        Records::SessionDeliveries(vec![SessionDelivery {
            id: "dl1".into(),
            mesh_id: MESH.into(),
            node_id: Some("n1".into()),
            session_id: Some("s1".into()),
            provider_type: None,
            task_id: Some("t3".into()),
            kind: "task".into(),
            priority: 3,
            message: "deliver".into(),
            status: DeliveryStatus::Delivered,
            deliver_after: None,
            expires_at: Some(at(100).iso()),
            attempt_count: 2,
            source_coordinator_session_id: Some("c1".into()),
            source_coordinator_daemon_id: Some("d1".into()),
            last_error: Some("once".into()),
            created_at: at(15).iso(),
            updated_at: at(16).iso(),
        }]),
        Records::IdleSessions(vec![
            IdleSession {
                mesh_id: MESH.into(),
                node_id: "n1".into(),
                session_id: "s9".into(),
                provider_type: "codex".into(),
                expires_at_ms: at(200).millis(),
                metadata: Some(json!({"cwd": "/w"})),
            },
            IdleSession {
                mesh_id: MESH.into(),
                node_id: "n2".into(),
                session_id: "s8".into(),
                provider_type: "codex".into(),
                expires_at_ms: at(1).millis(),
                metadata: None,
            },
        ]),
        Records::CompletionFingerprints(vec![
            CompletionFingerprint { fingerprint: "fa".into(), expires_at_ms: at(300).millis() },
            CompletionFingerprint { fingerprint: "fb".into(), expires_at_ms: at(2).millis() },
        ]),
        Records::CompletionConflicts(vec![CompletionConflict {
            id: "c1".into(),
            mesh_id: MESH.into(),
            fingerprint: "fa".into(),
            conflicting_task_id: Some("t4".into()),
            conflicting_session_id: None,
            original_task_id: Some("t1".into()),
            original_session_id: Some("s1".into()),
            event: "agent:generating_completed".into(),
            created_at: at(17).iso(),
        }]),
        Records::ToolCalls(
            [("claim", 1), ("claim", 2), ("drain", 1)]
                .into_iter()
                .map(|(tool, occurrence)| ToolCallRecord {
                    call: RecordedToolCall {
                        tool: tool.into(),
                        session_id: Some("s1".into()),
                        caller_role: Some("worker".into()),
                        called_at_ms: at(18).millis(),
                    },
                    occurrence,
                })
                .collect(),
        ),
        Records::CoordinatorPresence(vec![PresenceRecord {
            coordinator_key: "d1/r1".into(),
            machine: Some("d1".into()),
            daemon_id: "d1".into(),
            run_id: "r1".into(),
            session_id: None,
            last_seen_ms: at(19).millis(),
            ended_at_ms: Some(at(20).millis()),
        }]),
    ];
    for page in &pages {
        let report = store.import_page(MESH, page).unwrap();
        assert_eq!(report.inserted, page.len() as u64, "{:?}", page.kind());
    }
}

/// Every record of `kind` of `mesh`, read `page_size` at a time.
pub fn export_all<S: TransferStore + ?Sized>(
    store: &S,
    mesh: &str,
    kind: RecordKind,
    page_size: u32,
) -> Vec<Records> {
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = store.export_page(mesh, kind, after.as_ref(), page_size).unwrap();
        assert!(page.records.len() <= page_size as usize, "{kind:?}: a page holds at most its limit");
        if !page.records.is_empty() {
            pages.push(page.records);
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return pages,
        }
    }
}

/// The records of every page, one after the other, as one page.
fn joined(pages: Vec<Records>, kind: RecordKind) -> Records {
    let mut all = Records::empty(kind);
    for page in pages {
        match (&mut all, page) {
            (Records::Tasks(a), Records::Tasks(b)) => a.extend(b),
            (Records::Missions(a), Records::Missions(b)) => a.extend(b),
            (Records::Ledger(a), Records::Ledger(b)) => a.extend(b),
            (Records::InboxEvents(a), Records::InboxEvents(b)) => a.extend(b),
            (Records::SchedulerCursor(a), Records::SchedulerCursor(b)) => a.extend(b),
            (Records::DirectDispatches(a), Records::DirectDispatches(b)) => a.extend(b),
            (Records::SessionDeliveries(a), Records::SessionDeliveries(b)) => a.extend(b),
            (Records::IdleSessions(a), Records::IdleSessions(b)) => a.extend(b),
            (Records::CompletionFingerprints(a), Records::CompletionFingerprints(b)) => a.extend(b),
            (Records::CompletionConflicts(a), Records::CompletionConflicts(b)) => a.extend(b),
            (Records::ToolCalls(a), Records::ToolCalls(b)) => a.extend(b),
            (Records::CoordinatorPresence(a), Records::CoordinatorPresence(b)) => a.extend(b),
            (a, b) => panic!("a page of {:?} among pages of {:?}", b.kind(), a.kind()),
        }
    }
    all
}

/// Every kind of `mesh`, whole, in export order.
pub fn snapshot<S: TransferStore + ?Sized>(store: &S, mesh: &str) -> Vec<Records> {
    RecordKind::ALL.into_iter().map(|kind| joined(export_all(store, mesh, kind, 1000), kind)).collect()
}

/// Copies every kind of every mesh of `source` into `target`; the tallies by
/// mesh and kind.
pub fn copy_all<S: TransferStore, T: TransferStore>(
    source: &S,
    target: &T,
    page_size: u32,
) -> Vec<(String, RecordKind, KindTally)> {
    let mut tallies = Vec::new();
    for mesh in source.transfer_meshes().unwrap() {
        for kind in RecordKind::ALL {
            let tally = copy_kind(source, target, &mesh, kind, page_size, &mut |_| {}).unwrap();
            tallies.push((mesh.clone(), kind, tally));
        }
    }
    tallies
}

/// Export pages of any size read the same records in the same order, and only a
/// full page says another may follow.
pub fn transfer_pages_of_any_size_read_the_same_records<S: TransferStore>(store: &S) {
    seed_every_kind(store);
    for kind in RecordKind::ALL {
        let whole = joined(export_all(store, MESH, kind, 1000), kind);
        assert!(!whole.is_empty(), "{kind:?} was seeded");
        for size in [1, 2, 3] {
            assert_eq!(
                joined(export_all(store, MESH, kind, size), kind),
                whole,
                "{kind:?} in pages of {size}"
            );
        }
    }
    assert_eq!(store.transfer_meshes().unwrap(), [MESH, OTHER_MESH]);
}

/// A copy into an empty store holds every record as the source does (ledger
/// order, drained and undrained events, task readiness included), adds no ledger
/// entry, and a second copy copies nothing and changes nothing.
pub fn transfer_copy_round_trips_every_kind_and_is_idempotent<S: TransferStore, T: TransferStore>(
    source: &S,
    target: &T,
) {
    seed_every_kind(source);
    let before = snapshot(source, MESH);
    let tallies = copy_all(source, target, 2);
    for (mesh, kind, tally) in &tallies {
        assert_eq!(tally.copied, tally.read, "{mesh} {kind:?}: everything is new");
        assert!(tally.conflicts.is_empty(), "{mesh} {kind:?}");
    }
    assert_eq!(snapshot(target, MESH), before, "the target holds what the source holds");
    assert_eq!(snapshot(target, OTHER_MESH), snapshot(source, OTHER_MESH));
    let ids =
        |s: &dyn Fn() -> Vec<agentmesh_core::LedgerEntry>| s().into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(&|| target.read_ledger_ordered(MESH, &LedgerQuery::default()).unwrap()),
        ids(&|| source.read_ledger_ordered(MESH, &LedgerQuery::default()).unwrap()),
    );
    assert_eq!(target.pending_event_count_or_skip(MESH), source.pending_event_count_or_skip(MESH));
    // Readiness was counted anew: t1 completed, t2 is assigned, t3 waits for t2,
    // t4 is free.
    let claimed = target.claim_next(MESH, &worker("n3", "s3"), &lease(), at(50)).unwrap().expect_claimed();
    assert_eq!(claimed.id, "t4");
    let refused = target.claim_next(MESH, &worker("n4", "s4"), &lease(), at(51)).unwrap();
    assert!(refused.task().is_none(), "t3 waits for t2: {refused:?}");
    assert_eq!(
        target.find_task(MESH, "t4").unwrap().unwrap().extra["futureField"],
        json!({"kept": [1, 2, 3]})
    );

    let target_now = snapshot(target, MESH);
    let again = copy_all(source, target, 3);
    for (mesh, kind, tally) in &again {
        assert_eq!(tally.copied, 0, "{mesh} {kind:?}: a second copy copies nothing");
        assert_eq!(tally.existing, tally.read, "{mesh} {kind:?}");
    }
    assert_eq!(snapshot(target, MESH), target_now, "a second copy changes nothing");
}

/// A mesh's archive is copied into the target's hot tables before its hot
/// ledger: the whole ledger by sequence reads the same in the target, before
/// and after the target's retention archives the copies again; the copied task
/// is as it was (not marked archived); a second copy copies nothing, whether
/// the target holds the records hot or archived.
pub fn transfer_copies_the_archive_before_the_hot_ledger<S: TransferStore, T: TransferStore>(
    source: &S,
    target: &T,
) {
    let done = |id: &str, secs: i64| {
        source.enqueue(MESH, &new_task(id), at(secs)).unwrap();
        let task =
            source.claim_next(MESH, &worker("n1", "s1"), &lease(), at(secs + 1)).unwrap().expect_claimed();
        let report = CompletionReport {
            session_id: "s1".into(),
            task_id: Some(task.id.clone()),
            epoch: Some(task.epoch()),
            occurred_at: None,
            outcome: Outcome::Completed { summary: Some(format!("{id} done")) },
        };
        source.complete_task(MESH, &report, at(secs + 2)).unwrap();
    };
    done("t1", 1);
    done("t2", 10);
    settled(source, MESH);
    let later = at(40 * 24 * 60 * 60);
    let policy = agentmesh_core::retention::RetentionPolicy::default();
    super::archive::archive_until(source, &policy, later, &[(MESH, 6)]);
    source.enqueue(MESH, &new_task("t3"), later).unwrap();
    settled(source, MESH);
    let by_seq = |store: &dyn Store| -> Vec<String> {
        let mut query =
            agentmesh_core::SliceQuery { after_seq: Some(0), limit: Some(2), ..Default::default() };
        let mut ids = Vec::new();
        loop {
            let page = crate::archive::slice(store, MESH, &query).unwrap();
            ids.extend(page.entries.into_iter().map(|e| e.id));
            if !page.cursor.has_more {
                return ids;
            }
            query.after_seq = page.cursor.next_after_seq;
        }
    };
    let whole = by_seq(source);
    assert_eq!(whole.len(), 7, "{whole:?}");

    let tally = copy_archive(source, target, MESH, 2, &mut |_| {}).unwrap();
    assert_eq!((tally.tasks.read, tally.tasks.copied, tally.ledger.read, tally.ledger.copied), (2, 2, 6, 6));
    copy_all(source, target, 2);
    settled(target, MESH);
    assert_eq!(by_seq(target), whole, "the same ledger, all of it hot in the target");
    let t1 = target.find_task(MESH, "t1").unwrap().expect("t1 copied into the hot tables");
    assert_eq!((t1.final_summary.as_deref(), t1.archived), (Some("t1 done"), None));

    super::archive::archive_until(target, &policy, later, &[(MESH, 6)]);
    assert_eq!(target.find_task(MESH, "t1").unwrap(), None, "archived again by the target");
    assert_eq!(by_seq(target), whole, "archived again, in the same order");
    let again = copy_archive(source, target, MESH, 4, &mut |_| {}).unwrap();
    for tally in [&again.tasks, &again.ledger] {
        assert_eq!((tally.copied, tally.existing), (0, tally.read), "{again:?}");
        assert!(tally.conflicts.is_empty(), "{again:?}");
    }
}

/// Where the target keeps ids unique per database, a record whose id another
/// mesh holds there is named as a conflict and not copied; the rest is.
pub fn transfer_an_id_held_by_another_mesh_is_a_conflict<S: TransferStore, T: TransferStore>(
    source: &S,
    target: &T,
) {
    seed_every_kind(source);
    target.enqueue("mesh-c", &new_task("t1"), at(1)).unwrap();
    let tallies = copy_all(source, target, 2);
    let tasks = &tallies.iter().find(|(m, k, _)| m == MESH && *k == RecordKind::Tasks).unwrap().2;
    match target.profile().id_scope {
        IdScope::Database => {
            assert_eq!(tasks.conflicts.len(), 1);
            assert_eq!(tasks.conflicts[0].id, "t1");
            assert!(tasks.conflicts[0].reason.contains("mesh-c"), "{}", tasks.conflicts[0].reason);
            assert_eq!(tasks.copied, tasks.read - 1);
        }
        IdScope::Mesh => {
            assert!(tasks.conflicts.is_empty());
            assert_eq!(tasks.copied, tasks.read);
        }
    }
    assert!(target.find_task("mesh-c", "t1").unwrap().is_some(), "the other mesh's task is untouched");
}

/// A page naming another mesh is refused whole.
pub fn transfer_a_record_of_another_mesh_is_refused<S: TransferStore>(store: &S) {
    let mut task = agentmesh_core::Task::from_json(r#"{"id":"x","meshId":"mesh-b","message":"m","status":"pending","createdAt":"2025-01-01T00:00:00.000Z","updatedAt":"2025-01-01T00:00:00.000Z"}"#).unwrap();
    task.mesh_id = OTHER_MESH.into();
    let err = store.import_page(MESH, &Records::Tasks(vec![task])).unwrap_err();
    assert_eq!(err.code(), "invalid_input", "{err}");
    assert!(store.find_task(OTHER_MESH, "x").unwrap().is_none());
    assert!(store.find_task(MESH, "x").unwrap().is_none());
}

/// Undrained events counted through the store when the backend has them, else
/// through an export (the inbox operations may come later than the copy).
trait PendingCount {
    fn pending_event_count_or_skip(&self, mesh: &str) -> u64;
}

impl<S: TransferStore> PendingCount for S {
    fn pending_event_count_or_skip(&self, mesh: &str) -> u64 {
        match joined(export_all(self, mesh, RecordKind::InboxEvents, 1000), RecordKind::InboxEvents) {
            Records::InboxEvents(events) => events.iter().filter(|e| !e.drained).count() as u64,
            _ => unreachable!("an inbox export holds events"),
        }
    }
}
