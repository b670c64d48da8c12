//! The runtime tables around the queue: direct dispatches, the session delivery
//! queue, idle sessions, completion fingerprints and conflicts, the tool-call log
//! of the rate guard, and the scheduler cursor.

use agentmesh_core::{
    CompletionConflict, CompletionFingerprint, DeliveryStatus, DirectDispatch, DispatchStatus, IdleSession,
    InflightHold, NewDirectDispatch, NewInflightHold, NewSessionDelivery, RateGuard, RateVerdict,
    SessionDelivery, Timestamp,
};
use agentmesh_store::cells;
use agentmesh_store::{DeliveryUpdate, RecordedToolCall, StoreError, ToolCall};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use crate::cells::record;
use crate::{Fail, Res};

fn not_found(kind: &'static str, mesh_id: &str, id: &str) -> Fail {
    Fail(StoreError::NotFound { kind, mesh_id: mesh_id.to_owned(), id: id.to_owned() })
}

/// Ids of these tables are global keys: an id another mesh holds is refused rather
/// than replacing that mesh's row.
fn refuse_other_mesh(conn: &Connection, sql: &str, id: &str, mesh_id: &str, kind: &'static str) -> Res<()> {
    let owner: Option<String> = conn.prepare_cached(sql)?.query_row([id], |r| r.get(0)).optional()?;
    match owner {
        Some(owner) if owner != mesh_id => Err(Fail(StoreError::IdInOtherMesh { kind, id: id.to_owned() })),
        _ => Ok(()),
    }
}

// ── Direct dispatches ───────────────────────────────────────────────────────

pub(crate) use agentmesh_store::cells::{DELIVERY_COLUMNS, DISPATCH_COLUMNS, HOLD_COLUMNS};

pub(crate) fn dispatch_from_row(row: &Row<'_>) -> rusqlite::Result<DirectDispatch> {
    record(row, cells::dispatch)
}

pub(crate) fn record_dispatch(
    conn: &Connection,
    mesh_id: &str,
    d: &NewDirectDispatch,
    now: Timestamp,
) -> Res<DirectDispatch> {
    d.validate()?;
    refuse_other_mesh(
        conn,
        "SELECT mesh_id FROM mesh_direct_dispatches WHERE task_id = ?1",
        d.task_id.trim(),
        mesh_id,
        "direct dispatch",
    )?;
    let row = d.record(mesh_id, now);
    conn.prepare_cached(&format!(
        "INSERT OR REPLACE INTO mesh_direct_dispatches ({DISPATCH_COLUMNS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    ))?
    .execute(params![
        row.task_id,
        row.mesh_id,
        row.node_id,
        row.session_id,
        row.provider_type,
        row.message,
        row.task_mode,
        row.via,
        row.status.as_str(),
        row.dispatched_to_idle_session,
        row.dispatched_at,
        row.updated_at,
    ])?;
    Ok(row)
}

pub(crate) fn dispatch(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Option<DirectDispatch>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {DISPATCH_COLUMNS} FROM mesh_direct_dispatches WHERE task_id = ?1 AND mesh_id = ?2"
    ))?;
    Ok(stmt.query_row(params![task_id.trim(), mesh_id], dispatch_from_row).optional()?)
}

pub(crate) fn active_dispatches(conn: &Connection, mesh_id: &str) -> Res<Vec<DirectDispatch>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {DISPATCH_COLUMNS} FROM mesh_direct_dispatches
          WHERE mesh_id = +?1 AND status NOT IN ('completed', 'failed', 'stale')
          ORDER BY dispatched_at ASC, rowid ASC"
    ))?;
    Ok(stmt.query_map([mesh_id], dispatch_from_row)?.collect::<Result<Vec<_>, _>>()?)
}

pub(crate) fn set_dispatch_status(
    conn: &Connection,
    mesh_id: &str,
    session_id: Option<&str>,
    task_id: Option<&str>,
    status: DispatchStatus,
    now: Timestamp,
) -> Res<u64> {
    let task_id = task_id.map(str::trim).filter(|s| !s.is_empty());
    let session_id = session_id.map(str::trim).filter(|s| !s.is_empty());
    let n = match (task_id, session_id) {
        (Some(task_id), _) => conn
            .prepare_cached(
                "UPDATE mesh_direct_dispatches SET status = ?1, updated_at = ?2
                  WHERE mesh_id = ?3 AND task_id = ?4 AND status NOT IN ('completed', 'failed')",
            )?
            .execute(params![status.as_str(), now.iso(), mesh_id, task_id])?,
        // Without a task id the whole session moves, never rows without a session.
        (None, Some(session_id)) => conn
            .prepare_cached(
                "UPDATE mesh_direct_dispatches SET status = ?1, updated_at = ?2
                  WHERE mesh_id = ?3 AND session_id = ?4 AND session_id IS NOT NULL
                    AND status NOT IN ('completed', 'failed')",
            )?
            .execute(params![status.as_str(), now.iso(), mesh_id, session_id])?,
        (None, None) => 0,
    };
    Ok(n as u64)
}

pub(crate) fn mark_stale_dispatches(
    conn: &Connection,
    mesh_id: &str,
    cutoff: Timestamp,
    now: Timestamp,
) -> Res<u64> {
    Ok(conn
        .prepare_cached(
            "UPDATE mesh_direct_dispatches SET status = 'stale', updated_at = ?1
              WHERE mesh_id = ?2 AND status = 'dispatched' AND dispatched_at < ?3",
        )?
        .execute(params![now.iso(), mesh_id, cutoff.iso()])? as u64)
}

pub(crate) fn cleanup_terminal_dispatches(conn: &Connection, cutoff: Timestamp) -> Res<u64> {
    Ok(conn
        .prepare_cached(
            "DELETE FROM mesh_direct_dispatches
              WHERE status IN ('completed', 'failed', 'stale') AND updated_at < ?1",
        )?
        .execute([cutoff.iso()])? as u64)
}

pub(crate) fn delete_dispatches_by_task(conn: &Connection, mesh_id: &str, task_ids: &[String]) -> Res<u64> {
    let mut stmt =
        conn.prepare_cached("DELETE FROM mesh_direct_dispatches WHERE mesh_id = ?1 AND task_id = ?2")?;
    let mut n = 0;
    for id in task_ids.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        n += stmt.execute(params![mesh_id, id])? as u64;
    }
    Ok(n)
}

// ── Session deliveries ──────────────────────────────────────────────────────

/// Statuses a waiting delivery has, as SQL.
const ACTIVE_DELIVERY_SQL: &str = "status IN ('delivering', 'queued', 'acked')";

pub(crate) fn delivery_from_row(row: &Row<'_>) -> rusqlite::Result<SessionDelivery> {
    record(row, cells::delivery)
}

pub(crate) fn load_delivery(conn: &Connection, mesh_id: &str, id: &str) -> Res<Option<SessionDelivery>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM mesh_session_delivery WHERE id = ?1 AND mesh_id = ?2"
    ))?;
    Ok(stmt.query_row(params![id, mesh_id], delivery_from_row).optional()?)
}

pub(crate) fn insert_delivery(
    conn: &Connection,
    mesh_id: &str,
    d: &NewSessionDelivery,
    now: Timestamp,
) -> Res<SessionDelivery> {
    d.validate()?;
    refuse_other_mesh(
        conn,
        "SELECT mesh_id FROM mesh_session_delivery WHERE id = ?1",
        d.id.trim(),
        mesh_id,
        "delivery",
    )?;
    let row = d.record(mesh_id, now);
    conn.prepare_cached(&format!(
        "INSERT OR REPLACE INTO mesh_session_delivery ({DELIVERY_COLUMNS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
    ))?
    .execute(params![
        row.id,
        row.mesh_id,
        row.node_id,
        row.session_id,
        row.provider_type,
        row.task_id,
        row.kind,
        row.priority,
        row.message,
        row.status.as_str(),
        row.deliver_after,
        row.expires_at,
        row.attempt_count,
        row.source_coordinator_session_id,
        row.source_coordinator_daemon_id,
        row.last_error,
        row.created_at,
        row.updated_at,
    ])?;
    Ok(row)
}

pub(crate) fn set_delivery_status(
    conn: &Connection,
    mesh_id: &str,
    id: &str,
    status: DeliveryStatus,
    update: &DeliveryUpdate,
    now: Timestamp,
) -> Res<bool> {
    let current = load_delivery(conn, mesh_id, id)?.ok_or_else(|| not_found("delivery", mesh_id, id))?;
    if !current.status.may_update(status, update.increment_attempt) {
        return Ok(false);
    }
    conn.prepare_cached(
        "UPDATE mesh_session_delivery
            SET status = ?1, last_error = ?2, attempt_count = attempt_count + ?3, updated_at = ?4
          WHERE id = ?5 AND mesh_id = ?6",
    )?
    .execute(params![
        status.as_str(),
        update.last_error,
        i64::from(update.increment_attempt),
        now.iso(),
        id,
        mesh_id
    ])?;
    Ok(true)
}

pub(crate) fn active_deliveries(
    conn: &Connection,
    mesh_id: &str,
    session_id: Option<&str>,
    now: Timestamp,
) -> Res<Vec<SessionDelivery>> {
    let mut sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM mesh_session_delivery
          WHERE mesh_id = +?1 AND {ACTIVE_DELIVERY_SQL} AND (expires_at IS NULL OR expires_at > +?2)"
    );
    let mut args = vec![Value::Text(mesh_id.to_owned()), Value::Text(now.iso())];
    if let Some(session) = session_id {
        sql.push_str(" AND session_id = +?3");
        args.push(Value::Text(session.to_owned()));
    }
    sql.push_str(" ORDER BY priority DESC, created_at ASC, rowid ASC");
    let mut stmt = conn.prepare_cached(&sql)?;
    Ok(stmt.query_map(params_from_iter(args.iter()), delivery_from_row)?.collect::<Result<Vec<_>, _>>()?)
}

/// The deliveries of a task that reached its session, oldest first.
pub(crate) fn confirmed_deliveries(
    conn: &Connection,
    mesh_id: &str,
    task_id: &str,
) -> Res<Vec<SessionDelivery>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM mesh_session_delivery
          WHERE mesh_id = ?1 AND task_id = ?2 AND status IN ('delivered', 'acked', 'completed')
          ORDER BY created_at, rowid"
    ))?;
    Ok(stmt.query_map(params![mesh_id, task_id.trim()], delivery_from_row)?.collect::<Result<Vec<_>, _>>()?)
}

pub(crate) fn expire_deliveries(conn: &Connection, mesh_id: &str, now: Timestamp) -> Res<u64> {
    let iso = now.iso();
    Ok(conn
        .prepare_cached(&format!(
            "UPDATE mesh_session_delivery SET status = 'expired', updated_at = ?1
              WHERE mesh_id = ?2 AND expires_at IS NOT NULL AND expires_at <= ?1 AND {ACTIVE_DELIVERY_SQL}"
        ))?
        .execute(params![iso, mesh_id])? as u64)
}

pub(crate) fn meshes_with_deliveries_or_dispatches(conn: &Connection) -> Res<Vec<String>> {
    // UNION keeps each mesh once; both tables have an index led by mesh_id.
    let mut stmt = conn.prepare_cached(
        "SELECT mesh_id FROM mesh_session_delivery UNION SELECT mesh_id FROM mesh_direct_dispatches
          ORDER BY mesh_id",
    )?;
    let meshes = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
    Ok(meshes)
}

// ── In-flight holds ─────────────────────────────────────────────────────────

fn hold_from_row(row: &Row<'_>) -> rusqlite::Result<InflightHold> {
    record(row, cells::hold)
}

pub(crate) fn inflight_hold(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<Option<InflightHold>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {HOLD_COLUMNS} FROM mesh_inflight_hold WHERE task_id = ?1 AND mesh_id = ?2"
    ))?;
    Ok(stmt.query_row(params![task_id.trim(), mesh_id], hold_from_row).optional()?)
}

/// Holds a task, keeping the first instant of an existing hold. The table is the
/// original's, keyed by task id alone: a task id another mesh holds is refused.
pub(crate) fn upsert_inflight_hold(
    conn: &Connection,
    mesh_id: &str,
    hold: &NewInflightHold,
    now: Timestamp,
) -> Res<InflightHold> {
    hold.validate()?;
    refuse_other_mesh(
        conn,
        "SELECT mesh_id FROM mesh_inflight_hold WHERE task_id = ?1",
        hold.task_id.trim(),
        mesh_id,
        "inflight hold",
    )?;
    let existing = inflight_hold(conn, mesh_id, &hold.task_id)?;
    let row = hold.record(mesh_id, existing.as_ref(), now);
    conn.prepare_cached(&format!(
        "INSERT OR REPLACE INTO mesh_inflight_hold ({HOLD_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    ))?
    .execute(params![
        row.task_id,
        row.mesh_id,
        row.hold_reason,
        row.held_at,
        row.first_idle_since_ack,
        row.read_failure_count,
        row.updated_at
    ])?;
    Ok(row)
}

pub(crate) fn inflight_holds(conn: &Connection, mesh_id: &str) -> Res<Vec<InflightHold>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {HOLD_COLUMNS} FROM mesh_inflight_hold WHERE mesh_id = ?1 ORDER BY held_at, task_id"
    ))?;
    Ok(stmt.query_map([mesh_id], hold_from_row)?.collect::<Result<Vec<_>, _>>()?)
}

pub(crate) fn delete_inflight_hold(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<bool> {
    Ok(conn
        .prepare_cached("DELETE FROM mesh_inflight_hold WHERE task_id = ?1 AND mesh_id = ?2")?
        .execute(params![task_id.trim(), mesh_id])?
        > 0)
}

// ── Idle sessions ───────────────────────────────────────────────────────────

pub(crate) fn set_idle(conn: &Connection, s: &IdleSession) -> Res<()> {
    s.validate()?;
    let metadata = s.metadata.as_ref().map(serde_json::to_string).transpose()?;
    conn.prepare_cached(
        "INSERT OR REPLACE INTO remote_idle_sessions
             (mesh_id, node_id, session_id, provider_type, expires_at, metadata)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        s.mesh_id.trim(),
        s.node_id.trim(),
        s.session_id.trim(),
        s.provider_type.trim(),
        s.expires_at_ms,
        metadata
    ])?;
    Ok(())
}

pub(crate) fn idle_sessions(conn: &Connection, mesh_id: &str, now: Timestamp) -> Res<Vec<IdleSession>> {
    let mut stmt = conn.prepare_cached(
        "SELECT mesh_id, node_id, session_id, provider_type, expires_at, metadata FROM remote_idle_sessions
          WHERE mesh_id = ?1 AND expires_at > ?2 ORDER BY node_id, session_id",
    )?;
    let rows = stmt.query_map(params![mesh_id, now.millis()], |r| record(r, cells::idle_session))?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

pub(crate) fn delete_idle(conn: &Connection, mesh_id: &str, node_id: &str, session_id: &str) -> Res<bool> {
    Ok(conn
        .prepare_cached(
            "DELETE FROM remote_idle_sessions WHERE mesh_id = ?1 AND node_id = ?2 AND session_id = ?3",
        )?
        .execute(params![mesh_id, node_id, session_id])?
        > 0)
}

pub(crate) fn prune_idle(conn: &Connection, now: Timestamp) -> Res<u64> {
    Ok(conn
        .prepare_cached("DELETE FROM remote_idle_sessions WHERE expires_at <= ?1")?
        .execute([now.millis()])? as u64)
}

// ── Completion fingerprints and conflicts ───────────────────────────────────

pub(crate) fn fingerprints(
    conn: &Connection,
    mesh_id: &str,
    now: Timestamp,
    limit: u32,
) -> Res<Vec<CompletionFingerprint>> {
    let mut stmt = conn.prepare_cached(
        "SELECT fingerprint, expires_at FROM mesh_completion_fingerprints
          WHERE mesh_id = ?1 AND expires_at > ?2 ORDER BY expires_at DESC, fingerprint ASC LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![mesh_id, now.millis(), limit], |r| {
        Ok(CompletionFingerprint { fingerprint: r.get(0)?, expires_at_ms: r.get(1)? })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

pub(crate) fn sweep_fingerprints(conn: &Connection, now: Timestamp) -> Res<u64> {
    Ok(conn
        .prepare_cached("DELETE FROM mesh_completion_fingerprints WHERE expires_at <= ?1")?
        .execute([now.millis()])? as u64)
}

pub(crate) fn recent_conflicts(
    conn: &Connection,
    mesh_id: &str,
    window_ms: i64,
    now: Timestamp,
) -> Res<Vec<CompletionConflict>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, mesh_id, fingerprint, conflicting_task_id, conflicting_session_id, original_task_id,
                original_session_id, event, created_at
           FROM mesh_completion_conflicts WHERE mesh_id = +?1 AND created_at >= +?2
          ORDER BY created_at DESC LIMIT ?3",
    )?;
    let cutoff = now.plus_millis(-window_ms).iso();
    let limit = agentmesh_core::sessions::CONFLICT_LIMIT;
    let rows = stmt.query_map(params![mesh_id, cutoff, limit], |r| record(r, cells::conflict))?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

// ── Tool-call rate guard ────────────────────────────────────────────────────

/// Records a call and counts the tool's calls in the window; `sweep` also deletes
/// rows past the guard's retention.
pub(crate) fn record_tool_call(
    conn: &Connection,
    call: &ToolCall,
    guard: RateGuard,
    sweep: bool,
    now: Timestamp,
) -> Res<RateVerdict> {
    let role = agentmesh_core::rate_guard::check_call(&call.tool, call.caller_role.as_deref())?;
    conn.prepare_cached(
        "INSERT INTO mesh_tool_call_log (mesh_id, tool, session_id, called_at, caller_role)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![call.mesh_id, call.tool, call.session_id, now.millis(), role])?;
    let calls: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM mesh_tool_call_log WHERE mesh_id = ?1 AND tool = ?2 AND called_at >= ?3",
        )?
        .query_row(params![call.mesh_id, call.tool, now.millis() - guard.window_ms], |r| r.get(0))?;
    if sweep {
        prune_tool_calls(conn, now.plus_millis(-guard.retention_ms()))?;
    }
    Ok(guard.verdict(&call.mesh_id, &call.tool, calls as u64))
}

pub(crate) fn recent_tool_calls(
    conn: &Connection,
    mesh_id: &str,
    since: Timestamp,
    limit: u32,
) -> Res<Vec<RecordedToolCall>> {
    let mut stmt = conn.prepare_cached(
        "SELECT tool, session_id, caller_role, called_at FROM mesh_tool_call_log
          WHERE mesh_id = ?1 AND called_at >= ?2 ORDER BY called_at DESC, id DESC LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![mesh_id, since.millis(), limit], |r| {
        Ok(RecordedToolCall {
            tool: r.get(0)?,
            session_id: r.get(1)?,
            caller_role: r.get(2)?,
            called_at_ms: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

pub(crate) fn prune_tool_calls(conn: &Connection, cutoff: Timestamp) -> Res<u64> {
    Ok(conn
        .prepare_cached("DELETE FROM mesh_tool_call_log WHERE called_at < ?1")?
        .execute([cutoff.millis()])? as u64)
}

// ── Scheduler cursor ────────────────────────────────────────────────────────

pub(crate) fn cursor(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let v: Option<i64> = conn
        .prepare_cached("SELECT cursor FROM mesh_scheduler_cursor WHERE mesh_id = ?1")?
        .query_row([mesh_id], |r| r.get(0))
        .optional()?;
    Ok(v.unwrap_or(0).max(0) as u64)
}

pub(crate) fn bump_cursor(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let before = cursor(conn, mesh_id)?;
    conn.prepare_cached(
        "INSERT INTO mesh_scheduler_cursor (mesh_id, cursor) VALUES (?1, ?2)
         ON CONFLICT(mesh_id) DO UPDATE SET cursor = excluded.cursor",
    )?
    .execute(params![mesh_id, before as i64 + 1])?;
    Ok(before)
}
