//! The lifecycle writes on a connection: each is the shared task write
//! ([`agentmesh_store::task_writes`]) over this store's [`Rows`].

use agentmesh_core::{RequeueOptions, Requeued, Task, TaskPriority, Timestamp};
use agentmesh_store::task_writes;
use agentmesh_store::{CompletionReport, StoreError};
use rusqlite::Connection;

use super::persist::Rows;
use crate::Res;

/// Records a completion or failure. The outer `Res` fails the transaction; the
/// inner `Err` is a refusal that was recorded and must still be committed.
pub(crate) fn complete(
    conn: &Connection,
    mesh_id: &str,
    report: &CompletionReport,
    now: Timestamp,
) -> Res<Result<Task, StoreError>> {
    task_writes::complete(&Rows(conn), mesh_id, report, now)
}

/// Extends a lease; refusals are recorded like completion refusals.
pub(crate) fn heartbeat(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    session_id: &str,
    epoch: u64,
    lease_ms: i64,
    now: Timestamp,
) -> Res<Result<Task, StoreError>> {
    task_writes::heartbeat(&Rows(conn), mesh_id, task_id, session_id, epoch, lease_ms, now)
}

pub(crate) fn cancel(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    reason: Option<&str>,
    now: Timestamp,
) -> Res<Task> {
    task_writes::cancel(&Rows(conn), mesh_id, task_id, reason, now)
}

pub(crate) fn set_priority(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    priority: TaskPriority,
    reason: Option<&str>,
    now: Timestamp,
) -> Res<Task> {
    task_writes::set_priority(&Rows(conn), mesh_id, task_id, priority, reason, now)
}

pub(crate) fn requeue(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    opts: &RequeueOptions,
    now: Timestamp,
) -> Res<Requeued> {
    task_writes::requeue(&Rows(conn), mesh_id, task_id, opts, now)
}

pub(crate) fn reclaim(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    reason: &str,
    now: Timestamp,
) -> Res<Task> {
    task_writes::reclaim(&Rows(conn), mesh_id, task_id, reason, now)
}

/// Reclaims the task when, in this transaction, it is assigned and its lease ran
/// out before `now`; `None` otherwise.
pub(crate) fn reclaim_if_lease_expired(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
    now: Timestamp,
) -> Res<Option<Task>> {
    task_writes::reclaim_if_lease_expired(&Rows(conn), mesh_id, task_id, now)
}
