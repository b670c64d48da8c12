//! The task writes both stores run the same way: load the task, ask the core
//! ([`agentmesh_core::effects::task`]) what to store, and store exactly that,
//! in the caller's transaction. A store supplies its rows through [`TaskRows`];
//! the order of the writes is the core's, so both stores record the same ledger.

use agentmesh_core::effects::task::{self as decide, Decision, Dependents, Refused, Report};
use agentmesh_core::events::{EmitHint, EventToQueue, PendingEvent};
use agentmesh_core::lifecycle::{self, match_completion};
use agentmesh_core::{
    InvalidInput, InvalidTransition, LedgerEntry, RequeueOptions, Requeued, Task, TaskPriority, Timestamp,
};

use crate::ids::mint_at;
use crate::{ClaimOutcome, CompletionReport, Outcome, StoreError, TaskCommand};

/// A store's task rows, inside one write transaction.
pub trait TaskRows {
    /// A task as loaded for a change, with what the store keeps beside it.
    type Loaded;
    /// The store's error, which every error of a write converts into.
    type Error: From<StoreError> + From<InvalidInput> + From<InvalidTransition>;

    /// The task of a loaded row.
    fn task(loaded: &Self::Loaded) -> &Task;
    /// The task `task_id` of the mesh, when there is one.
    fn load(&self, mesh_id: &str, task_id: &str) -> Result<Option<Self::Loaded>, Self::Error>;
    /// The tasks assigned to the session, for a completion that names none.
    fn assigned_to_session(&self, mesh_id: &str, session_id: &str) -> Result<Vec<Task>, Self::Error>;
    /// The ids of the tasks that depend on the loaded one.
    fn dependents(&self, loaded: &Self::Loaded) -> Result<Vec<String>, Self::Error>;
    /// Stores `task` over the loaded row.
    fn save(&self, before: &Self::Loaded, task: &Task) -> Result<(), Self::Error>;
    /// Appends a ledger entry.
    fn append(&self, entry: &LedgerEntry) -> Result<(), Self::Error>;
    /// The path reservations of this transaction.
    type Paths<'r>: crate::reservation_writes::ReservationRows<Error = Self::Error>
    where
        Self: 'r;
    /// This transaction's path reservation rows: a task that declares paths
    /// keeps its reservation with its hold (see
    /// [`crate::reservation_writes::follow_task`]).
    fn paths(&self) -> Self::Paths<'_>;
    /// Queues an event for its coordinator.
    fn queue_event(
        &self,
        mesh_id: &str,
        event: PendingEvent,
        hint: &EmitHint,
        now: Timestamp,
    ) -> Result<(), Self::Error>;
    /// Whether `task`'s mesh holds its id already, hot or archived.
    fn holds(&self, task: &Task) -> Result<bool, Self::Error>;
    /// Writes `task` as it is, with its dependency edges; its readiness is
    /// counted later ([`TaskRows::recount`]).
    fn insert_as_is(&self, task: &Task) -> Result<(), Self::Error>;
    /// Counts the readiness of `task` and of the tasks that depend on it.
    fn recount(&self, task: &Task) -> Result<(), Self::Error>;
}

/// Inserts tasks as they are (an import, a migration), skipping ids their
/// mesh holds, hot or archived; returns how many were new. Readiness is
/// counted once every row is in, since the tasks may name each other in any
/// order.
pub fn import<R: TaskRows>(rows: &R, entries: &[Task]) -> Result<u64, R::Error> {
    let mut imported = Vec::new();
    for task in entries {
        if !rows.holds(task)? {
            rows.insert_as_is(task)?;
            imported.push(task);
        }
    }
    for task in &imported {
        rows.recount(task)?;
    }
    Ok(imported.len() as u64)
}

/// The task `task_id`, or [`StoreError::TaskNotFound`].
pub fn load_required<R: TaskRows>(rows: &R, mesh_id: &str, task_id: &str) -> Result<R::Loaded, R::Error> {
    rows.load(mesh_id, task_id)?.ok_or_else(|| StoreError::task_not_found(mesh_id, task_id).into())
}

/// Writes a decision about the loaded `before`, in the order the core states
/// it: the row, its ledger entry, the changes to its dependents (each with its
/// entry), then the event for its coordinator. Returns the task as stored.
pub fn persist<R: TaskRows>(
    rows: &R,
    before: &R::Loaded,
    decision: Decision,
    now: Timestamp,
) -> Result<Task, R::Error> {
    let Decision { task, ledger: entry, dependents, event } = decision;
    rows.save(before, &task)?;
    let was = R::task(before);
    if was.paths.is_some() || task.paths.is_some() {
        crate::reservation_writes::follow_task(&rows.paths(), was, &task, now)?;
    }
    if let Some(entry) = &entry {
        rows.append(entry)?;
    }
    match dependents {
        Dependents::Keep => {}
        Dependents::Block => each_dependent(rows, before, &task, |dep| {
            decide::block_dependent(dep, &task, now, || mint_at(now))
        })?,
        Dependents::Unblock => each_dependent(rows, before, &task, |dep| {
            decide::unblock_dependent(dep, &task, now, || mint_at(now))
        })?,
    }
    if let Some(EventToQueue { event, hint }) = event {
        rows.queue_event(&task.mesh_id, event, &hint, now)?;
    }
    Ok(task)
}

/// Loads each dependent of `task` and stores what `change` makes of it.
fn each_dependent<R: TaskRows>(
    rows: &R,
    before: &R::Loaded,
    task: &Task,
    mut change: impl FnMut(&Task) -> Option<(Task, LedgerEntry)>,
) -> Result<(), R::Error> {
    for id in rows.dependents(before)? {
        let Some(dep) = rows.load(&task.mesh_id, &id)? else { continue };
        if let Some((changed, entry)) = change(R::task(&dep)) {
            rows.save(&dep, &changed)?;
            rows.append(&entry)?;
        }
    }
    Ok(())
}

/// Records a refusal (committed with the transaction) and returns its error.
fn refused<R: TaskRows>(
    rows: &R,
    task: &Task,
    session_id: &str,
    refused: Refused,
) -> Result<StoreError, R::Error> {
    rows.append(&refused.ledger)?;
    Ok(StoreError::of_holder_refusal(&task.id, session_id, refused.refusal))
}

/// Records a completion or failure. The outer `Result` fails the transaction;
/// the inner `Err` is a refusal that was recorded and must still be committed.
pub fn complete<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    report: &CompletionReport,
    now: Timestamp,
) -> Result<Result<Task, StoreError>, R::Error> {
    decide::check_session(&report.session_id)?;
    let before = match &report.task_id {
        Some(id) => load_required(rows, mesh_id, id)?,
        None => {
            let assigned = rows.assigned_to_session(mesh_id, &report.session_id)?;
            let Some(task) = match_completion(&assigned, None, report.occurred_at.as_deref()) else {
                return Ok(Err(StoreError::NoAssignedTask {
                    mesh_id: mesh_id.to_owned(),
                    session_id: report.session_id.clone(),
                }));
            };
            load_required(rows, mesh_id, &task.id)?
        }
    };
    let outcome = match &report.outcome {
        Outcome::Completed { summary } => Report::Completed { summary: summary.as_deref() },
        Outcome::Failed { reason, summary } => Report::Failed { reason, summary: summary.as_deref() },
    };
    let task = R::task(&before);
    match decide::complete(task, &report.session_id, report.epoch, outcome, now, || mint_at(now))? {
        Ok(decision) => Ok(Ok(persist(rows, &before, decision, now)?)),
        Err(refusal) => Ok(Err(refused(rows, task, &report.session_id, refusal)?)),
    }
}

/// A completion, then the claim that follows it (`complete_and_claim`): `claim`
/// runs only when the completion was accepted; a refused one is recorded and
/// claims nothing. The claim is the store's own (it reads streams, not rows).
pub fn complete_then_claim<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    report: &CompletionReport,
    now: Timestamp,
    claim: impl FnOnce() -> Result<ClaimOutcome, R::Error>,
) -> Result<Result<(Task, ClaimOutcome), StoreError>, R::Error> {
    match complete(rows, mesh_id, report, now)? {
        Ok(task) => Ok(Ok((task, claim()?))),
        Err(refused) => Ok(Err(refused)),
    }
}

/// Extends a lease; refusals are recorded like completion refusals.
pub fn heartbeat<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    beat: &crate::Heartbeat,
    now: Timestamp,
) -> Result<Result<Task, StoreError>, R::Error> {
    let before = load_required(rows, mesh_id, &beat.task_id)?;
    let task = R::task(&before);
    let progress = beat.progress.as_ref();
    match decide::heartbeat(task, &beat.session_id, beat.epoch, beat.lease_ms, progress, now, || {
        mint_at(now)
    })? {
        Ok(decision) => Ok(Ok(persist(rows, &before, decision, now)?)),
        Err(refusal) => Ok(Err(refused(rows, task, &beat.session_id, refusal)?)),
    }
}

/// Refuses the dependency cycle `task` would close
/// ([`StoreError::DependencyCycle`]), walking the graph through `dependents_of`
/// (a backend's read of a task's dependents in the task's mesh).
pub fn refuse_cycle<E: From<StoreError>>(
    task: &Task,
    mut dependents_of: impl FnMut(&str) -> Result<Vec<String>, E>,
) -> Result<(), E> {
    if task.dependencies().is_empty() {
        return Ok(());
    }
    let mut lookup_error = None;
    let cycle = agentmesh_core::enqueue::find_dependency_cycle(&task.id, task.dependencies(), |id| {
        dependents_of(id).unwrap_or_else(|e| {
            lookup_error = Some(e);
            Vec::new()
        })
    });
    if let Some(err) = lookup_error {
        return Err(err);
    }
    match cycle {
        Some(path) => Err(StoreError::DependencyCycle { path }.into()),
        None => Ok(()),
    }
}

/// The error of the task at `index` of a batch: invalid input names the task
/// (`tasks[i]`), anything else is as it was.
pub fn in_batch(index: usize, err: StoreError) -> StoreError {
    match err {
        StoreError::InvalidInput(e) => StoreError::InvalidInput(e.within(format_args!("tasks[{index}]"))),
        other => other,
    }
}

/// Cancels a task.
pub fn cancel<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    task_id: &str,
    reason: Option<&str>,
    now: Timestamp,
) -> Result<Task, R::Error> {
    let before = load_required(rows, mesh_id, task_id)?;
    let decision = decide::cancel(R::task(&before), reason, now, || mint_at(now))?;
    persist(rows, &before, decision, now)
}

/// Changes a task's priority.
pub fn set_priority<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    task_id: &str,
    priority: TaskPriority,
    reason: Option<&str>,
    now: Timestamp,
) -> Result<Task, R::Error> {
    let before = load_required(rows, mesh_id, task_id)?;
    let decision = decide::set_priority(R::task(&before), priority, reason, now, || mint_at(now))?;
    persist(rows, &before, decision, now)
}

/// Puts a task back in the queue.
pub fn requeue<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    task_id: &str,
    opts: &RequeueOptions,
    now: Timestamp,
) -> Result<Requeued, R::Error> {
    let before = load_required(rows, mesh_id, task_id)?;
    let (decision, kind) = decide::requeue(R::task(&before), opts, now, || mint_at(now))?;
    Ok(kind.of(persist(rows, &before, decision, now)?))
}

/// Runs an operator's command on a task (see [`TaskCommand`]).
pub fn command<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    task_id: &str,
    command: TaskCommand<'_>,
    now: Timestamp,
) -> Result<Task, R::Error> {
    match command {
        TaskCommand::SetPriority { priority, reason } => {
            set_priority(rows, mesh_id, task_id, priority, reason, now)
        }
        TaskCommand::Cancel { reason } => cancel(rows, mesh_id, task_id, reason, now),
        TaskCommand::Requeue(opts) => requeue(rows, mesh_id, task_id, opts, now).map(Requeued::into_task),
    }
}

/// Takes a task back from its holder.
pub fn reclaim<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    task_id: &str,
    reason: &str,
    now: Timestamp,
) -> Result<Task, R::Error> {
    let before = load_required(rows, mesh_id, task_id)?;
    let decision = decide::reclaim(R::task(&before), reason, now, || mint_at(now))?;
    persist(rows, &before, decision, now)
}

/// Reclaims the task when, in this transaction, it is assigned and its lease ran
/// out before `now`; `None` otherwise.
pub fn reclaim_if_lease_expired<R: TaskRows>(
    rows: &R,
    mesh_id: &str,
    task_id: &str,
    now: Timestamp,
) -> Result<Option<Task>, R::Error> {
    let Some(current) = rows.load(mesh_id, task_id)? else {
        return Ok(None);
    };
    if !decide::lease_lapsed(R::task(&current), now) {
        return Ok(None);
    }
    let decision = decide::reclaim(R::task(&current), lifecycle::LEASE_EXPIRED_REASON, now, || mint_at(now))?;
    persist(rows, &current, decision, now).map(Some)
}
