//! Direct dispatches, session deliveries, idle sessions, completion fingerprints and conflicts, the tool-call log.

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

impl agentmesh_store::RuntimeStore for PgStore {
    fn record_direct_dispatch(
        &self,
        mesh_id: &str,
        dispatch: &NewDirectDispatch,
        now: Timestamp,
    ) -> StoreResult<DirectDispatch> {
        Err(crate::compat::pending("record_direct_dispatch"))
    }

    fn active_direct_dispatches(&self, mesh_id: &str) -> StoreResult<Vec<DirectDispatch>> {
        Err(crate::compat::pending("active_direct_dispatches"))
    }

    fn set_direct_dispatch_status(
        &self,
        mesh_id: &str,
        session_id: Option<&str>,
        task_id: Option<&str>,
        status: DispatchStatus,
        now: Timestamp,
    ) -> StoreResult<u64> {
        Err(crate::compat::pending("set_direct_dispatch_status"))
    }

    fn mark_stale_direct_dispatches(
        &self,
        mesh_id: &str,
        cutoff: Timestamp,
        now: Timestamp,
    ) -> StoreResult<u64> {
        Err(crate::compat::pending("mark_stale_direct_dispatches"))
    }

    fn cleanup_terminal_direct_dispatches(&self, cutoff: Timestamp) -> StoreResult<u64> {
        Err(crate::compat::pending("cleanup_terminal_direct_dispatches"))
    }

    fn direct_dispatch(&self, mesh_id: &str, task_id: &str) -> StoreResult<Option<DirectDispatch>> {
        Err(crate::compat::pending("direct_dispatch"))
    }

    fn delete_direct_dispatches_by_task(&self, mesh_id: &str, task_ids: &[String]) -> StoreResult<u64> {
        Err(crate::compat::pending("delete_direct_dispatches_by_task"))
    }

    fn insert_session_delivery(
        &self,
        mesh_id: &str,
        delivery: &NewSessionDelivery,
        now: Timestamp,
    ) -> StoreResult<SessionDelivery> {
        Err(crate::compat::pending("insert_session_delivery"))
    }

    fn set_session_delivery_status(
        &self,
        mesh_id: &str,
        id: &str,
        status: DeliveryStatus,
        update: &DeliveryUpdate,
        now: Timestamp,
    ) -> StoreResult<bool> {
        Err(crate::compat::pending("set_session_delivery_status"))
    }

    fn session_delivery(&self, mesh_id: &str, id: &str) -> StoreResult<Option<SessionDelivery>> {
        Err(crate::compat::pending("session_delivery"))
    }

    fn active_session_deliveries(
        &self,
        mesh_id: &str,
        session_id: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<Vec<SessionDelivery>> {
        Err(crate::compat::pending("active_session_deliveries"))
    }

    fn expire_stale_session_deliveries(&self, mesh_id: &str, now: Timestamp) -> StoreResult<u64> {
        Err(crate::compat::pending("expire_stale_session_deliveries"))
    }

    fn meshes_with_deliveries_or_dispatches(&self) -> StoreResult<Vec<String>> {
        Err(crate::compat::pending("meshes_with_deliveries_or_dispatches"))
    }

    fn set_idle_session(&self, session: &IdleSession) -> StoreResult<()> {
        Err(crate::compat::pending("set_idle_session"))
    }

    fn idle_sessions(&self, mesh_id: &str, now: Timestamp) -> StoreResult<Vec<IdleSession>> {
        Err(crate::compat::pending("idle_sessions"))
    }

    fn delete_idle_session(&self, mesh_id: &str, node_id: &str, session_id: &str) -> StoreResult<bool> {
        Err(crate::compat::pending("delete_idle_session"))
    }

    fn prune_idle_sessions(&self, now: Timestamp) -> StoreResult<u64> {
        Err(crate::compat::pending("prune_idle_sessions"))
    }

    fn completion_fingerprints(
        &self,
        mesh_id: &str,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<CompletionFingerprint>> {
        Err(crate::compat::pending("completion_fingerprints"))
    }

    fn sweep_completion_fingerprints(&self, now: Timestamp) -> StoreResult<u64> {
        Err(crate::compat::pending("sweep_completion_fingerprints"))
    }

    fn recent_completion_conflicts(
        &self,
        mesh_id: &str,
        window_ms: Option<i64>,
        now: Timestamp,
    ) -> StoreResult<Vec<CompletionConflict>> {
        Err(crate::compat::pending("recent_completion_conflicts"))
    }

    fn record_tool_call(
        &self,
        call: &ToolCall,
        guard: RateGuard,
        now: Timestamp,
    ) -> StoreResult<RateVerdict> {
        Err(crate::compat::pending("record_tool_call"))
    }

    fn recent_tool_calls(
        &self,
        mesh_id: &str,
        since: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<RecordedToolCall>> {
        Err(crate::compat::pending("recent_tool_calls"))
    }

    fn prune_tool_calls(&self, cutoff: Timestamp) -> StoreResult<u64> {
        Err(crate::compat::pending("prune_tool_calls"))
    }
}
