//! Rules of retention and the archive: what a step archives and what it
//! never does, that archived rows stay readable (marked) and in their place
//! in the ledger's order, that an archived dependency and an archived id keep
//! their meaning, that a webhook's cursor holds the ledger back, and that a
//! cursor before what was dropped expires.

use agentmesh_core::retention::{ArchiveMark, MeshRetention, RetentionPolicy, Window};
use agentmesh_core::webhook::{NewWebhook, UrlPolicy};
use agentmesh_core::{LedgerQuery, SliceQuery, Task, TaskStatus};

use super::support::*;
use crate::archive::{self, ArchiveReport};
use crate::{ArchivedTasks, Store, StoreError};

const DAY_SECS: i64 = 24 * 60 * 60;

/// Tasks after 7 days, the ledger after 30, as the defaults.
fn policy() -> RetentionPolicy {
    RetentionPolicy::default()
}

/// Archives until each mesh's archive holds at least its number of ledger
/// entries, then returns what moved in all. A step moves a ledger entry only
/// once every transaction older than the one that wrote it has ended (on
/// PostgreSQL: the ledger's horizon, see the backend's `ledger`), and a
/// transaction elsewhere on the same server can hold that back for a moment.
pub(super) fn archive_until(
    store: &dyn Store,
    policy: &RetentionPolicy,
    now: agentmesh_core::Timestamp,
    wanted: &[(&str, u64)],
) -> ArchiveReport {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut total = ArchiveReport::default();
    loop {
        total.add(archive_all(store, policy, now));
        // (mesh, entries archived, entries wanted) of each mesh still short.
        let short: Vec<(&str, u64, u64)> = wanted
            .iter()
            .filter_map(|&(mesh, want)| {
                let has = ok(store.archive_state(mesh, None, now), "archive_state").ledger_entries;
                (has < want).then_some((mesh, has, want))
            })
            .collect();
        if short.is_empty() {
            return total;
        }
        assert!(std::time::Instant::now() < deadline, "after 30 s, still short: {short:?} ({total:?})");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Runs steps until nothing is left to move.
fn archive_all(store: &dyn Store, policy: &RetentionPolicy, now: agentmesh_core::Timestamp) -> ArchiveReport {
    let mut total = ArchiveReport::default();
    for _ in 0..100 {
        let step = ok(store.archive_expired(policy, now, 2), "archive_expired");
        total.add(step);
        if !step.more && step.tasks == 0 && step.ledger_entries == 0 {
            return total;
        }
    }
    panic!("archiving did not finish in 100 steps: {total:?}");
}

fn done_task(store: &dyn Store, mesh: &str, id: &str, secs: i64) -> Task {
    enqueue(store, mesh, new_task(id), at(secs));
    let task = claim_ok(store, mesh, &worker("node-1", "s1"), at(secs + 1), id);
    complete(store, mesh, &task, at(secs + 2))
}

fn whole_ledger(store: &dyn Store, mesh: &str, by_seq: bool) -> (Vec<String>, u32) {
    let mut ids = Vec::new();
    let mut archived = 0;
    let mut query = SliceQuery { limit: Some(3), ..SliceQuery::default() };
    if by_seq {
        query.after_seq = Some(0);
    }
    for _ in 0..1000 {
        let page = ok(archive::slice(store, mesh, &query), "archive::slice");
        archived += page.archived;
        ids.extend(page.entries.iter().map(|e| e.id.clone()));
        if !page.cursor.has_more {
            return (ids, archived);
        }
        if by_seq {
            query.after_seq = page.cursor.next_after_seq;
        } else {
            query.after_id = page.cursor.next_after_id;
        }
    }
    panic!("the ledger did not end in 1000 pages");
}

/// A finished task past its window moves to the archive: gone from the hot
/// reads, found by the joined read marked archived, exactly as it was; a
/// pending, an assigned and a young finished task stay where they are.
pub fn archive_moves_only_finished_tasks_past_their_window(store: &dyn Store) {
    let old = done_task(store, MESH, "old", 1);
    let failed = {
        enqueue(store, MESH, new_task("old-failed"), at(4));
        let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(5), "old-failed");
        fail(store, MESH, &task, "broke", at(6))
    };
    done_task(store, MESH, "young", 8 * DAY_SECS);
    enqueue(store, MESH, new_task("waiting"), at(8 * DAY_SECS + 3));
    enqueue(store, MESH, new_task("held"), at(8 * DAY_SECS + 4));
    claim_ok(store, MESH, &worker("node-2", "s2"), at(8 * DAY_SECS + 5), "waiting");
    let now = at(10 + 8 * DAY_SECS);
    let report = archive_all(store, &policy(), now);
    assert_eq!(report.tasks, 2, "{report:?}");
    for (id, before) in [("old", &old), ("old-failed", &failed)] {
        assert_eq!(ok(store.find_task(MESH, id), "find_task"), None, "{id} left the hot reads");
        let found = ok(archive::find_task(store, MESH, id), "archive::find_task").expect("found archived");
        assert_eq!(found.archived, Some(true), "{id} marked archived");
        let mut unmarked = found.clone();
        unmarked.archived = None;
        assert_eq!(&unmarked, before, "{id} archived as it was");
    }
    for id in ["waiting", "held", "young"] {
        let task = ok(archive::find_task(store, MESH, id), "archive::find_task").expect("still there");
        assert_eq!(task.archived, None, "{id} stays hot");
    }
    assert_eq!(status_count(store, MESH, TaskStatus::Pending), 1);
    assert_eq!(status_count(store, MESH, TaskStatus::Assigned), 1);
    assert_eq!(status_count(store, MESH, TaskStatus::Completed), 1);
    let exported: Vec<String> =
        ok(store.archived_tasks(MESH, ArchivedTasks::After { after: 0, limit: 10 }), "archived_tasks")
            .into_iter()
            .map(|(_, t)| t.id)
            .collect();
    assert_eq!(exported.len(), 2);
    assert!(exported.contains(&"old".to_owned()) && exported.contains(&"old-failed".to_owned()));
    let again = archive_all(store, &policy(), now);
    assert_eq!(again.tasks, 0, "nothing archived twice: {again:?}");
}

/// A task that depends on an archived completed task is ready at once; an
/// enqueue that reuses an archived id is refused as a duplicate and changes
/// nothing; a recorded dispatch of that id finds the archived task.
pub fn archived_tasks_keep_their_dependency_and_their_id(store: &dyn Store) {
    done_task(store, MESH, "base", 1);
    archive_all(store, &policy(), at(8 * DAY_SECS));
    assert_eq!(ok(store.find_task(MESH, "base"), "find_task"), None);
    enqueue(store, MESH, dependent_task("next", &["base"]), at(8 * DAY_SECS + 1));
    assert_claimed(claim(store, MESH, &worker("node-1", "s9"), at(8 * DAY_SECS + 2)), "next");
    let err =
        expect_err(store.enqueue(MESH, &new_task("base"), at(8 * DAY_SECS + 3)), "enqueue of an archived id");
    assert!(matches!(err, StoreError::DuplicateTaskId { .. }), "{err:?}");
    let dispatched = agentmesh_core::NewDispatchedTask {
        id: "base".into(),
        message: "work on base".into(),
        node_id: "node-1".into(),
        session_id: "s5".into(),
        provider_type: None,
        mission_id: None,
        task_mode: None,
    };
    let recorded =
        ok(store.record_dispatched_task(MESH, &dispatched, at(8 * DAY_SECS + 4)), "record_dispatched_task");
    assert!(!recorded.created, "the archived task is the one recorded: {recorded:?}");
    assert_eq!(recorded.task.archived, Some(true));
    assert_eq!(queue_ids(store, MESH, &[]), ["next"]);
}

/// Ledger entries past the window leave oldest first and stay in the joined
/// ledger: paged by sequence or by time, from the start, every entry once in
/// the order of the ledger before archiving, the archived ones counted.
pub fn archived_ledger_entries_stay_in_the_ledgers_order(store: &dyn Store) {
    for i in 0..4 {
        done_task(store, MESH, &format!("t{i}"), i * 10);
    }
    done_task(store, OTHER_MESH, "other", 5);
    settled(store, MESH);
    settled(store, OTHER_MESH);
    let (other_before, _) = whole_ledger(store, OTHER_MESH, true);
    let (by_seq_before, _) = whole_ledger(store, MESH, true);
    let (by_time_before, _) = whole_ledger(store, MESH, false);
    let mut keep = policy();
    keep.tasks = Window::Off;
    // Entries of the first two tasks are older than the cutoff: 31 days after
    // t1's last entry and before t2's first.
    let now = at(15 + 30 * DAY_SECS);
    let report = archive_until(store, &keep, now, &[(MESH, 6), (OTHER_MESH, other_before.len() as u64)]);
    assert!(report.ledger_entries >= 6, "{report:?}");
    let state = ok(store.archive_state(MESH, None, now), "archive_state");
    assert_eq!(
        state.ledger_entries,
        report.ledger_entries - other_before.len() as u64,
        "the other mesh's entries, all old, are its own"
    );
    let (by_seq, archived) = whole_ledger(store, MESH, true);
    assert_eq!(by_seq, by_seq_before, "by sequence: every entry once, in order");
    assert_eq!(archived as u64, state.ledger_entries);
    let (by_time, _) = whole_ledger(store, MESH, false);
    assert_eq!(by_time, by_time_before, "by time: every entry once, in order");
    let hot_only =
        ok(store.ledger_slice(MESH, &SliceQuery { limit: Some(500), ..SliceQuery::default() }), "slice");
    assert_eq!(hot_only.entries.len() as u64, by_seq.len() as u64 - state.ledger_entries);
    let (other, _) = whole_ledger(store, OTHER_MESH, true);
    assert_eq!(other, other_before);
}

/// A task's history is its own entries wherever they are: the same before and
/// after the task leaves the hot database, and after its entries follow it; an
/// open task's archived entries are found too; the newest `tail` of the kinds
/// asked for; no history for a task the mesh never held.
pub fn a_tasks_history_reads_the_archive_and_the_hot_ledger(store: &dyn Store) {
    done_task(store, MESH, "t0", 1);
    done_task(store, MESH, "t1", 10);
    enqueue(store, MESH, new_task("open"), at(20));
    settled(store, MESH);
    let history = |id: &str, query: &LedgerQuery| -> Vec<String> {
        let entries = ok(archive::task_history(store, MESH, id, query), "task_history").expect("a history");
        assert!(entries.iter().all(|e| e.task_id() == Some(id)), "{id}: {entries:?}");
        entries.into_iter().map(|e| e.kind).collect()
    };
    let all = LedgerQuery::default();
    let before = history("t0", &all);
    assert_eq!(before, ["task_dispatched", "task_claimed", "task_completed"]);
    assert_eq!(history("open", &all), ["task_dispatched"]);

    archive_all(store, &policy(), at(8 * DAY_SECS));
    assert_eq!(ok(store.find_task(MESH, "t0"), "find_task"), None, "t0 archived");
    assert_eq!(history("t0", &all), before, "the task archived, its entries hot");
    let mut keep = policy();
    keep.tasks = Window::Off;
    archive_until(store, &keep, at(40 * DAY_SECS), &[(MESH, 7)]);
    assert_eq!(history("t0", &all), before, "the task and its entries archived");
    assert_eq!(history("t1", &all), before);
    assert_eq!(history("open", &all), ["task_dispatched"], "an open task's archived entry");
    let newest = LedgerQuery { tail: Some(1), kinds: vec!["task_claimed".into()], ..LedgerQuery::default() };
    assert_eq!(history("t1", &newest), ["task_claimed"]);
    let since = LedgerQuery { since: Some(at(12).iso()), ..LedgerQuery::default() };
    assert_eq!(history("t1", &since), ["task_completed"]);
    assert_eq!(ok(archive::task_history(store, MESH, "never", &all), "task_history"), None);
    assert_eq!(ok(archive::task_history(store, OTHER_MESH, "t0", &all), "task_history"), None);
}

/// A webhook subscription's cursor holds the ledger back: nothing it has not
/// sent is archived, and an export's drop stops there too.
pub fn a_webhook_cursor_holds_the_ledger_back(store: &dyn Store) {
    done_task(store, MESH, "t0", 1);
    let valid =
        NewWebhook { url: "http://127.0.0.1:9/hook".into(), from_start: true, ..NewWebhook::default() }
            .validate(UrlPolicy::default())
            .expect("valid");
    let hook =
        ok(store.add_webhook(MESH, &valid, "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3", at(4)), "add_webhook");
    assert_eq!(hook.cursor, 0);
    let mut keep = policy();
    keep.tasks = Window::Off;
    let now = at(40 * DAY_SECS);
    let report = archive_all(store, &keep, now);
    assert_eq!(report.ledger_entries, 0, "the subscription sent nothing yet: {report:?}");
    settled(store, MESH);
    let (ids, _) = whole_ledger(store, MESH, true);
    let first_two = ok(
        store.ledger_slice(MESH, &SliceQuery { after_seq: Some(0), limit: Some(2), ..SliceQuery::default() }),
        "slice",
    );
    let mut moved = hook.clone();
    moved.cursor = first_two.seqs[1];
    ok(store.save_webhook_progress(&moved, now), "save_webhook_progress").expect("saved");
    let report = archive_until(store, &keep, now, &[(MESH, 2)]);
    assert_eq!(report.ledger_entries, 2, "up to the cursor: {report:?}");
    let (after, _) = whole_ledger(store, MESH, true);
    assert_eq!(after, ids, "still every entry once");
}

/// An export's drop removes what it wrote out; a by-sequence cursor before
/// the last dropped entry is `cursor_expired` naming the oldest cursor still
/// served, which reads on without a gap; the drop is bounded by its marks.
pub fn a_cursor_before_a_drop_expires_and_names_where_to_go_on(store: &dyn Store) {
    for i in 0..3 {
        done_task(store, MESH, &format!("t{i}"), i * 10);
    }
    let now = at(40 * DAY_SECS);
    let entries = settled(store, MESH);
    archive_until(store, &policy(), now, &[(MESH, entries)]);
    let state = ok(store.archive_state(MESH, None, now), "archive_state");
    assert_eq!(state.tasks, 3);
    let (all, _) = whole_ledger(store, MESH, true);
    let first = ok(
        store.archived_ledger(
            MESH,
            &SliceQuery { after_seq: Some(0), limit: Some(4), ..SliceQuery::default() },
        ),
        "archived_ledger",
    );
    let tasks = ok(store.archived_tasks(MESH, ArchivedTasks::After { after: 0, limit: 1 }), "archived_tasks");
    let mark = ArchiveMark { tasks_through: tasks[0].0, ledger_through: first.slice.seqs[3] };
    let dropped = ok(store.drop_archived(MESH, &mark), "drop_archived");
    assert_eq!(dropped.ledger_through, mark.ledger_through);
    let state = ok(store.archive_state(MESH, None, now), "archive_state");
    assert_eq!(state.tasks, 2);
    assert_eq!(state.dropped_through, mark.ledger_through);
    let behind = SliceQuery { after_seq: Some(first.slice.seqs[1]), ..SliceQuery::default() };
    match archive::slice(store, MESH, &behind) {
        Err(StoreError::CursorExpired { dropped_through, .. }) => {
            assert_eq!(dropped_through, mark.ledger_through)
        }
        other => panic!("expected cursor_expired, got {other:?}"),
    }
    let (rest, _) = whole_ledger(store, MESH, true);
    assert_eq!(rest, all[4..].to_vec(), "from the start: what is kept, in order");
    let from_mark =
        SliceQuery { after_seq: Some(mark.ledger_through), limit: Some(500), ..SliceQuery::default() };
    let page = ok(archive::slice(store, MESH, &from_mark), "slice after the drop");
    assert_eq!(page.entries.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), all[4..].to_vec());
}

/// A mesh's own windows replace the daemon's for it alone, are read back and
/// recorded in the ledger; an empty set returns the mesh to the daemon's.
pub fn a_meshs_own_windows_apply_to_it_alone(store: &dyn Store) {
    done_task(store, MESH, "a", 1);
    done_task(store, OTHER_MESH, "b", 1);
    let own = MeshRetention { tasks: Some(Window::Off), ..MeshRetention::default() };
    let state = ok(store.archive_state(MESH, Some(&own), at(4)), "archive_state(set)");
    assert_eq!(state.retention, own);
    assert_eq!(ledger_kinds(store, MESH).last().map(String::as_str), Some("retention_changed"));
    let now = at(9 * DAY_SECS);
    let report = archive_all(store, &policy(), now);
    assert_eq!(report.tasks, 1, "{report:?}");
    assert!(ok(store.find_task(MESH, "a"), "find_task").is_some(), "kept by the mesh's own window");
    assert!(ok(store.find_task(OTHER_MESH, "b"), "find_task").is_none(), "archived by the daemon's");
    let cleared = ok(store.archive_state(MESH, Some(&MeshRetention::default()), now), "archive_state(clear)");
    assert!(cleared.retention.is_empty());
    assert_eq!(archive_all(store, &policy(), now).tasks, 1);
    assert!(ok(store.find_task(MESH, "a"), "find_task").is_none());
}

/// A mesh's own events window decides when its drained events go, for it
/// alone: a shorter one deletes them where the daemon's keeps them, `off`
/// keeps them where the daemon's deletes them; its undrained events stay.
pub fn a_meshs_own_events_window_applies_to_its_drained_events(store: &dyn Store) {
    const THIRD_MESH: &str = "mesh-c";
    let me = coordinator("mach_A", "run_1", None);
    for mesh in [MESH, OTHER_MESH, THIRD_MESH] {
        for (label, secs) in [("drained", 0), ("waiting", 1)] {
            let event = targeted_at(inbox_event(mesh, "mesh:dispatch_blocked", label, at(secs)), &me);
            queue_event(store, mesh, event, at(secs));
        }
        let one = crate::DrainRequest { limit: Some(1), ..drain_request(&me) };
        assert_eq!(drain(store, mesh, &one, at(2)).events.len(), 1, "{mesh}");
    }
    let hour = MeshRetention { events: Some(Window::After(3_600_000)), ..MeshRetention::default() };
    ok(store.archive_state(MESH, Some(&hour), at(3)), "archive_state(set)");
    let keep = MeshRetention { events: Some(Window::Off), ..MeshRetention::default() };
    ok(store.archive_state(THIRD_MESH, Some(&keep), at(3)), "archive_state(set)");
    let now = at(2 * 3600);

    // The daemon's window keeps everything queued after the epoch.
    let report = ok(store.prune_pending_events(at(0), at(0), now), "prune_pending_events");
    assert_eq!(report.drained_expired, 1, "the mesh's own hour: {report:?}");
    let report = ok(store.prune_pending_events(at(100), at(0), now), "prune_pending_events");
    assert_eq!(report.drained_expired, 1, "the other mesh by the daemon's; the third keeps: {report:?}");
    ok(store.archive_state(THIRD_MESH, Some(&MeshRetention::default()), now), "archive_state(clear)");
    let report = ok(store.prune_pending_events(at(100), at(0), now), "prune_pending_events");
    assert_eq!(report.drained_expired, 1, "back to the daemon's: {report:?}");
    for mesh in [MESH, OTHER_MESH, THIRD_MESH] {
        assert_eq!(
            ok(store.pending_event_count(mesh), "pending_event_count"),
            1,
            "{mesh}: the undrained one stays"
        );
    }
}
