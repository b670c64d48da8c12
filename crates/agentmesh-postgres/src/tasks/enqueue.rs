//! Enqueue, and the import of tasks as they are.

use agentmesh_core::effects::task as decide;
use agentmesh_core::{NewDispatchedTask, NewTask, Task, Timestamp, enqueue};
use agentmesh_store::RecordedDispatch;
use agentmesh_store::ids::mint_at;

use super::rows::{add_edges, dependents, duplicate_id, id_taken, insert_row};
use crate::db::Db;
use crate::{Res, ledger};

/// Enqueues one validated task with its ledger entry. The caller holds the
/// mesh's lock, so the cycle check and the readiness count see every edge and
/// status a concurrent write of the mesh could change.
pub(crate) fn enqueue(db: &Db<'_>, mesh_id: &str, new: &NewTask, now: Timestamp) -> Res<Task> {
    let task = enqueue::prepare_task(mesh_id, new, &mint_at(now), now)?;
    agentmesh_store::task_writes::refuse_cycle(&task, |id| dependents(db, &task.mesh_id, id))?;
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

/// Records a task already dispatched to a session, with its entry and its
/// delivered record; an id the mesh holds is returned as it is (an archived
/// one marked so). The caller holds the mesh key, so of two recordings of one
/// id the second finds the first.
pub(crate) fn record_dispatched(
    db: &Db<'_>,
    mesh_id: &str,
    new: &NewDispatchedTask,
    now: Timestamp,
) -> Res<RecordedDispatch> {
    new.validate()?;
    let task_id = new.id.trim();
    let found = db.query_opt(
        "SELECT payload, false FROM mesh_queue WHERE mesh_id = $1 AND id = $2
         UNION ALL
         SELECT convert_to(task, 'UTF8'), true FROM mesh_queue_archive WHERE mesh_id = $1 AND id = $2
         LIMIT 1",
        &[&mesh_id, &task_id],
    )?;
    if let Some(row) = found {
        let task = super::rows::decode(task_id, row.get(0))?;
        let task = if row.get(1) { agentmesh_store::archive::mark_archived(task) } else { task };
        return Ok(RecordedDispatch { task, created: false });
    }
    let record = new.record(mesh_id, now, mint_at(now))?;
    insert_row(db, &record.task, 0)?;
    ledger::append(db, &record.ledger)?;
    crate::runtime::insert_delivery(db, mesh_id, &record.delivery, now)?;
    Ok(RecordedDispatch { task: record.task, created: true })
}

/// Inserts tasks as they are, skipping ids the mesh holds (see
/// [`agentmesh_store::task_writes::import`]); returns how many were new.
pub(crate) fn import_entries(db: &Db<'_>, entries: &[Task]) -> Res<u64> {
    agentmesh_store::task_writes::import(&super::persist::Rows::of(db), entries)
}
