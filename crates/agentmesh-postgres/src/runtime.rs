//! The runtime tables around the queue: direct dispatches, the session delivery
//! queue, in-flight holds, idle sessions, completion fingerprints and conflicts, and the tool-call
//! log of the rate guard.
//!
//! Ids of these tables are keys within a mesh: a row of another mesh with the
//! same id is a different row, never replaced.

use std::sync::atomic::Ordering;

use agentmesh_core::{
    CompletionConflict, CompletionFingerprint, DeliveryStatus, DirectDispatch, DispatchStatus, IdleSession,
    InflightHold, NewDirectDispatch, NewInflightHold, NewSessionDelivery, RateGuard, RateVerdict,
    SessionDelivery, Timestamp,
};
use agentmesh_store::cells;
use agentmesh_store::{
    DeliveryQuery, DeliveryUpdate, DispatchChange, HoldWrite, IdleWrite, RecordedToolCall, RuntimePrune,
    StoreError, StoreResult, ToolCall,
};
use postgres::Row;

use crate::db::{Db, record, unsigned};
use crate::{Fail, PgStore, Res};

fn not_found(kind: &'static str, mesh_id: &str, id: &str) -> Fail {
    Fail(StoreError::NotFound { kind, mesh_id: mesh_id.to_owned(), id: id.to_owned() })
}

// ── Direct dispatches ───────────────────────────────────────────────────────

fn dispatch_from_row(row: &Row) -> Res<DirectDispatch> {
    record(row, cells::dispatch)
}

/// Records a dispatch; one for the same task id in the mesh is replaced, and the
/// replacement lists as the newest row among equal dispatch times.
pub(crate) fn record_dispatch(
    db: &Db<'_>,
    mesh_id: &str,
    d: &NewDirectDispatch,
    now: Timestamp,
) -> Res<DirectDispatch> {
    d.validate()?;
    let row = d.record(mesh_id, now);
    db.execute(
        "INSERT INTO mesh_direct_dispatches (task_id, mesh_id, node_id, session_id, provider_type, message,
                                             task_mode, via, status, dispatched_to_idle_session,
                                             dispatched_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (mesh_id, task_id) DO UPDATE SET
             row_id = DEFAULT, node_id = EXCLUDED.node_id, session_id = EXCLUDED.session_id,
             provider_type = EXCLUDED.provider_type, message = EXCLUDED.message,
             task_mode = EXCLUDED.task_mode, via = EXCLUDED.via, status = EXCLUDED.status,
             dispatched_to_idle_session = EXCLUDED.dispatched_to_idle_session,
             dispatched_at = EXCLUDED.dispatched_at, updated_at = EXCLUDED.updated_at",
        &[
            &row.task_id,
            &row.mesh_id,
            &row.node_id,
            &row.session_id,
            &row.provider_type,
            &row.message,
            &row.task_mode,
            &row.via,
            &row.status.as_str(),
            &i64::from(row.dispatched_to_idle_session),
            &row.dispatched_at,
            &row.updated_at,
        ],
    )?;
    Ok(row)
}

pub(crate) fn dispatch(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<Option<DirectDispatch>> {
    db.query_opt(
        "SELECT task_id, mesh_id, node_id, session_id, provider_type, message, task_mode, via,
                status, dispatched_to_idle_session, dispatched_at, updated_at
           FROM mesh_direct_dispatches WHERE mesh_id = $1 AND task_id = $2",
        &[&mesh_id, &task_id.trim()],
    )?
    .as_ref()
    .map(dispatch_from_row)
    .transpose()
}

pub(crate) fn active_dispatches(db: &Db<'_>, mesh_id: &str) -> Res<Vec<DirectDispatch>> {
    db.query(
        "SELECT task_id, mesh_id, node_id, session_id, provider_type, message, task_mode, via,
                status, dispatched_to_idle_session, dispatched_at, updated_at
           FROM mesh_direct_dispatches
          WHERE mesh_id = $1 AND status NOT IN ('completed', 'failed', 'stale')
          ORDER BY dispatched_at ASC, row_id ASC",
        &[&mesh_id],
    )?
    .iter()
    .map(dispatch_from_row)
    .collect()
}

/// Moves the dispatch of `task_id`, or without one every dispatch of `session_id`
/// (never rows without a session); completed and failed rows never move.
pub(crate) fn set_dispatch_status(
    db: &Db<'_>,
    mesh_id: &str,
    session_id: Option<&str>,
    task_id: Option<&str>,
    status: DispatchStatus,
    now: Timestamp,
) -> Res<u64> {
    let task_id = task_id.map(str::trim).filter(|s| !s.is_empty());
    let session_id = session_id.map(str::trim).filter(|s| !s.is_empty());
    let now = now.iso();
    match (task_id, session_id) {
        (Some(task_id), _) => db.execute(
            "UPDATE mesh_direct_dispatches SET status = $1, updated_at = $2
              WHERE mesh_id = $3 AND task_id = $4 AND status NOT IN ('completed', 'failed')",
            &[&status.as_str(), &now, &mesh_id, &task_id],
        ),
        (None, Some(session_id)) => db.execute(
            "UPDATE mesh_direct_dispatches SET status = $1, updated_at = $2
              WHERE mesh_id = $3 AND session_id = $4 AND status NOT IN ('completed', 'failed')",
            &[&status.as_str(), &now, &mesh_id, &session_id],
        ),
        (None, None) => Ok(0),
    }
}

pub(crate) fn mark_stale_dispatches(
    db: &Db<'_>,
    mesh_id: &str,
    cutoff: Timestamp,
    now: Timestamp,
) -> Res<u64> {
    db.execute(
        "UPDATE mesh_direct_dispatches SET status = 'stale', updated_at = $1
          WHERE mesh_id = $2 AND status = 'dispatched' AND dispatched_at < $3",
        &[&now.iso(), &mesh_id, &cutoff.iso()],
    )
}

/// Deletes ended dispatches of every mesh last changed before `cutoff`.
pub(crate) fn cleanup_terminal_dispatches(db: &Db<'_>, cutoff: Timestamp) -> Res<u64> {
    db.execute(
        "DELETE FROM mesh_direct_dispatches /* all meshes */
          WHERE status IN ('completed', 'failed', 'stale') AND updated_at < $1",
        &[&cutoff.iso()],
    )
}

pub(crate) fn delete_dispatches_by_task(db: &Db<'_>, mesh_id: &str, task_ids: &[String]) -> Res<u64> {
    let ids: Vec<&str> = task_ids.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
    if ids.is_empty() {
        return Ok(0);
    }
    db.execute(
        "DELETE FROM mesh_direct_dispatches WHERE mesh_id = $1 AND task_id = ANY($2)",
        &[&mesh_id, &ids],
    )
}

// ── Session deliveries ──────────────────────────────────────────────────────

fn delivery_from_row(row: &Row) -> Res<SessionDelivery> {
    record(row, cells::delivery)
}

pub(crate) fn load_delivery(db: &Db<'_>, mesh_id: &str, id: &str) -> Res<Option<SessionDelivery>> {
    db.query_opt(
        "SELECT id, mesh_id, node_id, session_id, provider_type, task_id, kind, priority, message,
                status, deliver_after, expires_at, attempt_count, source_coordinator_session_id,
                source_coordinator_daemon_id, last_error, created_at, updated_at
           FROM mesh_session_delivery WHERE mesh_id = $1 AND id = $2",
        &[&mesh_id, &id],
    )?
    .as_ref()
    .map(delivery_from_row)
    .transpose()
}

/// The deliveries of a task that reached its session, oldest first.
pub(crate) fn confirmed_deliveries(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<Vec<SessionDelivery>> {
    db.query(
        "SELECT id, mesh_id, node_id, session_id, provider_type, task_id, kind, priority, message,
                status, deliver_after, expires_at, attempt_count, source_coordinator_session_id,
                source_coordinator_daemon_id, last_error, created_at, updated_at
           FROM mesh_session_delivery
          WHERE mesh_id = $1 AND task_id = $2 AND status IN ('delivered', 'acked', 'completed')
          ORDER BY created_at, row_id",
        &[&mesh_id, &task_id.trim()],
    )?
    .iter()
    .map(delivery_from_row)
    .collect()
}

/// Stores a delivery; one with the same id in the mesh is replaced, and the
/// replacement lists after its equals in priority and creation time.
pub(crate) fn insert_delivery(
    db: &Db<'_>,
    mesh_id: &str,
    d: &NewSessionDelivery,
    now: Timestamp,
) -> Res<SessionDelivery> {
    d.validate()?;
    let row = d.record(mesh_id, now);
    db.execute(
        "INSERT INTO mesh_session_delivery (id, mesh_id, node_id, session_id, provider_type, task_id, kind,
                                            priority, message, status, deliver_after, expires_at,
                                            attempt_count, source_coordinator_session_id,
                                            source_coordinator_daemon_id, last_error, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
         ON CONFLICT (mesh_id, id) DO UPDATE SET
             row_id = DEFAULT, node_id = EXCLUDED.node_id, session_id = EXCLUDED.session_id,
             provider_type = EXCLUDED.provider_type, task_id = EXCLUDED.task_id, kind = EXCLUDED.kind,
             priority = EXCLUDED.priority, message = EXCLUDED.message, status = EXCLUDED.status,
             deliver_after = EXCLUDED.deliver_after, expires_at = EXCLUDED.expires_at,
             attempt_count = EXCLUDED.attempt_count,
             source_coordinator_session_id = EXCLUDED.source_coordinator_session_id,
             source_coordinator_daemon_id = EXCLUDED.source_coordinator_daemon_id,
             last_error = EXCLUDED.last_error, created_at = EXCLUDED.created_at,
             updated_at = EXCLUDED.updated_at",
        &[
            &row.id,
            &row.mesh_id,
            &row.node_id,
            &row.session_id,
            &row.provider_type,
            &row.task_id,
            &row.kind,
            &row.priority,
            &row.message,
            &row.status.as_str(),
            &row.deliver_after,
            &row.expires_at,
            &i64::from(row.attempt_count),
            &row.source_coordinator_session_id,
            &row.source_coordinator_daemon_id,
            &row.last_error,
            &row.created_at,
            &row.updated_at,
        ],
    )?;
    Ok(row)
}

/// Moves a delivery to `status` when [`DeliveryStatus::may_update`] allows it;
/// returns whether it moved. The caller holds the mesh lock, so the status read
/// is the one the update replaces.
pub(crate) fn set_delivery_status(
    db: &Db<'_>,
    mesh_id: &str,
    id: &str,
    status: DeliveryStatus,
    update: &DeliveryUpdate,
    now: Timestamp,
) -> Res<bool> {
    let current = load_delivery(db, mesh_id, id)?.ok_or_else(|| not_found("delivery", mesh_id, id))?;
    if !current.status.may_update(status, update.increment_attempt) {
        return Ok(false);
    }
    db.execute(
        "UPDATE mesh_session_delivery
            SET status = $1, last_error = $2, attempt_count = attempt_count + $3, updated_at = $4
          WHERE mesh_id = $5 AND id = $6",
        &[
            &status.as_str(),
            &update.last_error,
            &i64::from(update.increment_attempt),
            &now.iso(),
            &mesh_id,
            &id,
        ],
    )?;
    Ok(true)
}

/// Waiting, unexpired deliveries, highest priority first, then oldest first.
pub(crate) fn active_deliveries(
    db: &Db<'_>,
    mesh_id: &str,
    session_id: Option<&str>,
    now: Timestamp,
) -> Res<Vec<SessionDelivery>> {
    let now = now.iso();
    let rows = match session_id {
        None => db.query(
            "SELECT id, mesh_id, node_id, session_id, provider_type, task_id, kind, priority, message,
                    status, deliver_after, expires_at, attempt_count, source_coordinator_session_id,
                    source_coordinator_daemon_id, last_error, created_at, updated_at
               FROM mesh_session_delivery
              WHERE mesh_id = $1 AND status IN ('delivering', 'queued', 'acked')
                AND (expires_at IS NULL OR expires_at > $2)
              ORDER BY priority DESC, created_at ASC, row_id ASC",
            &[&mesh_id, &now],
        )?,
        Some(session) => db.query(
            "SELECT id, mesh_id, node_id, session_id, provider_type, task_id, kind, priority, message,
                    status, deliver_after, expires_at, attempt_count, source_coordinator_session_id,
                    source_coordinator_daemon_id, last_error, created_at, updated_at
               FROM mesh_session_delivery
              WHERE mesh_id = $1 AND status IN ('delivering', 'queued', 'acked')
                AND (expires_at IS NULL OR expires_at > $2) AND session_id = $3
              ORDER BY priority DESC, created_at ASC, row_id ASC",
            &[&mesh_id, &now, &session],
        )?,
    };
    rows.iter().map(delivery_from_row).collect()
}

/// Expires the waiting deliveries of the mesh whose expiry has come.
pub(crate) fn expire_deliveries(db: &Db<'_>, mesh_id: &str, now: Timestamp) -> Res<u64> {
    db.execute(
        "UPDATE mesh_session_delivery SET status = 'expired', updated_at = $1
          WHERE mesh_id = $2 AND expires_at IS NOT NULL AND expires_at <= $1
            AND status IN ('delivering', 'queued', 'acked')",
        &[&now.iso(), &mesh_id],
    )
}

/// Every mesh with a delivery or a dispatch, once each, in id order.
pub(crate) fn meshes_with_deliveries_or_dispatches(db: &Db<'_>) -> Res<Vec<String>> {
    db.query(
        "SELECT mesh_id FROM mesh_session_delivery /* all meshes */
         UNION SELECT mesh_id FROM mesh_direct_dispatches
          ORDER BY mesh_id",
        &[],
    )?
    .iter()
    .map(|r| Ok(r.try_get(0)?))
    .collect()
}

// ── In-flight holds ─────────────────────────────────────────────────────────

fn hold_from_row(row: &Row) -> Res<InflightHold> {
    record(row, cells::hold)
}

/// Holds a task in one statement: a new hold as the rule records it
/// ([`NewInflightHold::record`]), or an existing one updated in place keeping its
/// `held_at`, which is what the rule keeps too.
pub(crate) fn upsert_inflight_hold(
    db: &Db<'_>,
    mesh_id: &str,
    hold: &NewInflightHold,
    now: Timestamp,
) -> Res<InflightHold> {
    hold.validate()?;
    let row = hold.record(mesh_id, None, now);
    let stored = db.query_one(
        "INSERT INTO mesh_inflight_hold (mesh_id, task_id, hold_reason, held_at, first_idle_since_ack,
                                         read_failure_count, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (mesh_id, task_id) DO UPDATE SET
             hold_reason = EXCLUDED.hold_reason, first_idle_since_ack = EXCLUDED.first_idle_since_ack,
             read_failure_count = EXCLUDED.read_failure_count, updated_at = EXCLUDED.updated_at
         RETURNING task_id, mesh_id, hold_reason, held_at, first_idle_since_ack, read_failure_count,
                   updated_at",
        &[
            &row.mesh_id,
            &row.task_id,
            &row.hold_reason,
            &row.held_at,
            &row.first_idle_since_ack,
            &i64::from(row.read_failure_count),
            &row.updated_at,
        ],
    )?;
    hold_from_row(&stored)
}

pub(crate) fn inflight_hold(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<Option<InflightHold>> {
    db.query_opt(
        "SELECT task_id, mesh_id, hold_reason, held_at, first_idle_since_ack, read_failure_count, updated_at
           FROM mesh_inflight_hold WHERE mesh_id = $1 AND task_id = $2",
        &[&mesh_id, &task_id.trim()],
    )?
    .as_ref()
    .map(hold_from_row)
    .transpose()
}

pub(crate) fn inflight_holds(db: &Db<'_>, mesh_id: &str) -> Res<Vec<InflightHold>> {
    db.query(
        "SELECT task_id, mesh_id, hold_reason, held_at, first_idle_since_ack, read_failure_count, updated_at
           FROM mesh_inflight_hold WHERE mesh_id = $1 ORDER BY held_at, task_id",
        &[&mesh_id],
    )?
    .iter()
    .map(hold_from_row)
    .collect()
}

pub(crate) fn delete_inflight_hold(db: &Db<'_>, mesh_id: &str, task_id: &str) -> Res<bool> {
    Ok(db.execute(
        "DELETE FROM mesh_inflight_hold WHERE mesh_id = $1 AND task_id = $2",
        &[&mesh_id, &task_id.trim()],
    )? > 0)
}

// ── Idle sessions ───────────────────────────────────────────────────────────

pub(crate) fn set_idle(db: &Db<'_>, s: &IdleSession) -> Res<()> {
    s.validate()?;
    let metadata = s.metadata.as_ref().map(serde_json::to_string).transpose()?;
    db.execute(
        "INSERT INTO remote_idle_sessions (mesh_id, node_id, session_id, provider_type, expires_at, metadata)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (mesh_id, node_id, session_id) DO UPDATE SET
             provider_type = EXCLUDED.provider_type, expires_at = EXCLUDED.expires_at,
             metadata = EXCLUDED.metadata",
        &[
            &s.mesh_id.trim(),
            &s.node_id.trim(),
            &s.session_id.trim(),
            &s.provider_type.trim(),
            &s.expires_at_ms,
            &metadata,
        ],
    )?;
    Ok(())
}

pub(crate) fn idle_sessions(db: &Db<'_>, mesh_id: &str, now: Timestamp) -> Res<Vec<IdleSession>> {
    db.query(
        "SELECT mesh_id, node_id, session_id, provider_type, expires_at, metadata FROM remote_idle_sessions
          WHERE mesh_id = $1 AND expires_at > $2 ORDER BY node_id, session_id",
        &[&mesh_id, &now.millis()],
    )?
    .iter()
    .map(|r| record(r, cells::idle_session))
    .collect()
}

pub(crate) fn delete_idle(db: &Db<'_>, mesh_id: &str, node_id: &str, session_id: &str) -> Res<bool> {
    Ok(db.execute(
        "DELETE FROM remote_idle_sessions WHERE mesh_id = $1 AND node_id = $2 AND session_id = $3",
        &[&mesh_id, &node_id, &session_id],
    )? > 0)
}

/// Deletes the expired idle sessions of every mesh.
pub(crate) fn prune_idle(db: &Db<'_>, now: Timestamp) -> Res<u64> {
    db.execute("DELETE FROM remote_idle_sessions /* all meshes */ WHERE expires_at <= $1", &[&now.millis()])
}

// ── Completion fingerprints and conflicts ───────────────────────────────────

pub(crate) fn fingerprints(
    db: &Db<'_>,
    mesh_id: &str,
    now: Timestamp,
    limit: u32,
) -> Res<Vec<CompletionFingerprint>> {
    db.query(
        "SELECT fingerprint, expires_at FROM mesh_completion_fingerprints
          WHERE mesh_id = $1 AND expires_at > $2 ORDER BY expires_at DESC, fingerprint ASC LIMIT $3",
        &[&mesh_id, &now.millis(), &i64::from(limit)],
    )?
    .iter()
    .map(|r| Ok(CompletionFingerprint { fingerprint: r.try_get(0)?, expires_at_ms: r.try_get(1)? }))
    .collect()
}

/// Deletes the expired fingerprints of every mesh.
pub(crate) fn sweep_fingerprints(db: &Db<'_>, now: Timestamp) -> Res<u64> {
    db.execute(
        "DELETE FROM mesh_completion_fingerprints /* all meshes */ WHERE expires_at <= $1",
        &[&now.millis()],
    )
}

/// The mesh's conflicts of the last `window_ms`, newest first, at most
/// [`agentmesh_core::sessions::CONFLICT_LIMIT`].
pub(crate) fn recent_conflicts(
    db: &Db<'_>,
    mesh_id: &str,
    window_ms: i64,
    now: Timestamp,
) -> Res<Vec<CompletionConflict>> {
    let cutoff = now.plus_millis(-window_ms).iso();
    db.query(
        "SELECT id, mesh_id, fingerprint, conflicting_task_id, conflicting_session_id, original_task_id,
                original_session_id, event, created_at
           FROM mesh_completion_conflicts WHERE mesh_id = $1 AND created_at >= $2
          ORDER BY created_at DESC, row_id DESC LIMIT $3",
        &[&mesh_id, &cutoff, &i64::from(agentmesh_core::sessions::CONFLICT_LIMIT)],
    )?
    .iter()
    .map(|r| record(r, cells::conflict))
    .collect()
}

// ── Tool-call rate guard ────────────────────────────────────────────────────

/// Records a call and counts the tool's calls in the guard's window, this one
/// included. The caller holds the mesh lock, so each call counts those recorded
/// before it in the mesh.
pub(crate) fn record_tool_call(
    db: &Db<'_>,
    call: &ToolCall,
    role: Option<&str>,
    guard: RateGuard,
    now: Timestamp,
) -> Res<RateVerdict> {
    db.execute(
        "INSERT INTO mesh_tool_call_log (mesh_id, tool, session_id, called_at, caller_role)
         VALUES ($1, $2, $3, $4, $5)",
        &[&call.mesh_id, &call.tool, &call.session_id, &now.millis(), &role],
    )?;
    let calls: i64 = db
        .query_one(
            "SELECT COUNT(*) FROM mesh_tool_call_log WHERE mesh_id = $1 AND tool = $2 AND called_at >= $3",
            &[&call.mesh_id, &call.tool, &(now.millis() - guard.window_ms)],
        )?
        .try_get(0)?;
    Ok(guard.verdict(&call.mesh_id, &call.tool, unsigned(calls)))
}

pub(crate) fn recent_tool_calls(
    db: &Db<'_>,
    mesh_id: &str,
    since: Timestamp,
    limit: u32,
) -> Res<Vec<RecordedToolCall>> {
    db.query(
        "SELECT tool, session_id, caller_role, called_at FROM mesh_tool_call_log
          WHERE mesh_id = $1 AND called_at >= $2 ORDER BY called_at DESC, id DESC LIMIT $3",
        &[&mesh_id, &since.millis(), &i64::from(limit)],
    )?
    .iter()
    .map(|r| {
        Ok(RecordedToolCall {
            tool: r.try_get(0)?,
            session_id: r.try_get(1)?,
            caller_role: r.try_get(2)?,
            called_at_ms: r.try_get(3)?,
        })
    })
    .collect()
}

/// Deletes the tool calls of every mesh made before `cutoff`.
pub(crate) fn prune_tool_calls(db: &Db<'_>, cutoff: Timestamp) -> Res<u64> {
    db.execute("DELETE FROM mesh_tool_call_log /* all meshes */ WHERE called_at < $1", &[&cutoff.millis()])
}

// ── The trait ───────────────────────────────────────────────────────────────

impl PgStore {
    /// Whether this tool call is due for the rate guard's sweep of old rows.
    fn tool_call_sweep_due(&self) -> bool {
        (self.tool_calls.fetch_add(1, Ordering::Relaxed) + 1)
            .is_multiple_of(agentmesh_core::rate_guard::SWEEP_EVERY_CALLS)
    }
}

impl agentmesh_store::RuntimeStore for PgStore {
    fn record_direct_dispatch(
        &self,
        mesh_id: &str,
        dispatch: &NewDirectDispatch,
        now: Timestamp,
    ) -> StoreResult<DirectDispatch> {
        self.write(mesh_id, |db| record_dispatch(db, mesh_id, dispatch, now))
    }

    fn direct_dispatches(&self, mesh_id: &str, task_id: Option<&str>) -> StoreResult<Vec<DirectDispatch>> {
        self.read(|db| match task_id {
            Some(task_id) => Ok(dispatch(db, mesh_id, task_id)?.into_iter().collect()),
            None => active_dispatches(db, mesh_id),
        })
    }

    fn change_direct_dispatches(
        &self,
        mesh_id: &str,
        change: DispatchChange<'_>,
        now: Timestamp,
    ) -> StoreResult<u64> {
        self.write(mesh_id, |db| match change {
            DispatchChange::Status { session_id, task_id, status } => {
                set_dispatch_status(db, mesh_id, session_id, task_id, status, now)
            }
            DispatchChange::MarkStale(cutoff) => mark_stale_dispatches(db, mesh_id, cutoff, now),
            DispatchChange::Delete(task_ids) => delete_dispatches_by_task(db, mesh_id, task_ids),
        })
    }

    fn prune_runtime(&self, prune: RuntimePrune) -> StoreResult<u64> {
        // Without a lock: each row is deleted only if it still qualifies when
        // its row lock is taken, so a record refreshed meanwhile stays.
        self.write_unlocked(|db| match prune {
            RuntimePrune::EndedDispatches(cutoff) => cleanup_terminal_dispatches(db, cutoff),
            RuntimePrune::IdleSessions(now) => prune_idle(db, now),
            RuntimePrune::Fingerprints(now) => sweep_fingerprints(db, now),
            RuntimePrune::ToolCalls(cutoff) => prune_tool_calls(db, cutoff),
        })
    }

    fn insert_session_delivery(
        &self,
        mesh_id: &str,
        delivery: &NewSessionDelivery,
        now: Timestamp,
    ) -> StoreResult<SessionDelivery> {
        self.write(mesh_id, |db| insert_delivery(db, mesh_id, delivery, now))
    }

    fn set_session_delivery_status(
        &self,
        mesh_id: &str,
        id: &str,
        status: DeliveryStatus,
        update: &DeliveryUpdate,
        now: Timestamp,
    ) -> StoreResult<bool> {
        self.write(mesh_id, |db| set_delivery_status(db, mesh_id, id, status, update, now))
    }

    fn session_deliveries(
        &self,
        mesh_id: &str,
        query: DeliveryQuery<'_>,
    ) -> StoreResult<Vec<SessionDelivery>> {
        self.read(|db| match query {
            DeliveryQuery::Id(id) => Ok(load_delivery(db, mesh_id, id.trim())?.into_iter().collect()),
            DeliveryQuery::Confirmed(task_id) => confirmed_deliveries(db, mesh_id, task_id),
            DeliveryQuery::Waiting { session_id, now } => active_deliveries(db, mesh_id, session_id, now),
        })
    }

    fn expire_stale_session_deliveries(&self, mesh_id: &str, now: Timestamp) -> StoreResult<u64> {
        self.write(mesh_id, |db| expire_deliveries(db, mesh_id, now))
    }

    fn meshes_with_deliveries_or_dispatches(&self) -> StoreResult<Vec<String>> {
        self.read(meshes_with_deliveries_or_dispatches)
    }

    fn write_inflight_hold(
        &self,
        mesh_id: &str,
        write: HoldWrite<'_>,
        now: Timestamp,
    ) -> StoreResult<Option<InflightHold>> {
        self.write_unlocked(|db| match write {
            // One statement decides: an upsert racing another of the same task
            // updates the row the first inserted.
            HoldWrite::Hold(hold) => upsert_inflight_hold(db, mesh_id, hold, now).map(Some),
            // A release racing another answers the hold only to the one whose
            // delete removed it.
            HoldWrite::Release(task_id) => {
                let held = inflight_hold(db, mesh_id, task_id)?;
                let released = held.is_some() && delete_inflight_hold(db, mesh_id, task_id)?;
                Ok(held.filter(|_| released))
            }
        })
    }

    fn inflight_holds(&self, mesh_id: &str, task_id: Option<&str>) -> StoreResult<Vec<InflightHold>> {
        self.read(|db| match task_id {
            Some(task_id) => Ok(inflight_hold(db, mesh_id, task_id)?.into_iter().collect()),
            None => inflight_holds(db, mesh_id),
        })
    }

    fn write_idle_session(&self, write: IdleWrite<'_>) -> StoreResult<bool> {
        self.write_unlocked(|db| match write {
            IdleWrite::Report(session) => set_idle(db, session).map(|()| true),
            IdleWrite::Forget { mesh_id, node_id, session_id } => {
                delete_idle(db, mesh_id, node_id, session_id)
            }
        })
    }

    fn idle_sessions(&self, mesh_id: &str, now: Timestamp) -> StoreResult<Vec<IdleSession>> {
        self.read(|db| idle_sessions(db, mesh_id, now))
    }

    fn completion_fingerprints(
        &self,
        mesh_id: &str,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<CompletionFingerprint>> {
        self.read(|db| fingerprints(db, mesh_id, now, limit))
    }

    fn recent_completion_conflicts(
        &self,
        mesh_id: &str,
        window_ms: Option<i64>,
        now: Timestamp,
    ) -> StoreResult<Vec<CompletionConflict>> {
        let window = window_ms.unwrap_or(agentmesh_core::sessions::CONFLICT_WINDOW_MS);
        self.read(|db| recent_conflicts(db, mesh_id, window, now))
    }

    fn record_tool_call(
        &self,
        call: &ToolCall,
        guard: RateGuard,
        now: Timestamp,
    ) -> StoreResult<RateVerdict> {
        let role = agentmesh_core::rate_guard::check_call(&call.tool, call.caller_role.as_deref())?;
        if self.tool_call_sweep_due() {
            // Its own transaction, before the call: it deletes rows of every mesh
            // older than any window counts, and holds no mesh lock meanwhile.
            let cutoff = now.plus_millis(-guard.retention_ms());
            self.write_unlocked(|db| prune_tool_calls(db, cutoff))?;
        }
        self.write(&call.mesh_id, |db| record_tool_call(db, call, role.as_deref(), guard, now))
    }

    fn recent_tool_calls(
        &self,
        mesh_id: &str,
        since: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<RecordedToolCall>> {
        self.read(|db| recent_tool_calls(db, mesh_id, since, limit))
    }
}
