//! The queue's decisions: what a task write stores and records.

use serde_json::{Value, json};

use crate::daemon_id::session_ids_equivalent;
use crate::events::{EventToQueue, completion_event};
use crate::ledger::kinds;
use crate::{
    Claimant, InvalidInput, InvalidTransition, LedgerEntry, ProgressReport, RequeueOptions, Requeued, Task,
    TaskAction, TaskPriority, TaskStatus, Timestamp, lifecycle,
};

/// What a write decided about one task.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The task as it is to be stored.
    pub task: Task,
    /// The entry that records the change (a heartbeat records none).
    pub ledger: Option<LedgerEntry>,
    /// What the change does to the tasks that depend on this one.
    pub dependents: Dependents,
    /// The event to queue for the task's coordinator, after the dependents.
    pub event: Option<EventToQueue>,
}

/// What a change does to the dependents of its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dependents {
    /// Nothing.
    Keep,
    /// The task failed or was cancelled: its pending dependents are blocked
    /// ([`block_dependent`]).
    Block,
    /// The task is pending again: the blocks it left are lifted ([`unblock_dependent`]).
    Unblock,
}

/// Why a worker's report or heartbeat about a task is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderRefusal {
    /// The epoch presented is not the task's.
    StaleEpoch {
        /// The epoch the worker presented.
        presented: u64,
        /// The task's epoch.
        current: u64,
    },
    /// The task is not assigned.
    NotAssigned {
        /// Its status.
        from: TaskStatus,
        /// What was asked.
        action: TaskAction,
    },
    /// The task is assigned to another session.
    OtherSession,
}

impl HolderRefusal {
    /// The reason the refusal entry names.
    pub const fn reason(&self) -> &'static str {
        match self {
            HolderRefusal::StaleEpoch { .. } => "stale_epoch",
            HolderRefusal::NotAssigned { .. } => "not_assigned",
            HolderRefusal::OtherSession => "other_session",
        }
    }

    /// The transition error of a `NotAssigned` refusal of `task_id`.
    pub fn transition(&self, task_id: &str) -> Option<InvalidTransition> {
        match self {
            HolderRefusal::NotAssigned { from, action } => {
                Some(InvalidTransition { task_id: task_id.to_owned(), from: *from, action: *action })
            }
            _ => None,
        }
    }
}

/// A refused report or heartbeat: the refusal, and the entry that records it,
/// which is committed although the write is refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// Why.
    pub refusal: HolderRefusal,
    /// The `completion_refused` or `heartbeat_refused` entry.
    pub ledger: LedgerEntry,
}

/// What a worker reports about its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report<'a> {
    /// The work is done.
    Completed {
        /// What the worker says it did.
        summary: Option<&'a str>,
    },
    /// The work failed.
    Failed {
        /// Why.
        reason: &'a str,
        /// What the worker says it did.
        summary: Option<&'a str>,
    },
}

/// A refusal of a blank session, naming the field.
pub fn check_session(session_id: &str) -> Result<(), InvalidInput> {
    if session_id.trim().is_empty() {
        return Err(InvalidInput::new("sessionId", "must not be blank"));
    }
    Ok(())
}

/// A claimant's session and node must not be blank.
pub fn check_claimant(claimant: &Claimant) -> Result<(), InvalidInput> {
    check_session(&claimant.session_id)?;
    if claimant.node_id.trim().is_empty() {
        return Err(InvalidInput::new("nodeId", "must not be blank"));
    }
    Ok(())
}

/// An entry about `task`, with its assignee.
fn task_entry(kind: &str, task: &Task, payload: Value, id: String, now: Timestamp) -> LedgerEntry {
    LedgerEntry {
        id,
        mesh_id: task.mesh_id.clone(),
        timestamp: now.iso(),
        kind: kind.to_owned(),
        node_id: task.assigned_node_id.clone(),
        session_id: task.assigned_session_id.clone(),
        provider_type: task.assigned_provider_type.clone(),
        payload,
    }
}

/// Characters of a task's message the `task_dispatched` entry keeps; the task holds
/// the whole text.
pub const LEDGER_MESSAGE_CHARS: usize = 120;

fn excerpt(message: &str) -> String {
    match message.char_indices().nth(LEDGER_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message.to_owned(),
    }
}

/// The `task_dispatched` entry of a task just enqueued: its message (cut to
/// [`LEDGER_MESSAGE_CHARS`]) and the request fields it set.
pub fn dispatched(task: &Task, id: String, now: Timestamp) -> LedgerEntry {
    let mut payload = json!({"taskId": task.id, "message": excerpt(&task.message)});
    for (key, value) in [
        ("taskMode", task.task_mode.map(|m| json!(m.as_str()))),
        ("priority", task.priority.map(|p| json!(p.as_str()))),
        ("targetNodeId", task.target_node_id.as_ref().map(|v| json!(v))),
        ("targetSessionId", task.target_session_id.as_ref().map(|v| json!(v))),
        ("dependsOn", task.depends_on.as_ref().map(|v| json!(v))),
        ("missionId", task.mission_id.as_ref().map(|v| json!(v))),
    ] {
        if let Some(value) = value {
            payload[key] = value;
        }
    }
    task_entry(kinds::TASK_DISPATCHED, task, payload, id, now)
}

/// A claim of `before` by `claimant`: the task assigned, recorded as `task_claimed`.
pub fn claim(
    before: &Task,
    claimant: &Claimant,
    lease_ms: Option<i64>,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Result<Decision, InvalidTransition> {
    let task = lifecycle::claim(before, claimant, lease_ms, now)?;
    let payload = json!({
        "taskId": task.id,
        "epoch": task.epoch(),
        "dispatchTimestamp": task.dispatch_timestamp,
        "leaseExpiresAt": task.lease_expires_at,
    });
    let ledger = task_entry(kinds::TASK_CLAIMED, &task, payload, mint(), now);
    Ok(Decision { task, ledger: Some(ledger), dependents: Dependents::Keep, event: None })
}

/// Whether `session_id` holds `task` at `epoch` (the epoch is checked when
/// given), or why not: a stale epoch first, then a task not assigned, then
/// another session's.
pub fn check_holder(
    task: &Task,
    session_id: &str,
    epoch: Option<u64>,
    action: TaskAction,
) -> Option<HolderRefusal> {
    if let Some(presented) = epoch.filter(|e| *e != task.epoch()) {
        Some(HolderRefusal::StaleEpoch { presented, current: task.epoch() })
    } else if task.status != TaskStatus::Assigned {
        Some(HolderRefusal::NotAssigned { from: task.status, action })
    } else if !task.assigned_session_id.as_deref().is_some_and(|s| session_ids_equivalent(s, session_id)) {
        Some(HolderRefusal::OtherSession)
    } else {
        None
    }
}

/// The entry of `kind` (`completion_refused`, `heartbeat_refused`) that records a
/// refusal of `session_id`'s write to `task`.
fn refusal_entry(
    kind: &str,
    task: &Task,
    session_id: &str,
    refusal: &HolderRefusal,
    presented: Option<u64>,
    id: String,
    now: Timestamp,
) -> LedgerEntry {
    let payload = json!({
        "taskId": task.id,
        "reason": refusal.reason(),
        "sessionId": session_id,
        "presentedEpoch": presented,
        "currentEpoch": task.epoch(),
        "status": task.status.as_str(),
    });
    let mut entry = task_entry(kind, task, payload, id, now);
    entry.session_id = Some(session_id.to_owned());
    entry
}

/// A worker's report on `before`: the task completed or failed, recorded as
/// `task_completed` or `task_failed`, the completion event for its coordinator,
/// and on failure its dependents blocked. A report by a session that does not
/// hold the task at `epoch` is refused, with its `completion_refused` entry.
pub fn complete(
    before: &Task,
    session_id: &str,
    epoch: Option<u64>,
    report: Report<'_>,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Result<Result<Decision, Refused>, InvalidTransition> {
    let action = match report {
        Report::Completed { .. } => TaskAction::Complete,
        Report::Failed { .. } => TaskAction::Fail,
    };
    if let Some(refusal) = check_holder(before, session_id, epoch, action) {
        let ledger =
            refusal_entry(kinds::COMPLETION_REFUSED, before, session_id, &refusal, epoch, mint(), now);
        return Ok(Err(Refused { refusal, ledger }));
    }
    let task = match report {
        Report::Completed { summary } => lifecycle::complete(before, summary, now)?,
        Report::Failed { reason, summary } => lifecycle::fail(before, reason, summary, now)?,
    };
    let mut payload = json!({"taskId": task.id, "epoch": task.epoch(), "summary": task.final_summary});
    let (kind, dependents) = if task.status == TaskStatus::Completed {
        (kinds::TASK_COMPLETED, Dependents::Keep)
    } else {
        payload["reason"] = json!(task.failure_reason);
        (kinds::TASK_FAILED, Dependents::Block)
    };
    let ledger = task_entry(kind, &task, payload, mint(), now);
    let event = completion_event(&task, now);
    Ok(Ok(Decision { task, ledger: Some(ledger), dependents, event }))
}

/// A heartbeat on `before`: the lease extended by `lease_ms`, and the worker's
/// progress report taken when it brings one. Only a report that says something
/// new is recorded (`task_progress`, at most [`Progress::TRAIL`](crate::Progress::TRAIL)
/// an assignment);
/// a plain heartbeat is recorded nowhere. A heartbeat by a session that does not
/// hold the task at `epoch` is refused, with its `heartbeat_refused` entry.
pub fn heartbeat(
    before: &Task,
    session_id: &str,
    epoch: u64,
    lease_ms: i64,
    progress: Option<&ProgressReport>,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Result<Result<Decision, Refused>, InvalidTransition> {
    if let Some(refusal) = check_holder(before, session_id, Some(epoch), TaskAction::Heartbeat) {
        let ledger =
            refusal_entry(kinds::HEARTBEAT_REFUSED, before, session_id, &refusal, Some(epoch), mint(), now);
        return Ok(Err(Refused { refusal, ledger }));
    }
    let mut task = lifecycle::heartbeat(before, lease_ms, progress, now)?;
    let ledger = match (progress, task.progress.as_mut()) {
        (Some(report), Some(current))
            if lifecycle::progress_worth_recording(before.progress.as_ref(), report) =>
        {
            current.recorded += 1;
            let payload = json!({"taskId": task.id, "percent": report.percent, "note": report.note});
            Some(task_entry(kinds::TASK_PROGRESS, &task, payload, mint(), now))
        }
        _ => None,
    };
    Ok(Ok(Decision { task, ledger, dependents: Dependents::Keep, event: None }))
}

/// A cancel of `before`: recorded as `task_cancelled` with the assignee it had,
/// its dependents blocked.
pub fn cancel(
    before: &Task,
    reason: Option<&str>,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Result<Decision, InvalidTransition> {
    let task = lifecycle::cancel(before, reason, now)?;
    let payload = json!({"taskId": task.id, "reason": reason, "previousStatus": before.status.as_str()});
    let mut entry = task_entry(kinds::TASK_CANCELLED, &task, payload, mint(), now);
    entry.node_id = before.assigned_node_id.clone();
    entry.session_id = before.assigned_session_id.clone();
    Ok(Decision { task, ledger: Some(entry), dependents: Dependents::Block, event: None })
}

/// A priority change of `before`: recorded as `task_priority_changed` with the
/// priority it had, the new one and the reason; the task keeps its place
/// otherwise, and its dependents are untouched.
pub fn set_priority(
    before: &Task,
    priority: TaskPriority,
    reason: Option<&str>,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Result<Decision, InvalidTransition> {
    let task = lifecycle::reprioritize(before, priority, now)?;
    let was = before.priority.unwrap_or(TaskPriority::Normal);
    let payload = json!({"taskId": task.id, "from": was.as_str(), "to": priority.as_str(), "reason": reason});
    let entry = task_entry(kinds::TASK_PRIORITY_CHANGED, &task, payload, mint(), now);
    Ok(Decision { task, ledger: Some(entry), dependents: Dependents::Keep, event: None })
}

/// Which way a requeue went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequeueKind {
    /// The task is pending again.
    Pending,
    /// The retry budget was spent: the task failed.
    RetriesExhausted,
}

impl RequeueKind {
    /// The requeue's answer, with the task as stored.
    pub fn of(self, task: Task) -> Requeued {
        match self {
            RequeueKind::Pending => Requeued::Pending(task),
            RequeueKind::RetriesExhausted => Requeued::RetriesExhausted(task),
        }
    }
}

/// A requeue of `before`: pending again (`task_requeued`, the blocks it left
/// lifted), or, with the retry budget spent, failed (`task_failed`, dependents
/// blocked, the stop queued for its coordinator).
pub fn requeue(
    before: &Task,
    opts: &RequeueOptions,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Result<(Decision, RequeueKind), InvalidTransition> {
    Ok(match lifecycle::requeue(before, opts, now)? {
        Requeued::Pending(task) => {
            let payload = json!({
                "taskId": task.id,
                "reason": opts.reason,
                "requeueCount": task.requeue_count,
                "previousStatus": before.status.as_str(),
                "forced": opts.force,
            });
            let ledger = task_entry(kinds::TASK_REQUEUED, &task, payload, mint(), now);
            (
                Decision { task, ledger: Some(ledger), dependents: Dependents::Unblock, event: None },
                RequeueKind::Pending,
            )
        }
        Requeued::RetriesExhausted(task) => {
            let payload = json!({"taskId": task.id, "epoch": task.epoch(), "reason": task.failure_reason});
            let ledger = task_entry(kinds::TASK_FAILED, &task, payload, mint(), now);
            let event = completion_event(&task, now);
            (
                Decision { task, ledger: Some(ledger), dependents: Dependents::Block, event },
                RequeueKind::RetriesExhausted,
            )
        }
    })
}

/// A reclaim of `before`'s stranded assignment: recorded as `task_reclaimed` with
/// the assignee it had, the assignment's age and the outcome; a task that failed
/// for good blocks its dependents and its stop is queued for its coordinator.
pub fn reclaim(
    before: &Task,
    reason: &str,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Result<Decision, InvalidTransition> {
    let task = lifecycle::reclaim(before, reason, now)?;
    let age_ms = before
        .dispatch_timestamp
        .as_deref()
        .and_then(Timestamp::parse_iso)
        .map(|t| now.millis() - t.millis());
    let failed = task.status == TaskStatus::Failed;
    let payload = json!({
        "taskId": task.id,
        "reason": reason,
        "ageMs": age_ms,
        "reclaimCount": task.stranded_reclaim_count,
        "outcome": if failed { "failed" } else { "requeued" },
    });
    let mut entry = task_entry(kinds::TASK_RECLAIMED, &task, payload, mint(), now);
    entry.node_id = before.assigned_node_id.clone();
    entry.session_id = before.assigned_session_id.clone();
    entry.provider_type = before.assigned_provider_type.clone();
    let (dependents, event) =
        if failed { (Dependents::Block, completion_event(&task, now)) } else { (Dependents::Keep, None) };
    Ok(Decision { task, ledger: Some(entry), dependents, event })
}

/// Whether `task` is assigned and its lease ran out before `now`.
pub fn lease_lapsed(task: &Task, now: Timestamp) -> bool {
    task.status == TaskStatus::Assigned
        && task
            .lease_expires_at
            .as_deref()
            .and_then(Timestamp::parse_iso)
            .is_some_and(|lease| lease.millis() < now.millis())
}

/// The block a failed or cancelled `failed` leaves on its dependent `dependent`,
/// with its `task_blocked` entry; `None` when it stays as it is.
pub fn block_dependent(
    dependent: &Task,
    failed: &Task,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Option<(Task, LedgerEntry)> {
    let blocked = lifecycle::block_for_failed_dependency(dependent, &failed.id, now)?;
    let payload = json!({"taskId": blocked.id, "reason": blocked.blocked_reason, "dependencyId": failed.id});
    let entry = task_entry(kinds::TASK_BLOCKED, &blocked, payload, mint(), now);
    Some((blocked, entry))
}

/// The lifting of the block a requeued `requeued` had left on its dependent
/// `dependent`, with its `task_unblocked` entry; `None` when it stays as it is.
pub fn unblock_dependent(
    dependent: &Task,
    requeued: &Task,
    now: Timestamp,
    mint: impl FnOnce() -> String,
) -> Option<(Task, LedgerEntry)> {
    let unblocked = lifecycle::unblock_for_requeued_dependency(dependent, &requeued.id, now)?;
    let payload = json!({"taskId": unblocked.id, "dependencyId": requeued.id});
    let entry = task_entry(kinds::TASK_UNBLOCKED, &unblocked, payload, mint(), now);
    Some((unblocked, entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Progress;
    use crate::events::names;

    const T0: i64 = 1_700_000_000_000;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(T0 + ms)
    }

    fn id(s: &'static str) -> impl FnOnce() -> String {
        move || s.to_owned()
    }

    fn never() -> String {
        panic!("no entry was to be made")
    }

    fn claimant() -> Claimant {
        Claimant {
            node_id: "laptop".into(),
            session_id: "s1".into(),
            capability_tags: Vec::new(),
            provider_type: Some("claude".into()),
            provider_max_parallel: None,
            node_is_worktree: false,
            transcript_profile: None,
            allowed_difficulties: None,
        }
    }

    fn pending() -> Task {
        let mut t = Task::new("t1", "m", "write the parser", &at(0).iso());
        t.source_coordinator_daemon_id = Some("daemon_mach_A".into());
        t
    }

    fn assigned() -> Task {
        claim(&pending(), &claimant(), Some(60_000), at(10), id("c")).unwrap().task
    }

    #[test]
    fn dispatched_keeps_an_excerpt_and_the_fields_set() {
        let mut task = pending();
        task.message = "x".repeat(LEDGER_MESSAGE_CHARS + 5);
        task.target_node_id = Some("laptop".into());
        task.depends_on = Some(vec!["t0".into()]);
        let e = dispatched(&task, "e1".into(), at(0));
        assert_eq!(
            (e.id.as_str(), e.kind.as_str(), e.timestamp.as_str()),
            ("e1", "task_dispatched", &*at(0).iso())
        );
        assert_eq!(e.node_id, None);
        assert_eq!(
            e.payload.to_string(),
            json!({"taskId": "t1", "message": format!("{}…", "x".repeat(LEDGER_MESSAGE_CHARS)),
                   "targetNodeId": "laptop", "dependsOn": ["t0"]})
            .to_string()
        );
    }

    #[test]
    fn a_claim_assigns_and_records_the_epoch_and_lease() {
        let d = claim(&pending(), &claimant(), Some(60_000), at(10), id("c1")).unwrap();
        assert_eq!(d.task.status, TaskStatus::Assigned);
        assert_eq!((d.dependents, d.event.is_none()), (Dependents::Keep, true));
        let e = d.ledger.unwrap();
        assert_eq!((e.id.as_str(), e.kind.as_str()), ("c1", "task_claimed"));
        assert_eq!(
            (e.node_id.as_deref(), e.session_id.as_deref(), e.provider_type.as_deref()),
            (Some("laptop"), Some("s1"), Some("claude"))
        );
        assert_eq!(
            e.payload.to_string(),
            json!({"taskId": "t1", "epoch": 1, "dispatchTimestamp": at(10).iso(),
                   "leaseExpiresAt": at(60_010).iso()})
            .to_string()
        );
        assert!(claim(&d.task, &claimant(), None, at(20), never).is_err());
    }

    #[test]
    fn blank_claimants_and_sessions_are_refused_by_field() {
        assert_eq!(
            check_claimant(&Claimant { session_id: " ".into(), ..claimant() }).unwrap_err().field,
            "sessionId"
        );
        assert_eq!(
            check_claimant(&Claimant { node_id: "".into(), ..claimant() }).unwrap_err().field,
            "nodeId"
        );
        assert!(check_claimant(&claimant()).is_ok());
    }

    #[test]
    fn a_completion_records_it_and_queues_the_event() {
        let report = Report::Completed { summary: Some("done") };
        let d = complete(&assigned(), "s1", Some(1), report, at(20), id("k")).unwrap().unwrap();
        assert_eq!(d.task.status, TaskStatus::Completed);
        assert_eq!(d.dependents, Dependents::Keep);
        let e = d.ledger.unwrap();
        assert_eq!((e.id.as_str(), e.kind.as_str()), ("k", "task_completed"));
        assert_eq!(e.payload.to_string(), json!({"taskId": "t1", "epoch": 1, "summary": "done"}).to_string());
        let ev = d.event.unwrap().event;
        assert_eq!(ev.event, names::AGENT_GENERATING_COMPLETED);
        assert_eq!(ev.target_coordinator_daemon_id.as_deref(), Some("daemon_mach_A"));
        assert_eq!(ev.queued_at, at(20));
    }

    #[test]
    fn a_failure_records_its_reason_and_blocks_dependents() {
        let report = Report::Failed { reason: "broke", summary: None };
        let d = complete(&assigned(), "s1", None, report, at(20), id("f")).unwrap().unwrap();
        assert_eq!((d.task.status, d.dependents), (TaskStatus::Failed, Dependents::Block));
        assert_eq!(
            d.ledger.unwrap().payload.to_string(),
            json!({"taskId": "t1", "epoch": 1, "summary": null, "reason": "broke"}).to_string()
        );
        assert_eq!(d.event.unwrap().event.event, names::AGENT_STOPPED);
    }

    #[test]
    fn reports_by_non_holders_are_refused_and_recorded_in_order() {
        let done = Report::Completed { summary: None };
        let task = assigned();
        let refused = |task: &Task, session: &str, epoch: Option<u64>| {
            complete(task, session, epoch, done, at(30), id("r")).unwrap().unwrap_err()
        };
        let stale = refused(&task, "other", Some(7));
        assert_eq!(stale.refusal, HolderRefusal::StaleEpoch { presented: 7, current: 1 });
        assert_eq!((stale.ledger.id.as_str(), stale.ledger.kind.as_str()), ("r", "completion_refused"));
        assert_eq!(stale.ledger.session_id.as_deref(), Some("other"));
        assert_eq!(stale.ledger.node_id.as_deref(), Some("laptop"));
        assert_eq!(
            stale.ledger.payload.to_string(),
            json!({"taskId": "t1", "reason": "stale_epoch", "sessionId": "other", "presentedEpoch": 7,
                   "currentEpoch": 1, "status": "assigned"})
            .to_string()
        );
        let other = refused(&task, "other", Some(1));
        assert_eq!(other.refusal, HolderRefusal::OtherSession);
        assert_eq!(other.ledger.payload["reason"], "other_session");
        let finished = complete(&task, "s1", None, done, at(25), id("k")).unwrap().unwrap().task;
        let not_assigned = refused(&finished, "s1", None);
        assert_eq!(
            not_assigned.refusal,
            HolderRefusal::NotAssigned { from: TaskStatus::Completed, action: TaskAction::Complete }
        );
        assert_eq!(not_assigned.ledger.payload["presentedEpoch"], Value::Null);
        assert_eq!(not_assigned.refusal.transition("t1").unwrap().from, TaskStatus::Completed);
        assert!(HolderRefusal::OtherSession.transition("t1").is_none());
    }

    #[test]
    fn a_heartbeat_extends_the_lease_and_records_only_refusals() {
        let d = heartbeat(&assigned(), "s1", 1, 5_000, None, at(100), never).unwrap().unwrap();
        assert_eq!(d.task.lease_expires_at, Some(at(5_100).iso()));
        assert!(d.ledger.is_none() && d.event.is_none());
        let r = heartbeat(&assigned(), "s1", 2, 5_000, None, at(100), id("h")).unwrap().unwrap_err();
        assert_eq!((r.ledger.kind.as_str(), r.refusal.reason()), ("heartbeat_refused", "stale_epoch"));
    }

    #[test]
    fn progress_is_taken_by_every_beat_and_recorded_when_new_up_to_the_trail() {
        let report = |percent: Option<u8>, note: Option<&str>| ProgressReport {
            percent,
            note: note.map(str::to_owned),
        };
        let first = report(Some(10), Some("building"));
        let d = heartbeat(&assigned(), "s1", 1, 5_000, Some(&first), at(100), id("p1")).unwrap().unwrap();
        let progress = d.task.progress.clone().unwrap();
        assert_eq!(
            (progress.percent, progress.note.as_deref(), progress.recorded),
            (Some(10), Some("building"), 1)
        );
        assert_eq!(progress.at, at(100).iso());
        let entry = d.ledger.unwrap();
        assert_eq!((entry.kind.as_str(), entry.session_id.as_deref()), ("task_progress", Some("s1")));
        assert_eq!(
            (entry.payload["percent"].as_u64(), entry.payload["note"].as_str()),
            (Some(10), Some("building"))
        );

        // The same report again: the task takes its time, the ledger nothing.
        let again = heartbeat(&d.task, "s1", 1, 5_000, Some(&first), at(101), never).unwrap().unwrap();
        assert!(again.ledger.is_none());
        assert_eq!(again.task.progress.as_ref().unwrap().at, at(101).iso());
        // A plain beat keeps the last report.
        let plain = heartbeat(&again.task, "s1", 1, 5_000, None, at(102), never).unwrap().unwrap();
        assert_eq!(plain.task.progress, again.task.progress);

        // Past the trail, reports still update the task but write no entry.
        let mut task = plain.task;
        for i in 0..(Progress::TRAIL + 5) {
            let step = report(None, Some(&format!("step {i}")));
            let d = heartbeat(&task, "s1", 1, 5_000, Some(&step), at(200 + i64::from(i)), id("p"))
                .unwrap()
                .unwrap();
            assert_eq!(d.ledger.is_some(), i + 1 < Progress::TRAIL, "step {i}");
            task = d.task;
        }
        assert_eq!(task.progress.as_ref().unwrap().note.as_deref(), Some("step 54"));
        assert_eq!(task.progress.as_ref().unwrap().recorded, Progress::TRAIL);
        // A new claim starts without progress.
        let requeued = crate::lifecycle::reclaim(&task, "lease_expired", at(300)).unwrap();
        let claimant = Claimant { node_id: "n2".into(), session_id: "s2".into(), ..Claimant::default() };
        let claimed = crate::lifecycle::claim(&requeued, &claimant, None, at(301)).unwrap();
        assert_eq!(claimed.progress, None);
    }

    #[test]
    fn a_progress_report_is_checked_naming_its_field() {
        let check = |percent: Option<u8>, note: Option<&str>| {
            ProgressReport { percent, note: note.map(str::to_owned) }.check().map_err(|e| e.field)
        };
        assert_eq!(check(Some(101), None), Err("progress.percent".to_owned()));
        assert_eq!(check(None, Some("  ")), Err("progress.note".to_owned()));
        assert_eq!(check(None, Some("two\nlines")), Err("progress.note".to_owned()));
        assert_eq!(check(None, Some(&"x".repeat(201))), Err("progress.note".to_owned()));
        assert_eq!(check(None, None), Err("progress".to_owned()));
        let ok = ProgressReport { percent: Some(100), note: Some("  done soon ".into()) }.check().unwrap();
        assert_eq!(ok.note.as_deref(), Some("done soon"));
    }

    #[test]
    fn a_cancel_records_the_assignee_it_had_and_blocks_dependents() {
        let d = cancel(&assigned(), Some("not needed"), at(40), id("x")).unwrap();
        assert_eq!(
            (d.task.status, d.dependents, d.event.is_none()),
            (TaskStatus::Cancelled, Dependents::Block, true)
        );
        let e = d.ledger.unwrap();
        assert_eq!(
            (e.kind.as_str(), e.node_id.as_deref(), e.session_id.as_deref()),
            ("task_cancelled", Some("laptop"), Some("s1"))
        );
        assert_eq!(e.provider_type, None);
        assert_eq!(
            e.payload.to_string(),
            json!({"taskId": "t1", "reason": "not needed", "previousStatus": "assigned"}).to_string()
        );
    }

    #[test]
    fn a_requeue_unblocks_or_fails_when_retries_are_spent() {
        let mut failed = assigned();
        failed.status = TaskStatus::Failed;
        let opts = RequeueOptions { reason: Some("retry".into()), ..RequeueOptions::default() };
        let (d, wrap) = requeue(&failed, &opts, at(50), id("q")).unwrap();
        assert_eq!((d.task.status, d.dependents), (TaskStatus::Pending, Dependents::Unblock));
        assert_eq!(
            d.ledger.as_ref().unwrap().payload.to_string(),
            json!({"taskId": "t1", "reason": "retry", "requeueCount": 1, "previousStatus": "failed", "forced": false})
                .to_string()
        );
        assert!(matches!(wrap.of(d.task.clone()), Requeued::Pending(_)));
        let mut spent = d.task;
        spent.status = TaskStatus::Failed;
        let (d, wrap) = requeue(&spent, &opts, at(60), id("q2")).unwrap();
        assert_eq!((d.task.status, d.dependents), (TaskStatus::Failed, Dependents::Block));
        let e = d.ledger.as_ref().unwrap();
        assert_eq!(e.kind, "task_failed");
        assert_eq!(e.payload["reason"], "max_retries_exceeded: requeued 1 time(s), limit is 1");
        assert_eq!(d.event.as_ref().unwrap().event.event, names::AGENT_STOPPED);
        assert!(matches!(wrap.of(d.task), Requeued::RetriesExhausted(_)));
    }

    #[test]
    fn a_reclaim_records_the_age_and_outcome() {
        let d = reclaim(&assigned(), lifecycle::LEASE_EXPIRED_REASON, at(1_010), id("r")).unwrap();
        assert_eq!(
            (d.task.status, d.dependents, d.event.is_none()),
            (TaskStatus::Pending, Dependents::Keep, true)
        );
        let e = d.ledger.unwrap();
        assert_eq!(
            (e.node_id.as_deref(), e.session_id.as_deref(), e.provider_type.as_deref()),
            (Some("laptop"), Some("s1"), Some("claude"))
        );
        assert_eq!(
            e.payload.to_string(),
            json!({"taskId": "t1", "reason": "lease_expired", "ageMs": 1000, "reclaimCount": 1, "outcome": "requeued"})
                .to_string()
        );
        let mut stranded = assigned();
        stranded.stranded_reclaim_count = Some(lifecycle::MAX_STRANDED_RECLAIMS);
        let d = reclaim(&stranded, "gone", at(20), id("r2")).unwrap();
        assert_eq!((d.task.status, d.dependents), (TaskStatus::Failed, Dependents::Block));
        assert_eq!(d.ledger.unwrap().payload["outcome"], "failed");
        assert_eq!(d.event.unwrap().event.event, names::AGENT_STOPPED);
    }

    #[test]
    fn a_lease_lapses_only_on_an_assigned_task_past_it() {
        let task = assigned();
        assert!(!lease_lapsed(&task, at(60_010)));
        assert!(lease_lapsed(&task, at(60_011)));
        assert!(!lease_lapsed(&pending(), at(1_000_000)));
    }

    #[test]
    fn dependents_are_blocked_and_unblocked_with_entries() {
        let failed = Task { status: TaskStatus::Failed, ..assigned() };
        let dep = Task::new("t2", "m", "after", &at(0).iso());
        let (blocked, e) = block_dependent(&dep, &failed, at(70), id("b")).unwrap();
        assert_eq!(blocked.blocked_reason.as_deref(), Some("dependency_failed:t1"));
        assert_eq!((e.id.as_str(), e.kind.as_str(), e.node_id.as_deref()), ("b", "task_blocked", None));
        assert_eq!(
            e.payload.to_string(),
            json!({"taskId": "t2", "reason": "dependency_failed:t1", "dependencyId": "t1"}).to_string()
        );
        assert!(block_dependent(&blocked, &failed, at(71), never).is_none());
        let (unblocked, e) = unblock_dependent(&blocked, &failed, at(80), id("u")).unwrap();
        assert_eq!(unblocked.blocked_reason, None);
        assert_eq!(e.payload.to_string(), json!({"taskId": "t2", "dependencyId": "t1"}).to_string());
        assert!(unblock_dependent(&dep, &failed, at(81), never).is_none());
    }
}
