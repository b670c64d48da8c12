//! Rules of direct dispatches: work a coordinator sends straight to a session,
//! tracked from `dispatched` through `acked` to `completed` / `failed`, or to
//! `stale` when nobody acknowledged it in time. Status changes by task id and by
//! session, the sole-active lookup, stale marking, cleanup, deletion, validation and
//! mesh isolation.

use agentmesh_core::{
    DeliveryStatus, DirectDispatch, DispatchStatus, NewDirectDispatch, NewDispatchedTask, NewSessionDelivery,
    TaskStatus,
};

use super::support::*;
use crate::{DispatchChange, RuntimePrune, Store};

/// A recorded dispatch is `dispatched`, stamped with `now`, and listed oldest dispatch first.
pub fn direct_dispatch_is_recorded_and_listed_oldest_first(store: &dyn Store) {
    let late = NewDirectDispatch {
        task_mode: Some("validation".into()),
        dispatched_to_idle_session: true,
        via: "p2p".into(),
        ..direct_dispatch("a-late", Some("s1"))
    };
    // Recorded first but sent later, and its id sorts first: only dispatch time orders the list.
    let recorded = record_dispatch(store, MESH, late, at(20));
    let expected = DirectDispatch {
        task_id: "a-late".into(),
        mesh_id: MESH.into(),
        node_id: Some("node-1".into()),
        session_id: Some("s1".into()),
        provider_type: Some(PROVIDER.into()),
        message: "do a-late".into(),
        task_mode: Some("validation".into()),
        via: "p2p".into(),
        status: DispatchStatus::Dispatched,
        dispatched_to_idle_session: true,
        dispatched_at: at(20).iso(),
        updated_at: at(20).iso(),
    };
    assert_eq!(recorded, expected, "expected the recorded dispatch as given, dispatched, stamped with now");
    let early = record_dispatch(store, MESH, direct_dispatch("b-early", Some("s2")), at(10));
    assert_eq!(early.status, DispatchStatus::Dispatched, "expected a new dispatch to be dispatched");
    assert_eq!(early.session_id.as_deref(), Some("s2"), "expected the dispatch's session as given");
    assert_eq!(early.task_mode, None, "expected no task mode when none was given");
    assert!(!early.dispatched_to_idle_session, "expected dispatchedToIdleSession false as given");

    assert_eq!(
        active_dispatches(store, MESH),
        [early, recorded],
        "expected both dispatches listed as recorded, oldest dispatch first"
    );
}

/// Recording a dispatch for a task id that has one replaces that row: fresh status, time and fields.
pub fn recording_a_direct_dispatch_again_replaces_the_row(store: &dyn Store) {
    record_dispatch(store, MESH, direct_dispatch("t1", Some("s1")), at(1));
    set_dispatch_status(store, MESH, "t1", DispatchStatus::Acked, at(2));
    let again = NewDirectDispatch { message: "second attempt".into(), ..direct_dispatch("t1", Some("s2")) };
    let replaced = record_dispatch(store, MESH, again, at(5));
    assert_eq!(replaced.status, DispatchStatus::Dispatched, "expected the replacing row dispatched again");
    assert_eq!(replaced.dispatched_at, at(5).iso(), "expected the replacing row's dispatch time");
    assert_eq!(replaced.updated_at, at(5).iso(), "expected the replacing row's change time");
    assert_eq!(replaced.message, "second attempt", "expected the replacing row's message");
    assert_eq!(replaced.session_id.as_deref(), Some("s2"), "expected the replacing row's session");
    assert_eq!(active_dispatches(store, MESH), [replaced], "expected one row for task t1, the replacing one");
    assert_eq!(
        ok(
            store.change_direct_dispatches(
                MESH,
                DispatchChange::Status {
                    session_id: Some("s1"),
                    task_id: None,
                    status: DispatchStatus::Failed
                },
                at(6)
            ),
            "sweep s1"
        ),
        0,
        "expected the old session to hold no dispatch after the replacement"
    );
}

/// A status change naming a task id moves that row only; a sibling on the same session stays as it was.
pub fn direct_dispatch_status_with_a_task_id_changes_only_that_row(store: &dyn Store) {
    record_dispatch(store, MESH, direct_dispatch("t1", Some("s1")), at(1));
    let sibling = record_dispatch(store, MESH, direct_dispatch("t2", Some("s1")), at(2));
    let changed = ok(
        store.change_direct_dispatches(
            MESH,
            DispatchChange::Status {
                session_id: Some("s1"),
                task_id: Some("t1"),
                status: DispatchStatus::Acked,
            },
            at(5),
        ),
        "set_direct_dispatch_status(s1, t1, acked)",
    );
    assert_eq!(changed, 1, "expected exactly the row of t1 to change");
    let t1 = active_dispatch(store, MESH, "t1");
    assert_eq!(t1.status, DispatchStatus::Acked, "expected t1 acked");
    assert_eq!(t1.updated_at, at(5).iso(), "expected t1's change time to be the change's now");
    assert_eq!(t1.dispatched_at, at(1).iso(), "expected a status change to keep the dispatch time");
    assert_eq!(active_dispatch(store, MESH, "t2"), sibling, "expected the sibling dispatch t2 untouched");

    let changed = ok(
        store.change_direct_dispatches(
            MESH,
            DispatchChange::Status {
                session_id: Some("s1"),
                task_id: Some("t2"),
                status: DispatchStatus::Failed,
            },
            at(6),
        ),
        "set_direct_dispatch_status(s1, t2, failed)",
    );
    assert_eq!(changed, 1, "expected exactly the row of t2 to change");
    assert_eq!(active_dispatch_ids(store, MESH), ["t1"], "expected failed t2 gone from the active list");
    assert_eq!(active_dispatch(store, MESH, "t1").status, DispatchStatus::Acked, "expected t1 still acked");
}

/// Without a task id every non-final row of the session moves; other sessions, rows without a session and other meshes never do.
pub fn direct_dispatch_status_without_a_task_id_changes_the_sessions_open_rows(store: &dyn Store) {
    record_dispatch(store, MESH, direct_dispatch("open", Some("s1")), at(1));
    record_dispatch(store, MESH, direct_dispatch("went-stale", Some("s1")), at(2));
    record_dispatch(store, MESH, direct_dispatch("done", Some("s1")), at(3));
    record_dispatch(store, MESH, direct_dispatch("broken", Some("s1")), at(4));
    let other_session = record_dispatch(store, MESH, direct_dispatch("other-session", Some("s2")), at(5));
    let no_session = record_dispatch(store, MESH, direct_dispatch("no-session", None), at(6));
    let other_mesh = record_dispatch(store, OTHER_MESH, direct_dispatch("other-mesh", Some("s1")), at(7));
    set_dispatch_status(store, MESH, "went-stale", DispatchStatus::Stale, at(8));
    set_dispatch_status(store, MESH, "done", DispatchStatus::Completed, at(8));
    set_dispatch_status(store, MESH, "broken", DispatchStatus::Failed, at(8));

    let changed = ok(
        store.change_direct_dispatches(
            MESH,
            DispatchChange::Status { session_id: Some("s1"), task_id: None, status: DispatchStatus::Acked },
            at(10),
        ),
        "set_direct_dispatch_status(s1, no task id, acked)",
    );
    assert_eq!(changed, 2, "expected the session's dispatched and stale rows to change, and nothing else");
    // Acked is active, so a completed or failed row that moved would show up here.
    assert_eq!(
        active_dispatch_ids(store, MESH),
        ["open", "went-stale", "other-session", "no-session"],
        "expected the session's open and stale rows active again, its completed and failed rows not"
    );
    for id in ["open", "went-stale"] {
        let row = active_dispatch(store, MESH, id);
        assert_eq!(row.status, DispatchStatus::Acked, "expected {id} acked");
        assert_eq!(row.updated_at, at(10).iso(), "expected {id}'s change time to be the change's now");
    }
    assert_eq!(active_dispatch(store, MESH, "other-session"), other_session, "expected s2's row untouched");
    assert_eq!(
        active_dispatch(store, MESH, "no-session"),
        no_session,
        "expected the sessionless row untouched"
    );
    assert_eq!(
        active_dispatches(store, OTHER_MESH),
        std::slice::from_ref(&other_mesh),
        "expected the other mesh untouched"
    );

    let changed = ok(
        store.change_direct_dispatches(
            MESH,
            DispatchChange::Status { session_id: None, task_id: None, status: DispatchStatus::Stale },
            at(11),
        ),
        "set_direct_dispatch_status(no session, no task id, stale)",
    );
    assert_eq!(changed, 0, "expected a change naming neither session nor task to change nothing");
    assert_eq!(
        active_dispatch_ids(store, MESH),
        ["open", "went-stale", "other-session", "no-session"],
        "expected a change naming neither session nor task to leave every row active"
    );
    assert_eq!(
        active_dispatch(store, MESH, "no-session"),
        no_session,
        "expected the sessionless row untouched"
    );
    assert_eq!(active_dispatches(store, OTHER_MESH), [other_mesh], "expected the other mesh untouched");
}

/// Completed and failed dispatches never change again, whether named by task id or by session.
pub fn completed_and_failed_direct_dispatches_never_change(store: &dyn Store) {
    record_dispatch(store, MESH, direct_dispatch("done", Some("s1")), at(1));
    record_dispatch(store, MESH, direct_dispatch("broken", Some("s1")), at(2));
    set_dispatch_status(store, MESH, "done", DispatchStatus::Completed, at(3));
    set_dispatch_status(store, MESH, "broken", DispatchStatus::Failed, at(3));
    for status in DispatchStatus::ALL {
        for task in ["done", "broken"] {
            let what = format!("set_direct_dispatch_status({task}, {status})");
            let changed = ok(
                store.change_direct_dispatches(
                    MESH,
                    DispatchChange::Status { session_id: Some("s1"), task_id: Some(task), status },
                    at(4),
                ),
                &what,
            );
            assert_eq!(changed, 0, "expected the final dispatch {task} not to move to {status}");
        }
        let what = format!("set_direct_dispatch_status(s1, {status})");
        let changed = ok(
            store.change_direct_dispatches(
                MESH,
                DispatchChange::Status { session_id: Some("s1"), task_id: None, status },
                at(4),
            ),
            &what,
        );
        assert_eq!(changed, 0, "expected a session-wide change to {status} to skip the session's final rows");
    }
    assert!(active_dispatch_ids(store, MESH).is_empty(), "expected no final dispatch to become active again");
    // Both rows still carry their final change time: cleanup just after it deletes both.
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::EndedDispatches(at(4))), "prune ended dispatches"),
        2,
        "expected both final rows still stamped with their final change"
    );
}

/// Marking stale moves only `dispatched` rows of the mesh sent before the cutoff, and counts them.
pub fn mark_stale_direct_dispatches_touches_only_old_dispatched_rows(store: &dyn Store) {
    record_dispatch(store, MESH, direct_dispatch("old", Some("s1")), at(0));
    record_dispatch(store, MESH, direct_dispatch("old-acked", Some("s2")), at(1));
    set_dispatch_status(store, MESH, "old-acked", DispatchStatus::Acked, at(2));
    let at_cutoff = record_dispatch(store, MESH, direct_dispatch("at-cutoff", Some("s3")), at(50));
    let recent = record_dispatch(store, MESH, direct_dispatch("recent", Some("s4")), at(100));
    let elsewhere = record_dispatch(store, OTHER_MESH, direct_dispatch("elsewhere", Some("s1")), at(0));

    let marked = ok(
        store.change_direct_dispatches(MESH, DispatchChange::MarkStale(at(50)), at(200)),
        "mark_stale_direct_dispatches",
    );
    assert_eq!(marked, 1, "expected only the dispatched row sent before the cutoff marked stale");
    assert_eq!(
        active_dispatch_ids(store, MESH),
        ["old-acked", "at-cutoff", "recent"],
        "expected the old dispatched row gone from the active list"
    );
    assert_eq!(
        active_dispatch(store, MESH, "at-cutoff"),
        at_cutoff,
        "expected a row sent at the cutoff untouched"
    );
    assert_eq!(active_dispatch(store, MESH, "recent"), recent, "expected a recent row untouched");
    assert_eq!(
        active_dispatch(store, MESH, "old-acked").status,
        DispatchStatus::Acked,
        "expected acked to stay"
    );
    assert_eq!(active_dispatches(store, OTHER_MESH), [elsewhere], "expected the other mesh untouched");
    assert_eq!(
        ok(
            store.change_direct_dispatches(MESH, DispatchChange::MarkStale(at(50)), at(201)),
            "mark_stale_direct_dispatches again"
        ),
        0,
        "expected nothing left to mark"
    );
    // The stale row was changed at now (200), not at its dispatch time: a cleanup
    // before that keeps it, one after it deletes it.
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::EndedDispatches(at(150))), "cleanup before the marking"),
        0,
        "expected the stale row stamped with the marking's now"
    );
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::EndedDispatches(at(250))), "cleanup after the marking"),
        1,
        "expected the stale row deleted by a cleanup after its marking"
    );
}

/// Cleanup deletes completed, failed and stale rows changed before the cutoff, in every mesh, and counts them.
pub fn pruning_ended_dispatches_deletes_only_old_ended_rows(store: &dyn Store) {
    for (task, status) in [
        ("done-old", DispatchStatus::Completed),
        ("failed-old", DispatchStatus::Failed),
        ("stale-old", DispatchStatus::Stale),
    ] {
        record_dispatch(store, MESH, direct_dispatch(task, Some("s1")), at(0));
        set_dispatch_status(store, MESH, task, status, at(10));
    }
    record_dispatch(store, OTHER_MESH, direct_dispatch("elsewhere-old", Some("s1")), at(0));
    set_dispatch_status(store, OTHER_MESH, "elsewhere-old", DispatchStatus::Completed, at(10));
    // Sent long ago but ended after the cutoff.
    record_dispatch(store, MESH, direct_dispatch("done-recently", Some("s2")), at(0));
    set_dispatch_status(store, MESH, "done-recently", DispatchStatus::Completed, at(100));
    record_dispatch(store, MESH, direct_dispatch("open-old", Some("s3")), at(0));
    record_dispatch(store, MESH, direct_dispatch("acked-old", Some("s4")), at(1));
    set_dispatch_status(store, MESH, "acked-old", DispatchStatus::Acked, at(2));

    let deleted = ok(store.prune_runtime(RuntimePrune::EndedDispatches(at(50))), "prune ended dispatches");
    assert_eq!(deleted, 4, "expected the three old ended rows of A and the one of B deleted");
    assert_eq!(active_dispatch_ids(store, MESH), ["open-old", "acked-old"], "expected active rows kept");
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::EndedDispatches(at(50))), "prune ended dispatches again"),
        0,
        "expected nothing left to clean up"
    );
    let kept = |mesh: &str, task: &str| dispatch_of(store, mesh, task).is_some();
    assert!(kept(MESH, "done-recently"), "expected the recently ended row kept by the cleanup");
    for task in ["done-old", "failed-old", "stale-old"] {
        assert!(!kept(MESH, task), "expected the old ended row {task} deleted");
    }
    assert!(!kept(OTHER_MESH, "elsewhere-old"), "expected B's old ended row deleted by the cleanup");
}

/// Deleting by task ids deletes only the mesh's named rows, whatever their status, and returns the count.
pub fn direct_dispatches_are_deleted_by_task(store: &dyn Store) {
    for (i, task) in ["t1", "t2", "t3"].into_iter().enumerate() {
        record_dispatch(store, MESH, direct_dispatch(task, Some("s1")), at(i as i64));
    }
    set_dispatch_status(store, MESH, "t3", DispatchStatus::Completed, at(5));
    let elsewhere = record_dispatch(store, OTHER_MESH, direct_dispatch("b1", Some("s1")), at(0));

    let ids = |ids: &[&str]| ids.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>();
    assert_eq!(
        ok(
            store.change_direct_dispatches(MESH, DispatchChange::Delete(&[]), at(0)),
            "delete_direct_dispatches_by_task([])"
        ),
        0,
        "expected deleting no task ids to delete nothing"
    );
    assert_eq!(
        ok(
            store.change_direct_dispatches(
                MESH,
                DispatchChange::Delete(&ids(&["t1", "t3", "missing", "b1"])),
                at(0)
            ),
            "delete by task"
        ),
        2,
        "expected t1 and the completed t3 deleted, and neither the unknown id nor B's b1"
    );
    assert_eq!(active_dispatch_ids(store, MESH), ["t2"], "expected t2 kept");
    assert_eq!(active_dispatches(store, OTHER_MESH), [elsewhere], "expected B's row untouched");
    assert!(dispatch_of(store, MESH, "t3").is_none(), "expected t3 gone");
}

/// A blank task id or via, an empty message or an unknown task mode is invalid input naming the field; nothing is recorded.
pub fn direct_dispatch_rejects_bad_input_naming_the_field(store: &dyn Store) {
    let kept = record_dispatch(store, MESH, direct_dispatch("kept", Some("s1")), at(0));
    let cases = [
        ("taskId", NewDirectDispatch { task_id: "  ".into(), ..direct_dispatch("x", Some("s1")) }),
        ("message", NewDirectDispatch { message: String::new(), ..direct_dispatch("kept", Some("s2")) }),
        ("via", NewDirectDispatch { via: " ".into(), ..direct_dispatch("kept", Some("s2")) }),
        (
            "taskMode",
            NewDirectDispatch { task_mode: Some("refactor".into()), ..direct_dispatch("kept", Some("s2")) },
        ),
    ];
    for (field, bad) in cases {
        let what = format!("record_direct_dispatch with a bad {field}");
        assert_invalid_input(store.record_direct_dispatch(MESH, &bad, at(1)), field, &what);
        assert_eq!(
            active_dispatches(store, MESH),
            std::slice::from_ref(&kept),
            "expected {what} to record nothing"
        );
    }
}

/// Dispatches of one mesh are invisible to, and unchanged by, operations on another mesh.
pub fn direct_dispatches_are_isolated_by_mesh(store: &dyn Store) {
    let a1 = record_dispatch(store, MESH, direct_dispatch("a1", Some("s1")), at(0));
    assert!(active_dispatch_ids(store, OTHER_MESH).is_empty(), "expected A's dispatch invisible from B");
    let set_in_b = |session: Option<&str>, task: Option<&str>, status| {
        ok(
            store.change_direct_dispatches(
                OTHER_MESH,
                DispatchChange::Status { session_id: session, task_id: task, status },
                at(1),
            ),
            "status change through B",
        )
    };
    assert_eq!(
        set_in_b(Some("s1"), Some("a1"), DispatchStatus::Acked),
        0,
        "expected B unable to move A's row"
    );
    assert_eq!(set_in_b(Some("s1"), None, DispatchStatus::Failed), 0, "expected B's session sweep to skip A");
    assert_eq!(
        ok(
            store.change_direct_dispatches(OTHER_MESH, DispatchChange::MarkStale(at(100)), at(100)),
            "mark stale in B"
        ),
        0,
        "expected marking stale in B to leave A's rows"
    );
    assert_eq!(
        ok(
            store.change_direct_dispatches(OTHER_MESH, DispatchChange::Delete(&["a1".into()]), at(0)),
            "delete a1 through B"
        ),
        0,
        "expected B unable to delete A's row"
    );
    assert_eq!(active_dispatches(store, MESH), [a1], "expected A's dispatch untouched by operations on B");
}

/// Recording in mesh B a dispatch for a task id mesh A has leaves A's dispatch as it was (B's is refused or kept apart).
pub fn direct_dispatch_of_a_task_id_in_another_mesh_leaves_the_first_mesh_alone(store: &dyn Store) {
    let a = record_dispatch(store, MESH, direct_dispatch("shared", Some("s1")), at(0));
    let in_b = NewDirectDispatch { message: "mesh B's work".into(), ..direct_dispatch("shared", Some("s9")) };
    if let Ok(b) = store.record_direct_dispatch(OTHER_MESH, &in_b, at(1)) {
        assert_eq!(b.mesh_id, OTHER_MESH, "expected B's dispatch recorded in B");
        assert_eq!(
            active_dispatches(store, OTHER_MESH),
            [b],
            "expected B's dispatch listed in B as returned"
        );
    }
    assert_eq!(
        active_dispatches(store, MESH),
        [a],
        "expected a dispatch recorded in mesh B not to replace or remove mesh A's dispatch of the same task id"
    );
}

/// The dispatch of a task is read whatever its status (a stale or completed one
/// included); an unknown task, or one of another mesh, reads as none.
pub fn direct_dispatch_is_read_by_task_whatever_its_status(store: &dyn Store) {
    record_dispatch(store, MESH, direct_dispatch("t1", Some("s1")), at(0));
    set_dispatch_status(store, MESH, "t1", DispatchStatus::Completed, at(5));
    let read = dispatch_of(store, MESH, "t1");
    let read = read.expect("expected a completed dispatch still readable by its task");
    assert_eq!((read.status, read.updated_at.as_str()), (DispatchStatus::Completed, at(5).iso().as_str()));
    assert!(active_dispatch_ids(store, MESH).is_empty(), "a completed dispatch is not active");
    assert_eq!(dispatch_of(store, MESH, "nope"), None);
    assert_eq!(dispatch_of(store, OTHER_MESH, "t1"), None, "mesh B sees none of A's");
}

fn dispatched_task(id: &str, session: &str) -> NewDispatchedTask {
    NewDispatchedTask {
        id: id.into(),
        message: format!("work on {id}"),
        node_id: "node-1".into(),
        session_id: session.into(),
        provider_type: Some(PROVIDER.into()),
        mission_id: None,
        task_mode: None,
    }
}

fn confirmed(store: &dyn Store, mesh: &str, task_id: &str) -> bool {
    let found = ok(
        store.session_deliveries(mesh, crate::DeliveryQuery::Confirmed(task_id)),
        &format!("confirmed deliveries of {task_id}"),
    );
    assert!(
        found.iter().all(|d| d.task_id.as_deref() == Some(task_id)),
        "expected only {task_id}'s: {found:?}"
    );
    !found.is_empty()
}

/// A recorded direct dispatch is a task assigned to its node and session at epoch 1, dispatched
/// at `now`, with or without a mission, recorded by a `task_dispatched` entry naming them, and its
/// delivery is confirmed; its holder completes it like any claimed task.
pub fn recorded_direct_dispatch_is_an_assigned_task_with_a_confirmed_delivery(store: &dyn Store) {
    upsert_mission(store, MESH, new_mission("m1", "Mission"), at(1));
    let new = NewDispatchedTask { mission_id: Some("m1".into()), ..dispatched_task("t1", "s1") };
    let recorded = ok(store.record_dispatched_task(MESH, &new, at(10)), "record_dispatched_task(t1)");
    assert!(recorded.created, "expected a new id to create the task");
    let task = recorded.task;
    assert_eq!(task.status, TaskStatus::Assigned);
    assert_eq!(
        (task.assigned_node_id.as_deref(), task.assigned_session_id.as_deref()),
        (Some("node-1"), Some("s1")),
        "expected the task assigned where it was sent"
    );
    assert_eq!(task.dispatch_timestamp, Some(at(10).iso()), "expected dispatchTimestamp set to now");
    assert_eq!((task.epoch(), task.mission_id.as_deref()), (1, Some("m1")));
    assert_eq!(find(store, MESH, "t1"), task, "expected the stored task returned");
    let entry = ledger_entries(store, MESH)
        .into_iter()
        .find(|e| e.kind == "task_dispatched" && e.payload["taskId"] == "t1")
        .expect("a task_dispatched entry for t1");
    assert_eq!((entry.node_id.as_deref(), entry.session_id.as_deref()), (Some("node-1"), Some("s1")));
    assert_eq!(entry.payload["direct"], true);
    assert!(confirmed(store, MESH, "t1"), "expected the direct dispatch's delivery confirmed");
    assert!(!confirmed(store, MESH, "t-never"), "expected no confirmed delivery for an unknown task");
    assert!(!confirmed(store, OTHER_MESH, "t1"), "expected another mesh to see no confirmed delivery");
    let progress = ok(store.mission_progress(MESH, "m1"), "mission_progress(m1)");
    assert_eq!((progress.total, progress.assigned), (1, 1), "expected the task counted in its mission");

    let bare = ok(store.record_dispatched_task(MESH, &dispatched_task("t2", "s2"), at(11)), "record t2");
    assert_eq!((bare.task.mission_id, bare.task.status), (None, TaskStatus::Assigned));
    let done = complete(store, MESH, &task, at(12));
    assert_eq!(done.status, TaskStatus::Completed, "expected the holder to complete it");
}

/// Recording an id the mesh holds is a no-op that returns the task as it is: no second task, no
/// second entry, whatever the request says.
pub fn recording_a_direct_dispatch_of_an_existing_id_changes_nothing(store: &dyn Store) {
    let queued = enqueue(store, MESH, new_task("t1"), at(1));
    let again = ok(store.record_dispatched_task(MESH, &dispatched_task("t1", "s1"), at(2)), "record t1");
    assert!(!again.created, "expected an existing id not to be created again");
    assert_eq!(again.task, queued, "expected the existing task returned as it is");
    assert_eq!(find(store, MESH, "t1").status, TaskStatus::Pending);
    assert!(!confirmed(store, MESH, "t1"), "expected no delivery recorded for the no-op");

    let first = ok(store.record_dispatched_task(MESH, &dispatched_task("t2", "s1"), at(3)), "record t2");
    let entries = ledger_entries(store, MESH).len();
    let other = NewDispatchedTask { message: "something else".into(), ..dispatched_task("t2", "s9") };
    let second = ok(store.record_dispatched_task(MESH, &other, at(4)), "record t2 again");
    assert!(first.created && !second.created);
    assert_eq!(second.task, first.task, "expected the first recording kept");
    assert_eq!(ledger_entries(store, MESH).len(), entries, "expected no entry for the no-op");
}

/// A task's delivery is confirmed once one of its deliveries is delivered, acked or completed;
/// queued, delivering, failed, expired or cancelled ones do not count.
pub fn task_delivery_is_confirmed_by_delivered_acked_or_completed_only(store: &dyn Store) {
    let of =
        |id: &str, task: &str| NewSessionDelivery { task_id: Some(task.into()), ..delivery(id, "s1", 0) };
    insert_delivery(store, MESH, of("d1", "t1"), at(1));
    assert!(!confirmed(store, MESH, "t1"), "expected a queued delivery unconfirmed");
    for status in [DeliveryStatus::Delivering, DeliveryStatus::Failed] {
        let id = format!("d-{status}");
        insert_delivery(store, MESH, NewSessionDelivery { status: Some(status), ..of(&id, "t1") }, at(2));
    }
    assert!(!confirmed(store, MESH, "t1"), "expected delivering and failed deliveries unconfirmed");
    for (status, task) in [
        (DeliveryStatus::Delivered, "t-delivered"),
        (DeliveryStatus::Acked, "t-acked"),
        (DeliveryStatus::Completed, "t-completed"),
        (DeliveryStatus::Expired, "t-expired"),
        (DeliveryStatus::Cancelled, "t-cancelled"),
    ] {
        let id = format!("d-{task}");
        insert_delivery(store, MESH, NewSessionDelivery { status: Some(status), ..of(&id, task) }, at(3));
        assert_eq!(confirmed(store, MESH, task), status.is_confirmed(), "a {status} delivery");
    }
    assert!(set_delivery_status(store, MESH, "d1", DeliveryStatus::Delivered, at(4)));
    assert!(confirmed(store, MESH, "t1"), "expected t1 confirmed once d1 was delivered");
    assert!(!confirmed(store, OTHER_MESH, "t1"), "expected another mesh to see nothing");
}

/// A direct dispatch with a blank id, message, node or session, a bad mission id or an unknown
/// task mode is invalid input naming the field; nothing is stored.
pub fn recording_a_direct_dispatch_rejects_bad_input_naming_the_field(store: &dyn Store) {
    let good = dispatched_task("t1", "s1");
    for (field, bad) in [
        ("id", NewDispatchedTask { id: " ".into(), ..good.clone() }),
        ("message", NewDispatchedTask { message: "\n".into(), ..good.clone() }),
        ("nodeId", NewDispatchedTask { node_id: String::new(), ..good.clone() }),
        ("sessionId", NewDispatchedTask { session_id: "\t".into(), ..good.clone() }),
        ("missionId", NewDispatchedTask { mission_id: Some("a\u{7}b".into()), ..good.clone() }),
        ("taskMode", NewDispatchedTask { task_mode: Some("sideways".into()), ..good.clone() }),
    ] {
        let what = format!("record_dispatched_task with a bad {field}");
        assert_invalid_input(store.record_dispatched_task(MESH, &bad, at(1)), field, &what);
    }
    assert!(queue_ids(store, MESH, &[]).is_empty(), "expected nothing stored");
    assert!(ledger_entries(store, MESH).is_empty(), "expected no entry");
    assert!(!confirmed(store, MESH, "t1"));
}

/// The dispatch of one task, whatever its status: `direct_dispatches` with its
/// id answers none or one.
fn dispatch_of(store: &dyn Store, mesh: &str, task_id: &str) -> Option<DirectDispatch> {
    let found =
        ok(store.direct_dispatches(mesh, Some(task_id)), &format!("direct_dispatches({mesh}, {task_id})"));
    assert!(found.len() <= 1, "expected at most one dispatch of {task_id}, got {found:?}");
    found.into_iter().next()
}
