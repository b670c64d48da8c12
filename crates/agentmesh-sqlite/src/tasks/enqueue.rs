//! Enqueue, and the raw queue operations of import and tests.

use agentmesh_core::effects::task as decide;
use agentmesh_core::{NewTask, Task, TaskStatus, Timestamp, enqueue};
use agentmesh_store::StoreError;
use agentmesh_store::ids::mint_at;
use rusqlite::Connection;

use super::rows::{
    Loaded, add_edges, dependents, duplicate_id, id_taken, insert_row, load_required, refresh_dependents,
    refresh_readiness, save, write_edges,
};
use crate::{Fail, Res, ledger};

/// Enqueues one validated task with its ledger entry.
pub(crate) fn enqueue(
    conn: &Connection,
    mesh_id: &str,
    new: &NewTask,
    fresh_id: &str,
    now: Timestamp,
) -> Res<Task> {
    let task = enqueue::prepare_task(mesh_id, new, fresh_id, now)?;
    // A taken id is caught by the row's primary key (see `insert_row`); the whole
    // transaction then rolls back, edges included.
    if !task.dependencies().is_empty() {
        let mut lookup_error = None;
        let cycle = enqueue::find_dependency_cycle(&task.id, task.dependencies(), |id| {
            dependents(conn, &task.mesh_id, id).unwrap_or_else(|e| {
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
    let unmet = if task.dependencies().is_empty() { 0 } else { add_edges(conn, &task)? };
    insert_row(conn, &task, unmet)?;
    ledger::append(conn, &decide::dispatched(&task, mint_at(now), now))?;
    Ok(task)
}

/// Inserts tasks as they are, skipping ids that exist; returns how many were new.
pub(crate) fn import_entries(conn: &Connection, entries: &[Task]) -> Res<u64> {
    let mut imported = Vec::new();
    for task in entries {
        if id_taken(conn, &task.id)? {
            continue;
        }
        write_edges(conn, task)?;
        insert_row(conn, task, 0)?;
        imported.push(task);
    }
    // Counted after every row is in, since entries may name each other in any order.
    for task in &imported {
        refresh_readiness(conn, &task.mesh_id, &task.id)?;
        refresh_dependents(conn, &task.mesh_id, &task.id)?;
    }
    Ok(imported.len() as u64)
}

/// Replaces the whole queue of a mesh.
pub(crate) fn replace_queue(conn: &Connection, mesh_id: &str, entries: &[Task]) -> Res<()> {
    delete_queue(conn, mesh_id)?;
    for (i, task) in entries.iter().enumerate() {
        task.check_storable_in(mesh_id).map_err(|e| e.within(format_args!("entries[{i}]")))?;
        if id_taken(conn, &task.id)? {
            return Err(duplicate_id(conn, task));
        }
        write_edges(conn, task)?;
        insert_row(conn, task, 0)?;
    }
    for task in entries {
        refresh_readiness(conn, mesh_id, &task.id)?;
    }
    Ok(())
}

/// Deletes every task of a mesh with its edges.
pub(crate) fn delete_queue(conn: &Connection, mesh_id: &str) -> Res<u64> {
    conn.execute("DELETE FROM mesh_task_deps WHERE mesh_id = ?1", [mesh_id])?;
    Ok(conn.execute("DELETE FROM mesh_queue WHERE mesh_id = ?1", [mesh_id])? as u64)
}

/// Inserts a task as given.
pub(crate) fn insert_entry(conn: &Connection, task: &Task) -> Res<()> {
    agentmesh_core::InvalidInput::non_blank("id", &task.id)?;
    if id_taken(conn, &task.id)? {
        return Err(duplicate_id(conn, task));
    }
    let unmet = write_edges(conn, task)?;
    insert_row(conn, task, unmet)?;
    if task.status == TaskStatus::Completed {
        refresh_dependents(conn, &task.mesh_id, &task.id)?;
    }
    Ok(())
}

/// Rewrites a task as given, stamping `updatedAt`.
pub(crate) fn update_entry(conn: &Connection, entry: &Task, now: Timestamp) -> Res<Task> {
    let before = load_required(conn, &entry.mesh_id, &entry.id)?;
    let mut task = entry.clone();
    task.updated_at = now.iso();
    let unmet = write_edges(conn, &task)?;
    save(conn, &Loaded { deps_unmet: unmet, ..before }, &task)?;
    Ok(task)
}
