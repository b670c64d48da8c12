//! The effect writer: persists what the core decided about a task
//! ([`agentmesh_core::effects::task::Decision`]) in the caller's transaction.

use agentmesh_core::effects::task::{self as decide, Decision, Dependents};
use agentmesh_core::events::EventToQueue;
use agentmesh_core::{LedgerEntry, Task, Timestamp};
use agentmesh_store::ids::mint_at;

use super::rows::{Loaded, load, save};
use crate::db::Db;
use crate::{Res, ledger};

/// Writes a decision about the loaded `before`, in the order the core states
/// it: the row, its ledger entry, the changes to its dependents (each with its
/// entry), then the event for its coordinator. Returns the task as stored.
pub(super) fn persist(db: &Db<'_>, before: &Loaded, decision: Decision, now: Timestamp) -> Res<Task> {
    let Decision { task, ledger: entry, dependents, event } = decision;
    save(db, before, &task)?;
    if let Some(entry) = &entry {
        ledger::append_later(db, entry)?;
    }
    match dependents {
        Dependents::Keep => {}
        Dependents::Block => each_dependent(db, before, &task, |dep| {
            decide::block_dependent(dep, &task, now, || mint_at(now))
        })?,
        Dependents::Unblock => each_dependent(db, before, &task, |dep| {
            decide::unblock_dependent(dep, &task, now, || mint_at(now))
        })?,
    }
    if let Some(EventToQueue { event, hint }) = event {
        crate::inbox::queue_later(db, &task.mesh_id, event, &hint, None, now)?;
    }
    Ok(task)
}

/// Loads each dependent of `task` and stores what `change` makes of it.
fn each_dependent(
    db: &Db<'_>,
    before: &Loaded,
    task: &Task,
    mut change: impl FnMut(&Task) -> Option<(Task, LedgerEntry)>,
) -> Res<()> {
    for id in before.dependents(db)? {
        let Some(dep) = load(db, &task.mesh_id, &id)? else { continue };
        if let Some((changed, entry)) = change(&dep.task) {
            save(db, &dep, &changed)?;
            ledger::append_later(db, &entry)?;
        }
    }
    Ok(())
}
