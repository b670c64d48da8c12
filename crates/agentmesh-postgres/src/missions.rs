//! Missions and the scheduler cursor.

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

impl agentmesh_store::MissionStore for PgStore {
    fn upsert_mission(
        &self,
        mesh_id: &str,
        mission: &NewMission,
        now: Timestamp,
    ) -> StoreResult<UpsertedMission> {
        Err(crate::compat::pending("upsert_mission"))
    }

    fn mission(&self, mesh_id: &str, id: &str) -> StoreResult<Option<Mission>> {
        Err(crate::compat::pending("mission"))
    }

    fn missions(&self, mesh_id: &str, statuses: &[String]) -> StoreResult<Vec<Mission>> {
        Err(crate::compat::pending("missions"))
    }

    fn mission_progress(&self, mesh_id: &str, id: &str) -> StoreResult<MissionProgress> {
        Err(crate::compat::pending("mission_progress"))
    }

    fn bump_scheduler_cursor(&self, mesh_id: &str) -> StoreResult<u64> {
        Err(crate::compat::pending("bump_scheduler_cursor"))
    }
}
