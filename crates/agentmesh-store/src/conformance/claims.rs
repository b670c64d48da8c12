//! Rules of claiming: claim order (tier, priority, age), the gates and their refusal
//! reasons, dependencies and blocks, node identity across daemon-id forms, and what
//! a claim stamps on the task.

use agentmesh_core::{
    ClaimRefusal, Claimant, NewTask, NotBefore, RequeueOptions, Requeued, TaskStatus, ledger::kinds,
};

use super::support::*;
use crate::{ClaimOutcome, Store};

/// Among tasks of equal priority and tier, the oldest is claimed first.
pub fn claims_are_fifo_among_equal_priority(store: &dyn Store) {
    // Ids run against creation order, so an id-ordered store fails this rule.
    enqueue(store, MESH, new_task("fifo-3"), at(1));
    enqueue(store, MESH, new_task("fifo-2"), at(2));
    enqueue(store, MESH, new_task("fifo-1"), at(3));
    claim_ok(store, MESH, &worker("node-1", "s1"), at(10), "fifo-3");
    claim_ok(store, MESH, &worker("node-2", "s2"), at(11), "fifo-2");
    claim_ok(store, MESH, &worker("node-3", "s3"), at(12), "fifo-1");
}

/// Within a tier, high priority is claimed before normal, and normal before low, whatever their age.
pub fn claims_take_higher_priority_first_within_a_tier(store: &dyn Store) {
    let with = |id: &str, priority: &str| NewTask { priority: Some(priority.into()), ..new_task(id) };
    enqueue(store, MESH, with("low", "low"), at(1));
    enqueue(store, MESH, with("normal", "normal"), at(2));
    enqueue(store, MESH, with("high", "high"), at(3));
    enqueue(store, MESH, with("high-later", "high"), at(4));
    claim_ok(store, MESH, &worker("node-1", "s1"), at(10), "high");
    claim_ok(store, MESH, &worker("node-2", "s2"), at(11), "high-later");
    claim_ok(store, MESH, &worker("node-3", "s3"), at(12), "normal");
    claim_ok(store, MESH, &worker("node-4", "s4"), at(13), "low");
}

/// A session takes tasks pinned to it first, then tasks pinned to its node, then open tasks, whatever their priority.
pub fn claims_take_session_pins_then_node_pins_then_open_tasks(store: &dyn Store) {
    let high = |id: &str| NewTask { priority: Some("high".into()), ..new_task(id) };
    let low = |id: &str| NewTask { priority: Some("low".into()), ..new_task(id) };
    enqueue(store, MESH, high("open"), at(1));
    enqueue(store, MESH, NewTask { target_node_id: Some("node-1".into()), ..low("node-pinned") }, at(2));
    enqueue(store, MESH, NewTask { target_session_id: Some("s1".into()), ..low("session-pinned") }, at(3));
    let me = worker("node-1", "s1");
    let t = claim_ok(store, MESH, &me, at(10), "session-pinned");
    complete(store, MESH, &t, at(11));
    let t = claim_ok(store, MESH, &me, at(12), "node-pinned");
    complete(store, MESH, &t, at(13));
    claim_ok(store, MESH, &me, at(14), "open");
}

/// A session holding an assigned task is refused with `SessionAlreadyAssigned`.
pub fn a_session_holds_one_task_at_a_time(store: &dyn Store) {
    enqueue(store, MESH, readonly_task("first"), at(1));
    enqueue(store, MESH, readonly_task("second"), at(2));
    let me = worker("node-1", "s1");
    let first = claim_ok(store, MESH, &me, at(3), "first");
    let before = Snapshot::take(store, MESH);
    assert_refused(claim(store, MESH, &me, at(4)), ClaimRefusal::SessionAlreadyAssigned);
    before.assert_unchanged(store, MESH, "a refused claim");
    complete(store, MESH, &first, at(5));
    claim_ok(store, MESH, &me, at(6), "second");
}

/// With nothing pending, a claim is refused with `NoPendingCandidates`.
pub fn claim_with_nothing_pending_is_refused(store: &dyn Store) {
    let me = worker("node-1", "s1");
    assert_refused(claim(store, MESH, &me, at(0)), ClaimRefusal::NoPendingCandidates);
    enqueue(store, MESH, new_task("only"), at(1));
    let t = claim_ok(store, MESH, &me, at(2), "only");
    complete(store, MESH, &t, at(3));
    assert_refused(claim(store, MESH, &worker("node-2", "s2"), at(4)), ClaimRefusal::NoPendingCandidates);
    assert_eq!(ledger_kinds(store, MESH).len(), 3, "expected refused claims to write no ledger entry");
}

/// A claimant with a blank session or node id is refused as invalid input naming the field, and nothing changes.
pub fn claim_with_a_blank_session_or_node_is_invalid(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let before = Snapshot::take(store, MESH);
    let blank_session = worker("node-1", "  ");
    assert_invalid_input(
        store.claim_next(MESH, &blank_session, &lease(), at(2)),
        "sessionId",
        "claim by a blank session",
    );
    let blank_node = worker("", "s1");
    assert_invalid_input(
        store.claim_next(MESH, &blank_node, &lease(), at(2)),
        "nodeId",
        "claim from a blank node",
    );
    before.assert_unchanged(store, MESH, "a claim with a blank claimant");
}

/// A node lacking a required tag is refused with `RequiredTagsUnsatisfied`; a node with every tag claims.
pub fn required_tags_gate_claims(store: &dyn Store) {
    let new = NewTask { required_tags: vec!["gpu".into(), "os=linux".into()], ..new_task("tagged") };
    enqueue(store, MESH, new, at(1));
    let tags = |tags: &[&str]| tags.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let partial = Claimant { capability_tags: tags(&["os=linux"]), ..worker("node-1", "s1") };
    assert_refused(claim(store, MESH, &partial, at(2)), ClaimRefusal::RequiredTagsUnsatisfied);
    let wrong_case = Claimant { capability_tags: tags(&["GPU", "os=linux"]), ..worker("node-2", "s2") };
    assert_refused(claim(store, MESH, &wrong_case, at(3)), ClaimRefusal::RequiredTagsUnsatisfied);
    assert_status(store, MESH, "tagged", TaskStatus::Pending);
    let full = Claimant { capability_tags: tags(&["os=linux", "arch=x64", "gpu"]), ..worker("node-3", "s3") };
    claim_ok(store, MESH, &full, at(4), "tagged");
}

/// A dependency chain is claimed link by link, each only after its dependency completed.
pub fn dependency_chain_claims_in_order(store: &dyn Store) {
    // Enqueued tail first (forward references), so creation order would pick the wrong task.
    enqueue(store, MESH, dependent_task("step-3", &["step-2"]), at(1));
    enqueue(store, MESH, dependent_task("step-2", &["step-1"]), at(2));
    enqueue(store, MESH, new_task("step-1"), at(3));
    let other = worker("node-2", "s2");
    let mut now = 10;
    for (step, others_wait) in [("step-1", true), ("step-2", true), ("step-3", false)] {
        let task = claim_ok(store, MESH, &worker("node-1", "s1"), at(now), step);
        if others_wait {
            assert_refused(claim(store, MESH, &other, at(now + 1)), ClaimRefusal::DependenciesUnsatisfied);
        }
        complete(store, MESH, &task, at(now + 2));
        now += 10;
    }
    assert_refused(claim(store, MESH, &other, at(now)), ClaimRefusal::NoPendingCandidates);
}

/// A task whose dependency is not completed (pending elsewhere, assigned, or not enqueued) is refused with `DependenciesUnsatisfied`.
pub fn unmet_dependency_refuses_claims(store: &dyn Store) {
    enqueue(store, MESH, dependent_task("waits-for-ghost", &["ghost"]), at(1));
    assert_refused(claim(store, MESH, &worker("node-1", "s1"), at(2)), ClaimRefusal::DependenciesUnsatisfied);

    enqueue(store, MESH, new_task("dep"), at(3));
    enqueue(store, MESH, dependent_task("waits-for-dep", &["dep"]), at(4));
    claim_ok(store, MESH, &worker("node-1", "s1"), at(5), "dep");
    assert_refused(claim(store, MESH, &worker("node-2", "s2"), at(6)), ClaimRefusal::DependenciesUnsatisfied);

    // A dependency that shows up later still has to complete first.
    enqueue(store, MESH, new_task("ghost"), at(7));
    let ghost = claim_ok(store, MESH, &worker("node-3", "s3"), at(8), "ghost");
    assert_refused(claim(store, MESH, &worker("node-4", "s4"), at(9)), ClaimRefusal::DependenciesUnsatisfied);
    complete(store, MESH, &ghost, at(10));
    claim_ok(store, MESH, &worker("node-4", "s4"), at(11), "waits-for-ghost");
}

/// A failed dependency blocks its pending dependents with `dependency_failed:<id>` and `task_blocked`; they are not claimable.
pub fn failed_dependency_blocks_its_pending_dependents(store: &dyn Store) {
    enqueue(store, MESH, new_task("dep"), at(1));
    enqueue(store, MESH, dependent_task("child-1", &["dep"]), at(2));
    enqueue(store, MESH, dependent_task("child-2", &["dep"]), at(3));
    let dep = claim_ok(store, MESH, &worker("node-1", "s1"), at(4), "dep");
    let mut ledger = LedgerCursor::new(store, MESH);
    fail(store, MESH, &dep, "tests broke", at(5));
    ledger.assert_new(
        store,
        "failing a task with two pending dependents",
        &["task_failed:dep", "task_blocked:child-1", "task_blocked:child-2"],
    );
    for child in ["child-1", "child-2"] {
        let task = find(store, MESH, child);
        assert_eq!(task.status, TaskStatus::Pending, "expected blocked {child} to stay pending");
        assert_eq!(
            task.blocked_reason.as_deref(),
            Some("dependency_failed:dep"),
            "expected {child} blocked by its failed dependency"
        );
    }
    assert_refused(claim(store, MESH, &worker("node-2", "s2"), at(6)), ClaimRefusal::DependenciesUnsatisfied);
}

/// Cancelling a dependency blocks its pending dependents like a failure does.
pub fn cancelled_dependency_blocks_its_pending_dependents(store: &dyn Store) {
    enqueue(store, MESH, new_task("dep"), at(1));
    enqueue(store, MESH, dependent_task("child", &["dep"]), at(2));
    let mut ledger = LedgerCursor::new(store, MESH);
    ok(
        store.task_command(MESH, "dep", TaskCommand::Cancel { reason: Some("plan changed") }, at(3)),
        "cancel of dep",
    );
    ledger.assert_new(
        store,
        "cancelling a task with a pending dependent",
        &["task_cancelled:dep", "task_blocked:child"],
    );
    let child = find(store, MESH, "child");
    assert_eq!(child.status, TaskStatus::Pending, "expected the blocked dependent to stay pending");
    assert_eq!(
        child.blocked_reason.as_deref(),
        Some("dependency_failed:dep"),
        "expected the dependent blocked by its cancelled dependency"
    );
    assert_refused(claim(store, MESH, &worker("node-1", "s1"), at(4)), ClaimRefusal::DependenciesUnsatisfied);
}

/// Requeueing a failed dependency lifts the block it left; the dependent runs once the dependency completes.
pub fn requeued_dependency_lifts_the_block(store: &dyn Store) {
    enqueue(store, MESH, new_task("dep"), at(1));
    enqueue(store, MESH, dependent_task("child", &["dep"]), at(2));
    let dep = claim_ok(store, MESH, &worker("node-1", "s1"), at(3), "dep");
    fail(store, MESH, &dep, "flaky", at(4));
    let requeued = ok(
        store
            .task_command(MESH, "dep", TaskCommand::Requeue(&RequeueOptions::default()), at(5))
            .map(Requeued::from_task),
        "requeue of dep",
    );
    assert!(matches!(requeued, Requeued::Pending(_)), "expected the first requeue to return dep to pending");
    assert_eq!(
        find(store, MESH, "child").blocked_reason,
        None,
        "expected the requeue of dep to lift child's dependency_failed block"
    );
    // The dependency still has to complete before the child runs.
    let dep = claim_ok(store, MESH, &worker("node-1", "s1"), at(6), "dep");
    assert_refused(claim(store, MESH, &worker("node-2", "s2"), at(7)), ClaimRefusal::DependenciesUnsatisfied);
    complete(store, MESH, &dep, at(8));
    claim_ok(store, MESH, &worker("node-2", "s2"), at(9), "child");
}

/// A task whose `notBefore` is ahead is refused with `NotBeforeDelayed`, and claimable once `now` passes it.
pub fn not_before_delays_claims(store: &dyn Store) {
    let new = NewTask { not_before: Some(NotBefore::Iso(at(60).iso())), ..new_task("later") };
    let task = enqueue(store, MESH, new, at(0));
    assert_eq!(task.not_before, Some(at(60).iso()), "expected notBefore stored as the given instant");
    let me = worker("node-1", "s1");
    assert_refused(claim(store, MESH, &me, at(1)), ClaimRefusal::NotBeforeDelayed);
    assert_refused(claim(store, MESH, &me, at(59)), ClaimRefusal::NotBeforeDelayed);
    claim_ok(store, MESH, &me, at(61), "later");
}

/// `mach_X` and `daemon_mach_X` are one node: a write task on either makes the other busy; `mach_Y` is not.
pub fn daemon_id_forms_name_one_busy_node(store: &dyn Store) {
    enqueue(store, MESH, new_task("write-1"), at(1));
    enqueue(store, MESH, new_task("write-2"), at(2));
    claim_ok(store, MESH, &worker("mach_X", "s1"), at(3), "write-1");
    assert_refused(
        claim(store, MESH, &worker("daemon_mach_X", "s2"), at(4)),
        ClaimRefusal::NodeBusyWithActiveAssignment,
    );
    assert_refused(
        claim(store, MESH, &worker("standalone_mach_X", "s3"), at(4)),
        ClaimRefusal::NodeBusyWithActiveAssignment,
    );
    assert_refused(
        claim(store, MESH, &worker("mach_X", "s4"), at(4)),
        ClaimRefusal::NodeBusyWithActiveAssignment,
    );
    claim_ok(store, MESH, &worker("mach_Y", "s5"), at(5), "write-2");
}

/// Read-only tasks (mode `live_debug_readonly` or `readonly`) run side by side on one node while a write task waits.
pub fn readonly_tasks_run_beside_each_other_while_writes_wait(store: &dyn Store) {
    enqueue(store, MESH, readonly_task("read-mode"), at(1));
    enqueue(store, MESH, NewTask { readonly: Some(true), ..new_task("read-flag") }, at(2));
    enqueue(store, MESH, new_task("write"), at(3));
    let r1 = claim_ok(store, MESH, &worker("node-1", "s1"), at(10), "read-mode");
    let r2 = claim_ok(store, MESH, &worker("node-1", "s2"), at(11), "read-flag");
    assert_refused(
        claim(store, MESH, &worker("node-1", "s3"), at(12)),
        ClaimRefusal::NodeBusyWithActiveAssignment,
    );
    complete(store, MESH, &r1, at(13));
    assert_refused(
        claim(store, MESH, &worker("node-1", "s3"), at(14)),
        ClaimRefusal::NodeBusyWithActiveAssignment,
    );
    complete(store, MESH, &r2, at(15));
    claim_ok(store, MESH, &worker("node-1", "s3"), at(16), "write");
}

/// With `provider_max_parallel` 1, a second session of the same provider on the node (any id form) is refused with `ParallelCapReached`; another provider is not.
pub fn provider_cap_limits_parallel_sessions(store: &dyn Store) {
    for (i, id) in ["r1", "r2", "r3"].into_iter().enumerate() {
        enqueue(store, MESH, readonly_task(id), at(i as i64));
    }
    let capped = |node: &str, session: &str, provider: &str| Claimant {
        provider_type: Some(provider.to_owned()),
        provider_max_parallel: Some(1),
        ..worker(node, session)
    };
    claim_ok(store, MESH, &capped("mach_X", "s1", "claude-cli"), at(10), "r1");
    assert_refused(
        claim(store, MESH, &capped("mach_X", "s2", "claude-cli"), at(11)),
        ClaimRefusal::ParallelCapReached,
    );
    assert_refused(
        claim(store, MESH, &capped("daemon_mach_X", "s3", "claude-cli"), at(11)),
        ClaimRefusal::ParallelCapReached,
    );
    claim_ok(store, MESH, &capped("mach_X", "s4", "codex-cli"), at(12), "r2");
    claim_ok(store, MESH, &capped("mach_Y", "s5", "claude-cli"), at(13), "r3");
}

/// A convergence task is refused to a worktree node with `ConvergenceTargetIsWorktree` and claimed by a base node.
pub fn convergence_is_never_claimed_by_a_worktree(store: &dyn Store) {
    enqueue(store, MESH, NewTask { task_mode: Some("convergence".into()), ..new_task("land") }, at(1));
    let worktree = Claimant { node_is_worktree: true, ..worker("worktree-a", "s1") };
    assert_refused(claim(store, MESH, &worktree, at(2)), ClaimRefusal::ConvergenceTargetIsWorktree);
    assert_status(store, MESH, "land", TaskStatus::Pending);
    claim_ok(store, MESH, &worker("mach_base", "s2"), at(3), "land");
}

/// A node-pinned task goes only to that node, and a pin given as `mach_X` matches `daemon_mach_X`.
pub fn node_pins_match_every_id_form_and_only_that_node(store: &dyn Store) {
    enqueue(store, MESH, NewTask { target_node_id: Some("mach_X".into()), ..new_task("pinned") }, at(1));
    let outcome = claim(store, MESH, &worker("mach_Y", "s1"), at(2));
    assert!(
        outcome.task().is_none(),
        "expected a task pinned to mach_X never claimed by mach_Y, got {outcome:?}"
    );
    let outcome = claim(store, MESH, &worker("daemon_mach_Y", "s2"), at(2));
    assert!(outcome.task().is_none(), "expected a task pinned to mach_X never claimed by daemon_mach_Y");
    assert_status(store, MESH, "pinned", TaskStatus::Pending);
    let task = claim_ok(store, MESH, &worker("daemon_mach_X", "s3"), at(3), "pinned");
    assert_eq!(
        task.assigned_node_id.as_deref(),
        Some("daemon_mach_X"),
        "expected the claimant's node id stamped"
    );
}

/// A claim stamps the assignment, the dispatch time, the lease and epoch 1, and records `task_claimed`.
pub fn claim_stamps_the_assignment_and_records_task_claimed(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let me = worker("node-1", "s1");
    let now = at(30);
    let mut ledger = LedgerCursor::new(store, MESH);
    let task = claim_ok(store, MESH, &me, now, "t1");
    ledger.assert_new(store, "a claim", &["task_claimed:t1"]);
    assert_eq!(task.status, TaskStatus::Assigned, "expected a claimed task to be assigned");
    assert_eq!(
        task.assigned_node_id.as_deref(),
        Some("node-1"),
        "expected assignedNodeId = the claimant's node"
    );
    assert_eq!(
        task.assigned_session_id.as_deref(),
        Some("s1"),
        "expected assignedSessionId = the claimant's session"
    );
    assert_eq!(
        task.assigned_provider_type.as_deref(),
        Some(PROVIDER),
        "expected assignedProviderType stamped"
    );
    assert_eq!(task.dispatch_timestamp, Some(now.iso()), "expected dispatchTimestamp = the claim time");
    assert_eq!(
        task.lease_expires_at,
        Some(now.plus_millis(LEASE_MS).iso()),
        "expected leaseExpiresAt = now + lease"
    );
    assert_eq!(task.dispatch_nonce, Some(1), "expected the first claim to carry epoch 1");
    assert_eq!(task.updated_at, now.iso(), "expected updatedAt = the claim time");
    assert_eq!(find(store, MESH, "t1"), task, "expected the stored task to equal the claimed one");

    let entry = ledger_entries(store, MESH).pop().expect("a ledger entry after the claim");
    assert_eq!(entry.kind, kinds::TASK_CLAIMED, "expected the last entry to be task_claimed");
    assert_eq!(entry.timestamp, now.iso(), "expected task_claimed stamped with the claim time");
    assert_eq!(entry.node_id.as_deref(), Some("node-1"), "expected task_claimed to name the node");
    assert_eq!(entry.session_id.as_deref(), Some("s1"), "expected task_claimed to name the session");
}

/// The epoch increases on every claim and reclaim: claim, reclaim, claim gives 1 then 3.
pub fn epoch_increases_on_every_claim_and_reclaim(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    let first = claim_briefly(store, MESH, &worker("node-1", "s1"), at(2), "t1");
    assert_eq!(first.epoch(), 1, "expected epoch 1 after the first claim");
    let reclaimed = reclaim_lapsed(store, MESH, "t1", at(3));
    assert_eq!(reclaimed.epoch(), 2, "expected the reclaim to bump the epoch to 2");
    let second = claim_ok(store, MESH, &worker("node-2", "s2"), at(4), "t1");
    assert_eq!(second.epoch(), 3, "expected epoch 3 after claim, reclaim and claim");
    assert_eq!(find(store, MESH, "t1").epoch(), 3, "expected the stored epoch to be 3");
}

/// A claim stamps the claimant's transcript profile on the task (`assignedTranscriptProfile`), read back on the task and on the session's assigned rows; a claim without one stamps none.
pub fn claim_stamps_the_claimants_transcript_profile(store: &dyn Store) {
    enqueue(store, MESH, new_task("t1"), at(1));
    enqueue(store, MESH, new_task("t2"), at(2));
    let profile = agentmesh_core::TranscriptProfile {
        class: "pty".into(),
        timing: "live".into(),
        emits_pty_turn_events: true,
    };
    let with_profile = Claimant { transcript_profile: Some(profile.clone()), ..worker("node-1", "s1") };
    let task = claim_ok(store, MESH, &with_profile, at(10), "t1");
    let stamped = serde_json::json!({ "class": "pty", "timing": "live", "emitsPtyTurnEvents": true });
    assert_eq!(task.assigned_transcript_profile, Some(stamped.clone()), "expected the profile stamped");
    assert_eq!(find(store, MESH, "t1").assigned_transcript_profile, Some(stamped.clone()), "and stored");
    let assigned = store.queue_entries(MESH, &[TaskStatus::Assigned]).expect("the assigned rows");
    assert_eq!(assigned.len(), 1, "{assigned:?}");
    assert_eq!(assigned[0].assigned_transcript_profile, Some(stamped), "and on the session's assigned row");
    assert!(task.to_json().contains("\"assignedTranscriptProfile\":{"), "{}", task.to_json());

    complete(store, MESH, &task, at(20));
    let plain = claim_ok(store, MESH, &worker("node-1", "s1"), at(30), "t2");
    assert_eq!(plain.assigned_transcript_profile, None, "a claim without a profile stamps none");
}

/// A claimant that takes only some difficulties skips a task of another (it stays pending, refused `difficulty_floor_unmet` when nothing else is left), and takes one without a difficulty or `freeform`; a claimant that names none takes any.
pub fn claim_skips_tasks_of_difficulties_the_claimant_does_not_take(store: &dyn Store) {
    let with = |id: &str, difficulty: Option<&str>| NewTask {
        difficulty: difficulty.map(str::to_owned),
        ..new_task(id)
    };
    enqueue(store, MESH, with("hard", Some("difficult")), at(1));
    enqueue(store, MESH, with("plain", None), at(2));
    enqueue(store, MESH, with("free", Some("freeform")), at(3));
    enqueue(store, MESH, with("easy", Some("easy")), at(4));
    let picky = |session: &str| Claimant {
        allowed_difficulties: Some(vec!["easy".into(), "medium".into()]),
        ..worker("node-1", session)
    };
    // The older difficult task is stepped over, in claim order, for each picky session.
    let first = claim_ok(store, MESH, &picky("s1"), at(10), "plain");
    complete(store, MESH, &first, at(11));
    let second = claim_ok(store, MESH, &picky("s1"), at(12), "free");
    complete(store, MESH, &second, at(13));
    let third = claim_ok(store, MESH, &picky("s1"), at(14), "easy");
    complete(store, MESH, &third, at(15));
    assert_eq!(
        claim(store, MESH, &picky("s1"), at(16)),
        ClaimOutcome::Refused(ClaimRefusal::DifficultyFloorUnmet),
        "only the difficult task is left"
    );
    assert_eq!(find(store, MESH, "hard").status, TaskStatus::Pending, "it stays pending");
    claim_ok(store, MESH, &worker("node-2", "s2"), at(17), "hard");
}
