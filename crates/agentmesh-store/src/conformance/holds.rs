//! Rules of in-flight holds (the original's `mesh_inflight_hold`): one hold per
//! task, whose first instant an upsert keeps while the rest is overwritten, read by
//! task, listed by mesh in the order they were first held, and released by task.

use agentmesh_core::{InflightHold, NewInflightHold, Timestamp};

use super::support::*;
use crate::{HoldWrite, Store};

fn hold(task_id: &str, reason: &str) -> NewInflightHold {
    NewInflightHold {
        task_id: task_id.into(),
        hold_reason: reason.into(),
        first_idle_since_ack: None,
        read_failure_count: 0,
    }
}

fn upsert(store: &dyn Store, mesh: &str, new: &NewInflightHold, now: Timestamp) -> InflightHold {
    let what = format!("write_inflight_hold({mesh}, {})", new.task_id);
    ok(store.write_inflight_hold(mesh, HoldWrite::Hold(new), now), &what)
        .unwrap_or_else(|| panic!("expected {what} to answer the hold as stored"))
}

fn holds(store: &dyn Store, mesh: &str) -> Vec<InflightHold> {
    ok(store.inflight_holds(mesh, None), &format!("inflight_holds({mesh})"))
}

fn held(store: &dyn Store, mesh: &str, task_id: &str) -> Option<InflightHold> {
    let found = ok(store.inflight_holds(mesh, Some(task_id)), &format!("inflight_holds({mesh}, {task_id})"));
    assert!(found.len() <= 1, "expected at most one hold of {task_id}, got {found:?}");
    found.into_iter().next()
}

/// A new hold is stored as given, held and updated at `now`, and read back by its task; an
/// omitted idle anchor reads back empty, and a task that is not held has no hold.
pub fn inflight_hold_is_stored_and_read_back_by_task(store: &dyn Store) {
    let stored = upsert(store, MESH, &hold(" t1 ", " acked "), at(10));
    let expected = InflightHold {
        task_id: "t1".into(),
        mesh_id: MESH.into(),
        hold_reason: "acked".into(),
        held_at: at(10).iso(),
        first_idle_since_ack: None,
        read_failure_count: 0,
        updated_at: at(10).iso(),
    };
    assert_eq!(stored, expected, "expected the upsert to return the hold as stored, trimmed");
    assert_eq!(held(store, MESH, "t1"), Some(expected), "expected the hold read back by its task");
    assert_eq!(held(store, MESH, "t2"), None, "expected no hold for a task never held");
}

/// Upserting the hold of a held task keeps its first `heldAt` and overwrites its reason, idle
/// anchor, read-failure count and `updatedAt`; a later upsert without an idle anchor clears it.
pub fn inflight_hold_upsert_keeps_the_first_held_at(store: &dyn Store) {
    upsert(store, MESH, &hold("t1", "acked"), at(10));
    let idle = NewInflightHold {
        first_idle_since_ack: Some(at(15)),
        read_failure_count: 3,
        ..hold("t1", "idle_after_ack")
    };
    let again = upsert(store, MESH, &idle, at(20));
    assert_eq!(again.held_at, at(10).iso(), "expected the first heldAt kept");
    assert_eq!(again.updated_at, at(20).iso(), "expected updatedAt moved to the upsert");
    assert_eq!(again.hold_reason, "idle_after_ack", "expected the reason overwritten");
    assert_eq!(again.first_idle_since_ack, Some(at(15).iso()), "expected the idle anchor recorded");
    assert_eq!(again.read_failure_count, 3, "expected the read-failure count overwritten");
    assert_eq!(held(store, MESH, "t1").as_ref(), Some(&again), "expected the read to match the upsert");

    let cleared = upsert(store, MESH, &hold("t1", "acked"), at(30));
    assert_eq!(cleared.held_at, at(10).iso(), "expected the first heldAt kept again");
    assert_eq!(cleared.first_idle_since_ack, None, "expected an omitted idle anchor to read back empty");
    assert_eq!(cleared.read_failure_count, 0);
    assert_eq!(holds(store, MESH).len(), 1, "expected one hold per task");
}

/// A mesh's holds are listed by `heldAt`, then by task id, and only that mesh's; a re-upsert
/// keeps a hold's place.
pub fn inflight_holds_are_listed_by_mesh_in_held_order(store: &dyn Store) {
    upsert(store, MESH, &hold("t-late", "acked"), at(30));
    upsert(store, MESH, &hold("t-b", "acked"), at(10));
    upsert(store, MESH, &hold("t-a", "acked"), at(10));
    upsert(store, MESH, &hold("t-mid", "acked"), at(20));
    upsert(store, OTHER_MESH, &hold("t-other", "acked"), at(5));
    upsert(store, MESH, &hold("t-b", "read_failed"), at(40));
    let order: Vec<String> = holds(store, MESH).into_iter().map(|h| h.task_id).collect();
    assert_eq!(order, ["t-a", "t-b", "t-mid", "t-late"], "expected heldAt order, then task id");
    assert_eq!(held(store, MESH, "t-other"), None, "expected another mesh's hold invisible");
    assert_eq!(held(store, OTHER_MESH, "t-a"), None, "expected this mesh's hold invisible to the other");
    let theirs: Vec<String> = holds(store, OTHER_MESH).into_iter().map(|h| h.task_id).collect();
    assert_eq!(theirs, ["t-other"]);
}

/// Releasing a hold deletes it and says so; releasing it again, or in another mesh, deletes
/// nothing.
pub fn inflight_hold_delete_reports_whether_it_was_held(store: &dyn Store) {
    upsert(store, MESH, &hold("t1", "acked"), at(10));
    upsert(store, MESH, &hold("t2", "acked"), at(10));
    upsert(store, OTHER_MESH, &hold("t9", "acked"), at(10));
    assert!(
        ok(
            store.write_inflight_hold(OTHER_MESH, HoldWrite::Release("t1"), at(11)),
            "delete_inflight_hold(B, t1)"
        )
        .is_none(),
        "expected another mesh's release to find nothing"
    );
    assert!(
        ok(store.write_inflight_hold(MESH, HoldWrite::Release("t1"), at(11)), "delete_inflight_hold(t1)")
            .is_some(),
        "expected t1 released"
    );
    assert!(
        ok(
            store.write_inflight_hold(MESH, HoldWrite::Release("t1"), at(11)),
            "delete_inflight_hold(t1) again"
        )
        .is_none()
    );
    assert_eq!(held(store, MESH, "t1"), None);
    let left: Vec<String> = holds(store, MESH).into_iter().map(|h| h.task_id).collect();
    assert_eq!(left, ["t2"], "expected the other hold kept");
    assert_eq!(holds(store, OTHER_MESH).len(), 1, "expected the other mesh's hold kept");
}

/// A hold with a blank task id or reason is invalid input naming the field; nothing is stored.
pub fn inflight_hold_rejects_bad_input_naming_the_field(store: &dyn Store) {
    upsert(store, MESH, &hold("kept", "acked"), at(10));
    for (field, bad) in [("taskId", hold(" ", "acked")), ("holdReason", hold("t1", "\t"))] {
        let what = format!("write_inflight_hold with a blank {field}");
        assert_invalid_input(store.write_inflight_hold(MESH, HoldWrite::Hold(&bad), at(20)), field, &what);
        let left: Vec<String> = holds(store, MESH).into_iter().map(|h| h.task_id).collect();
        assert_eq!(left, ["kept"], "expected {what} to store nothing");
    }
    assert_eq!(held(store, MESH, "kept").map(|h| h.updated_at), Some(at(10).iso()));
}
