//! This store's rows for the task writes both stores share
//! ([`agentmesh_store::task_writes`]): load, save and the ledger and event
//! writes, the last three deferred to go out with the next statement.

use agentmesh_core::events::{EmitHint, PendingEvent};
use agentmesh_core::{LedgerEntry, Task, Timestamp};
use agentmesh_store::task_writes::TaskRows;

use super::reads::assigned_to_session;
use super::rows::{Loaded, load, save};
use crate::db::Db;
use crate::{Fail, Res, ledger};

impl<'c> TaskRows for Db<'c> {
    type Loaded = Loaded;
    type Error = Fail;
    type Paths<'r>
        = crate::reservations::Rows<'r, 'c>
    where
        Self: 'r;

    fn paths(&self) -> crate::reservations::Rows<'_, 'c> {
        crate::reservations::Rows(self)
    }

    fn task(loaded: &Loaded) -> &Task {
        &loaded.task
    }

    fn load(&self, mesh_id: &str, task_id: &str) -> Res<Option<Loaded>> {
        load(self, mesh_id, task_id)
    }

    fn assigned_to_session(&self, mesh_id: &str, session_id: &str) -> Res<Vec<Task>> {
        assigned_to_session(self, mesh_id, session_id)
    }

    /// The ids the load read with the task, else read now.
    fn dependents(&self, loaded: &Loaded) -> Res<Vec<String>> {
        loaded.dependents(self)
    }

    fn save(&self, before: &Loaded, task: &Task) -> Res<()> {
        save(self, before, task)
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append_later(self, entry)
    }

    fn queue_event(&self, mesh_id: &str, event: PendingEvent, hint: &EmitHint, now: Timestamp) -> Res<()> {
        crate::inbox::queue_later(self, mesh_id, event, hint, None, now)
    }
}
