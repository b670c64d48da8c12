//! The lifecycle writes: each loads its task, asks the core what to store
//! ([`agentmesh_core::effects::task`]) and persists the decision.

use agentmesh_core::effects::task::{self as decide, Refused, Report};
use agentmesh_core::lifecycle::{self, match_completion};
use agentmesh_core::{RequeueOptions, Requeued, Task, TaskPriority, Timestamp};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{CompletionReport, Outcome, StoreError};

use super::persist::persist;
use super::reads::assigned_to_session;
use super::rows::{load, load_required};
use crate::db::Db;
use crate::{Res, ledger};

/// Records a refusal (committed with the transaction) and returns its error.
fn refused(db: &Db<'_>, task: &Task, session_id: &str, refused: Refused) -> Res<StoreError> {
    ledger::append_later(db, &refused.ledger)?;
    Ok(StoreError::of_holder_refusal(&task.id, session_id, refused.refusal))
}

/// Records a completion or failure. The outer `Res` fails the transaction; the
/// inner `Err` is a refusal that was recorded and must still be committed.
pub(crate) fn complete(
    db: &Db<'_>,
    mesh_id: &str,
    report: &CompletionReport,
    now: Timestamp,
) -> Res<Result<Task, StoreError>> {
    decide::check_session(&report.session_id)?;
    let before = match &report.task_id {
        Some(id) => load_required(db, mesh_id, id)?,
        None => {
            let assigned = assigned_to_session(db, mesh_id, &report.session_id)?;
            let Some(task) = match_completion(&assigned, None, report.occurred_at.as_deref()) else {
                return Ok(Err(StoreError::NoAssignedTask {
                    mesh_id: mesh_id.to_owned(),
                    session_id: report.session_id.clone(),
                }));
            };
            load_required(db, mesh_id, &task.id)?
        }
    };
    let outcome = match &report.outcome {
        Outcome::Completed { summary } => Report::Completed { summary: summary.as_deref() },
        Outcome::Failed { reason, summary } => Report::Failed { reason, summary: summary.as_deref() },
    };
    let mint = || mint_at(now);
    match decide::complete(&before.task, &report.session_id, report.epoch, outcome, now, mint)? {
        Ok(decision) => Ok(Ok(persist(db, &before, decision, now)?)),
        Err(refusal) => Ok(Err(refused(db, &before.task, &report.session_id, refusal)?)),
    }
}

/// Extends a lease; refusals are recorded like completion refusals.
pub(crate) fn heartbeat(
    db: &Db<'_>,
    mesh_id: &str,
    task_id: &str,
    session_id: &str,
    epoch: u64,
    lease_ms: i64,
    now: Timestamp,
) -> Res<Result<Task, StoreError>> {
    let before = load_required(db, mesh_id, task_id)?;
    match decide::heartbeat(&before.task, session_id, epoch, lease_ms, now, || mint_at(now))? {
        Ok(decision) => Ok(Ok(persist(db, &before, decision, now)?)),
        Err(refusal) => Ok(Err(refused(db, &before.task, session_id, refusal)?)),
    }
}

pub(crate) fn cancel(
    db: &Db<'_>,
    mesh_id: &str,
    task_id: &str,
    reason: Option<&str>,
    now: Timestamp,
) -> Res<Task> {
    let before = load_required(db, mesh_id, task_id)?;
    let decision = decide::cancel(&before.task, reason, now, || mint_at(now))?;
    persist(db, &before, decision, now)
}

pub(crate) fn set_priority(
    db: &Db<'_>,
    mesh_id: &str,
    task_id: &str,
    priority: TaskPriority,
    reason: Option<&str>,
    now: Timestamp,
) -> Res<Task> {
    let before = load_required(db, mesh_id, task_id)?;
    let decision = decide::set_priority(&before.task, priority, reason, now, || mint_at(now))?;
    persist(db, &before, decision, now)
}

pub(crate) fn requeue(
    db: &Db<'_>,
    mesh_id: &str,
    task_id: &str,
    opts: &RequeueOptions,
    now: Timestamp,
) -> Res<Requeued> {
    let before = load_required(db, mesh_id, task_id)?;
    let (decision, kind) = decide::requeue(&before.task, opts, now, || mint_at(now))?;
    Ok(kind.of(persist(db, &before, decision, now)?))
}

pub(crate) fn reclaim(db: &Db<'_>, mesh_id: &str, task_id: &str, reason: &str, now: Timestamp) -> Res<Task> {
    let before = load_required(db, mesh_id, task_id)?;
    let decision = decide::reclaim(&before.task, reason, now, || mint_at(now))?;
    persist(db, &before, decision, now)
}

/// Reclaims the task when, in this transaction, it is assigned and its lease ran
/// out before `now`; `None` otherwise.
pub(crate) fn reclaim_if_lease_expired(
    db: &Db<'_>,
    mesh_id: &str,
    task_id: &str,
    now: Timestamp,
) -> Res<Option<Task>> {
    let Some(current) = load(db, mesh_id, task_id)? else {
        return Ok(None);
    };
    if !decide::lease_lapsed(&current.task, now) {
        return Ok(None);
    }
    let decision = decide::reclaim(&current.task, lifecycle::LEASE_EXPIRED_REASON, now, || mint_at(now))?;
    persist(db, &current, decision, now).map(Some)
}
