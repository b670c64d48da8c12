//! Rules of the queue itself: enqueueing (validation, duplicates, cycles, batches),
//! the raw queue operations the original's store offers, the read views, and mesh
//! isolation of tasks and claims.

use agentmesh_core::{ClaimRefusal, NewTask, Task, TaskPriority, TaskStatus, ledger::kinds};
use serde_json::json;

use super::support::*;
use crate::transfer::{Records, TransferStore};
use crate::{IdScope, StatusCount, Store, StoreError};

/// Enqueue returns a pending task stamped `createdAt = updatedAt = now` and records `task_dispatched`.
pub fn enqueue_returns_a_pending_task_and_records_task_dispatched(store: &dyn Store) {
    let now = at(5);
    let new = NewTask { priority: Some("high".into()), ..new_task("t1") };
    let task = enqueue(store, MESH, new, now);
    assert_eq!(task.id, "t1", "expected the task to keep the caller's id");
    assert_eq!(task.mesh_id, MESH, "expected the task to belong to the mesh it was enqueued into");
    assert_eq!(task.message, "work on t1", "expected the message as given");
    assert_eq!(task.status, TaskStatus::Pending, "expected a new task to be pending");
    assert_eq!(task.priority, Some(TaskPriority::High), "expected the priority as given");
    assert_eq!(task.created_at, now.iso(), "expected createdAt to be the enqueue time in ISO form");
    assert_eq!(task.updated_at, now.iso(), "expected updatedAt to be the enqueue time in ISO form");
    assert_eq!(task.epoch(), 0, "expected no epoch before the first claim");
    assert_eq!(find(store, MESH, "t1"), task, "expected the stored task to equal the returned one");

    let entries = ledger_entries(store, MESH);
    assert_eq!(entries.len(), 1, "expected exactly one ledger entry after one enqueue, got {entries:?}");
    let entry = &entries[0];
    assert_eq!(entry.kind, kinds::TASK_DISPATCHED, "expected the enqueue to record task_dispatched");
    assert_eq!(entry.task_id(), Some("t1"), "expected task_dispatched to name the task in payload.taskId");
    assert_eq!(entry.mesh_id, MESH, "expected the ledger entry in the task's mesh");
    assert_eq!(entry.timestamp, now.iso(), "expected the ledger entry stamped with the enqueue time");
}

/// Enqueue without an id gives the task a fresh, non-blank, unique id.
pub fn enqueue_without_an_id_assigns_a_fresh_one(store: &dyn Store) {
    let anonymous = || NewTask { message: "no id given".into(), ..NewTask::default() };
    let a = enqueue(store, MESH, anonymous(), at(0));
    let b = enqueue(store, MESH, anonymous(), at(0));
    assert!(!a.id.trim().is_empty(), "expected a fresh id for a task enqueued without one");
    assert_ne!(a.id, b.id, "expected two tasks enqueued without ids to get different ids");
    assert_eq!(find(store, MESH, &a.id), a, "expected the task findable by its fresh id");
}

/// A blank message is refused as invalid input naming `message`, and nothing changes.
pub fn enqueue_rejects_a_blank_message_and_changes_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("existing"), at(0));
    let before = Snapshot::take(store, MESH);
    for message in ["", "   \n\t"] {
        let new = NewTask { message: message.into(), ..new_task("blank") };
        assert_invalid_input(store.enqueue(MESH, &new, at(1)), "message", "enqueue with a blank message");
        before.assert_unchanged(store, MESH, "a refused enqueue with a blank message");
    }
}

/// An unknown task mode or priority is refused naming `taskMode` / `priority`, and nothing changes.
pub fn enqueue_rejects_an_unknown_mode_or_priority_and_changes_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("existing"), at(0));
    let before = Snapshot::take(store, MESH);
    let bad_mode = NewTask { task_mode: Some("refactor".into()), ..new_task("bad-mode") };
    assert_invalid_input(store.enqueue(MESH, &bad_mode, at(1)), "taskMode", "enqueue with mode \"refactor\"");
    before.assert_unchanged(store, MESH, "a refused enqueue with an unknown mode");
    let bad_priority = NewTask { priority: Some("urgent".into()), ..new_task("bad-priority") };
    assert_invalid_input(
        store.enqueue(MESH, &bad_priority, at(1)),
        "priority",
        "enqueue with priority \"urgent\"",
    );
    before.assert_unchanged(store, MESH, "a refused enqueue with an unknown priority");
}

/// A second task with an existing id is refused with `DuplicateTaskId`, and nothing changes.
pub fn enqueue_rejects_a_duplicate_id_and_changes_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("dup"), at(0));
    let before = Snapshot::take(store, MESH);
    let again = NewTask { message: "a different message".into(), ..new_task("dup") };
    let err = expect_err(store.enqueue(MESH, &again, at(1)), "enqueue of an id that exists");
    assert!(
        matches!(&err, StoreError::DuplicateTaskId { task_id, .. } if task_id == "dup"),
        "expected DuplicateTaskId for task dup, got {err:?}"
    );
    before.assert_unchanged(store, MESH, "a refused duplicate enqueue");
}

/// A dependency cycle (through other tasks, or on itself) is refused with `DependencyCycle`, and nothing changes.
pub fn enqueue_rejects_a_dependency_cycle_and_changes_nothing(store: &dyn Store) {
    // a depends on c (not there yet), b on a; adding c depending on b closes c -> b -> a -> c.
    enqueue(store, MESH, dependent_task("a", &["c"]), at(0));
    enqueue(store, MESH, dependent_task("b", &["a"]), at(1));
    let before = Snapshot::take(store, MESH);
    let err = expect_err(store.enqueue(MESH, &dependent_task("c", &["b"]), at(2)), "enqueue closing a cycle");
    match &err {
        StoreError::DependencyCycle { path } => {
            assert_eq!(
                path.first().map(String::as_str),
                Some("c"),
                "expected the cycle to start at c: {path:?}"
            );
            assert_eq!(
                path.last().map(String::as_str),
                Some("c"),
                "expected the cycle to end at c: {path:?}"
            );
            for id in ["a", "b"] {
                assert!(path.iter().any(|p| p == id), "expected the cycle {path:?} to pass through {id}");
            }
        }
        other => panic!("expected DependencyCycle for c -> b -> a -> c, got {other:?}"),
    }
    before.assert_unchanged(store, MESH, "a refused enqueue that closes a cycle");

    let err = expect_err(store.enqueue(MESH, &dependent_task("self", &["self"]), at(3)), "self-dependency");
    assert!(
        matches!(err, StoreError::DependencyCycle { .. }),
        "expected a task depending on itself to be refused with DependencyCycle, got {err:?}"
    );
    before.assert_unchanged(store, MESH, "a refused self-dependent enqueue");
}

/// A batch with a bad member (invalid, duplicate or cyclic) enqueues none of its tasks.
pub fn enqueue_batch_is_all_or_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("existing"), at(0));
    let before = Snapshot::take(store, MESH);

    let bad_third = [new_task("b1"), new_task("b2"), NewTask { message: "  ".into(), ..new_task("b3") }];
    assert_invalid_input(
        store.enqueue_batch(MESH, &bad_third, at(1)),
        "message",
        "a batch whose third task has a blank message",
    );
    before.assert_unchanged(store, MESH, "a batch refused for its third task");

    let duplicate = [new_task("b1"), new_task("existing")];
    let err = expect_err(store.enqueue_batch(MESH, &duplicate, at(1)), "a batch repeating an existing id");
    assert!(matches!(err, StoreError::DuplicateTaskId { .. }), "expected DuplicateTaskId, got {err:?}");
    before.assert_unchanged(store, MESH, "a batch refused for a duplicate id");

    let cyclic = [dependent_task("p", &["q"]), dependent_task("q", &["p"])];
    let err = expect_err(store.enqueue_batch(MESH, &cyclic, at(1)), "a batch whose members form a cycle");
    assert!(matches!(err, StoreError::DependencyCycle { .. }), "expected DependencyCycle, got {err:?}");
    before.assert_unchanged(store, MESH, "a batch refused for a cycle");
}

/// A batch enqueues every task in order, and a member may depend on an earlier member.
pub fn enqueue_batch_members_may_depend_on_earlier_members(store: &dyn Store) {
    let batch =
        [new_task("first"), dependent_task("second", &["first"]), dependent_task("third", &["second"])];
    let tasks = ok(store.enqueue_batch(MESH, &batch, at(1)), "a batch with in-batch dependencies");
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["first", "second", "third"], "expected the batch's tasks returned in batch order");
    for task in &tasks {
        assert_eq!(task.status, TaskStatus::Pending, "expected batch task {} pending", task.id);
        assert_eq!(find(store, MESH, &task.id), *task, "expected batch task {} stored as returned", task.id);
    }
    assert_eq!(find(store, MESH, "second").dependencies(), ["first"], "expected second to depend on first");
    assert_eq!(
        ledger_kinds(store, MESH),
        [kinds::TASK_DISPATCHED; 3],
        "expected one task_dispatched per batch member"
    );
    // The in-batch dependency holds: only the head of the chain is claimable.
    claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "first");
    assert_refused(claim(store, MESH, &worker("node-2", "s2"), at(2)), ClaimRefusal::DependenciesUnsatisfied);
}

/// Queue entries come in creation order (insertion order within one instant), not id order.
pub fn queue_entries_are_in_creation_order(store: &dyn Store) {
    enqueue(store, MESH, new_task("t-c"), at(1));
    enqueue(store, MESH, new_task("t-b"), at(2));
    enqueue(store, MESH, new_task("t-a"), at(3));
    ok(store.enqueue_batch(MESH, &[new_task("u-z"), new_task("u-y")], at(4)), "a batch at one instant");
    assert_eq!(
        queue_ids(store, MESH, &[]),
        ["t-c", "t-b", "t-a", "u-z", "u-y"],
        "expected queue entries in creation order"
    );
}

/// Queue entries are filtered by the given statuses; no statuses means every task.
pub fn queue_entries_filter_by_status(store: &dyn Store) {
    for (i, id) in ["p1", "a1", "c1", "p2"].into_iter().enumerate() {
        enqueue(store, MESH, new_task(id), at(i as i64));
    }
    let a1 = claim_ok(store, MESH, &worker("node-1", "s1"), at(10), "p1");
    complete(store, MESH, &a1, at(11));
    claim_ok(store, MESH, &worker("node-2", "s2"), at(12), "a1");
    claim_ok(store, MESH, &worker("node-3", "s3"), at(13), "c1");
    ok(
        store.task_command(MESH, "c1", TaskCommand::Cancel { reason: Some("not needed") }, at(14)),
        "cancel of c1",
    );

    assert_eq!(queue_ids(store, MESH, &[TaskStatus::Pending]), ["p2"], "expected only pending tasks");
    assert_eq!(queue_ids(store, MESH, &[TaskStatus::Assigned]), ["a1"], "expected only assigned tasks");
    assert_eq!(
        queue_ids(store, MESH, &[TaskStatus::Completed, TaskStatus::Cancelled]),
        ["p1", "c1"],
        "expected completed and cancelled tasks in creation order"
    );
    assert!(queue_ids(store, MESH, &[TaskStatus::Failed]).is_empty(), "expected no failed task");
    assert_eq!(queue_ids(store, MESH, &[]), ["p1", "a1", "c1", "p2"], "expected every task without a filter");
}

/// An imported task is stored exactly as given, with no ledger entry; importing
/// an id the mesh holds again leaves the stored task as it was.
pub fn imported_task_is_stored_as_given_and_an_existing_id_is_kept(store: &dyn TransferStore) {
    let mut task = assigned_row("raw-1", "s1", at(7));
    task.failure_reason = Some("kept as given".into());
    task.required_tags = Some(vec!["os=linux".into()]);
    seed_tasks(store, &[task.clone()]);
    assert_eq!(find(store, MESH, "raw-1"), task, "expected the imported task stored exactly as given");
    assert!(ledger_kinds(store, MESH).is_empty(), "expected an import to write no ledger entry");

    let mut again = task.clone();
    again.message = "another".into();
    let report = seed(store, MESH, Records::Tasks(vec![again]));
    assert_eq!((report.inserted, report.existing), (0, 1), "expected the id counted as existing");
    assert_eq!(find(store, MESH, "raw-1"), task, "expected the second import to leave the task unchanged");
}

/// An enqueue whose ids break the id rule (a control character, over 200 bytes)
/// is invalid input naming the field and changes nothing; a row stored as given
/// with such an id (as the original may have written it) stays readable.
pub fn ids_follow_the_id_rule_on_enqueue_and_odd_stored_rows_stay_readable(store: &dyn TransferStore) {
    let cases = [
        ("id", NewTask { id: Some("x\u{0}y\nz".into()), ..new_task("t1") }),
        ("id", NewTask { id: Some("t".repeat(201)), ..new_task("t1") }),
        ("dependsOn[0]", NewTask { depends_on: vec!["a\rb".into()], ..new_task("t1") }),
        ("targetNodeId", NewTask { target_node_id: Some("n\u{1b}1".into()), ..new_task("t1") }),
        ("missionId", NewTask { mission_id: Some("m\n1".into()), ..new_task("t1") }),
    ];
    for (field, bad) in cases {
        let what = format!("enqueue with a bad {field}");
        assert_invalid_input(store.enqueue(MESH, &bad, at(1)), field, &what);
    }
    assert!(queue_ids(store, MESH, &[]).is_empty(), "expected the refused enqueues to store no task");
    assert!(ledger_kinds(store, MESH).is_empty(), "expected the refused enqueues to write no ledger entry");

    let mut odd = assigned_row("legacy\nrow", "s1", at(2));
    odd.status = TaskStatus::Pending;
    odd.assigned_session_id = None;
    odd.assigned_node_id = None;
    seed_tasks(store, &[odd.clone()]);
    assert_eq!(queue_ids(store, MESH, &[]), ["legacy\nrow"], "expected the odd row listed as stored");
    assert_eq!(find(store, MESH, "legacy\nrow"), odd, "expected the odd row read back as stored");
}

/// `mesh_summaries` lists every mesh with a row of its own, sorted by id, with its
/// task counts by status, undrained events, ledger entries and missions.
pub fn mesh_summaries_list_every_mesh_with_its_counts(store: &dyn Store) {
    assert!(ok(store.mesh_summaries(), "mesh_summaries").is_empty(), "expected no mesh in an empty store");
    enqueue(store, "z-tasks", new_task("t1"), at(0));
    enqueue(store, "z-tasks", new_task("t2"), at(1));
    claim_ok(store, "z-tasks", &worker("node-1", "s1"), at(2), "t1");
    upsert_mission(store, "m-missions", new_mission("m1", "Mission one"), at(3));
    queue_event(
        store,
        "a-events",
        (inbox_event("a-events", "agent:ready", "n1", at(4)), Default::default()),
        at(4),
    );
    ok(store.import_ledger(&[ledger_entry("b-ledger", "e1", "note", at(5))]), "import_ledger");
    insert_delivery(store, "c-deliveries", delivery("d1", "s1", 0), at(6));

    let summaries = ok(store.mesh_summaries(), "mesh_summaries");
    let ids: Vec<&str> = summaries.iter().map(|s| s.mesh_id.as_str()).collect();
    assert_eq!(
        ids,
        ["a-events", "b-ledger", "c-deliveries", "m-missions", "z-tasks"],
        "expected every mesh once, by id"
    );
    let tasks = &summaries[4];
    assert_eq!(
        tasks.tasks,
        [
            StatusCount { status: TaskStatus::Pending, count: 1 },
            StatusCount { status: TaskStatus::Assigned, count: 1 }
        ],
        "expected the task counts in lifecycle order"
    );
    assert_eq!(tasks.ledger_entries, 3, "expected two task_dispatched and one task_claimed entry");
    assert_eq!((tasks.pending_events, tasks.missions), (0, 0));
    assert_eq!(summaries[0].pending_events, 1, "expected the queued event counted");
    assert_eq!(summaries[1].ledger_entries, 1, "expected the appended entry counted");
    assert_eq!(summaries[3].missions, 1, "expected the mission counted");
    assert!(
        summaries[2].tasks.is_empty() && summaries[2].ledger_entries == 0,
        "expected a delivery-only mesh listed with no counts"
    );
}

/// Imported tasks and enqueues keep dependents' claimability in step with their
/// dependencies' statuses, whatever order they arrive in.
pub fn imported_tasks_keep_dependency_readiness(store: &dyn TransferStore) {
    let me = worker("node-1", "s1");
    // A dependency imported as completed after its dependent was enqueued.
    enqueue(store, MESH, dependent_task("after-import", &["imported"]), at(1));
    let mut imported = Task::new("imported", MESH, "done elsewhere", &at(0).iso());
    imported.status = TaskStatus::Completed;
    seed_tasks(store, &[imported]);
    let t = claim_ok(store, MESH, &me, at(2), "after-import");
    complete(store, MESH, &t, at(3));

    // A dependency already completed when its dependent is enqueued.
    enqueue(store, MESH, dependent_task("late-child", &["imported"]), at(4));
    let t = claim_ok(store, MESH, &me, at(5), "late-child");
    complete(store, MESH, &t, at(6));

    // A page holding a dependent before its pending dependency: readiness follows
    // the rows, whatever their order in the page.
    let child =
        Task { depends_on: Some(vec!["r-dep".into()]), ..Task::new("r-child", MESH, "child", &at(7).iso()) };
    let pending_dep = Task::new("r-dep", MESH, "dependency", &at(8).iso());
    seed(store, MESH, Records::Tasks(vec![child, pending_dep]));
    claim_ok(store, MESH, &me, at(9), "r-dep");
    assert_refused(
        claim(store, MESH, &worker("node-2", "s2"), at(10)),
        ClaimRefusal::DependenciesUnsatisfied,
    );
    // A dependent imported after its dependency failed is blocked like any other.
    let mut failed_dep = Task::new("f-dep", MESH, "failed elsewhere", &at(11).iso());
    failed_dep.status = TaskStatus::Failed;
    seed_tasks(store, &[failed_dep]);
    let blocked = Task {
        depends_on: Some(vec!["f-dep".into()]),
        ..Task::new("f-child", MESH, "child of a failure", &at(12).iso())
    };
    seed_tasks(store, &[blocked]);
    assert_refused(
        claim(store, MESH, &worker("node-2", "s2"), at(13)),
        ClaimRefusal::DependenciesUnsatisfied,
    );
}

/// `find_task` finds a task by id within its mesh, and nothing for an unknown id or another mesh.
pub fn find_task_finds_by_id_within_the_mesh(store: &dyn Store) {
    let task = enqueue(store, MESH, new_task("f1"), at(1));
    assert_eq!(ok(store.find_task(MESH, "f1"), "find_task"), Some(task), "expected f1 found as enqueued");
    assert_eq!(ok(store.find_task(MESH, "nope"), "find_task"), None, "expected no task for an unknown id");
    assert_eq!(
        ok(store.find_task(OTHER_MESH, "f1"), "find_task"),
        None,
        "expected f1 invisible from another mesh"
    );
}

/// A node's load (`placement::node_load` over `active_assignments`) counts the
/// assigned tasks whose node is exactly the given id.
pub fn node_load_counts_the_exact_node(store: &dyn Store) {
    let count = |node: &str| {
        crate::placement::node_load(&ok(store.active_assignments(MESH), "active_assignments"), node)
    };
    enqueue(store, MESH, readonly_task("r1"), at(0));
    enqueue(store, MESH, readonly_task("r2"), at(1));
    enqueue(store, MESH, readonly_task("r3"), at(2));
    assert_eq!(count("daemon_mach_A"), 0, "expected 0 before any claim");
    let r1 = claim_ok(store, MESH, &worker("daemon_mach_A", "s1"), at(3), "r1");
    claim_ok(store, MESH, &worker("daemon_mach_A", "s2"), at(4), "r2");
    claim_ok(store, MESH, &worker("node-b", "s3"), at(5), "r3");
    assert_eq!(count("daemon_mach_A"), 2, "expected both assignments of daemon_mach_A counted");
    assert_eq!(count("node-b"), 1, "expected one assignment on node-b");
    assert_eq!(count("mach_A"), 0, "expected the count to match the node id exactly");
    complete(store, MESH, &r1, at(6));
    assert_eq!(count("daemon_mach_A"), 1, "expected a completed task no longer counted");
}

/// `oldest_pending_created_at` is the enqueue time of the mesh's oldest pending
/// task, blocked ones included, and moves on as tasks leave `pending`.
pub fn oldest_pending_created_at_is_the_oldest_pending_enqueue(store: &dyn Store) {
    let oldest = |mesh| ok(store.oldest_pending_created_at(mesh), "oldest_pending_created_at");
    assert_eq!(oldest(MESH), None, "expected no answer for an empty mesh");
    enqueue(store, OTHER_MESH, new_task("elsewhere"), at(0));
    enqueue(store, MESH, new_task("first"), at(10));
    enqueue(store, MESH, dependent_task("waits", &["first"]), at(20));
    enqueue(store, MESH, new_task("last"), at(30));
    assert_eq!(oldest(MESH), Some(at(10)), "expected the first enqueue, not the other mesh's older task");
    claim_ok(store, MESH, &worker("node-1", "s1"), at(40), "first");
    assert_eq!(oldest(MESH), Some(at(20)), "expected the task waiting for its dependency next");
    ok(store.task_command(MESH, "waits", TaskCommand::Cancel { reason: None }, at(41)), "cancel");
    assert_eq!(oldest(MESH), Some(at(30)), "expected a cancelled task no longer to count");
    ok(store.task_command(MESH, "last", TaskCommand::Cancel { reason: None }, at(42)), "cancel");
    assert_eq!(oldest(MESH), None, "expected no answer once nothing is pending");
    assert_eq!(oldest(OTHER_MESH), Some(at(0)), "expected the other mesh's task untouched");
}

/// `stats_by_status` counts tasks per status and leaves out statuses with no task.
pub fn stats_by_status_counts_each_present_status(store: &dyn Store) {
    let stats = |store: &dyn Store| {
        let mut s = ok(store.stats_by_status(MESH), "stats_by_status");
        s.sort_by_key(|c| c.status.as_str());
        s
    };
    let count = |status, count| StatusCount { status, count };
    assert!(stats(store).is_empty(), "expected no counts for an empty mesh");
    for (i, id) in ["s-a", "s-b", "s-c", "s-d", "s-e", "s-f"].into_iter().enumerate() {
        enqueue(store, MESH, new_task(id), at(i as i64));
    }
    assert_eq!(stats(store), [count(TaskStatus::Pending, 6)], "expected only the pending count");

    let a = claim_ok(store, MESH, &worker("node-1", "s1"), at(10), "s-a");
    complete(store, MESH, &a, at(11));
    let b = claim_ok(store, MESH, &worker("node-2", "s2"), at(12), "s-b");
    fail(store, MESH, &b, "broken", at(13));
    claim_ok(store, MESH, &worker("node-3", "s3"), at(14), "s-c");
    ok(store.task_command(MESH, "s-d", TaskCommand::Cancel { reason: None }, at(15)), "cancel");
    let mut expected = vec![
        count(TaskStatus::Assigned, 1),
        count(TaskStatus::Cancelled, 1),
        count(TaskStatus::Completed, 1),
        count(TaskStatus::Failed, 1),
        count(TaskStatus::Pending, 2),
    ];
    expected.sort_by_key(|c| c.status.as_str());
    assert_eq!(stats(store), expected, "expected one count per status present");
}

/// `active_assignments` lists every assigned task with its assignment, oldest dispatch first.
pub fn active_assignments_list_oldest_dispatch_first(store: &dyn Store) {
    enqueue(store, MESH, new_task("b-created-first"), at(0));
    enqueue(store, MESH, NewTask { target_session_id: Some("s1".into()), ..new_task("z-pinned") }, at(1));
    enqueue(store, MESH, new_task("done"), at(2));
    // s1 takes its pinned task first, although the other was created earlier.
    claim_ok(store, MESH, &worker("node-1", "s1"), at(10), "z-pinned");
    claim_ok(store, MESH, &worker("node-2", "s2"), at(20), "b-created-first");
    let done = claim_ok(store, MESH, &worker("node-3", "s3"), at(30), "done");
    complete(store, MESH, &done, at(31));

    let active = ok(store.active_assignments(MESH), "active_assignments");
    let ids: Vec<&str> = active.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["z-pinned", "b-created-first"], "expected assigned tasks only, oldest dispatch first");
    let first = &active[0];
    assert_eq!(first.node_id.as_deref(), Some("node-1"), "expected the assigned node");
    assert_eq!(first.session_id.as_deref(), Some("s1"), "expected the assigned session");
    assert_eq!(first.provider_type.as_deref(), Some(PROVIDER), "expected the assigned provider type");
    assert_eq!(first.message, "work on z-pinned", "expected the task's message");
    assert_eq!(first.dispatch_timestamp, Some(at(10).iso()), "expected the dispatch time");
    assert_eq!(first.lease_expires_at, Some(at(10).plus_millis(LEASE_MS).iso()), "expected the lease end");
    assert_eq!(first.epoch, 1, "expected the first claim's epoch");
    assert!(
        ok(store.active_assignments(OTHER_MESH), "active_assignments").is_empty(),
        "expected none in another mesh"
    );
}

/// Fields the runtime does not model survive import, read, priority change, claim
/// and completion unchanged.
pub fn unknown_task_fields_survive_a_round_trip(store: &dyn TransferStore) {
    let mut task = Task::new("odd", MESH, "carry my extras", &at(0).iso());
    task.model = Some("opus".into());
    task.extra.insert("autoLaunchStatus".into(), json!("started"));
    task.extra.insert("nested".into(), json!({"a": [1, 2, {"b": null}], "c": "d"}));
    task.extra.insert("ratio".into(), json!(0.25));
    seed_tasks(store, &[task.clone()]);
    assert_eq!(find(store, MESH, "odd"), task, "expected the task with unknown fields read back equal");
    assert_eq!(
        ok(store.queue_entries(MESH, &[]), "queue_entries"),
        [task.clone()],
        "expected queue_entries to carry the unknown fields"
    );

    let updated = ok(
        store.task_command(
            MESH,
            "odd",
            TaskCommand::SetPriority { priority: TaskPriority::High, reason: None },
            at(1),
        ),
        "set_task_priority",
    );
    assert_eq!(updated.extra, task.extra, "expected unknown fields kept through a priority change");

    let claimed = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "odd");
    assert_eq!(claimed.extra, task.extra, "expected unknown fields kept through a claim");
    let completed = complete(store, MESH, &claimed, at(3));
    assert_eq!(completed.extra, task.extra, "expected unknown fields kept through a completion");
    assert_eq!(
        find(store, MESH, "odd").extra,
        task.extra,
        "expected the stored task to keep its unknown fields"
    );
}

/// Tasks, claims and counts of one mesh never show up in another.
pub fn meshes_are_isolated_for_tasks_and_claims(store: &dyn Store) {
    enqueue(store, MESH, new_task("a-1"), at(0));
    enqueue(store, MESH, new_task("a-2"), at(1));
    // Nothing of mesh A is visible or claimable from mesh B.
    assert!(queue_ids(store, OTHER_MESH, &[]).is_empty(), "expected mesh B's queue empty");
    assert!(ok(store.stats_by_status(OTHER_MESH), "stats_by_status").is_empty(), "expected no stats in B");
    assert_eq!(ok(store.find_task(OTHER_MESH, "a-1"), "find_task"), None, "expected a-1 invisible from B");
    assert_refused(
        claim(store, OTHER_MESH, &worker("node-1", "s1"), at(2)),
        ClaimRefusal::NoPendingCandidates,
    );
    let err = expect_err(
        store.task_command(OTHER_MESH, "a-1", TaskCommand::Cancel { reason: None }, at(2)),
        "cancel of a-1 through mesh B",
    );
    assert!(matches!(err, StoreError::TaskNotFound { .. }), "expected TaskNotFound from B, got {err:?}");
    assert_status(store, MESH, "a-1", TaskStatus::Pending);

    // A session and a node busy in mesh A are free in mesh B.
    let a1 = claim_ok(store, MESH, &worker("node-1", "s1"), at(3), "a-1");
    enqueue(store, OTHER_MESH, new_task("b-1"), at(4));
    let b1 = claim_ok(store, OTHER_MESH, &worker("node-1", "s1"), at(5), "b-1");
    assert_eq!(
        crate::placement::node_load(
            &ok(store.active_assignments(OTHER_MESH), "active_assignments"),
            "node-1"
        ),
        1,
        "expected B's own count"
    );
    let active: Vec<String> =
        ok(store.active_assignments(OTHER_MESH), "active_assignments").into_iter().map(|a| a.id).collect();
    assert_eq!(active, ["b-1"], "expected only B's assignment listed for B");
    complete(store, OTHER_MESH, &b1, at(6));
    assert_status(store, MESH, "a-1", TaskStatus::Assigned);
    assert_eq!(find(store, MESH, "a-1"), a1, "expected completing in B to leave A's task as it was");
    // A dependency id completed in mesh A means nothing in mesh B.
    // Whether the dependent in B was enqueued before or after the completion in A.
    enqueue(store, OTHER_MESH, dependent_task("b-2", &["a-1"]), at(7));
    complete(store, MESH, &a1, at(8));
    enqueue(store, OTHER_MESH, dependent_task("b-3", &["a-1"]), at(8));
    assert_refused(
        claim(store, OTHER_MESH, &worker("node-2", "s2"), at(9)),
        ClaimRefusal::DependenciesUnsatisfied,
    );

    let stats_a = ok(store.stats_by_status(MESH), "stats_by_status");
    assert!(
        stats_a.iter().all(|c| c.status != TaskStatus::Cancelled),
        "expected nothing of B counted in A's stats: {stats_a:?}"
    );
}

/// An id another mesh holds follows the backend's [`IdScope`]. Unique per
/// database: enqueueing it (alone or in a batch) is refused with `DuplicateTaskId`
/// naming the mesh that holds it, and its message says so instead of placing the
/// task in the requesting mesh; neither mesh changes. Unique per mesh: each mesh
/// holds its own task of that id, and neither sees or changes the other's. Either
/// way a duplicate within one mesh is refused naming that mesh.
pub fn enqueue_of_an_id_another_mesh_holds_follows_the_id_scope(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(0));
    let (before_a, before_b) = (Snapshot::take(store, MESH), Snapshot::take(store, OTHER_MESH));
    match store.profile().id_scope {
        IdScope::Database => {
            let err =
                expect_err(store.enqueue(OTHER_MESH, &new_task("t1"), at(1)), "enqueue into mesh-b of t1");
            match &err {
                StoreError::DuplicateTaskId { task_id, existing_mesh_id, .. } => {
                    assert_eq!(task_id, "t1", "expected the refusal to name the id");
                    assert_eq!(existing_mesh_id, MESH, "expected the refusal to name the mesh that holds t1");
                }
                other => panic!("expected DuplicateTaskId, got {other:?}"),
            }
            let text = err.to_string();
            assert_eq!(
                text, "task t1 already exists (task ids are unique per database; it is in mesh mesh-a)",
                "expected the message to say where the task is"
            );
            let batch = [new_task("fresh"), new_task("t1")];
            let err = expect_err(
                store.enqueue_batch(OTHER_MESH, &batch, at(2)),
                "a batch into mesh-b repeating t1",
            );
            assert!(
                matches!(&err, StoreError::DuplicateTaskId { existing_mesh_id, .. } if existing_mesh_id == MESH),
                "expected the batch refused naming mesh-a, got {err:?}"
            );
            before_a.assert_unchanged(store, MESH, "a refused enqueue into another mesh");
            before_b.assert_unchanged(store, OTHER_MESH, "a refused enqueue of an id mesh-a holds");
            assert_eq!(
                ok(store.find_task(OTHER_MESH, "t1"), "find_task in mesh-b"),
                None,
                "t1 is not in mesh-b"
            );
        }
        IdScope::Mesh => {
            let theirs = NewTask { message: "mesh-b's own t1".into(), ..new_task("t1") };
            let b1 = enqueue(store, OTHER_MESH, theirs, at(1));
            assert_eq!((b1.mesh_id.as_str(), b1.message.as_str()), (OTHER_MESH, "mesh-b's own t1"));
            before_a.assert_unchanged(store, MESH, "an enqueue of the same id into another mesh");
            let claimed = claim_ok(store, OTHER_MESH, &worker("node-b", "sb"), at(2), "t1");
            assert_eq!(claimed.message, "mesh-b's own t1", "expected mesh-b to claim its own t1");
            before_a.assert_unchanged(store, MESH, "a claim of the same id in another mesh");
            let batch = [new_task("fresh"), new_task("t1")];
            let err = expect_err(
                store.enqueue_batch(OTHER_MESH, &batch, at(3)),
                "a batch into mesh-b repeating t1",
            );
            assert!(
                matches!(&err, StoreError::DuplicateTaskId { existing_mesh_id, .. } if existing_mesh_id == OTHER_MESH),
                "expected the batch refused naming mesh-b, which holds its own t1, got {err:?}"
            );
            assert_eq!(
                err.to_string(),
                "task t1 already exists in mesh mesh-b",
                "expected the message to name the mesh"
            );
            assert_eq!(
                ok(store.find_task(OTHER_MESH, "fresh"), "find_task in mesh-b"),
                None,
                "the batch stored nothing"
            );
        }
    }
    let err = expect_err(store.enqueue(MESH, &new_task("t1"), at(4)), "enqueue into mesh-a of t1 again");
    assert!(
        matches!(&err, StoreError::DuplicateTaskId { existing_mesh_id, .. } if existing_mesh_id == MESH),
        "expected a duplicate in the same mesh to name that mesh, got {err:?}"
    );
}
