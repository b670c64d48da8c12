//! This store's rows for the task writes both stores share
//! ([`agentmesh_store::task_writes`]): load, save and the ledger and event
//! writes, the last three deferred to go out with the next statement. A load
//! of a task this store remembers takes it from memory (see `remembered`).

use std::cell::RefCell;

use agentmesh_core::events::{EmitHint, PendingEvent};
use agentmesh_core::{LedgerEntry, Task, Timestamp};
use agentmesh_store::task_writes::TaskRows;

use super::reads::assigned_to_session;
use super::remembered::{self, Held};
use super::rows::{
    Loaded, id_taken, insert_row, load, refresh_dependents, refresh_readiness, save, write_edges,
};
use crate::db::Db;
use crate::{Fail, Res, ledger};

/// The task rows of one transaction, with the remembered row of one task, if
/// any, which a load of that task takes instead of reading it.
pub(crate) struct Rows<'a, 'c> {
    pub(super) db: &'a Db<'c>,
    held: RefCell<Option<Held>>,
}

impl<'a, 'c> Rows<'a, 'c> {
    /// The rows of `db`'s transaction.
    pub(crate) fn of(db: &'a Db<'c>) -> Rows<'a, 'c> {
        Rows::remembering(db, None)
    }

    /// The same, remembering `held`.
    pub(crate) fn remembering(db: &'a Db<'c>, held: Option<Held>) -> Rows<'a, 'c> {
        Rows { db, held: RefCell::new(held) }
    }
}

impl<'c> TaskRows for Rows<'_, 'c> {
    type Loaded = Loaded;
    type Error = Fail;
    type Paths<'r>
        = crate::reservations::Rows<'r, 'c>
    where
        Self: 'r;

    fn paths(&self) -> crate::reservations::Rows<'_, 'c> {
        crate::reservations::Rows(self.db)
    }

    fn task(loaded: &Loaded) -> &Task {
        &loaded.task
    }

    fn load(&self, mesh_id: &str, task_id: &str) -> Res<Option<Loaded>> {
        let held = self.held.borrow_mut().take_if(|h| h.task.id == task_id && h.task.mesh_id == mesh_id);
        match held {
            Some(held) => Ok(Some(remembered::load(self.db, held))),
            None => load(self.db, mesh_id, task_id),
        }
    }

    fn holds(&self, task: &Task) -> Res<bool> {
        id_taken(self.db, &task.mesh_id, &task.id)
    }

    fn assigned_to_session(&self, mesh_id: &str, session_id: &str) -> Res<Vec<Task>> {
        assigned_to_session(self.db, mesh_id, session_id)
    }

    /// The ids the load read with the task, else read now.
    fn dependents(&self, loaded: &Loaded) -> Res<Vec<String>> {
        loaded.dependents(self.db)
    }

    fn recount(&self, task: &Task) -> Res<()> {
        refresh_readiness(self.db, &task.mesh_id, &task.id)?;
        refresh_dependents(self.db, &task.mesh_id, &task.id)
    }

    fn save(&self, before: &Loaded, task: &Task) -> Res<()> {
        save(self.db, before, task)
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append_later(self.db, entry)
    }

    fn queue_event(&self, mesh_id: &str, event: PendingEvent, hint: &EmitHint, now: Timestamp) -> Res<()> {
        crate::inbox::queue_later(self.db, mesh_id, event, hint, None, now)
    }

    fn insert_as_is(&self, task: &Task) -> Res<()> {
        write_edges(self.db, task)?;
        insert_row(self.db, task, 0)
    }
}
