//! The operations no transport reaches ([`agentmesh_store::CompatStore`]).

use agentmesh_core::{CompletionConflict, LedgerEntry, LedgerQuery, Task, Timestamp};
use agentmesh_store::StoreResult;

use crate::PgStore;

impl agentmesh_store::CompatStore for PgStore {
    fn queue_revision(&self, mesh_id: &str) -> StoreResult<String> {
        self.read(|db| crate::tasks::revision(db, mesh_id))
    }

    fn replace_queue(&self, mesh_id: &str, entries: &[Task]) -> StoreResult<()> {
        self.write_exclusive(mesh_id, |db| crate::tasks::replace_queue(db, mesh_id, entries))
    }

    fn delete_queue(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write_exclusive(mesh_id, |db| crate::tasks::delete_queue(db, mesh_id))
    }

    fn insert_queue_entry(&self, entry: &Task) -> StoreResult<()> {
        self.write_exclusive(&entry.mesh_id, |db| crate::tasks::insert_entry(db, entry))
    }

    fn update_queue_entry(&self, entry: &Task, now: Timestamp) -> StoreResult<Task> {
        self.write_exclusive(&entry.mesh_id, |db| crate::tasks::update_entry(db, entry, now))
    }

    fn has_active_assignment(&self, mesh_id: &str, session_id: &str, node_id: &str) -> StoreResult<bool> {
        self.read(|db| crate::tasks::has_active_assignment(db, mesh_id, session_id, node_id))
    }

    fn pending_count(&self, mesh_id: &str) -> StoreResult<u64> {
        self.read(|db| crate::tasks::pending_count(db, mesh_id))
    }

    fn find_assigned_by_session(
        &self,
        mesh_id: &str,
        session_id: &str,
        occurred_at: Option<&str>,
        task_id: Option<&str>,
    ) -> StoreResult<Option<Task>> {
        self.read(|db| crate::tasks::find_assigned_by_session(db, mesh_id, session_id, occurred_at, task_id))
    }

    fn reclaim_task(&self, mesh_id: &str, task_id: &str, reason: &str, now: Timestamp) -> StoreResult<Task> {
        self.write_with(mesh_id, &[], |db| crate::tasks::reclaim(db, mesh_id, task_id, reason, now))
    }

    fn append_ledger(&self, entry: &LedgerEntry) -> StoreResult<bool> {
        crate::ledger::check_kind(entry)?;
        self.write(&entry.mesh_id, |db| crate::ledger::append(db, entry))
    }

    fn read_ledger(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>> {
        self.read(|db| crate::ledger::read_newest_first(db, mesh_id, query))
    }

    fn delete_ledger_entries(&self, mesh_id: &str, ids: &[String]) -> StoreResult<u64> {
        self.write_unlocked(|db| crate::ledger::delete(db, mesh_id, ids))
    }

    fn clear_ledger(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write_unlocked(|db| crate::ledger::clear(db, mesh_id))
    }

    fn has_ledger_entry(&self, mesh_id: &str, id: &str) -> StoreResult<bool> {
        self.read(|db| crate::ledger::has(db, mesh_id, id))
    }

    fn ledger_count(&self, mesh_id: &str) -> StoreResult<u64> {
        self.read(|db| crate::ledger::count(db, mesh_id))
    }

    fn sole_active_direct_dispatch(&self, mesh_id: &str, session_id: &str) -> StoreResult<Option<String>> {
        self.read(|db| crate::runtime::sole_active_dispatch(db, mesh_id, session_id))
    }

    fn delete_direct_dispatches(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write(mesh_id, |db| crate::runtime::delete_dispatches(db, mesh_id))
    }

    fn task_has_confirmed_delivery(&self, mesh_id: &str, task_id: &str) -> StoreResult<bool> {
        self.read(|db| crate::runtime::task_has_confirmed_delivery(db, mesh_id, task_id))
    }

    fn delete_session_deliveries(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write(mesh_id, |db| crate::runtime::delete_deliveries(db, mesh_id))
    }

    fn record_completion_fingerprint(
        &self,
        mesh_id: &str,
        fingerprint: &str,
        ttl_ms: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        self.write_unlocked(|db| crate::runtime::record_fingerprint(db, mesh_id, fingerprint, ttl_ms, now))
    }

    fn has_completion_fingerprint(
        &self,
        mesh_id: &str,
        fingerprint: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        self.read(|db| crate::runtime::has_fingerprint(db, mesh_id, fingerprint, now))
    }

    fn record_completion_conflict(&self, conflict: &CompletionConflict) -> StoreResult<bool> {
        self.write_unlocked(|db| crate::runtime::record_conflict(db, conflict))
    }

    fn clear_missions(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write_unlocked(|db| crate::missions::clear(db, mesh_id))
    }

    fn scheduler_cursor(&self, mesh_id: &str) -> StoreResult<u64> {
        self.read(|db| crate::missions::cursor(db, mesh_id))
    }

    fn delete_pending_events(&self, mesh_id: &str, ids: &[String]) -> StoreResult<u64> {
        self.write_inbox(mesh_id, |db| crate::inbox::delete(db, mesh_id, ids))
    }

    fn clear_pending_events(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write_inbox(mesh_id, |db| crate::inbox::clear(db, mesh_id))
    }
}
