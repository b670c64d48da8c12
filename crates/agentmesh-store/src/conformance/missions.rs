//! Rules of missions and placement: creating and updating missions with their
//! ledger entries, listing, ids owned by one mesh, progress derived from the
//! mission's tasks, validation, clearing; the per-mesh scheduler cursor and the
//! round-robin rotation it drives.

use std::collections::BTreeSet;

use agentmesh_core::placement::rank;
use agentmesh_core::{
    Mission, MissionProgress, NewMission, NewTask, NodeCandidate, Strategy, TaskStatus, Timestamp,
};

use super::support::*;
use crate::{IdScope, MissionQuery, Store, StoreError};

/// Kinds of the mission entries the ledger writes.
const MISSION_CREATED: &str = "mission_created";
const MISSION_STATUS_CHANGED: &str = "mission_status_changed";
const MISSION_GOAL_UPDATED: &str = "mission_goal_updated";

/// The kinds of the entries appended to the mesh's ledger after the first `seen`,
/// each asserted to be stamped with `now`.
#[track_caller]
fn new_kinds(store: &dyn Store, mesh: &str, seen: usize, now: Timestamp) -> Vec<String> {
    let entries = ledger_entries(store, mesh);
    let new = entries.get(seen..).unwrap_or_default();
    for entry in new {
        assert_eq!(
            entry.timestamp,
            now.iso(),
            "expected ledger entry {} stamped with the upsert's now",
            entry.kind
        );
    }
    new.iter().map(|e| e.kind.clone()).collect()
}

/// A mission `id` in mesh `mesh` with the given fields, as a store returns it.
fn stored_mission(
    mesh: &str,
    id: &str,
    title: &str,
    goal: &str,
    status: &str,
    created: i64,
    updated: i64,
) -> Mission {
    Mission {
        id: id.into(),
        mesh_id: mesh.into(),
        title: title.into(),
        goal: goal.into(),
        status: status.into(),
        source: None,
        created_at: at(created).iso(),
        updated_at: at(updated).iso(),
    }
}

/// A mission's source is written once: a mission created with one keeps it whatever later
/// upserts give, a mission created without one takes the first one given (the original's
/// `COALESCE(source, excluded.source)`), and every read shows it.
pub fn mission_source_is_written_once(store: &dyn Store) {
    let sourced = NewMission { source: Some("coordinator".into()), ..new_mission("m1", "One") };
    let first = upsert_mission(store, MESH, sourced, at(1));
    assert_eq!(first.source.as_deref(), Some("coordinator"), "expected the source written at creation");
    let other = NewMission { source: Some("import".into()), ..new_mission("m1", "One again") };
    let kept = upsert_mission(store, MESH, other, at(2));
    assert_eq!(kept.source.as_deref(), Some("coordinator"), "expected the first source kept");
    assert_eq!(kept.title, "One again", "expected the rest updated");
    let unsourced = upsert_mission(store, MESH, new_mission("m1", "One"), at(3));
    assert_eq!(unsourced.source.as_deref(), Some("coordinator"), "expected an upsert without one to keep it");

    let bare = upsert_mission(store, MESH, new_mission("m2", "Two"), at(4));
    assert_eq!(bare.source, None, "expected no source when none was given");
    let later = NewMission { source: Some("import".into()), ..new_mission("m2", "Two") };
    assert_eq!(upsert_mission(store, MESH, later, at(5)).source.as_deref(), Some("import"));

    let read = |id: &str| mission_of(store, MESH, id).expect("the mission exists").source;
    assert_eq!((read("m1").as_deref(), read("m2").as_deref()), (Some("coordinator"), Some("import")));
    let listed: Vec<Option<String>> = ok(store.missions(MESH, MissionQuery::Statuses(&[])), "missions")
        .into_iter()
        .map(|m| m.source)
        .collect();
    assert_eq!(listed, [Some("import".to_owned()), Some("coordinator".to_owned())]);
}

/// An upsert says whether it created the mission: the first upsert of an id did,
/// a later one (an update) did not.
pub fn upsert_mission_says_whether_it_created_the_mission(store: &dyn Store) {
    let first = ok(store.upsert_mission(MESH, &new_mission("m1", "Ship"), at(1)), "first upsert of m1");
    assert!(first.created, "expected the first upsert of m1 to create it");
    let again = ok(store.upsert_mission(MESH, &new_mission("m1", "Ship it"), at(2)), "second upsert of m1");
    assert!(!again.created, "expected a second upsert of m1 to update it, not create it");
    assert_eq!(again.mission.title, "Ship it");
}

/// Creating a mission gives it status `active` and goal "" by default, stamps `now`, and records `mission_created`.
pub fn upsert_mission_creates_an_active_mission_and_records_mission_created(store: &dyn Store) {
    let created = upsert_mission(store, MESH, new_mission("m1", "Ship the importer"), at(1));
    let expected = stored_mission(MESH, "m1", "Ship the importer", "", "active", 1, 1);
    assert_eq!(created, expected, "expected a new mission active, with an empty goal, stamped with now");
    assert_eq!(mission_of(store, MESH, "m1"), Some(expected), "expected the stored mission as returned");
    assert_eq!(
        new_kinds(store, MESH, 0, at(1)),
        [MISSION_CREATED],
        "expected exactly one mission_created entry"
    );

    let given = NewMission {
        goal: Some("all green".into()),
        status: Some("paused".into()),
        ..new_mission("m2", "Later")
    };
    let m2 = upsert_mission(store, MESH, given, at(2));
    assert_eq!(
        m2,
        stored_mission(MESH, "m2", "Later", "all green", "paused", 2, 2),
        "expected goal and status as given"
    );
    assert_eq!(new_kinds(store, MESH, 1, at(2)), [MISSION_CREATED], "expected m2's mission_created entry");
}

/// An update changes title, goal and status, keeps createdAt, stamps updatedAt, and records what changed.
pub fn upsert_mission_updates_and_keeps_the_creation_time(store: &dyn Store) {
    let first = NewMission { goal: Some("pass CI".into()), ..new_mission("m1", "Ship it") };
    upsert_mission(store, MESH, first, at(1));
    let mut seen = ledger_entries(store, MESH).len();

    let paused = NewMission {
        goal: Some("pass CI".into()),
        status: Some("paused".into()),
        ..new_mission("m1", "Ship it soon")
    };
    let updated = upsert_mission(store, MESH, paused, at(5));
    let expected = stored_mission(MESH, "m1", "Ship it soon", "pass CI", "paused", 1, 5);
    assert_eq!(updated, expected, "expected the new title and status, the first createdAt, updatedAt now");
    assert_eq!(mission_of(store, MESH, "m1"), Some(expected), "expected the update stored");
    let kinds = new_kinds(store, MESH, seen, at(5));
    assert!(
        kinds.iter().any(|k| k == MISSION_STATUS_CHANGED),
        "expected a status change recorded: {kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == MISSION_CREATED),
        "expected an update not recorded as a creation: {kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == MISSION_GOAL_UPDATED),
        "expected no goal update for the same goal: {kinds:?}"
    );
    seen += kinds.len();

    let regoaled = NewMission {
        goal: Some("pass CI and the benchmarks".into()),
        status: Some("paused".into()),
        ..new_mission("m1", "Ship it soon")
    };
    let updated = upsert_mission(store, MESH, regoaled, at(9));
    assert_eq!(
        updated,
        stored_mission(MESH, "m1", "Ship it soon", "pass CI and the benchmarks", "paused", 1, 9),
        "expected the new goal, the first createdAt, updatedAt now"
    );
    let kinds = new_kinds(store, MESH, seen, at(9));
    assert!(kinds.iter().any(|k| k == MISSION_GOAL_UPDATED), "expected a goal update recorded: {kinds:?}");
    assert!(
        !kinds.iter().any(|k| k == MISSION_STATUS_CHANGED),
        "expected no status change recorded: {kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == MISSION_CREATED),
        "expected an update not recorded as a creation: {kinds:?}"
    );
    assert_eq!(mission_ids(store, MESH, &[]), ["m1"], "expected updates to keep one mission");
}

/// Missions are listed most recently updated first, filtered by the given statuses (all when none).
pub fn missions_are_listed_by_status_most_recently_updated_first(store: &dyn Store) {
    upsert_mission(store, MESH, new_mission("ma", "A"), at(1));
    upsert_mission(store, MESH, new_mission("mb", "B"), at(2));
    let paused = NewMission { status: Some("paused".into()), ..new_mission("mc", "C") };
    let mc = upsert_mission(store, MESH, paused, at(3));
    let touched =
        NewMission { goal: Some(String::new()), status: Some("active".into()), ..new_mission("ma", "A2") };
    upsert_mission(store, MESH, touched, at(4));
    upsert_mission(store, OTHER_MESH, new_mission("mz", "Z"), at(5));

    assert_eq!(
        mission_ids(store, MESH, &[]),
        ["ma", "mc", "mb"],
        "expected every mission, latest update first"
    );
    assert_eq!(mission_ids(store, MESH, &["active"]), ["ma", "mb"], "expected the active missions");
    assert_eq!(
        mission_ids(store, MESH, &["paused", "closed"]),
        ["mc"],
        "expected the paused or closed missions"
    );
    assert!(mission_ids(store, MESH, &["completed"]).is_empty(), "expected no completed mission");
    assert_eq!(mission_ids(store, OTHER_MESH, &[]), ["mz"], "expected only B's mission in B");
    let listed = ok(store.missions(MESH, MissionQuery::Statuses(&["paused".into()])), "missions(paused)");
    assert_eq!(listed, [mc], "expected listed missions to carry every field");
}

/// A mission id used in another mesh follows the backend's [`IdScope`]: unique per
/// database, it is refused with `IdInOtherMesh` and neither mesh changes; unique
/// per mesh, the other mesh creates a mission of its own and the first one stays
/// as it was.
pub fn mission_id_used_in_another_mesh_follows_the_id_scope(store: &dyn Store) {
    let m1 = upsert_mission(store, MESH, new_mission("m1", "Mine"), at(1));
    let before = Snapshot::take(store, MESH);
    let theirs = NewMission { goal: Some("take over".into()), ..new_mission("m1", "Theirs") };
    if store.profile().id_scope == IdScope::Mesh {
        let upserted = ok(store.upsert_mission(OTHER_MESH, &theirs, at(2)), "upsert of m1 in B");
        assert!(upserted.created, "expected B's m1 created as a mission of its own");
        assert_eq!(upserted.mission.title, "Theirs", "expected B's m1 as given");
        assert_eq!(mission_of(store, MESH, "m1"), Some(m1), "expected A's mission unchanged");
        before.assert_unchanged(store, MESH, "an upsert of the same id in another mesh");
        assert_eq!(mission_ids(store, OTHER_MESH, &[]), ["m1"], "expected B to list its own m1");
        return;
    }
    let err = expect_err(store.upsert_mission(OTHER_MESH, &theirs, at(2)), "upsert of A's mission id in B");
    assert!(
        matches!(&err, StoreError::IdInOtherMesh { kind: "mission", id } if id == "m1"),
        "expected IdInOtherMesh for mission m1, got {err:?}"
    );
    assert_eq!(mission_of(store, MESH, "m1"), Some(m1), "expected A's mission unchanged");
    before.assert_unchanged(store, MESH, "a refused upsert in another mesh");
    assert_eq!(mission_of(store, OTHER_MESH, "m1"), None, "expected A's mission invisible in B");
    assert!(mission_ids(store, OTHER_MESH, &[]).is_empty(), "expected no mission created in B");
    assert!(ledger_entries(store, OTHER_MESH).is_empty(), "expected nothing recorded in B's ledger");
    assert_not_found(
        store.mission_progress(OTHER_MESH, "m1"),
        "mission",
        OTHER_MESH,
        "m1",
        "B's progress of m1",
    );
}

/// A mission's progress counts its tasks by status, follows every task change, and is never stored.
pub fn mission_progress_is_counted_from_its_tasks(store: &dyn Store) {
    upsert_mission(store, MESH, new_mission("m1", "One"), at(0));
    upsert_mission(store, MESH, new_mission("m2", "Two"), at(0));
    let progress = |id: &str| ok(store.mission_progress(MESH, id), "mission_progress");
    assert_eq!(
        progress("m1"),
        MissionProgress::default(),
        "expected a mission without tasks to count nothing"
    );

    let in_mission = |id: &str, mission: &str| NewTask { mission_id: Some(mission.into()), ..new_task(id) };
    enqueue(store, MESH, in_mission("t-done", "m1"), at(1));
    enqueue(store, MESH, in_mission("t-failed", "m1"), at(2));
    enqueue(store, MESH, in_mission("t-running", "m1"), at(3));
    enqueue(store, MESH, in_mission("t-other", "m2"), at(4));
    enqueue(store, MESH, new_task("t-none"), at(5));
    let expected = MissionProgress { total: 3, pending: 3, ..MissionProgress::default() };
    assert_eq!(progress("m1"), expected, "expected m1's three pending tasks");

    let done = claim_ok(store, MESH, &worker("node-1", "s1"), at(6), "t-done");
    let failing = claim_ok(store, MESH, &worker("node-2", "s2"), at(7), "t-failed");
    let running = claim_ok(store, MESH, &worker("node-3", "s3"), at(8), "t-running");
    let expected = MissionProgress { total: 3, assigned: 3, ..MissionProgress::default() };
    assert_eq!(progress("m1"), expected, "expected m1's three tasks assigned after the claims");

    complete(store, MESH, &done, at(9));
    fail(store, MESH, &failing, "tests broke", at(10));
    enqueue(store, MESH, in_mission("t-waiting", "m1"), at(11));
    enqueue(store, MESH, in_mission("t-dropped", "m1"), at(12));
    ok(
        store.task_command(MESH, "t-dropped", TaskCommand::Cancel { reason: Some("not needed") }, at(13)),
        "cancel of t-dropped",
    );
    let expected =
        MissionProgress { total: 5, pending: 1, assigned: 1, completed: 1, failed: 1, cancelled: 1 };
    assert_eq!(progress("m1"), expected, "expected m1 counted one task per status");
    assert_eq!(
        progress("m2"),
        MissionProgress { total: 1, pending: 1, ..MissionProgress::default() },
        "expected m2 to count only its own task"
    );

    complete(store, MESH, &running, at(14));
    let expected =
        MissionProgress { total: 5, pending: 1, assigned: 0, completed: 2, failed: 1, cancelled: 1 };
    assert_eq!(progress("m1"), expected, "expected the progress to follow the completion");
    assert_status(store, MESH, "t-running", TaskStatus::Completed);
}

/// An unknown mission reads as None and its progress is `NotFound`.
pub fn mission_of_an_unknown_id_is_not_found(store: &dyn Store) {
    upsert_mission(store, MESH, new_mission("m1", "One"), at(0));
    assert_eq!(mission_of(store, MESH, "nope"), None, "expected no mission nope");
    assert_not_found(
        store.mission_progress(MESH, "nope"),
        "mission",
        MESH,
        "nope",
        "progress of an unknown mission",
    );
}

/// A blank id or title, or a status that is not a lowercase word, is invalid input naming the field; nothing changes.
pub fn upsert_mission_rejects_bad_input_naming_the_field(store: &dyn Store) {
    let kept = upsert_mission(store, MESH, new_mission("kept", "Kept"), at(0));
    let before = Snapshot::take(store, MESH);
    let cases = [
        ("id", new_mission("  ", "A title")),
        ("title", new_mission("fresh", " ")),
        ("title", new_mission("kept", "")),
        ("status", NewMission { status: Some("Done!".into()), ..new_mission("fresh", "A title") }),
        ("status", NewMission { status: Some(String::new()), ..new_mission("kept", "Kept") }),
    ];
    for (field, bad) in cases {
        let what = format!("upsert_mission of {:?} with a bad {field}", bad.id);
        assert_invalid_input(store.upsert_mission(MESH, &bad, at(1)), field, &what);
        before.assert_unchanged(store, MESH, &what);
        let missions = ok(store.missions(MESH, MissionQuery::Statuses(&[])), "missions");
        assert_eq!(missions, std::slice::from_ref(&kept), "expected {what} to create or change no mission");
    }
}

/// The scheduler cursor starts at 0; a bump returns the value before and adds one, per mesh.
pub fn scheduler_cursor_starts_at_zero_and_bump_returns_the_value_before(store: &dyn Store) {
    let bump = |mesh: &str| ok(store.bump_scheduler_cursor(mesh), "bump_scheduler_cursor");
    assert_eq!(bump(MESH), 0, "expected the first bump to return 0");
    assert_eq!(bump(MESH), 1, "expected the second bump to return 1");
    assert_eq!(bump(MESH), 2, "expected the third bump to return 2");
    assert_eq!(bump(OTHER_MESH), 0, "expected B's first bump to return 0: A's bumps leave it alone");
    assert_eq!(bump(MESH), 3, "expected B's bump to leave A's cursor");
    assert_eq!(bump(OTHER_MESH), 1, "expected B's second bump to return 1");
}

/// Round robin over the store's cursor gives each of three equally loaded nodes a turn in successive placements.
pub fn round_robin_rotates_the_winner_among_equally_loaded_nodes(store: &dyn Store) {
    let nodes = ["node-1", "node-2", "node-3"];
    for (i, node) in nodes.into_iter().enumerate() {
        let id = format!("busy-{node}");
        enqueue(store, MESH, new_task(&id), at(i as i64));
        claim_ok(store, MESH, &worker(node, &format!("s{}", i + 1)), at(10), &id);
    }
    let candidates: Vec<NodeCandidate> = nodes
        .into_iter()
        .map(|node| NodeCandidate {
            node_id: node.into(),
            scheduling_priority: 0,
            load: crate::placement::node_load(
                &ok(store.active_assignments(MESH), "active_assignments"),
                node,
            ),
        })
        .collect();
    assert!(
        candidates.iter().all(|n| n.load == 1),
        "expected every node loaded with one task: {candidates:?}"
    );

    let place = || {
        let cursor = ok(store.bump_scheduler_cursor(MESH), "bump_scheduler_cursor");
        rank(Strategy::RoundRobin, &candidates, cursor)[0].node_id.clone()
    };
    let winners: Vec<String> = (0..3).map(|_| place()).collect();
    let distinct: BTreeSet<&String> = winners.iter().collect();
    assert_eq!(
        distinct.len(),
        3,
        "expected three successive placements to pick three different nodes: {winners:?}"
    );
    assert_eq!(place(), winners[0], "expected the fourth placement to come back to the first winner");
    assert_eq!(
        ok(store.bump_scheduler_cursor(MESH), "bump_scheduler_cursor"),
        4,
        "expected one bump per placement"
    );
}
