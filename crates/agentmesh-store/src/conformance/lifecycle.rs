//! Rules of a task's life after the claim: completion and failure fenced by session
//! and epoch, completion matching, cancel, requeue and its retry budget, reclaim,
//! heartbeats and leases, and the ledger entries every state change writes.

use agentmesh_core::{ClaimRefusal, NewTask, RequeueOptions, Requeued, TaskPriority, TaskStatus, Timestamp};

use super::support::*;
use crate::transfer::TransferStore;
use crate::{ClaimOptions, CompletionReport, Heartbeat, Store, StoreError};

/// A completion by the holding session at the current epoch completes the task with its summary and records `task_completed`.
pub fn complete_with_matching_session_and_epoch_completes(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    let mut ledger = LedgerCursor::new(store, MESH);
    let done_task = ok(store.complete_task(MESH, &report(&task, done("shipped it")), at(3)), "completion");
    ledger.assert_new(store, "a completion", &["task_completed:t1"]);
    assert_eq!(done_task.status, TaskStatus::Completed, "expected the task completed");
    assert_eq!(done_task.final_summary.as_deref(), Some("shipped it"), "expected the worker's summary kept");
    assert_eq!(done_task.finished_at, Some(at(3).iso()), "expected finishedAt = the completion time");
    assert_eq!(done_task.updated_at, at(3).iso(), "expected updatedAt = the completion time");
    assert_eq!(find(store, MESH, "t1"), done_task, "expected the stored task to equal the returned one");
    assert!(
        ok(store.active_assignments(MESH), "active_assignments").is_empty(),
        "expected the session free after its completion"
    );
}

/// A second report for a task that already completed is refused, recorded as `completion_refused`, and changes nothing.
pub fn repeated_completion_is_refused_and_recorded(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    let completed = complete(store, MESH, &task, at(3));
    let mut ledger = LedgerCursor::new(store, MESH);
    let retry = store.complete_task(MESH, &report(&task, failed("retried report")), at(4));
    assert!(retry.is_err(), "expected a report for a completed task refused, got {retry:?}");
    ledger.assert_new(store, "a repeated report", &["completion_refused:t1"]);
    assert_eq!(find(store, MESH, "t1"), completed, "expected the completed task left as it was");
}

/// A completion that names no task matches the session's assigned tasks by
/// dispatch time (never `updatedAt`): the latest dispatch at or before the
/// worker's `occurredAt`, and the latest of all when the worker's clock runs behind
/// every dispatch or it sends no time. Another session's task is never touched.
pub fn completion_matching_uses_dispatch_time_under_clock_skew(store: &dyn TransferStore) {
    let cases = [
        ("behind", Some(at(0)), "new", "an event dated before every dispatch (worker clock behind)"),
        ("between", Some(T0.plus_millis(1_500)), "old", "an event between the dispatches"),
        ("late", Some(at(9)), "new", "a late event"),
        ("untimed", None, "new", "no event time"),
    ];
    for (session, occurred, expected, what) in cases {
        let mut older = assigned_row(&format!("{session}-old"), session, at(1));
        // A later updatedAt must not make the older dispatch look newer.
        older.updated_at = at(50).iso();
        let newer = assigned_row(&format!("{session}-new"), session, at(2));
        seed_tasks(store, &[older, newer]);
        let report = CompletionReport {
            session_id: session.into(),
            task_id: None,
            epoch: None,
            occurred_at: occurred.map(Timestamp::iso),
            outcome: done("found by time"),
        };
        let completed = ok(store.complete_task(MESH, &report, at(10)), "completion without a task id");
        assert_eq!(
            completed.id,
            format!("{session}-{expected}"),
            "expected {what} to match the {expected} dispatch"
        );
        let other = if expected == "new" { "old" } else { "new" };
        assert_status(store, MESH, &format!("{session}-{other}"), TaskStatus::Assigned);
    }
    seed_tasks(store, &[assigned_row("foreign", "s-other", at(3))]);
    assert_status(store, MESH, "foreign", TaskStatus::Assigned);
}

/// A completion naming the task takes that task when the session holds it, over
/// the dispatch order.
pub fn completion_matching_prefers_the_exact_task_id(store: &dyn TransferStore) {
    seed_tasks(store, &[assigned_row("x-old", "s1", at(1)), assigned_row("x-new", "s1", at(2))]);
    let report = CompletionReport {
        session_id: "s1".into(),
        task_id: Some("x-old".into()),
        epoch: None,
        occurred_at: Some(at(9).iso()),
        outcome: done("the named one"),
    };
    let completed = ok(store.complete_task(MESH, &report, at(10)), "completion naming x-old");
    assert_eq!(completed.id, "x-old", "expected the exact task id to win over dispatch order");
    assert_status(store, MESH, "x-new", TaskStatus::Assigned);
}

/// A completion without a task id completes the session's assigned task.
pub fn complete_without_task_id_finds_the_sessions_task(store: &dyn Store) {
    enqueue(store, MESH, new_task("other"), at(0));
    enqueue(store, MESH, new_task("mine"), at(1));
    claim_ok(store, MESH, &worker("node-0", "s0"), at(2), "other");
    claim_ok(store, MESH, &worker("node-1", "s1"), at(3), "mine");
    let report = CompletionReport {
        session_id: "s1".into(),
        task_id: None,
        epoch: None,
        occurred_at: None,
        outcome: done("found by session"),
    };
    let completed = ok(store.complete_task(MESH, &report, at(4)), "completion without a task id");
    assert_eq!(completed.id, "mine", "expected the session's own task completed");
    assert_eq!(completed.status, TaskStatus::Completed, "expected it completed");
    assert_status(store, MESH, "other", TaskStatus::Assigned);
}

/// A completion without a task id from a session that holds nothing is refused with `NoAssignedTask`.
pub fn completion_without_an_assigned_task_is_refused(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(0));
    let before = Snapshot::take(store, MESH);
    let report = CompletionReport {
        session_id: "s-idle".into(),
        task_id: None,
        epoch: None,
        occurred_at: None,
        outcome: done("nothing to do"),
    };
    let err =
        expect_err(store.complete_task(MESH, &report, at(1)), "completion by a session holding nothing");
    assert!(matches!(err, StoreError::NoAssignedTask { .. }), "expected NoAssignedTask, got {err:?}");
    before.assert_unchanged(store, MESH, "a completion that matched no task");
}

/// A completion carrying a stale epoch is refused with `StaleEpoch`, recorded as `completion_refused`, and changes nothing else.
pub fn stale_epoch_completion_is_refused_and_recorded(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let first = claim_briefly(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    reclaim_lapsed(store, MESH, "t1", at(3));
    let current = claim_ok(store, MESH, &worker("node-1", "s1"), at(4), "t1");
    assert_eq!(current.epoch(), 3, "expected epoch 3 after claim, reclaim, claim");
    let mut ledger = LedgerCursor::new(store, MESH);
    let err = expect_err(
        store.complete_task(MESH, &report(&first, done("late")), at(5)),
        "completion with the epoch of an earlier claim",
    );
    assert!(
        matches!(err, StoreError::StaleEpoch { presented: 1, current: 3, .. }),
        "expected StaleEpoch presenting 1 against 3, got {err:?}"
    );
    ledger.assert_new(store, "a stale completion", &["completion_refused:t1"]);
    assert_eq!(find(store, MESH, "t1"), current, "expected the stale completion to leave the task unchanged");
}

/// Complete-and-claim records the completion, then claims the next task for the claimant, which sees the completion: a dependent it unblocked is claimed at once.
pub fn complete_and_claim_completes_then_claims_the_next(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    enqueue(store, MESH, dependent_task("t2", &["t1"]), at(2));
    let s1 = worker("node-1", "s1");
    let task = claim_ok(store, MESH, &s1, at(3), "t1");
    let mut ledger = LedgerCursor::new(store, MESH);
    let (completed, next) = ok(
        store.complete_and_claim(MESH, &report(&task, done("shipped")), &s1, &lease(), at(4)),
        "complete_and_claim",
    );
    assert_eq!(completed.status, TaskStatus::Completed, "expected t1 completed");
    assert_eq!(completed.final_summary.as_deref(), Some("shipped"), "expected the worker's summary kept");
    assert_eq!(find(store, MESH, "t1"), completed, "expected the stored t1 to equal the returned one");
    let next = assert_claimed(next, "t2");
    assert_eq!(next.assigned_session_id.as_deref(), Some("s1"), "expected t2 assigned to the same session");
    assert_eq!(find(store, MESH, "t2"), next, "expected the stored t2 to equal the returned one");
    ledger.assert_new(store, "a complete-and-claim", &["task_completed:t1", "task_claimed:t2"]);

    let (last, none) = ok(
        store.complete_and_claim(MESH, &report(&next, done("also shipped")), &s1, &lease(), at(5)),
        "complete_and_claim on an empty queue",
    );
    assert_eq!(last.status, TaskStatus::Completed, "expected t2 completed");
    assert_refused(none, ClaimRefusal::NoPendingCandidates);
}

/// Complete-and-claim with a stale report is refused like the completion alone, the refusal is recorded, and nothing is claimed.
pub fn complete_and_claim_with_a_refused_report_claims_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    enqueue(store, MESH, new_task("t2"), at(2));
    let s1 = worker("node-1", "s1");
    let task = claim_ok(store, MESH, &s1, at(3), "t1");
    let mut stale = report(&task, done("late"));
    stale.epoch = Some(task.epoch() + 1);
    let mut ledger = LedgerCursor::new(store, MESH);
    let err = expect_err(
        store.complete_and_claim(MESH, &stale, &s1, &lease(), at(4)),
        "a stale complete-and-claim",
    );
    assert!(matches!(err, StoreError::StaleEpoch { .. }), "expected StaleEpoch, got {err:?}");
    ledger.assert_new(store, "a refused complete-and-claim", &["completion_refused:t1"]);
    assert_eq!(find(store, MESH, "t1"), task, "expected t1 left as it was");
    assert_status(store, MESH, "t2", TaskStatus::Pending);
}

/// Complete-and-claim whose claim names a blank node is refused as invalid input
/// naming `nodeId`, and changes nothing: the completion that would have gone
/// before the claim is not kept either.
pub fn complete_and_claim_with_a_blank_node_changes_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    enqueue(store, MESH, new_task("t2"), at(2));
    let s1 = worker("node-1", "s1");
    let task = claim_ok(store, MESH, &s1, at(3), "t1");
    let mut ledger = LedgerCursor::new(store, MESH);
    let blank = worker("  ", "s1");
    assert_invalid_input(
        store.complete_and_claim(MESH, &report(&task, done("shipped")), &blank, &lease(), at(4)),
        "nodeId",
        "a complete-and-claim with a blank node",
    );
    ledger.assert_new(store, "a malformed complete-and-claim", &[]);
    assert_eq!(find(store, MESH, "t1"), task, "expected t1 left as it was");
    assert_status(store, MESH, "t2", TaskStatus::Pending);
}

/// A completion from a session that does not hold the task is refused with `NotAssignedToSession` and recorded.
pub fn completion_from_another_session_is_refused(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    let mut ledger = LedgerCursor::new(store, MESH);
    let intruder = CompletionReport { session_id: "s2".into(), ..report(&task, done("not mine")) };
    let err = expect_err(store.complete_task(MESH, &intruder, at(3)), "completion by another session");
    assert!(
        matches!(&err, StoreError::NotAssignedToSession { task_id, session_id } if task_id == "t1" && session_id == "s2"),
        "expected NotAssignedToSession for t1 and s2, got {err:?}"
    );
    ledger.assert_new(store, "a completion from the wrong session", &["completion_refused:t1"]);
    assert_eq!(find(store, MESH, "t1"), task, "expected the refused completion to leave the task unchanged");
}

/// A completion naming a task the session no longer holds (reclaimed and taken by another session, or cancelled) is refused and recorded, and the session's live task stays assigned: it never falls through to the task the session holds now.
pub fn completion_naming_a_task_no_longer_held_is_refused_and_the_live_task_stays(store: &dyn Store) {
    for id in ["t1", "t2", "t3", "t4"] {
        enqueue(store, MESH, new_task(id), at(1));
    }
    claim_briefly(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    reclaim_lapsed(store, MESH, "t1", at(3));
    let taken = claim_ok(store, MESH, &worker("node-2", "s2"), at(4), "t1");
    let live = claim_ok(store, MESH, &worker("node-1", "s1"), at(5), "t2");
    let mut ledger = LedgerCursor::new(store, MESH);
    let late = CompletionReport {
        session_id: "s1".into(),
        task_id: Some("t1".into()),
        epoch: None,
        occurred_at: None,
        outcome: done("finished t1"),
    };
    let err = expect_err(store.complete_task(MESH, &late, at(6)), "completion of a task taken over by s2");
    assert!(
        matches!(&err, StoreError::NotAssignedToSession { task_id, session_id } if task_id == "t1" && session_id == "s1"),
        "expected NotAssignedToSession for t1 and s1, got {err:?}"
    );
    ledger.assert_new(store, "a completion of a task taken over", &["completion_refused:t1"]);
    assert_eq!(find(store, MESH, "t1"), taken, "expected t1 still held by s2, unchanged");
    assert_eq!(find(store, MESH, "t2"), live, "expected s1's live task t2 still assigned, unchanged");

    claim_ok(store, MESH, &worker("node-3", "s3"), at(7), "t3");
    ok(
        store.task_command(MESH, "t3", TaskCommand::Cancel { reason: Some("not needed") }, at(8)),
        "cancel of t3",
    );
    let live = claim_ok(store, MESH, &worker("node-3", "s3"), at(9), "t4");
    let late = CompletionReport { session_id: "s3".into(), task_id: Some("t3".into()), ..late };
    let err = expect_err(store.complete_task(MESH, &late, at(10)), "completion of a cancelled task");
    assert!(matches!(err, StoreError::InvalidTransition(_)), "expected InvalidTransition, got {err:?}");
    assert_status(store, MESH, "t3", TaskStatus::Cancelled);
    assert_eq!(find(store, MESH, "t4"), live, "expected s3's live task t4 still assigned, unchanged");
}

/// A completed or failed task cannot be cancelled: the cancel is refused with `InvalidTransition` and changes nothing.
pub fn cancel_of_a_finished_task_is_refused_and_changes_nothing(store: &dyn Store) {
    enqueue(store, MESH, new_task("done"), at(1));
    enqueue(store, MESH, new_task("broken"), at(2));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(3), "done");
    complete(store, MESH, &task, at(4));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(5), "broken");
    fail(store, MESH, &task, "tests still red", at(6));
    let before = Snapshot::take(store, MESH);
    for id in ["done", "broken"] {
        let err = expect_err(
            store.task_command(MESH, id, TaskCommand::Cancel { reason: Some("too late") }, at(7)),
            "cancel of a finished task",
        );
        assert!(
            matches!(err, StoreError::InvalidTransition(_)),
            "expected InvalidTransition for {id}, got {err:?}"
        );
    }
    before.assert_unchanged(store, MESH, "refused cancels of finished tasks");
}

/// A priority change reorders the pending claims, is recorded as
/// `task_priority_changed` with both priorities, and is refused for a finished
/// task without changing anything.
pub fn priority_changes_reorder_claims_and_finished_tasks_refuse_them(store: &dyn Store) {
    enqueue(store, MESH, new_task("first"), at(1));
    enqueue(store, MESH, new_task("second"), at(2));
    let mut ledger = LedgerCursor::new(store, MESH);
    let raised = ok(
        store.task_command(
            MESH,
            "second",
            TaskCommand::SetPriority { priority: TaskPriority::High, reason: Some("urgent now") },
            at(3),
        ),
        "raise",
    );
    ledger.assert_new(store, "a priority change", &["task_priority_changed:second"]);
    assert_eq!(raised.priority, Some(TaskPriority::High), "expected the new priority");
    assert_eq!(raised.updated_at, at(3).iso(), "expected updatedAt = the change time");
    assert_eq!(find(store, MESH, "second"), raised, "expected the stored task to equal the returned one");
    let entry = ledger_entries(store, MESH)
        .into_iter()
        .find(|e| e.kind == "task_priority_changed")
        .expect("the entry");
    assert_eq!(entry.payload["from"], "normal", "expected the old priority named: {entry:?}");
    assert_eq!(entry.payload["to"], "high", "expected the new priority named: {entry:?}");
    assert_eq!(entry.payload["reason"], "urgent now", "expected the reason kept: {entry:?}");
    // The raised task is claimed first.
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(4), "second");
    // Back to normal is stored as no priority, as at enqueue; an assigned task may change.
    let lowered = ok(
        store.task_command(
            MESH,
            "second",
            TaskCommand::SetPriority { priority: TaskPriority::Normal, reason: None },
            at(5),
        ),
        "lower",
    );
    assert_eq!(lowered.priority, None, "expected normal stored as absent");
    assert_eq!(lowered.epoch(), task.epoch(), "expected the claim's epoch kept");
    complete(store, MESH, &lowered, at(6));
    let before = Snapshot::take(store, MESH);
    let err = expect_err(
        store.task_command(
            MESH,
            "second",
            TaskCommand::SetPriority { priority: TaskPriority::Low, reason: None },
            at(7),
        ),
        "finished",
    );
    assert!(matches!(err, StoreError::InvalidTransition(_)), "expected InvalidTransition, got {err:?}");
    let err = expect_err(
        store.task_command(
            MESH,
            "nope",
            TaskCommand::SetPriority { priority: TaskPriority::Low, reason: None },
            at(7),
        ),
        "missing",
    );
    assert!(matches!(err, StoreError::TaskNotFound { .. }), "expected TaskNotFound, got {err:?}");
    before.assert_unchanged(store, MESH, "refused priority changes");
}

/// A failure report marks the task failed with its reason and records `task_failed`.
pub fn fail_marks_the_task_failed_with_its_reason(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    let mut ledger = LedgerCursor::new(store, MESH);
    let failed_task = fail(store, MESH, &task, "compiler exploded", at(3));
    ledger.assert_new(store, "a failure report", &["task_failed:t1"]);
    assert_eq!(failed_task.status, TaskStatus::Failed, "expected the task failed");
    assert_eq!(failed_task.failure_reason.as_deref(), Some("compiler exploded"), "expected the reason kept");
    assert_eq!(failed_task.finished_at, Some(at(3).iso()), "expected finishedAt = the failure time");
    assert_eq!(find(store, MESH, "t1"), failed_task, "expected the stored task to equal the returned one");
}

/// Cancel withdraws a pending or an assigned task (fencing out its worker); a finished task cannot be cancelled.
pub fn cancel_withdraws_pending_and_assigned_tasks(store: &dyn Store) {
    enqueue(store, MESH, new_task("waiting"), at(1));
    enqueue(store, MESH, new_task("running"), at(2));
    let mut ledger = LedgerCursor::new(store, MESH);
    let cancelled = ok(
        store.task_command(MESH, "waiting", TaskCommand::Cancel { reason: Some("not needed") }, at(3)),
        "cancel of a pending task",
    );
    ledger.assert_new(store, "cancelling a pending task", &["task_cancelled:waiting"]);
    assert_eq!(cancelled.status, TaskStatus::Cancelled, "expected the pending task cancelled");
    assert_eq!(cancelled.cancel_reason.as_deref(), Some("not needed"), "expected the cancel reason kept");
    assert_eq!(cancelled.cancelled_at, Some(at(3).iso()), "expected cancelledAt = the cancel time");

    let running = claim_ok(store, MESH, &worker("node-1", "s1"), at(4), "running");
    let cancelled = ok(
        store.task_command(MESH, "running", TaskCommand::Cancel { reason: None }, at(5)),
        "cancel of an assigned task",
    );
    ledger.assert_new(
        store,
        "claiming and cancelling a task",
        &["task_claimed:running", "task_cancelled:running"],
    );
    assert_eq!(cancelled.status, TaskStatus::Cancelled, "expected the assigned task cancelled");
    assert_eq!(cancelled.assigned_session_id, None, "expected the assignment cleared by the cancel");
    assert_eq!(cancelled.epoch(), running.epoch() + 1, "expected the cancel to bump the epoch");
    let err = expect_err(
        store.complete_task(MESH, &report(&running, done("too late")), at(6)),
        "completion of a cancelled task",
    );
    assert!(
        matches!(err, StoreError::StaleEpoch { .. }),
        "expected the cancelled worker's completion stale, got {err:?}"
    );
    assert_status(store, MESH, "running", TaskStatus::Cancelled);

    let before = Snapshot::take(store, MESH);
    let err = expect_err(
        store.task_command(MESH, "waiting", TaskCommand::Cancel { reason: None }, at(7)),
        "cancel of a cancelled task",
    );
    assert!(matches!(err, StoreError::InvalidTransition(_)), "expected InvalidTransition, got {err:?}");
    before.assert_unchanged(store, MESH, "a refused cancel of a terminal task");
    let err = expect_err(
        store.task_command(MESH, "ghost", TaskCommand::Cancel { reason: None }, at(7)),
        "cancel of an unknown task",
    );
    assert!(matches!(err, StoreError::TaskNotFound { .. }), "expected TaskNotFound, got {err:?}");
}

/// Requeue spends the retry budget (default 1): the first requeue of a failed task returns it to pending, the next fails it with `max_retries_exceeded`.
pub fn requeue_spends_the_default_retry_budget(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    fail(store, MESH, &task, "first try failed", at(3));
    let mut ledger = LedgerCursor::new(store, MESH);
    let opts = RequeueOptions { reason: Some("try again".into()), ..RequeueOptions::default() };
    let back = match ok(
        store.task_command(MESH, "t1", TaskCommand::Requeue(&opts), at(4)).map(Requeued::from_task),
        "first requeue",
    ) {
        Requeued::Pending(t) => t,
        other => panic!("expected the first requeue within the default budget of 1, got {other:?}"),
    };
    ledger.assert_new(store, "a requeue", &["task_requeued:t1"]);
    assert_eq!(back.status, TaskStatus::Pending, "expected the requeued task pending");
    assert_eq!(back.requeue_count, Some(1), "expected requeueCount 1");
    assert_eq!(back.requeue_reason.as_deref(), Some("try again"), "expected the requeue reason kept");
    assert_eq!(back.failure_reason, None, "expected the old failure reason cleared");
    assert_eq!(find(store, MESH, "t1"), back, "expected the stored task to equal the returned one");

    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(5), "t1");
    fail(store, MESH, &task, "second try failed", at(6));
    ledger = LedgerCursor::new(store, MESH);
    let spent = match ok(
        store
            .task_command(MESH, "t1", TaskCommand::Requeue(&RequeueOptions::default()), at(7))
            .map(Requeued::from_task),
        "second requeue",
    ) {
        Requeued::RetriesExhausted(t) => t,
        other => panic!("expected the second requeue to exhaust the default budget of 1, got {other:?}"),
    };
    ledger.assert_new(store, "a requeue past the budget", &["task_failed:t1"]);
    assert_eq!(spent.status, TaskStatus::Failed, "expected the task failed once its retries are spent");
    let reason = spent.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("max_retries_exceeded"),
        "expected a max_retries_exceeded failure, got {reason:?}"
    );
    assert_eq!(find(store, MESH, "t1"), spent, "expected the stored task to equal the returned one");
}

/// Requeue of an assigned task is refused without `force`; with it the task returns to pending and the epoch is bumped.
pub fn requeue_of_an_assigned_task_needs_force(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let held = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    let before = Snapshot::take(store, MESH);
    let err = expect_err(
        store
            .task_command(MESH, "t1", TaskCommand::Requeue(&RequeueOptions::default()), at(3))
            .map(Requeued::from_task),
        "requeue of an assigned task without force",
    );
    assert!(matches!(err, StoreError::InvalidTransition(_)), "expected InvalidTransition, got {err:?}");
    before.assert_unchanged(store, MESH, "a refused requeue of an assigned task");

    let mut ledger = LedgerCursor::new(store, MESH);
    let forced = RequeueOptions { force: true, reason: Some("operator".into()), ..RequeueOptions::default() };
    let back = match ok(
        store.task_command(MESH, "t1", TaskCommand::Requeue(&forced), at(4)).map(Requeued::from_task),
        "forced requeue",
    ) {
        Requeued::Pending(t) => t,
        other => panic!("expected a forced requeue to return the task to pending, got {other:?}"),
    };
    ledger.assert_new(store, "a forced requeue", &["task_requeued:t1"]);
    assert_eq!(back.status, TaskStatus::Pending, "expected the task pending after a forced requeue");
    assert_eq!(
        back.epoch(),
        held.epoch() + 1,
        "expected the forced requeue of an assignment to bump the epoch"
    );
    assert_eq!(back.assigned_session_id, None, "expected the assignment cleared");
    let err = expect_err(
        store.complete_task(MESH, &report(&held, done("late")), at(5)),
        "completion after requeue",
    );
    assert!(
        matches!(err, StoreError::StaleEpoch { .. }),
        "expected the old holder's completion stale, got {err:?}"
    );
    claim_ok(store, MESH, &worker("node-2", "s2"), at(6), "t1");
}

/// A heartbeat's progress report is stored on the task and read back by every
/// read; one that says something new is recorded as `task_progress`, a repeat
/// is not; a refused heartbeat's report changes nothing; the next claim starts
/// without progress.
pub fn heartbeat_progress_is_stored_and_recorded_when_new(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(0));
    let task = claim_briefly(store, MESH, &worker("node-1", "s1"), at(1), "t1");
    let beat = |percent, note: &str| Heartbeat {
        progress: Some(agentmesh_core::ProgressReport { percent, note: Some(note.to_owned()) }),
        ..Heartbeat::new("t1", "s1", task.epoch(), LEASE_MS)
    };
    let mut ledger = LedgerCursor::new(store, MESH);
    let beaten = ok(store.heartbeat(MESH, &beat(Some(40), "running the tests"), at(2)), "heartbeat");
    ledger.assert_new(store, "a progress report", &["task_progress:t1"]);
    let progress = beaten.progress.clone().expect("the report on the task");
    assert_eq!((progress.percent, progress.note.as_deref()), (Some(40), Some("running the tests")));
    assert_eq!(progress.at, at(2).iso(), "expected the report stamped with the beat's time");
    assert_eq!(find(store, MESH, "t1"), beaten, "expected the stored task to carry the report");
    let entry = ledger_entries(store, MESH).pop().expect("the entry");
    assert_eq!(entry.payload["note"], "running the tests", "{entry:?}");

    ok(store.heartbeat(MESH, &beat(Some(40), "running the tests"), at(3)), "the same report again");
    ledger.assert_new(store, "a repeated report", &[]);
    let stale = Heartbeat { epoch: task.epoch() + 1, ..beat(Some(90), "not mine") };
    assert!(store.heartbeat(MESH, &stale, at(4)).is_err(), "expected a stale beat refused");
    ledger.assert_new(store, "a refused beat", &["heartbeat_refused:t1"]);
    assert_eq!(
        find(store, MESH, "t1").progress.and_then(|p| p.percent),
        Some(40),
        "expected the refused report dropped"
    );

    // The beat at 3 s extended the lease by LEASE_MS; reclaim after it lapses.
    reclaim_lapsed(store, MESH, "t1", at(70));
    let again = claim_ok(store, MESH, &worker("node-2", "s2"), at(71), "t1");
    assert_eq!(again.progress, None, "expected a new claim to start without progress");
}

/// A reclaim of a lapsed lease returns an assigned task to pending and records
/// `task_reclaimed`; the fourth reclaim fails the task.
pub fn reclaim_returns_the_task_and_the_fourth_fails_it(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(0));
    let mut ledger = LedgerCursor::new(store, MESH);
    for round in 1..=3_u32 {
        let now = i64::from(round) * 10;
        claim_briefly(store, MESH, &worker("node-1", "s1"), at(now), "t1");
        let back = reclaim_lapsed(store, MESH, "t1", at(now + 2));
        ledger.assert_new(store, "a claim and a reclaim", &["task_claimed:t1", "task_reclaimed:t1"]);
        assert_eq!(
            back.status,
            TaskStatus::Pending,
            "expected reclaim {round} to return the task to pending"
        );
        assert_eq!(back.assigned_session_id, None, "expected reclaim {round} to clear the assignment");
        assert_eq!(back.stranded_reclaim_count, Some(round), "expected strandedReclaimCount {round}");
        assert_eq!(find(store, MESH, "t1"), back, "expected the stored task to equal the returned one");
    }
    claim_briefly(store, MESH, &worker("node-1", "s1"), at(40), "t1");
    let last = reclaim_lapsed(store, MESH, "t1", at(42));
    ledger.assert_new(store, "the fourth claim and reclaim", &["task_claimed:t1", "task_reclaimed:t1"]);
    assert_eq!(last.status, TaskStatus::Failed, "expected the fourth reclaim to fail the task");
    let reason = last.failure_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("stranded_dispatch_unrecovered"),
        "expected a stranded failure, got {reason:?}"
    );

    let again = ok(store.reclaim_if_lease_expired(MESH, "t1", at(43)), "reclaim of a failed task");
    assert_eq!(again, None, "expected a failed task left alone by the lease sweep");
}

/// A heartbeat by the holder at the current epoch extends the lease; a stale epoch or another session is refused.
pub fn heartbeat_extends_the_lease_for_the_current_holder(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(0));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(0), "t1");
    let beat =
        ok(store.heartbeat(MESH, &Heartbeat::new("t1", "s1", task.epoch(), 90_000), at(30)), "heartbeat");
    assert_eq!(beat.lease_expires_at, Some(at(120).iso()), "expected the lease extended to now + lease");
    assert_eq!(beat.status, TaskStatus::Assigned, "expected the task still assigned");
    assert_eq!(find(store, MESH, "t1"), beat, "expected the stored task to equal the returned one");

    let mut ledger = LedgerCursor::new(store, MESH);
    let err = expect_err(
        store.heartbeat(MESH, &Heartbeat::new("t1", "s1", task.epoch() + 5, 90_000), at(40)),
        "stale heartbeat",
    );
    assert!(matches!(err, StoreError::StaleEpoch { .. }), "expected StaleEpoch, got {err:?}");
    ledger.assert_new(store, "a stale heartbeat", &["heartbeat_refused:t1"]);
    let err = expect_err(
        store.heartbeat(MESH, &Heartbeat::new("t1", "s2", task.epoch(), 90_000), at(40)),
        "heartbeat by another session",
    );
    assert!(
        matches!(err, StoreError::NotAssignedToSession { .. }),
        "expected NotAssignedToSession, got {err:?}"
    );
    ledger.assert_new(store, "a heartbeat from another session", &["heartbeat_refused:t1"]);
    assert_eq!(
        find(store, MESH, "t1").lease_expires_at,
        Some(at(120).iso()),
        "expected refused heartbeats to leave the lease alone"
    );
    complete(store, MESH, &beat, at(50));
    assert!(
        store.heartbeat(MESH, &Heartbeat::new("t1", "s1", task.epoch(), 90_000), at(60)).is_err(),
        "expected a heartbeat for a completed task refused"
    );
}

/// `expired_leases` lists, across meshes, assigned tasks whose lease ran out before `now`, and no others.
pub fn expired_leases_lists_only_lapsed_assignments(store: &dyn Store) {
    enqueue(store, MESH, new_task("short"), at(0));
    enqueue(store, MESH, new_task("finished"), at(0));
    enqueue(store, OTHER_MESH, new_task("long"), at(0));
    claim_ok(store, MESH, &worker("node-1", "s1"), at(0), "short");
    let finished = claim_ok(store, MESH, &worker("node-2", "s2"), at(0), "finished");
    complete(store, MESH, &finished, at(1));
    let long = ok(
        store.claim_next(
            OTHER_MESH,
            &worker("node-3", "s3"),
            &ClaimOptions { lease_ms: Some(600_000) },
            at(0),
        ),
        "claim with a long lease",
    );
    assert_claimed(long, "long");

    let expired = |now: Timestamp| {
        let mut list = ok(store.expired_leases(now), "expired_leases");
        list.sort();
        list
    };
    assert!(expired(at(30)).is_empty(), "expected no lease expired 30 s into a 60 s lease");
    assert_eq!(
        expired(at(120)),
        [(MESH.to_owned(), "short".to_owned())],
        "expected only the lapsed 60 s lease listed at 120 s"
    );
    assert_eq!(
        expired(at(700)),
        [(MESH.to_owned(), "short".to_owned()), (OTHER_MESH.to_owned(), "long".to_owned())],
        "expected both lapsed leases listed, from every mesh"
    );
}

/// Every state change appends exactly its own ledger entries, in order, and refusals of claims append nothing.
pub fn every_state_change_records_its_ledger_entries(store: &dyn Store) {
    let mut ledger = LedgerCursor::new(store, MESH);
    enqueue(store, MESH, new_task("dep"), at(1));
    ledger.assert_new(store, "enqueue of dep", &["task_dispatched:dep"]);
    enqueue(store, MESH, dependent_task("child", &["dep"]), at(2));
    ledger.assert_new(store, "enqueue of child", &["task_dispatched:child"]);

    let dep = claim_ok(store, MESH, &worker("node-1", "s1"), at(3), "dep");
    ledger.assert_new(store, "claim of dep", &["task_claimed:dep"]);
    assert!(
        claim(store, MESH, &worker("node-2", "s2"), at(4)).task().is_none(),
        "expected child not claimable"
    );
    ledger.assert_new(store, "a refused claim", &[]);

    let stale = CompletionReport { epoch: Some(dep.epoch() + 7), ..report(&dep, done("stale")) };
    assert!(store.complete_task(MESH, &stale, at(5)).is_err(), "expected a stale completion refused");
    ledger.assert_new(store, "a stale completion", &["completion_refused:dep"]);

    fail(store, MESH, &dep, "broken", at(6));
    ledger.assert_new(store, "failure of dep", &["task_failed:dep", "task_blocked:child"]);
    ok(
        store
            .task_command(MESH, "dep", TaskCommand::Requeue(&RequeueOptions::default()), at(7))
            .map(Requeued::from_task),
        "requeue of dep",
    );
    ledger.assert_new(store, "requeue of dep", &["task_requeued:dep", "task_unblocked:child"]);

    claim_briefly(store, MESH, &worker("node-1", "s1"), at(8), "dep");
    ledger.assert_new(store, "claim of dep", &["task_claimed:dep"]);
    reclaim_lapsed(store, MESH, "dep", at(9));
    ledger.assert_new(store, "reclaim of dep", &["task_reclaimed:dep"]);
    let dep = claim_ok(store, MESH, &worker("node-1", "s1"), at(10), "dep");
    ledger.assert_new(store, "claim of dep", &["task_claimed:dep"]);
    complete(store, MESH, &dep, at(11));
    ledger.assert_new(store, "completion of dep", &["task_completed:dep"]);

    claim_ok(store, MESH, &worker("node-2", "s2"), at(12), "child");
    ledger.assert_new(store, "claim of child", &["task_claimed:child"]);
    let forced = RequeueOptions { force: true, ..RequeueOptions::default() };
    ok(
        store.task_command(MESH, "child", TaskCommand::Requeue(&forced), at(13)).map(Requeued::from_task),
        "forced requeue of child",
    );
    ledger.assert_new(store, "forced requeue of child", &["task_requeued:child"]);
    ok(
        store.task_command(MESH, "child", TaskCommand::Cancel { reason: Some("enough") }, at(14)),
        "cancel of child",
    );
    ledger.assert_new(store, "cancel of child", &["task_cancelled:child"]);
    ok(
        store
            .task_command(MESH, "child", TaskCommand::Requeue(&RequeueOptions::default()), at(15))
            .map(Requeued::from_task),
        "requeue past the budget",
    );
    ledger.assert_new(store, "a requeue past the budget", &["task_failed:child"]);
}

/// A reclaim of an expired lease re-checks the lease in its own transaction: a task whose lease a heartbeat extended, a completed task and an unknown id are left alone; a lapsed one is reclaimed with a `task_reclaimed` entry and a higher epoch.
pub fn reclaim_if_lease_expired_rechecks_the_lease(store: &dyn Store) {
    enqueue(store, MESH, new_task("lapsed"), at(0));
    enqueue(store, MESH, new_task("renewed"), at(0));
    enqueue(store, MESH, new_task("done"), at(0));
    let lapsed = claim_ok(store, MESH, &worker("node-1", "s1"), at(0), "lapsed");
    let renewed = claim_ok(store, MESH, &worker("node-2", "s2"), at(0), "renewed");
    let done = claim_ok(store, MESH, &worker("node-3", "s3"), at(0), "done");
    complete(store, MESH, &done, at(1));
    // Listed as expired at 120 s, then renewed by a heartbeat before the reclaim.
    let listed = ok(store.expired_leases(at(120)), "expired_leases");
    assert!(listed.iter().any(|(_, id)| id == "renewed"), "expected renewed listed: {listed:?}");
    ok(
        store.heartbeat(MESH, &Heartbeat::new("renewed", "s2", renewed.epoch(), LEASE_MS), at(119)),
        "heartbeat",
    );

    assert_eq!(ok(store.reclaim_if_lease_expired(MESH, "renewed", at(120)), "reclaim renewed"), None);
    assert_eq!(ok(store.reclaim_if_lease_expired(MESH, "done", at(120)), "reclaim done"), None);
    assert_eq!(ok(store.reclaim_if_lease_expired(MESH, "nope", at(120)), "reclaim unknown"), None);
    let still = ok(store.find_task(MESH, "renewed"), "find").expect("renewed exists");
    assert_eq!(still.status, TaskStatus::Assigned, "a renewed lease keeps its task");

    let back = ok(store.reclaim_if_lease_expired(MESH, "lapsed", at(120)), "reclaim lapsed")
        .expect("the lapsed task is reclaimed");
    assert_eq!(back.status, TaskStatus::Pending);
    assert!(back.epoch() > lapsed.epoch(), "the reclaim bumps the epoch");
    let reclaimed = ledger_kinds(store, MESH).iter().filter(|k| k.as_str() == "task_reclaimed").count();
    assert_eq!(reclaimed, 1, "exactly one task_reclaimed entry");
}

/// Session ids match after trimming, as the original compared them: a task whose stored assigned session is padded (`" sess-pad "`) is completed by a report from `sess-pad` that names no task, and failed by one from `" sess-pad"` that does.
pub fn completion_matches_a_padded_session_after_trimming(store: &dyn TransferStore) {
    seed_tasks(store, &[assigned_row("t1", " sess-pad ", at(1))]);
    let report = CompletionReport {
        session_id: "sess-pad".into(),
        task_id: None,
        epoch: Some(1),
        occurred_at: None,
        outcome: done("padded but mine"),
    };
    let mut ledger = LedgerCursor::new(store, MESH);
    let task = ok(store.complete_task(MESH, &report, at(2)), "completion by sess-pad of its padded row");
    ledger.assert_new(store, "the completion", &["task_completed:t1"]);
    assert_eq!(task.status, TaskStatus::Completed, "expected the padded row's task completed");

    seed_tasks(store, &[assigned_row("t2", "sess-pad\t", at(3))]);
    let report = CompletionReport {
        session_id: " sess-pad".into(),
        task_id: Some("t2".into()),
        epoch: Some(1),
        occurred_at: None,
        outcome: failed("no luck"),
    };
    let task = ok(store.complete_task(MESH, &report, at(4)), "failure report by \" sess-pad\" naming t2");
    assert_eq!(task.status, TaskStatus::Failed, "expected t2 failed by the same session, padded otherwise");

    seed_tasks(store, &[assigned_row("t3", " sess-pad ", at(5))]);
    let other = CompletionReport {
        session_id: "sess-pa".into(),
        task_id: None,
        epoch: None,
        occurred_at: None,
        outcome: done("not mine"),
    };
    let err = expect_err(store.complete_task(MESH, &other, at(6)), "completion by another session");
    assert!(matches!(err, StoreError::NoAssignedTask { .. }), "expected NoAssignedTask, got {err:?}");
    assert_status(store, MESH, "t3", TaskStatus::Assigned);
}

/// A requeue past the retry budget fails the task with the original's `max_retries_exceeded: requeued N time(s), limit is M` in `cancelReason`, the field the original writes and reads.
pub fn retry_budget_refusal_is_written_to_cancel_reason(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    fail(store, MESH, &task, "first try failed", at(3));
    ok(
        store
            .task_command(MESH, "t1", TaskCommand::Requeue(&RequeueOptions::default()), at(4))
            .map(Requeued::from_task),
        "first requeue",
    );
    let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(5), "t1");
    fail(store, MESH, &task, "second try failed", at(6));
    let spent = match ok(
        store
            .task_command(MESH, "t1", TaskCommand::Requeue(&RequeueOptions::default()), at(7))
            .map(Requeued::from_task),
        "second requeue",
    ) {
        Requeued::RetriesExhausted(t) => t,
        other => panic!("expected the second requeue to exhaust the default budget of 1, got {other:?}"),
    };
    let expected = "max_retries_exceeded: requeued 1 time(s), limit is 1";
    assert_eq!(spent.cancel_reason.as_deref(), Some(expected), "expected the refusal in cancelReason");
    assert_eq!(find(store, MESH, "t1").cancel_reason.as_deref(), Some(expected), "expected it stored");

    enqueue(store, MESH, NewTask { max_retries: Some(0), ..new_task("t2") }, at(8));
    let spent = match ok(
        store
            .task_command(MESH, "t2", TaskCommand::Requeue(&RequeueOptions::default()), at(9))
            .map(Requeued::from_task),
        "requeue of t2",
    ) {
        Requeued::RetriesExhausted(t) => t,
        other => panic!("expected a budget of 0 to be spent by the first requeue, got {other:?}"),
    };
    assert_eq!(
        spent.cancel_reason.as_deref(),
        Some("max_retries_exceeded: requeued 0 time(s), limit is 0"),
        "expected the count and the limit as they were"
    );
}
