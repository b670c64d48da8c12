//! The coordinator inbox.

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

impl agentmesh_store::InboxStore for PgStore {
    fn queue_pending_event(
        &self,
        mesh_id: &str,
        event: &agentmesh_core::events::PendingEvent,
        hint: &agentmesh_core::events::EmitHint,
        self_machine_id: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome> {
        Err(crate::compat::pending("queue_pending_event"))
    }

    fn drain_pending_events(
        &self,
        mesh_id: &str,
        request: &DrainRequest,
        now: Timestamp,
    ) -> StoreResult<DrainOutcome> {
        Err(crate::compat::pending("drain_pending_events"))
    }

    fn peek_pending_events(&self, mesh_id: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>> {
        Err(crate::compat::pending("peek_pending_events"))
    }

    fn ack_pending_events(&self, mesh_id: &str, ids: &[String], _now: Timestamp) -> StoreResult<u64> {
        Err(crate::compat::pending("ack_pending_events"))
    }

    fn retract_dispatch_blocked(&self, mesh_id: &str, task_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("retract_dispatch_blocked"))
    }

    fn pending_event_count(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("pending_event_count"))
    }

    fn touch_coordinator(
        &self,
        mesh_id: &str,
        identity: &agentmesh_core::events::CoordinatorIdentity,
        now: Timestamp,
    ) -> StoreResult<()> {
        Err(crate::compat::pending("touch_coordinator"))
    }

    fn end_coordinator(
        &self,
        mesh_id: &str,
        identity: &agentmesh_core::events::CoordinatorIdentity,
        now: Timestamp,
    ) -> StoreResult<bool> {
        Err(crate::compat::pending("end_coordinator"))
    }

    fn prune_pending_events(
        &self,
        drained_older_than: Timestamp,
        undrained_older_than: Timestamp,
        now: Timestamp,
    ) -> StoreResult<agentmesh_store::PruneReport> {
        Err(crate::compat::pending("prune_pending_events"))
    }

    fn requeue_held_event(&self, mesh_id: &str, held_entry_id: &str, now: Timestamp) -> StoreResult<bool> {
        Err(crate::compat::pending("requeue_held_event"))
    }

    fn pending_events_by_addressee(
        &self,
        mesh_id: &str,
    ) -> StoreResult<Vec<agentmesh_store::PendingAddressee>> {
        Err(crate::compat::pending("pending_events_by_addressee"))
    }
}

/// Stamps and queues an event in the caller's transaction (what the SQLite
/// backend's `inbox::queue` does).
pub(crate) fn queue(
    _db: &crate::db::Db<'_>,
    _mesh_id: &str,
    _event: agentmesh_core::events::PendingEvent,
    _hint: &agentmesh_core::events::EmitHint,
    _self_machine_id: Option<&str>,
    _now: Timestamp,
) -> crate::Res<QueueOutcome> {
    Err(crate::Fail(crate::compat::pending("queue_pending_event")))
}
