//! The operations no transport reaches ([`agentmesh_store::CompatStore`]).

#![allow(unused_imports, unused_variables)]
use agentmesh_core::TaskPriority;
use agentmesh_core::{
    Claimant, CompletionConflict, CompletionFingerprint, DeliveryStatus, DirectDispatch, DispatchStatus,
    IdleSession, LedgerEntry, LedgerQuery, LedgerSlice, Mission, MissionProgress, NewDirectDispatch,
    NewMission, NewSessionDelivery, NewTask, RateGuard, RateVerdict, RequeueOptions, Requeued,
    SessionDelivery, SliceQuery, Task, TaskStatus, Timestamp,
};
use agentmesh_store::{
    ActiveAssignment, ClaimOptions, ClaimOutcome, CompletionReport, DeliveryUpdate, Heartbeat,
    RecordedToolCall, StatusCount, StoreError, StoreResult, Submitted, ToolCall,
};
use agentmesh_store::{DrainOutcome, DrainRequest, InboxEvent, QueueOutcome, UpsertedMission};
use std::sync::Arc;

use crate::PgStore;

impl agentmesh_store::CompatStore for PgStore {
    fn queue_revision(&self, mesh_id: &str) -> StoreResult<String> {
        Err(crate::compat::pending("queue_revision"))
    }

    fn replace_queue(&self, mesh_id: &str, entries: &[Task]) -> StoreResult<()> {
        Err(crate::compat::pending("replace_queue"))
    }

    fn delete_queue(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("delete_queue"))
    }

    fn insert_queue_entry(&self, entry: &Task) -> StoreResult<()> {
        Err(crate::compat::pending("insert_queue_entry"))
    }

    fn update_queue_entry(&self, entry: &Task, now: Timestamp) -> StoreResult<Task> {
        Err(crate::compat::pending("update_queue_entry"))
    }

    fn has_active_assignment(&self, mesh_id: &str, session_id: &str, node_id: &str) -> StoreResult<bool> {
        Err(crate::compat::pending("has_active_assignment"))
    }

    fn pending_count(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("pending_count"))
    }

    fn find_assigned_by_session(
        &self,
        mesh_id: &str,
        session_id: &str,
        occurred_at: Option<&str>,
        task_id: Option<&str>,
    ) -> StoreResult<Option<Task>> {
        Err(crate::compat::pending("find_assigned_by_session"))
    }

    fn reclaim_task(&self, mesh_id: &str, task_id: &str, reason: &str, now: Timestamp) -> StoreResult<Task> {
        Err(crate::compat::pending("reclaim_task"))
    }

    fn append_ledger(&self, entry: &LedgerEntry) -> StoreResult<bool> {
        Err(crate::compat::pending("append_ledger"))
    }

    fn read_ledger(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>> {
        Err(crate::compat::pending("read_ledger"))
    }

    fn delete_ledger_entries(&self, mesh_id: &str, ids: &[String]) -> StoreResult<u64> {
        Err(crate::compat::pending("delete_ledger_entries"))
    }

    fn clear_ledger(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("clear_ledger"))
    }

    fn has_ledger_entry(&self, mesh_id: &str, id: &str) -> StoreResult<bool> {
        Err(crate::compat::pending("has_ledger_entry"))
    }

    fn ledger_count(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("ledger_count"))
    }

    fn sole_active_direct_dispatch(&self, mesh_id: &str, session_id: &str) -> StoreResult<Option<String>> {
        Err(crate::compat::pending("sole_active_direct_dispatch"))
    }

    fn delete_direct_dispatches(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("delete_direct_dispatches"))
    }

    fn task_has_confirmed_delivery(&self, mesh_id: &str, task_id: &str) -> StoreResult<bool> {
        Err(crate::compat::pending("task_has_confirmed_delivery"))
    }

    fn delete_session_deliveries(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("delete_session_deliveries"))
    }

    fn record_completion_fingerprint(
        &self,
        mesh_id: &str,
        fingerprint: &str,
        ttl_ms: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        Err(crate::compat::pending("record_completion_fingerprint"))
    }

    fn has_completion_fingerprint(
        &self,
        mesh_id: &str,
        fingerprint: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        Err(crate::compat::pending("has_completion_fingerprint"))
    }

    fn record_completion_conflict(&self, conflict: &CompletionConflict) -> StoreResult<bool> {
        Err(crate::compat::pending("record_completion_conflict"))
    }

    fn clear_missions(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("clear_missions"))
    }

    fn scheduler_cursor(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("scheduler_cursor"))
    }

    fn delete_pending_events(&self, mesh_id: &str, ids: &[String]) -> StoreResult<u64> {
        self.write(mesh_id, |db| crate::inbox::delete(db, mesh_id, ids))
    }

    fn clear_pending_events(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write(mesh_id, |db| crate::inbox::clear(db, mesh_id))
    }
}

/// The error of an operation this backend does not have yet.
pub(crate) fn pending(operation: &str) -> StoreError {
    StoreError::Backend(format!("{operation} is not available on PostgreSQL yet").into())
}
