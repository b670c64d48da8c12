//! Enqueue, and the import of tasks as they are.

use agentmesh_core::effects::task as decide;
use agentmesh_core::{NewDispatchedTask, NewTask, Task, Timestamp, enqueue};
use agentmesh_store::RecordedDispatch;
use agentmesh_store::ids::mint_at;
use rusqlite::Connection;

use super::rows::{add_edges, dependents, insert_row};
use crate::{Res, ledger};

/// Enqueues one validated task with its ledger entry.
pub(crate) fn enqueue(conn: &Connection, mesh_id: &str, new: &NewTask, now: Timestamp) -> Res<Task> {
    let task = enqueue::prepare_task(mesh_id, new, &mint_at(now), now)?;
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
    if let Some((_, task)) = crate::archive::task(conn, mesh_id, new.id.trim())? {
        return Ok(RecordedDispatch { task: agentmesh_store::archive::mark_archived(task), created: false });
    }
    let record = new.record(mesh_id, now, mint_at(now))?;
    // An id another mesh holds is refused by the row's primary key, as an enqueue's.
    insert_row(conn, &record.task, 0)?;
    ledger::append(conn, &record.ledger)?;
    crate::runtime::insert_delivery(conn, mesh_id, &record.delivery, now)?;
    Ok(RecordedDispatch { task: record.task, created: true })
}

/// Inserts tasks as they are, skipping ids the mesh holds (see
/// [`agentmesh_store::task_writes::import`]); returns how many were new.
pub(crate) fn import_entries(conn: &Connection, entries: &[Task]) -> Res<u64> {
    agentmesh_store::task_writes::import(&super::persist::Rows(conn), entries)
}
