//! The work queue: tasks, claims and the task lifecycle.

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

impl agentmesh_store::QueueStore for PgStore {
    fn enqueue(&self, mesh_id: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task> {
        Err(crate::compat::pending("enqueue"))
    }

    fn enqueue_batch(&self, mesh_id: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>> {
        Err(crate::compat::pending("enqueue_batch"))
    }

    fn queue_entries(&self, mesh_id: &str, statuses: &[TaskStatus]) -> StoreResult<Vec<Task>> {
        Err(crate::compat::pending("queue_entries"))
    }

    fn find_task(&self, mesh_id: &str, task_id: &str) -> StoreResult<Option<Task>> {
        Err(crate::compat::pending("find_task"))
    }

    fn node_active_assignment_count(&self, mesh_id: &str, node_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("node_active_assignment_count"))
    }

    fn stats_by_status(&self, mesh_id: &str) -> StoreResult<Vec<StatusCount>> {
        Err(crate::compat::pending("stats_by_status"))
    }

    fn oldest_pending_created_at(&self, mesh_id: &str) -> StoreResult<Option<Timestamp>> {
        Err(crate::compat::pending("oldest_pending_created_at"))
    }

    fn active_assignments(&self, mesh_id: &str) -> StoreResult<Vec<ActiveAssignment>> {
        Err(crate::compat::pending("active_assignments"))
    }

    fn claim_next(
        &self,
        mesh_id: &str,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome> {
        Err(crate::compat::pending("claim_next"))
    }

    fn complete_task(&self, mesh_id: &str, report: &CompletionReport, now: Timestamp) -> StoreResult<Task> {
        Err(crate::compat::pending("complete_task"))
    }

    fn complete_and_claim(
        &self,
        mesh_id: &str,
        report: &CompletionReport,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)> {
        Err(crate::compat::pending("complete_and_claim"))
    }

    fn heartbeat(
        &self,
        mesh_id: &str,
        task_id: &str,
        session_id: &str,
        epoch: u64,
        lease_ms: i64,
        now: Timestamp,
    ) -> StoreResult<Task> {
        Err(crate::compat::pending("heartbeat"))
    }

    fn cancel_task(
        &self,
        mesh_id: &str,
        task_id: &str,
        reason: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<Task> {
        Err(crate::compat::pending("cancel_task"))
    }

    fn set_task_priority(
        &self,
        mesh_id: &str,
        task_id: &str,
        priority: TaskPriority,
        reason: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<Task> {
        Err(crate::compat::pending("set_task_priority"))
    }

    fn requeue_task(
        &self,
        mesh_id: &str,
        task_id: &str,
        opts: &RequeueOptions,
        now: Timestamp,
    ) -> StoreResult<Requeued> {
        Err(crate::compat::pending("requeue_task"))
    }

    fn expired_leases(&self, now: Timestamp) -> StoreResult<Vec<(String, String)>> {
        Err(crate::compat::pending("expired_leases"))
    }

    fn reclaim_if_lease_expired(
        &self,
        mesh_id: &str,
        task_id: &str,
        now: Timestamp,
    ) -> StoreResult<Option<Task>> {
        Err(crate::compat::pending("reclaim_if_lease_expired"))
    }
}
