//! This store's rows for the task writes both stores share
//! ([`agentmesh_store::task_writes`]): load, save, the ledger and the event,
//! on the caller's connection.

use agentmesh_core::events::{EmitHint, PendingEvent};
use agentmesh_core::{LedgerEntry, Task, Timestamp};
use agentmesh_store::task_writes::TaskRows;
use rusqlite::Connection;

use super::reads::assigned_to_session;
use super::rows::{
    Loaded, dependents, id_taken, insert_row, load, refresh_dependents, refresh_readiness, save, write_edges,
};
use crate::{Fail, Res, ledger};

/// The task rows of one write transaction.
pub(crate) struct Rows<'a>(pub(crate) &'a Connection);

impl TaskRows for Rows<'_> {
    type Loaded = Loaded;
    type Error = Fail;

    fn task(loaded: &Loaded) -> &Task {
        &loaded.task
    }

    fn load(&self, mesh_id: &str, task_id: &str) -> Res<Option<Loaded>> {
        load(self.0, mesh_id, task_id)
    }

    /// Task ids are unique across the meshes of a file, hot and archived.
    fn holds(&self, task: &Task) -> Res<bool> {
        Ok(id_taken(self.0, &task.id)? || crate::archive::archived_mesh_of(self.0, &task.id)?.is_some())
    }

    fn assigned_to_session(&self, mesh_id: &str, session_id: &str) -> Res<Vec<Task>> {
        assigned_to_session(self.0, mesh_id, session_id)
    }

    fn dependents(&self, loaded: &Loaded) -> Res<Vec<String>> {
        dependents(self.0, &loaded.task.mesh_id, &loaded.task.id)
    }

    fn recount(&self, task: &Task) -> Res<()> {
        refresh_readiness(self.0, &task.mesh_id, &task.id)?;
        refresh_dependents(self.0, &task.mesh_id, &task.id)
    }

    type Paths<'r>
        = crate::reservations::Rows<'r>
    where
        Self: 'r;

    fn paths(&self) -> crate::reservations::Rows<'_> {
        crate::reservations::Rows(self.0)
    }

    fn save(&self, before: &Loaded, task: &Task) -> Res<()> {
        save(self.0, before, task)
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append(self.0, entry).map(drop)
    }

    fn queue_event(&self, mesh_id: &str, event: PendingEvent, hint: &EmitHint, now: Timestamp) -> Res<()> {
        agentmesh_store::inbox_writes::queue(&crate::inbox::Inbox(self.0), mesh_id, event, hint, None, now)
            .map(drop)
    }

    fn insert_as_is(&self, task: &Task) -> Res<()> {
        write_edges(self.0, task)?;
        insert_row(self.0, task, 0)
    }
}
