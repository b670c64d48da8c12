//! Enqueue, and the import of tasks as they are.

use agentmesh_core::effects::task as decide;
use agentmesh_core::{NewDispatchedTask, NewTask, Task, Timestamp, enqueue};
use agentmesh_store::RecordedDispatch;
use agentmesh_store::ids::mint_at;
use rusqlite::Connection;

use super::rows::{
    add_edges, dependents, id_taken, insert_row, refresh_dependents, refresh_readiness, write_edges,
};
use crate::{Res, ledger};

/// Enqueues one validated task with its ledger entry.
pub(crate) fn enqueue(
    conn: &Connection,
    mesh_id: &str,
    new: &NewTask,
    fresh_id: &str,
    now: Timestamp,
) -> Res<Task> {
    let task = enqueue::prepare_task(mesh_id, new, fresh_id, now)?;
    if new.id.is_some() {
        crate::archive::refuse_archived_id(conn, &task.id)?;
    }
    // A taken id is caught by the row's primary key (see `insert_row`); the whole
    // transaction then rolls back, edges included.
    agentmesh_store::task_writes::refuse_cycle(&task, |id| dependents(conn, &task.mesh_id, id))?;
    let unmet = if task.dependencies().is_empty() { 0 } else { add_edges(conn, &task)? };
    insert_row(conn, &task, unmet)?;
    ledger::append(conn, &decide::dispatched(&task, mint_at(now), now))?;
    Ok(task)
}

/// Records a task already dispatched to a session, with its entry and its
/// delivered record; an id the mesh holds is returned as it is.
pub(crate) fn record_dispatched(
    conn: &Connection,
    mesh_id: &str,
    new: &NewDispatchedTask,
    now: Timestamp,
) -> Res<RecordedDispatch> {
    new.validate()?;
    if let Some(task) = super::find(conn, mesh_id, new.id.trim())? {
        return Ok(RecordedDispatch { task, created: false });
    }
    if let Some(task) = crate::archive::task(conn, mesh_id, new.id.trim())? {
        return Ok(RecordedDispatch { task: agentmesh_store::archive::mark_archived(task), created: false });
    }
    let record = new.record(mesh_id, now, mint_at(now))?;
    // An id another mesh holds is refused by the row's primary key, as an enqueue's.
    insert_row(conn, &record.task, 0)?;
    ledger::append(conn, &record.ledger)?;
    crate::runtime::insert_delivery(conn, mesh_id, &record.delivery, now)?;
    Ok(RecordedDispatch { task: record.task, created: true })
}

/// Inserts tasks as they are, skipping ids that exist; returns how many were new.
pub(crate) fn import_entries(conn: &Connection, entries: &[Task]) -> Res<u64> {
    let mut imported = Vec::new();
    for task in entries {
        if id_taken(conn, &task.id)? || crate::archive::refuse_archived_id(conn, &task.id).is_err() {
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
