//! The coordinator inbox, `mesh_pending_events`: queueing with stamping and dedup,
//! and drains that route every event inside their transaction.
//!
//! A drain walks the mesh's undrained events oldest first through
//! `idx_mesh_pending_events_drain` in pages, keyed by (queued_at, id). The
//! daemon target and the `onlyEvents` filter are applied in SQL from the index; the
//! v2 routing decision ([`route_event`]) is taken per event. Only delivered,
//! deduplicated and quarantined rows are marked drained; routed-away rows are
//! stepped over and stay queued, so a backlog for other coordinators costs a walk
//! over index entries and never hides the drainer's own events.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_core::events::{
    DrainCounter, DrainRouter, EmitHint, PendingEvent, QuarantineReason, RouteDecision,
    pending_event_fingerprint, read_completion_summary, refine_job_id, refine_terminal_fingerprint,
    stamp_event,
};
use agentmesh_core::{InvalidInput, LedgerEntry, Timestamp};
use agentmesh_store::{DrainOutcome, DrainRequest, DuplicateReason, InboxEvent, QueueOutcome, StoreError};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::json;

use crate::{Fail, Res, ledger};

/// Accept-mode passes of events enforce mode would hold back are logged, once per
/// kind per process, so a log is told about them without being flooded.
static WARNED_V1_ACCEPTED: AtomicBool = AtomicBool::new(false);
static WARNED_INVALID_ACCEPTED: AtomicBool = AtomicBool::new(false);

fn warn_once(routed: &agentmesh_core::events::Routed, mesh_id: &str) {
    let flag = match routed.counter {
        Some(DrainCounter::V1BroadcastAccepted) => &WARNED_V1_ACCEPTED,
        Some(DrainCounter::V2ValidationFailedAccepted) => &WARNED_INVALID_ACCEPTED,
        _ => return,
    };
    if !flag.swap(true, Ordering::Relaxed) {
        match &routed.violation {
            Some(violation) => {
                tracing::warn!(mesh_id, %violation, "accepted an event that fails the v2 contract; enforce mode would hold it")
            }
            None => tracing::warn!(
                mesh_id,
                "accepted an unversioned event as a broadcast; enforce mode would hold it"
            ),
        }
    }
}

/// Delivered events per drain when the request sets no limit.
const DEFAULT_DRAIN_LIMIT: u32 = 100;
/// Candidate rows read per page of a drain's walk.
const PAGE: i64 = 256;

/// Queues one event for a coordinator.
pub(crate) fn queue(
    conn: &Connection,
    mesh_id: &str,
    event: &PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<QueueOutcome> {
    if event.event.trim().is_empty() {
        return Err(Fail(StoreError::InvalidInput(InvalidInput::new("event", "must not be blank"))));
    }
    if event.mesh_id != mesh_id {
        return Err(Fail(StoreError::InvalidInput(InvalidInput::new(
            "meshId",
            format!("the event belongs to mesh {:?}, not {mesh_id:?}", event.mesh_id),
        ))));
    }
    let mut ev = event.clone();
    stamp_event(&mut ev, hint, &ledger::new_entry_id(now), self_machine_id);
    if refine_terminal_fingerprint(&ev).is_some() && refine_terminal_pending(conn, &ev)? {
        return Ok(QueueOutcome::Duplicate(DuplicateReason::RefineTerminal));
    }
    let id = ledger::new_entry_id(now);
    let inserted = insert_row(conn, &id, &ev)?;
    if !inserted {
        return Ok(QueueOutcome::Duplicate(DuplicateReason::Fingerprint));
    }
    Ok(QueueOutcome::Queued { id, event: ev })
}

/// Stores an event, as it is, under `id`: the whole event in `payload`, its daemon
/// target, fingerprint and v2 envelope in their columns. `false` when its
/// fingerprint is already used in the mesh (nothing is written).
pub(crate) fn insert_row(conn: &Connection, id: &str, ev: &PendingEvent) -> Res<bool> {
    let fingerprint = pending_event_fingerprint(ev);
    let fingerprint = (!fingerprint.is_empty()).then_some(fingerprint);
    let envelope = &ev.envelope;
    let identity =
        |i: &Option<agentmesh_core::events::CoordinatorIdentity>| i.as_ref().map(|i| i.to_json().to_string());
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO mesh_pending_events
                 (id, mesh_id, coordinator_daemon_id, event, payload, fingerprint, queued_at, drained,
                  protocol_version, event_id, scope, dispatched_by, intended_for)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?11, ?12)",
        )?
        .execute(params![
            id,
            ev.mesh_id,
            ev.target_coordinator_daemon_id.as_deref().map(str::trim).filter(|s| !s.is_empty()),
            ev.event,
            ev.to_value().to_string(),
            fingerprint,
            ev.queued_at.millis(),
            envelope.protocol_version.map(|v| v.as_str()),
            envelope.event_id,
            envelope.scope.map(|s| s.as_str()),
            identity(&envelope.dispatched_by),
            identity(&envelope.intended_for),
        ])?;
    Ok(inserted > 0)
}

/// Whether an undrained event of the same refine job and outcome is queued.
fn refine_terminal_pending(conn: &Connection, ev: &PendingEvent) -> Res<bool> {
    let Some(job) = refine_job_id(&ev.metadata_event) else { return Ok(false) };
    let mut stmt = conn.prepare_cached(
        "SELECT payload FROM mesh_pending_events WHERE mesh_id = ?1 AND drained = 0 AND event = ?2",
    )?;
    let rows = stmt.query_map(params![ev.mesh_id, ev.event], |r| r.get::<_, String>(0))?;
    for payload in rows {
        let payload: serde_json::Value = serde_json::from_str(&payload?).unwrap_or_else(|_| json!({}));
        let metadata = payload.get("metadataEvent").and_then(|m| m.as_object());
        if metadata.and_then(refine_job_id) == Some(job) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One undrained row as a drain sees it.
struct Candidate {
    id: String,
    /// The stored event, parsed.
    raw: serde_json::Value,
    fingerprint: Option<String>,
    queued_at: i64,
}

/// The SQL of one page of a drain's walk: after the (queued_at, id) cursor in ?2,
/// ?3, for `forms` daemon id forms and, when given, `only` event names.
fn walk_sql(forms: usize, only: Option<usize>) -> String {
    let list =
        |start: usize, n: usize| (0..n).map(|i| format!("+?{}", start + i)).collect::<Vec<_>>().join(", ");
    let mut sql = String::from(
        "SELECT id, payload, fingerprint, queued_at FROM mesh_pending_events
          WHERE mesh_id = +?1 AND drained = 0 AND (queued_at, id) > (+?2, +?3)",
    );
    if forms > 0 {
        sql.push_str(&format!(
            " AND (coordinator_daemon_id IS NULL OR coordinator_daemon_id IN ({}))",
            list(4, forms)
        ));
    }
    if let Some(n) = only {
        sql.push_str(&format!(" AND event IN ({})", list(4 + forms, n)));
    }
    sql.push_str(&format!(" ORDER BY queued_at ASC, id ASC LIMIT +?{}", 4 + forms + only.unwrap_or(0)));
    sql
}

/// Walks the drainer's candidate rows oldest first, page by page, until `visit`
/// returns `true`.
fn walk(
    conn: &Connection,
    mesh_id: &str,
    request: &DrainRequest,
    first_page: i64,
    mut visit: impl FnMut(Candidate, &HashSet<String>) -> Res<bool>,
) -> Res<()> {
    let forms = request.drainer.daemon_forms();
    let only = request.only_events.as_deref().unwrap_or(&[]);
    let sql = walk_sql(forms.len(), request.only_events.as_ref().map(|_| only.len()));
    let mut args: Vec<Value> =
        vec![Value::Text(mesh_id.to_owned()), Value::Integer(i64::MIN), Value::Text(String::new())];
    args.extend(forms.iter().map(|f| Value::Text(f.clone())));
    args.extend(only.iter().map(|e| Value::Text(e.clone())));
    // The first page is as large as the drain needs when every event is its own;
    // later pages (past events routed away) are full size.
    let mut page_size = first_page.clamp(1, PAGE);
    args.push(Value::Integer(page_size));
    loop {
        let page: Vec<Candidate> = {
            let mut stmt = conn.prepare_cached(&sql)?;
            stmt.query_map(params_from_iter(args.iter()), |r| {
                let payload: String = r.get(1)?;
                Ok(Candidate {
                    id: r.get(0)?,
                    raw: parse(&payload),
                    fingerprint: r.get(2)?,
                    queued_at: r.get(3)?,
                })
            })?
            .collect::<Result<_, _>>()?
        };
        let full = page.len() as i64 == page_size;
        let drained = drained_event_ids(conn, mesh_id, &page)?;
        for candidate in page {
            args[1] = Value::Integer(candidate.queued_at);
            args[2] = Value::Text(candidate.id.clone());
            if visit(candidate, &drained)? {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
        page_size = PAGE;
        *args.last_mut().expect("the limit is the last argument") = Value::Integer(page_size);
    }
}

/// Which event ids of a page's events were drained before: one indexed lookup per
/// page instead of one per event.
fn drained_event_ids(conn: &Connection, mesh_id: &str, page: &[Candidate]) -> Res<HashSet<String>> {
    let ids: Vec<&str> =
        page.iter().filter_map(|c| c.raw.get("eventId").and_then(serde_json::Value::as_str)).collect();
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT event_id FROM mesh_pending_events
          WHERE mesh_id = ?1 AND drained = 1 AND event_id IN (SELECT value FROM json_each(?2))",
    )?;
    let found = stmt
        .query_map(params![mesh_id, serde_json::to_string(&ids)?], |r| r.get::<_, String>(0))?
        .collect::<Result<HashSet<_>, _>>()?;
    Ok(found)
}

fn parse(payload: &str) -> serde_json::Value {
    // An unparsable payload reads as `{}`, as in the original; routing then treats
    // it as an unversioned event.
    serde_json::from_str(payload).unwrap_or_else(|_| json!({}))
}

/// Drains in the caller's transaction.
pub(crate) fn drain(
    conn: &Connection,
    mesh_id: &str,
    request: &DrainRequest,
    now: Timestamp,
) -> Res<DrainOutcome> {
    let mut out = DrainOutcome::default();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(out);
    }
    let limit = request.limit.unwrap_or(DEFAULT_DRAIN_LIMIT) as usize;
    if limit == 0 {
        return Ok(out);
    }
    let drained_by = request.drainer.identity().to_json().to_string();
    let mut router = DrainRouter::new(&request.drainer, request.enforce);
    let mut mark = conn.prepare_cached(
        "UPDATE mesh_pending_events SET drained = 1, drained_at = ?1, drained_by = ?2 WHERE id = ?3",
    )?;
    walk(conn, mesh_id, request, limit as i64, |c, drained| {
        let raw = c.raw;
        let routed = router.route(&raw, |event_id| drained.contains(event_id));
        warn_once(&routed, mesh_id);
        match routed.decision {
            RouteDecision::RoutedAway { .. } => return Ok(false),
            RouteDecision::Deliver => {
                mark.execute(params![now.millis(), drained_by, c.id])?;
                out.events.push(InboxEvent {
                    id: c.id,
                    event: raw,
                    fingerprint: c.fingerprint,
                    queued_at_ms: c.queued_at,
                });
            }
            RouteDecision::DedupSkipped => {
                mark.execute(params![now.millis(), drained_by, c.id])?;
            }
            RouteDecision::Quarantine { reason } => {
                mark.execute(params![now.millis(), drained_by, c.id])?;
                ledger::append(conn, &held_entry(mesh_id, &c.id, &raw, reason, c.queued_at, now))?;
                out.quarantined.push(c.id);
            }
        }
        Ok(out.events.len() >= limit)
    })?;
    out.counters = router.counters();
    out.events = reconcile_refine(conn, mesh_id, std::mem::take(&mut out.events), now)?;
    Ok(out)
}

/// Applies the refine reconciliation to what a drain or peek hands out: a refine
/// job accepted in the batch whose terminal event is missing gets it rebuilt from
/// the ledger (found by job, however many newer entries there are), and accepted
/// events whose terminal is present are left out.
fn reconcile_refine(
    conn: &Connection,
    mesh_id: &str,
    events: Vec<InboxEvent>,
    now: Timestamp,
) -> Res<Vec<InboxEvent>> {
    use agentmesh_core::events::refine;
    let accepted =
        |e: &InboxEvent| e.event.get("event").and_then(serde_json::Value::as_str) == Some("refine:accepted");
    if !events.iter().any(accepted) {
        return Ok(events);
    }
    let values: Vec<serde_json::Value> = events.iter().map(|e| e.event.clone()).collect();
    let missing = refine::jobs_missing_a_terminal(&values);
    let mut backfilled = Vec::new();
    for job in &missing {
        let mut stmt = conn.prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger
              WHERE mesh_id = ?1 AND kind IN ('task_completed', 'task_failed') AND json_valid(payload)
                AND json_extract(payload, '$.source') = ?2
                AND TRIM(json_extract(payload, '$.refineJob.jobId')) = ?3
              ORDER BY timestamp DESC, rowid DESC LIMIT 1",
        )?;
        let entry = stmt
            .query_row(params![mesh_id, refine::REFINE_SOURCE, job], ledger::entry_from_row)
            .optional()?;
        if let Some(entry) = entry.filter(|e| refine::is_refine_outcome(e, job)) {
            backfilled.push(refine::terminal_from_ledger(mesh_id, &entry, now));
        }
    }
    if missing.is_empty() {
        return Ok(events);
    }
    let mut out = refine::drop_superseded(events, |e| &e.event, &backfilled);
    for event in backfilled {
        let job = agentmesh_core::events::read_refine_job_id(&event).unwrap_or_default().to_owned();
        let name = event.get("event").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
        // Rebuilt events are not rows: their id names where they came from.
        out.push(InboxEvent {
            id: format!("ledger:{name}:{job}"),
            event,
            fingerprint: None,
            queued_at_ms: now.millis(),
        });
    }
    Ok(out)
}

/// The `event_held` entry of a quarantined event: recoverable, with the whole event.
fn held_entry(
    mesh_id: &str,
    row_id: &str,
    raw: &serde_json::Value,
    reason: QuarantineReason,
    queued_at: i64,
    now: Timestamp,
) -> LedgerEntry {
    let metadata = raw.get("metadataEvent").and_then(|m| m.as_object());
    LedgerEntry {
        id: ledger::new_entry_id(now),
        mesh_id: mesh_id.to_owned(),
        timestamp: now.iso(),
        kind: "event_held".to_owned(),
        node_id: raw.get("nodeId").and_then(|v| v.as_str()).map(str::to_owned),
        session_id: None,
        provider_type: None,
        payload: json!({
            "event": raw.get("event").cloned().unwrap_or(serde_json::Value::Null),
            "reason": reason.as_str(),
            "recoverable": true,
            "nodeLabel": raw.get("nodeLabel").cloned().unwrap_or(json!("")),
            "workspace": raw.get("workspace").cloned(),
            "targetCoordinatorDaemonId": raw.get("targetCoordinatorDaemonId").cloned().unwrap_or(serde_json::Value::Null),
            "eventId": raw.get("eventId").cloned(),
            "queuedAt": queued_at,
            "finalSummary": metadata.and_then(read_completion_summary),
            "taskId": metadata.and_then(|m| m.get("taskId")).cloned(),
            "heldEvent": raw,
            "pendingEventId": row_id,
        }),
    }
}

/// What a drain would deliver, marking and counting nothing.
pub(crate) fn peek(conn: &Connection, mesh_id: &str, request: &DrainRequest) -> Res<Vec<InboxEvent>> {
    let mut events = Vec::new();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(events);
    }
    let limit = request.limit.unwrap_or(DEFAULT_DRAIN_LIMIT) as usize;
    let mut router = DrainRouter::new(&request.drainer, request.enforce);
    walk(conn, mesh_id, request, limit as i64, |c, drained| {
        let raw = c.raw;
        if router.route(&raw, |event_id| drained.contains(event_id)).decision == RouteDecision::Deliver {
            events.push(InboxEvent {
                id: c.id,
                event: raw,
                fingerprint: c.fingerprint,
                queued_at_ms: c.queued_at,
            });
        }
        Ok(events.len() >= limit)
    })?;
    // A peek reads no clock: a rebuilt terminal is dated like the newest event seen.
    let at = Timestamp::from_millis(events.iter().map(|e| e.queued_at_ms).max().unwrap_or(0));
    reconcile_refine(conn, mesh_id, events, at)
}

pub(crate) fn ack(conn: &Connection, mesh_id: &str, ids: &[String], now: Timestamp) -> Res<u64> {
    let mut stmt = conn.prepare_cached(
        "UPDATE mesh_pending_events SET drained = 1, drained_at = ?1 WHERE mesh_id = ?2 AND id = ?3 AND drained = 0",
    )?;
    let mut n = 0;
    for id in ids {
        n += stmt.execute(params![now.millis(), mesh_id, id])? as u64;
    }
    Ok(n)
}

pub(crate) fn delete(conn: &Connection, mesh_id: &str, ids: &[String]) -> Res<u64> {
    let mut stmt = conn.prepare_cached("DELETE FROM mesh_pending_events WHERE mesh_id = ?1 AND id = ?2")?;
    let mut n = 0;
    for id in ids {
        n += stmt.execute(params![mesh_id, id])? as u64;
    }
    Ok(n)
}

pub(crate) fn retract_dispatch_blocked(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<u64> {
    let task_id = task_id.trim();
    if task_id.is_empty() {
        return Ok(0);
    }
    Ok(conn
        .prepare_cached(
            "DELETE FROM mesh_pending_events
              WHERE mesh_id = ?1 AND drained = 0 AND event = 'mesh:dispatch_blocked'
                AND json_valid(payload) AND TRIM(json_extract(payload, '$.metadataEvent.taskId')) = ?2",
        )?
        .execute(params![mesh_id, task_id])? as u64)
}

pub(crate) fn clear(conn: &Connection, mesh_id: &str) -> Res<u64> {
    // The durable completion dedup records of the mesh go with its events.
    conn.execute(
        "DELETE FROM mesh_completion_fingerprints WHERE mesh_id = ?1 AND fingerprint LIKE 'pending::%'",
        [mesh_id],
    )?;
    Ok(conn.execute("DELETE FROM mesh_pending_events WHERE mesh_id = ?1", [mesh_id])? as u64)
}

pub(crate) fn count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt =
        conn.prepare_cached("SELECT COUNT(*) FROM mesh_pending_events WHERE mesh_id = ?1 AND drained = 0")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
}

/// Puts the event of an `event_held` entry back in the inbox, with its
/// `event_held_requeued` entry.
pub(crate) fn requeue_held(
    conn: &Connection,
    mesh_id: &str,
    held_entry_id: &str,
    now: Timestamp,
) -> Res<bool> {
    let entry = conn
        .prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger WHERE id = ?1 AND mesh_id = ?2 AND kind = 'event_held'",
        )?
        .query_row(params![held_entry_id, mesh_id], ledger::entry_from_row)
        .optional()?
        .ok_or_else(|| {
            Fail(StoreError::NotFound {
                kind: "held event",
                mesh_id: mesh_id.to_owned(),
                id: held_entry_id.to_owned(),
            })
        })?;
    let row_id = entry.payload.get("pendingEventId").and_then(serde_json::Value::as_str);
    let mut requeued = match row_id {
        Some(row) => {
            conn.prepare_cached(
                "UPDATE mesh_pending_events SET drained = 0, drained_at = NULL, drained_by = NULL
                  WHERE id = ?1 AND mesh_id = ?2 AND drained = 1",
            )?
            .execute(params![row, mesh_id])?
                > 0
        }
        None => false,
    };
    let row_exists = match row_id {
        Some(row) => conn
            .prepare_cached("SELECT 1 FROM mesh_pending_events WHERE id = ?1 AND mesh_id = ?2")?
            .query_row(params![row, mesh_id], |_| Ok(()))
            .optional()?
            .is_some(),
        None => false,
    };
    if !row_exists {
        // Retention removed the row: queue the held event again (its envelope, and
        // so its event id, is kept).
        let held = entry.payload.get("heldEvent").cloned().unwrap_or(serde_json::Value::Null);
        let event = PendingEvent::from_value(held).map_err(|e| {
            Fail(StoreError::Corrupt {
                what: format!("held event of ledger entry {held_entry_id}"),
                problem: e.to_string(),
            })
        })?;
        requeued = matches!(
            queue(conn, mesh_id, &event, &EmitHint::default(), None, now)?,
            QueueOutcome::Queued { .. }
        );
    }
    ledger::append(
        conn,
        &LedgerEntry {
            id: ledger::new_entry_id(now),
            mesh_id: mesh_id.to_owned(),
            timestamp: now.iso(),
            kind: "event_held_requeued".to_owned(),
            node_id: entry.node_id.clone(),
            session_id: None,
            provider_type: None,
            payload: json!({
                "heldEntryId": held_entry_id,
                "event": entry.payload.get("event"),
                "requeued": requeued,
                "taskId": entry.payload.get("taskId"),
                "reason": entry.payload.get("reason"),
            }),
        },
    )?;
    Ok(requeued)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drain page is a range of the drain index in walk order, filtered from the
    /// index itself: no sort, however many events other coordinators have queued.
    #[test]
    fn a_drain_page_walks_the_drain_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        for (forms, only) in [(0, None), (3, None), (3, Some(2))] {
            let sql = walk_sql(forms, only);
            let n = conn.prepare(&sql).unwrap().parameter_count();
            let args: Vec<Value> = (0..n)
                .map(|i| if i == 1 { Value::Integer(0) } else { Value::Text(format!("v{i}")) })
                .collect();
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(params_from_iter(args.iter()), |r| r.get(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join(" | ");
            assert!(plan.contains("idx_mesh_pending_events_drain"), "{sql}\n{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}\n{plan}");
        }
    }
}
