//! Enqueue, and the raw queue operations of tests and tools.

use agentmesh_core::effects::task as decide;
use agentmesh_core::{NewTask, Task, TaskStatus, Timestamp, enqueue};
use agentmesh_store::StoreError;
use agentmesh_store::ids::mint_at;

use super::rows::{
    Loaded, add_edges, dependents, duplicate_id, id_taken, insert_row, load_required, refresh_dependents,
    refresh_readiness, save, write_edges,
};
use crate::db::Db;
use crate::{Fail, Res, ledger};

/// Enqueues one validated task with its ledger entry. The caller holds the
/// mesh's lock, so the cycle check and the readiness count see every edge and
/// status a concurrent write of the mesh could change.
pub(crate) fn enqueue(
    db: &Db<'_>,
    mesh_id: &str,
    new: &NewTask,
    fresh_id: &str,
    now: Timestamp,
) -> Res<Task> {
    let task = enqueue::prepare_task(mesh_id, new, fresh_id, now)?;
    if !task.dependencies().is_empty() {
        let mut lookup_error = None;
        let cycle = enqueue::find_dependency_cycle(&task.id, task.dependencies(), |id| {
            dependents(db, &task.mesh_id, id).unwrap_or_else(|e| {
                lookup_error = Some(e);
                Vec::new()
            })
        });
        if let Some(err) = lookup_error {
            return Err(err);
        }
        if let Some(path) = cycle {
            return Err(Fail(StoreError::DependencyCycle { path }));
        }
    }
    // A task with dependencies writes its edges first, so its id is checked
    // before them; a task without any is refused by its insert, which changes
    // nothing when the id is taken.
    let unmet = if task.dependencies().is_empty() {
        0
    } else {
        if id_taken(db, &task.mesh_id, &task.id)? {
            return Err(duplicate_id(&task));
        }
        add_edges(db, &task)?
    };
    insert_row(db, &task, unmet)?;
    ledger::append_later(db, &decide::dispatched(&task, mint_at(now), now))?;
    Ok(task)
}

/// Inserts tasks as they are, skipping ids the mesh holds; returns how many were
/// new. Readiness is counted after every row is in, since the tasks may name each
/// other in any order.
pub(crate) fn import_entries(db: &Db<'_>, entries: &[Task]) -> Res<u64> {
    let mut imported = Vec::new();
    for task in entries {
        if id_taken(db, &task.mesh_id, &task.id)? {
            continue;
        }
        write_edges(db, task)?;
        insert_row(db, task, 0)?;
        imported.push(task);
    }
    for task in &imported {
        refresh_readiness(db, &task.mesh_id, &task.id)?;
        refresh_dependents(db, &task.mesh_id, &task.id)?;
    }
    Ok(imported.len() as u64)
}

/// Replaces the whole queue of a mesh.
pub(crate) fn replace_queue(db: &Db<'_>, mesh_id: &str, entries: &[Task]) -> Res<()> {
    delete_queue(db, mesh_id)?;
    for (i, task) in entries.iter().enumerate() {
        task.check_storable_in(mesh_id).map_err(|e| e.within(format_args!("entries[{i}]")))?;
        if id_taken(db, mesh_id, &task.id)? {
            return Err(duplicate_id(task));
        }
        write_edges(db, task)?;
        insert_row(db, task, 0)?;
    }
    for task in entries {
        refresh_readiness(db, mesh_id, &task.id)?;
    }
    Ok(())
}

/// Deletes every task of a mesh with its edges.
pub(crate) fn delete_queue(db: &Db<'_>, mesh_id: &str) -> Res<u64> {
    db.execute("DELETE FROM mesh_task_deps WHERE mesh_id = $1", &[&mesh_id])?;
    db.execute("DELETE FROM mesh_queue WHERE mesh_id = $1", &[&mesh_id])
}

/// Inserts a task as given.
pub(crate) fn insert_entry(db: &Db<'_>, task: &Task) -> Res<()> {
    agentmesh_core::InvalidInput::non_blank("id", &task.id)?;
    if id_taken(db, &task.mesh_id, &task.id)? {
        return Err(duplicate_id(task));
    }
    let unmet = write_edges(db, task)?;
    insert_row(db, task, unmet)?;
    if task.status == TaskStatus::Completed {
        refresh_dependents(db, &task.mesh_id, &task.id)?;
    }
    Ok(())
}

/// Rewrites a task as given, stamping `updatedAt`.
pub(crate) fn update_entry(db: &Db<'_>, entry: &Task, now: Timestamp) -> Res<Task> {
    let before = load_required(db, &entry.mesh_id, &entry.id)?;
    let mut task = entry.clone();
    task.updated_at = now.iso();
    let unmet = write_edges(db, &task)?;
    save(db, &Loaded { deps_unmet: unmet, ..before }, &task)?;
    Ok(task)
}
