//! The event ledger.

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

impl agentmesh_store::LedgerStore for PgStore {
    fn read_ledger_ordered(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>> {
        Err(crate::compat::pending("read_ledger_ordered"))
    }

    fn import_ledger(&self, entries: &[LedgerEntry]) -> StoreResult<u64> {
        Err(crate::compat::pending("import_ledger"))
    }

    fn ledger_slice(&self, mesh_id: &str, query: &SliceQuery) -> StoreResult<LedgerSlice> {
        Err(crate::compat::pending("ledger_slice"))
    }
}

/// Inserts one entry unless its id exists in its mesh; returns whether it was
/// new. The caller's transaction holds the entry's mesh lock, so within a mesh
/// the numbers the sequence hands out rise in commit order.
pub(crate) fn append(db: &crate::db::Db<'_>, entry: &LedgerEntry) -> crate::Res<bool> {
    let payload = serde_json::to_string(&entry.payload)?;
    let n = db.execute(
        "INSERT INTO mesh_event_ledger (mesh_id, id, timestamp, kind, node_id, session_id, provider_type, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (mesh_id, id) DO NOTHING",
        &[
            &entry.mesh_id,
            &entry.id,
            &entry.timestamp,
            &entry.kind,
            &entry.node_id,
            &entry.session_id,
            &entry.provider_type,
            &payload,
        ],
    )?;
    Ok(n > 0)
}
