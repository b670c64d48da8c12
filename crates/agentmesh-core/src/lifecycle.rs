//! Task transitions as plain functions: each takes the task as it is and returns it
//! as it must become, or says why it cannot. Stores persist the result together
//! with the ledger entry that records it.

use serde_json::json;

use crate::{
    Claimant, InvalidTransition, Progress, ProgressReport, Task, TaskAction, TaskPriority, TaskStatus,
    Timestamp, TranscriptProfile,
};

/// The default retry budget of a task that sets none.
pub const DEFAULT_MAX_RETRIES: u32 = 1;
/// A stranded assignment reclaimed more often than this fails the task.
pub const MAX_STRANDED_RECLAIMS: u32 = 3;

fn refuse(task: &Task, action: TaskAction) -> InvalidTransition {
    InvalidTransition { task_id: task.id.clone(), from: task.status, action }
}

fn clear_assignment(task: &mut Task) {
    task.assigned_node_id = None;
    task.assigned_session_id = None;
    task.assigned_provider_type = None;
    task.assigned_model = None;
    task.assigned_transcript_profile = None;
    task.dispatch_timestamp = None;
    task.lease_expires_at = None;
    task.attempt_id = None;
}

/// Assigns a pending task to `claimant`: stamps the assignee, the dispatch time,
/// the lease and a fencing epoch one higher than any before.
pub fn claim(
    task: &Task,
    claimant: &Claimant,
    lease_ms: Option<i64>,
    now: Timestamp,
) -> Result<Task, InvalidTransition> {
    if task.status != TaskStatus::Pending {
        return Err(refuse(task, TaskAction::Claim));
    }
    let mut t = task.clone();
    let iso = now.iso();
    t.status = TaskStatus::Assigned;
    t.assigned_node_id = Some(claimant.node_id.clone());
    t.assigned_session_id = Some(claimant.session_id.clone());
    t.assigned_provider_type = claimant.provider_type.clone().filter(|p| !p.trim().is_empty());
    t.assigned_transcript_profile = claimant.transcript_profile.as_ref().map(TranscriptProfile::to_json);
    t.dispatch_nonce = Some(task.epoch() + 1);
    t.lease_expires_at = lease_ms.map(|ms| now.plus_millis(ms).iso());
    t.dispatch_timestamp = Some(iso.clone());
    t.progress = None;
    t.updated_at = iso;
    Ok(t)
}

/// Marks an assigned task completed with the worker's summary.
pub fn complete(task: &Task, summary: Option<&str>, now: Timestamp) -> Result<Task, InvalidTransition> {
    if task.status != TaskStatus::Assigned {
        return Err(refuse(task, TaskAction::Complete));
    }
    let mut t = task.clone();
    let iso = now.iso();
    t.status = TaskStatus::Completed;
    t.final_summary = summary.map(str::to_owned);
    t.failure_reason = None;
    t.lease_expires_at = None;
    t.finished_at = Some(iso.clone());
    t.updated_at = iso;
    Ok(t)
}

/// Marks an assigned task failed with a reason (and an optional summary).
pub fn fail(
    task: &Task,
    reason: &str,
    summary: Option<&str>,
    now: Timestamp,
) -> Result<Task, InvalidTransition> {
    if task.status != TaskStatus::Assigned {
        return Err(refuse(task, TaskAction::Fail));
    }
    let mut t = task.clone();
    let iso = now.iso();
    t.status = TaskStatus::Failed;
    t.failure_reason = Some(reason.to_owned());
    t.final_summary = summary.map(str::to_owned);
    t.lease_expires_at = None;
    t.finished_at = Some(iso.clone());
    t.updated_at = iso;
    Ok(t)
}

/// Cancels a pending or assigned task; the assignment is cleared and the epoch
/// bumped, so the worker's late completion is stale.
pub fn cancel(task: &Task, reason: Option<&str>, now: Timestamp) -> Result<Task, InvalidTransition> {
    if task.status.is_terminal() {
        return Err(refuse(task, TaskAction::Cancel));
    }
    let mut t = task.clone();
    let iso = now.iso();
    t.status = TaskStatus::Cancelled;
    t.cancel_reason = reason.map(str::to_owned);
    t.cancelled_at = Some(iso.clone());
    clear_assignment(&mut t);
    t.dispatch_nonce = Some(task.epoch() + 1);
    t.updated_at = iso;
    Ok(t)
}

/// Changes the pull priority of a task that is not finished (pending or
/// assigned). Normal priority is stored as absent, as at enqueue.
pub fn reprioritize(task: &Task, priority: TaskPriority, now: Timestamp) -> Result<Task, InvalidTransition> {
    if task.status.is_terminal() {
        return Err(refuse(task, TaskAction::Reprioritize));
    }
    let mut t = task.clone();
    t.priority = Some(priority).filter(|p| *p != TaskPriority::Normal);
    t.updated_at = now.iso();
    Ok(t)
}

/// Options of a requeue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequeueOptions {
    /// Why the task goes back.
    pub reason: Option<String>,
    /// Requeue even an assigned or completed task, and ignore the retry budget.
    pub force: bool,
    /// Overrides the task's retry budget.
    pub max_retries: Option<u32>,
    /// Keep the session pin (it is dropped by default).
    pub keep_session_pin: bool,
}

/// What a requeue did.
#[derive(Debug, Clone, PartialEq)]
pub enum Requeued {
    /// The task is pending again.
    Pending(Task),
    /// The retry budget was spent: the task is failed instead.
    RetriesExhausted(Task),
}

impl Requeued {
    /// A requeue's answer from the task it left: failed when the retry budget
    /// was spent, pending again otherwise.
    pub fn from_task(task: Task) -> Requeued {
        match task.status {
            TaskStatus::Failed => Requeued::RetriesExhausted(task),
            _ => Requeued::Pending(task),
        }
    }

    /// The task as it is now, owned.
    pub fn into_task(self) -> Task {
        match self {
            Requeued::Pending(t) | Requeued::RetriesExhausted(t) => t,
        }
    }

    /// The task as it is now.
    pub fn task(&self) -> &Task {
        match self {
            Requeued::Pending(t) | Requeued::RetriesExhausted(t) => t,
        }
    }
}

/// Puts a task back in the queue, spending one retry. An assigned or completed task
/// needs `force`. Over budget (requeues so far ≥ max retries, default 1) the task
/// fails with `max_retries_exceeded: requeued N time(s), limit is M` in its
/// `cancelReason` (and `failureReason`).
pub fn requeue(task: &Task, opts: &RequeueOptions, now: Timestamp) -> Result<Requeued, InvalidTransition> {
    let allowed = match task.status {
        TaskStatus::Pending | TaskStatus::Failed | TaskStatus::Cancelled => true,
        TaskStatus::Assigned | TaskStatus::Completed => opts.force,
    };
    if !allowed {
        return Err(refuse(task, TaskAction::Requeue));
    }
    let mut t = task.clone();
    let iso = now.iso();
    let count = task.requeue_count.unwrap_or(0);
    let max = opts.max_retries.or(task.max_retries).unwrap_or(DEFAULT_MAX_RETRIES);
    t.max_retries = opts.max_retries.or(task.max_retries);
    t.updated_at = iso.clone();
    if task.status == TaskStatus::Assigned {
        t.dispatch_nonce = Some(task.epoch() + 1);
    }
    if count >= max && !opts.force {
        t.status = TaskStatus::Failed;
        // The original writes the refusal to `cancelReason`, where its readers
        // look for it; `failureReason` carries it too.
        let refusal = format!("max_retries_exceeded: requeued {count} time(s), limit is {max}");
        t.cancel_reason = Some(refusal.clone());
        t.failure_reason = Some(refusal);
        clear_assignment(&mut t);
        t.finished_at = Some(iso);
        return Ok(Requeued::RetriesExhausted(t));
    }
    t.status = TaskStatus::Pending;
    t.blocked_reason = None;
    t.parked = None;
    clear_assignment(&mut t);
    t.cancel_reason = None;
    t.cancelled_at = None;
    t.final_summary = None;
    t.failure_reason = None;
    t.finished_at = None;
    if !opts.keep_session_pin {
        t.target_session_id = None;
    }
    t.requeue_reason = opts.reason.clone();
    t.requeued_at = Some(iso);
    t.requeue_count = Some(count + 1);
    Ok(Requeued::Pending(t))
}

/// The reclaim reason of a task whose lease ran out.
pub const LEASE_EXPIRED_REASON: &str = "lease_expired";

/// Recovers a stranded assignment: the assignment is cleared and the epoch bumped;
/// after more than [`MAX_STRANDED_RECLAIMS`] reclaims the task fails instead of
/// returning to the queue.
pub fn reclaim(task: &Task, reason: &str, now: Timestamp) -> Result<Task, InvalidTransition> {
    if task.status != TaskStatus::Assigned {
        return Err(refuse(task, TaskAction::Reclaim));
    }
    let mut t = task.clone();
    let iso = now.iso();
    let count = task.stranded_reclaim_count.unwrap_or(0) + 1;
    t.last_reclaim = Some(json!({
        "providerType": task.assigned_provider_type,
        "nodeId": task.assigned_node_id,
        "sessionId": task.assigned_session_id,
        "reason": reason,
        "reclaimCount": count,
        "at": iso,
    }));
    clear_assignment(&mut t);
    t.stranded_reclaim_count = Some(count);
    t.dispatch_nonce = Some(task.epoch() + 1);
    t.updated_at = iso.clone();
    if count > MAX_STRANDED_RECLAIMS {
        t.status = TaskStatus::Failed;
        t.failure_reason = Some(format!("stranded_dispatch_unrecovered: {reason} after {count} reclaims"));
        t.finished_at = Some(iso);
    } else {
        t.status = TaskStatus::Pending;
    }
    Ok(t)
}

/// Extends the lease of an assigned task, and takes the worker's progress report
/// when it brings one (the previous report stays otherwise).
pub fn heartbeat(
    task: &Task,
    lease_ms: i64,
    progress: Option<&ProgressReport>,
    now: Timestamp,
) -> Result<Task, InvalidTransition> {
    if task.status != TaskStatus::Assigned {
        return Err(refuse(task, TaskAction::Heartbeat));
    }
    let mut t = task.clone();
    t.lease_expires_at = Some(now.plus_millis(lease_ms).iso());
    t.updated_at = now.iso();
    if let Some(report) = progress {
        let recorded = task.progress.as_ref().map_or(0, |p| p.recorded);
        t.progress =
            Some(Progress { percent: report.percent, note: report.note.clone(), at: now.iso(), recorded });
    }
    Ok(t)
}

/// Whether a progress report goes to the ledger: it says something the last one
/// did not (another percent or another note), and the assignment's trail is not
/// full yet.
pub fn progress_worth_recording(before: Option<&Progress>, report: &ProgressReport) -> bool {
    match before {
        None => true,
        Some(last) => {
            last.recorded < Progress::TRAIL && (last.percent != report.percent || last.note != report.note)
        }
    }
}

/// The `blockedReason` a failed or cancelled dependency leaves on its dependents.
pub fn dependency_failed_reason(dependency_id: &str) -> String {
    format!("dependency_failed:{dependency_id}")
}

/// Blocks a pending dependent of a failed or cancelled task. `None` when the task is
/// not pending or already carries a block.
pub fn block_for_failed_dependency(task: &Task, dependency_id: &str, now: Timestamp) -> Option<Task> {
    if task.status != TaskStatus::Pending || task.blocked_reason.is_some() {
        return None;
    }
    let mut t = task.clone();
    t.blocked_reason = Some(dependency_failed_reason(dependency_id));
    t.updated_at = now.iso();
    Some(t)
}

/// Lifts the block a dependency left when that dependency is back in the queue.
pub fn unblock_for_requeued_dependency(task: &Task, dependency_id: &str, now: Timestamp) -> Option<Task> {
    if task.blocked_reason.as_deref() != Some(dependency_failed_reason(dependency_id).as_str()) {
        return None;
    }
    let mut t = task.clone();
    t.blocked_reason = None;
    t.updated_at = now.iso();
    Some(t)
}

/// Picks the assigned task a completion event from `session` belongs to.
///
/// `assigned` holds the session's assigned tasks. The exact `task_id` wins when it is
/// among them; otherwise a single task is the answer; with several, the latest whose
/// immutable dispatch time is at or before `occurred_at`, else the latest overall.
/// Time only orders here and never filters, so a worker clock behind the
/// coordinator's still finds its task.
pub fn match_completion<'a>(
    assigned: &'a [Task],
    task_id: Option<&str>,
    occurred_at: Option<&str>,
) -> Option<&'a Task> {
    if let Some(id) = task_id
        && let Some(t) = assigned.iter().find(|t| t.id == id)
    {
        return Some(t);
    }
    if assigned.len() <= 1 {
        return assigned.first();
    }
    let key = |t: &Task| -> String { t.dispatch_timestamp.clone().unwrap_or_else(|| t.updated_at.clone()) };
    let mut by_dispatch: Vec<&Task> = assigned.iter().collect();
    by_dispatch.sort_by_key(|t| std::cmp::Reverse(key(t)));
    if let Some(at) = occurred_at
        && let Some(t) = by_dispatch.iter().find(|t| key(t).as_str() <= at)
    {
        return Some(t);
    }
    by_dispatch.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_millis(1_735_689_600_000);

    fn pending() -> Task {
        Task::new("t1", "m", "work", &T0.iso())
    }

    fn claimant() -> Claimant {
        Claimant {
            node_id: "n1".into(),
            session_id: "s1".into(),
            provider_type: Some("claude-cli".into()),
            ..Claimant::default()
        }
    }

    #[test]
    fn claim_stamps_and_bumps_the_epoch() {
        let t = claim(&pending(), &claimant(), Some(60_000), T0).unwrap();
        assert_eq!(t.status, TaskStatus::Assigned);
        assert_eq!(t.epoch(), 1);
        assert_eq!(t.dispatch_timestamp.as_deref(), Some(T0.iso().as_str()));
        assert_eq!(t.lease_expires_at, Some(T0.plus_millis(60_000).iso()));
        let again = reclaim(&t, "lease_expired", T0).unwrap();
        let t2 = claim(&again, &claimant(), None, T0).unwrap();
        assert_eq!(t2.epoch(), 3, "claim, reclaim and claim each bump the epoch");
        assert!(claim(&t2, &claimant(), None, T0).is_err());
    }

    #[test]
    fn requeue_spends_the_retry_budget() {
        let assigned = claim(&pending(), &claimant(), None, T0).unwrap();
        let failed = fail(&assigned, "boom", None, T0).unwrap();
        let Requeued::Pending(back) = requeue(&failed, &RequeueOptions::default(), T0).unwrap() else {
            panic!("first requeue is within the default budget of 1");
        };
        assert_eq!(back.requeue_count, Some(1));
        let failed = fail(&claim(&back, &claimant(), None, T0).unwrap(), "boom", None, T0).unwrap();
        let out = requeue(&failed, &RequeueOptions::default(), T0).unwrap();
        assert!(matches!(out, Requeued::RetriesExhausted(ref t) if t.status == TaskStatus::Failed));
        assert!(requeue(&assigned, &RequeueOptions::default(), T0).is_err());
    }

    #[test]
    fn fourth_reclaim_fails_the_task() {
        let mut t = pending();
        for i in 1..=3 {
            t = reclaim(&claim(&t, &claimant(), None, T0).unwrap(), "stranded", T0).unwrap();
            assert_eq!(t.status, TaskStatus::Pending, "reclaim {i}");
        }
        let t = reclaim(&claim(&t, &claimant(), None, T0).unwrap(), "stranded", T0).unwrap();
        assert_eq!(t.status, TaskStatus::Failed);
    }

    #[test]
    fn completion_matching_survives_clock_skew() {
        let mut a = claim(&pending(), &claimant(), None, T0.plus_millis(1_000)).unwrap();
        a.id = "a".into();
        let mut b = claim(&pending(), &claimant(), None, T0.plus_millis(2_000)).unwrap();
        b.id = "b".into();
        let both = [a, b];
        // Event time before every dispatch: still finds the latest dispatch.
        let early = T0.iso();
        assert_eq!(match_completion(&both, None, Some(&early)).unwrap().id, "b");
        let between = T0.plus_millis(1_500).iso();
        assert_eq!(match_completion(&both, None, Some(&between)).unwrap().id, "a");
        assert_eq!(match_completion(&both, Some("a"), Some(&early)).unwrap().id, "a");
        assert_eq!(match_completion(&both[..1], Some("zzz"), Some(&early)).unwrap().id, "a");
        assert!(match_completion(&[], None, None).is_none());
    }
}
