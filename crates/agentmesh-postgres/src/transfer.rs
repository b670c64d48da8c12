//! Copying meshes out of and into an installation ([`TransferStore`]).
//!
//! Pages follow the tables' `row_id` (the ledger's `seq`, its append order), so
//! the rows a copy inserts keep the source's row order, every listing's
//! tie-break; the tables without one (idle sessions, fingerprints, presence,
//! the cursor) page by their key. Ids are unique per mesh here, so the only
//! conflict an import meets is an inbox event whose fingerprint another event of
//! the mesh holds. An import runs under every lock of the mesh
//! ([`PgStore::write_exclusive`]); the ledger entries it appends take sequence
//! numbers in the page's order.

use agentmesh_core::{
    CompletionConflict, CompletionFingerprint, DirectDispatch, IdleSession, LedgerEntry, Mission,
    SessionDelivery,
};
use agentmesh_store::transfer::{
    EventRoute, ExportPage, ImportReport, PageKey, PresenceRecord, RecordKind, Records, StoredEvent,
    ToolCallRecord, TransferConflict, TransferStore, bad_key,
};
use agentmesh_store::{RecordedToolCall, StoreError, StoreResult};
use postgres::Row;

use crate::db::{Db, corrupt, unsigned};
use crate::{PgOptions, PgStore, Res};

/// Every mesh with a record of any kind.
const MESHES: &str = "SELECT mesh_id FROM mesh_queue /* all meshes */
    UNION SELECT mesh_id FROM mesh_missions UNION SELECT mesh_id FROM mesh_event_ledger
    UNION SELECT mesh_id FROM mesh_pending_events UNION SELECT mesh_id FROM mesh_scheduler_cursor
    UNION SELECT mesh_id FROM mesh_direct_dispatches UNION SELECT mesh_id FROM mesh_session_delivery
    UNION SELECT mesh_id FROM remote_idle_sessions UNION SELECT mesh_id FROM mesh_completion_fingerprints
    UNION SELECT mesh_id FROM mesh_completion_conflicts UNION SELECT mesh_id FROM mesh_tool_call_log
    UNION SELECT mesh_id FROM mesh_coordinator_presence ORDER BY 1";

const TASKS: &str = "SELECT id, payload, row_id FROM mesh_queue
    WHERE mesh_id = $1 AND row_id > $2 ORDER BY row_id LIMIT $3";

const MISSIONS: &str = "SELECT id, mesh_id, title, goal, status, created_at, updated_at, source, row_id
    FROM mesh_missions WHERE mesh_id = $1 AND row_id > $2 ORDER BY row_id LIMIT $3";

const LEDGER: &str = "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload, seq
    FROM mesh_event_ledger WHERE mesh_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";

const EVENTS: &str = "SELECT e.id, e.mesh_id, e.coordinator_daemon_id, e.event, e.payload, e.fingerprint,
        e.queued_at, e.event_id, e.intended_for, e.route_class, e.to_machine, e.to_key, e.to_fallback, e.to_session, e.lane,
        EXISTS (SELECT 1 FROM mesh_inbox_queue q
                 WHERE q.mesh_id = e.mesh_id AND q.lane = e.lane AND q.queued_at = e.queued_at AND q.id = e.id),
        e.row_id
    FROM mesh_pending_events e WHERE e.mesh_id = $1 AND e.row_id > $2 ORDER BY e.row_id LIMIT $3";

const CURSOR: &str = "SELECT cursor FROM mesh_scheduler_cursor WHERE mesh_id = $1";

const DISPATCHES: &str =
    "SELECT task_id, mesh_id, node_id, session_id, provider_type, message, task_mode, via,
        status, dispatched_to_idle_session, dispatched_at, updated_at, row_id
    FROM mesh_direct_dispatches WHERE mesh_id = $1 AND row_id > $2 ORDER BY row_id LIMIT $3";

const DELIVERIES: &str =
    "SELECT id, mesh_id, node_id, session_id, provider_type, task_id, kind, priority, message,
        status, deliver_after, expires_at, attempt_count, source_coordinator_session_id,
        source_coordinator_daemon_id, last_error, created_at, updated_at, row_id
    FROM mesh_session_delivery WHERE mesh_id = $1 AND row_id > $2 ORDER BY row_id LIMIT $3";

const CONFLICTS: &str = "SELECT id, mesh_id, fingerprint, conflicting_task_id, conflicting_session_id,
        original_task_id, original_session_id, event, created_at, row_id
    FROM mesh_completion_conflicts WHERE mesh_id = $1 AND row_id > $2 ORDER BY row_id LIMIT $3";

const TOOL_CALLS: &str = "SELECT t.tool, t.session_id, t.caller_role, t.called_at,
        (SELECT COUNT(*) FROM mesh_tool_call_log o
          WHERE o.mesh_id = t.mesh_id AND o.tool = t.tool AND o.called_at = t.called_at
            AND o.session_id IS NOT DISTINCT FROM t.session_id
            AND o.caller_role IS NOT DISTINCT FROM t.caller_role AND o.id <= t.id),
        t.id
    FROM mesh_tool_call_log t WHERE t.mesh_id = $1 AND t.id > $2 ORDER BY t.id LIMIT $3";

const IDLE_FIRST: &str = "SELECT mesh_id, node_id, session_id, provider_type, expires_at, metadata
    FROM remote_idle_sessions WHERE mesh_id = $1 ORDER BY node_id, session_id LIMIT $2";

const IDLE_AFTER: &str = "SELECT mesh_id, node_id, session_id, provider_type, expires_at, metadata
    FROM remote_idle_sessions WHERE mesh_id = $1 AND (node_id, session_id) > ($2, $3)
    ORDER BY node_id, session_id LIMIT $4";

const FINGERPRINTS_FIRST: &str = "SELECT fingerprint, expires_at FROM mesh_completion_fingerprints
    WHERE mesh_id = $1 ORDER BY fingerprint LIMIT $2";

const FINGERPRINTS_AFTER: &str = "SELECT fingerprint, expires_at FROM mesh_completion_fingerprints
    WHERE mesh_id = $1 AND fingerprint > $2 ORDER BY fingerprint LIMIT $3";

const PRESENCE_FIRST: &str = "SELECT coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms,
        ended_at_ms
    FROM mesh_coordinator_presence WHERE mesh_id = $1 ORDER BY coordinator_key LIMIT $2";

const PRESENCE_AFTER: &str = "SELECT coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms,
        ended_at_ms
    FROM mesh_coordinator_presence WHERE mesh_id = $1 AND coordinator_key > $2 ORDER BY coordinator_key LIMIT $3";

/// Where an export starts, decoded from its key.
enum From {
    /// From the start.
    Start,
    /// After this row number.
    Row(i64),
    /// After this natural key.
    Key(Vec<String>),
}

fn from(kind: RecordKind, after: Option<&PageKey>) -> StoreResult<From> {
    let Some(key) = after else { return Ok(From::Start) };
    let parts = match kind {
        RecordKind::IdleSessions => 2,
        RecordKind::CompletionFingerprints | RecordKind::CoordinatorPresence => 1,
        RecordKind::SchedulerCursor => return Ok(From::Key(Vec::new())),
        _ => return key.as_number().map(From::Row).ok_or_else(|| bad_key(key)),
    };
    match key.as_text() {
        Some(text) if text.len() == parts => Ok(From::Key(text)),
        _ => Err(bad_key(key)),
    }
}

/// Rows of a statement paged by row number (`$2`), mapped, with the row number
/// of the last one (the statement's column `key`).
fn by_row<T>(
    db: &Db<'_>,
    sql: &str,
    (mesh_id, from, limit): (&str, &From, i64),
    key: usize,
    map: impl Fn(&Row) -> Res<T>,
) -> Res<(Vec<T>, Option<PageKey>)> {
    let after = match from {
        From::Row(n) => *n,
        _ => 0,
    };
    let rows = db.query(sql, &[&mesh_id, &after, &limit])?;
    let last = rows.last().map(|r| PageKey::number(r.get(key)));
    Ok((rows.iter().map(map).collect::<Res<Vec<T>>>()?, last))
}

fn export(db: &Db<'_>, mesh_id: &str, kind: RecordKind, from: &From, limit: u32) -> Res<ExportPage> {
    let page = (mesh_id, from, i64::from(limit));
    let (records, last) = match kind {
        RecordKind::Tasks => {
            let (tasks, last) = by_row(db, TASKS, page, 2, |r| {
                let id: String = r.get(0);
                crate::tasks::decode(&id, r.get(1))
            })?;
            (Records::Tasks(tasks), last)
        }
        RecordKind::Missions => {
            let (rows, last) = by_row(db, MISSIONS, page, 8, |r| {
                Ok(Mission {
                    id: r.get(0),
                    mesh_id: r.get(1),
                    title: r.get(2),
                    goal: r.get(3),
                    status: r.get(4),
                    created_at: r.get(5),
                    updated_at: r.get(6),
                    source: r.get(7),
                })
            })?;
            (Records::Missions(rows), last)
        }
        RecordKind::Ledger => {
            let (rows, last) = by_row(db, LEDGER, page, 8, |r| {
                let payload: String = r.get(7);
                Ok(LedgerEntry {
                    id: r.get(0),
                    mesh_id: r.get(1),
                    timestamp: r.get(2),
                    kind: r.get(3),
                    node_id: r.get(4),
                    session_id: r.get(5),
                    provider_type: r.get(6),
                    // An unparsable payload reads as `{}`, as every ledger read does.
                    payload: serde_json::from_str(&payload).unwrap_or_else(|_| serde_json::json!({})),
                })
            })?;
            (Records::Ledger(rows), last)
        }
        RecordKind::InboxEvents => {
            let (rows, last) = by_row(db, EVENTS, page, 16, |r| {
                let queued: bool = r.get(15);
                Ok(StoredEvent {
                    id: r.get(0),
                    mesh_id: r.get(1),
                    coordinator_daemon_id: r.get(2),
                    name: r.get(3),
                    payload: crate::payload::json(r.get(4)),
                    fingerprint: r.get(5),
                    queued_at_ms: r.get(6),
                    drained: !queued,
                    route: EventRoute {
                        event_id: r.get(7),
                        intended_for: r.get(8),
                        route_class: r.get(9),
                        to_machine: r.get(10),
                        to_key: r.get(11),
                        to_fallback: r.get(12),
                        to_session: r.get(13),
                        lane: r.get(14),
                    },
                })
            })?;
            (Records::InboxEvents(rows), last)
        }
        RecordKind::SchedulerCursor => {
            let values = match from {
                From::Start => {
                    db.query_opt(CURSOR, &[&mesh_id])?.map(|r| unsigned(r.get(0))).into_iter().collect()
                }
                _ => Vec::new(),
            };
            return Ok(ExportPage { records: Records::SchedulerCursor(values), next: None });
        }
        RecordKind::DirectDispatches => {
            let (rows, last) = by_row(db, DISPATCHES, page, 12, |r| {
                let status: String = r.get(8);
                let to_idle: i64 = r.get(9);
                Ok(DirectDispatch {
                    task_id: r.get(0),
                    mesh_id: r.get(1),
                    node_id: r.get(2),
                    session_id: r.get(3),
                    provider_type: r.get(4),
                    message: r.get(5),
                    task_mode: r.get(6),
                    via: r.get(7),
                    status: status.parse().map_err(|e| corrupt("dispatch status", e))?,
                    dispatched_to_idle_session: to_idle != 0,
                    dispatched_at: r.get(10),
                    updated_at: r.get(11),
                })
            })?;
            (Records::DirectDispatches(rows), last)
        }
        RecordKind::SessionDeliveries => {
            let (rows, last) = by_row(db, DELIVERIES, page, 18, |r| {
                let status: String = r.get(9);
                let attempts: i64 = r.get(12);
                Ok(SessionDelivery {
                    id: r.get(0),
                    mesh_id: r.get(1),
                    node_id: r.get(2),
                    session_id: r.get(3),
                    provider_type: r.get(4),
                    task_id: r.get(5),
                    kind: r.get(6),
                    priority: r.get(7),
                    message: r.get(8),
                    status: status.parse().map_err(|e| corrupt("delivery status", e))?,
                    deliver_after: r.get(10),
                    expires_at: r.get(11),
                    attempt_count: u32::try_from(attempts)
                        .map_err(|e| corrupt("delivery attempt count", e))?,
                    source_coordinator_session_id: r.get(13),
                    source_coordinator_daemon_id: r.get(14),
                    last_error: r.get(15),
                    created_at: r.get(16),
                    updated_at: r.get(17),
                })
            })?;
            (Records::SessionDeliveries(rows), last)
        }
        RecordKind::CompletionConflicts => {
            let (rows, last) = by_row(db, CONFLICTS, page, 9, |r| {
                Ok(CompletionConflict {
                    id: r.get(0),
                    mesh_id: r.get(1),
                    fingerprint: r.get(2),
                    conflicting_task_id: r.get(3),
                    conflicting_session_id: r.get(4),
                    original_task_id: r.get(5),
                    original_session_id: r.get(6),
                    event: r.get(7),
                    created_at: r.get(8),
                })
            })?;
            (Records::CompletionConflicts(rows), last)
        }
        RecordKind::ToolCalls => {
            let (rows, last) = by_row(db, TOOL_CALLS, page, 5, |r| {
                let occurrence: i64 = r.get(4);
                Ok(ToolCallRecord {
                    call: RecordedToolCall {
                        tool: r.get(0),
                        session_id: r.get(1),
                        caller_role: r.get(2),
                        called_at_ms: r.get(3),
                    },
                    occurrence: u32::try_from(occurrence).unwrap_or(u32::MAX),
                })
            })?;
            (Records::ToolCalls(rows), last)
        }
        RecordKind::IdleSessions => {
            let limit = i64::from(limit);
            let rows = match from {
                From::Key(k) => db.query(IDLE_AFTER, &[&mesh_id, &k[0], &k[1], &limit])?,
                _ => db.query(IDLE_FIRST, &[&mesh_id, &limit])?,
            };
            let sessions: Vec<IdleSession> = rows
                .iter()
                .map(|r| {
                    let metadata: Option<String> = r.get(5);
                    IdleSession {
                        mesh_id: r.get(0),
                        node_id: r.get(1),
                        session_id: r.get(2),
                        provider_type: r.get(3),
                        expires_at_ms: r.get(4),
                        metadata: metadata.and_then(|m| serde_json::from_str(&m).ok()),
                    }
                })
                .collect();
            let last = sessions.last().map(|s| PageKey::text(&[&s.node_id, &s.session_id]));
            (Records::IdleSessions(sessions), last)
        }
        RecordKind::CompletionFingerprints => {
            let limit = i64::from(limit);
            let rows = match from {
                From::Key(k) => db.query(FINGERPRINTS_AFTER, &[&mesh_id, &k[0], &limit])?,
                _ => db.query(FINGERPRINTS_FIRST, &[&mesh_id, &limit])?,
            };
            let fingerprints: Vec<CompletionFingerprint> = rows
                .iter()
                .map(|r| CompletionFingerprint { fingerprint: r.get(0), expires_at_ms: r.get(1) })
                .collect();
            let last = fingerprints.last().map(|f| PageKey::text(&[&f.fingerprint]));
            (Records::CompletionFingerprints(fingerprints), last)
        }
        RecordKind::CoordinatorPresence => {
            let limit = i64::from(limit);
            let rows = match from {
                From::Key(k) => db.query(PRESENCE_AFTER, &[&mesh_id, &k[0], &limit])?,
                _ => db.query(PRESENCE_FIRST, &[&mesh_id, &limit])?,
            };
            let presence: Vec<PresenceRecord> = rows
                .iter()
                .map(|r| PresenceRecord {
                    coordinator_key: r.get(0),
                    machine: r.get(1),
                    daemon_id: r.get(2),
                    run_id: r.get(3),
                    session_id: r.get(4),
                    last_seen_ms: r.get(5),
                    ended_at_ms: r.get(6),
                })
                .collect();
            let last = presence.last().map(|p| PageKey::text(&[&p.coordinator_key]));
            (Records::CoordinatorPresence(presence), last)
        }
    };
    Ok(ExportPage::new(records, limit, last))
}

/// Imports one page of records in the caller's transaction; a record the
/// mesh holds already is counted, not written again.
fn import(db: &Db<'_>, mesh_id: &str, records: &Records) -> Res<ImportReport> {
    let mut report = ImportReport::default();
    match records {
        Records::Tasks(tasks) => {
            report.inserted = crate::tasks::import_entries(db, tasks)?;
            report.existing = tasks.len() as u64 - report.inserted;
        }
        Records::Missions(rows) => {
            for m in rows {
                let n = db.execute(
                    "INSERT INTO mesh_missions (id, mesh_id, title, goal, status, created_at, updated_at, source)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (mesh_id, id) DO NOTHING",
                    &[&m.id, &m.mesh_id, &m.title, &m.goal, &m.status, &m.created_at, &m.updated_at, &m.source],
                )?;
                report.tally(n);
            }
        }
        Records::Ledger(entries) => {
            for entry in entries {
                report.tally(u64::from(crate::ledger::append_imported(db, entry)?));
            }
        }
        Records::InboxEvents(events) => {
            for event in events {
                import_event(db, event, &mut report)?;
            }
        }
        Records::SchedulerCursor(values) => {
            for value in values {
                let cursor = i64::try_from(*value).unwrap_or(i64::MAX);
                let n = db.execute(
                    "INSERT INTO mesh_scheduler_cursor (mesh_id, cursor) VALUES ($1, $2)
                     ON CONFLICT (mesh_id) DO NOTHING",
                    &[&mesh_id, &cursor],
                )?;
                report.tally(n);
            }
        }
        Records::DirectDispatches(rows) => {
            for d in rows {
                let to_idle = i64::from(d.dispatched_to_idle_session);
                let n = db.execute(
                    "INSERT INTO mesh_direct_dispatches (task_id, mesh_id, node_id, session_id, provider_type,
                         message, task_mode, via, status, dispatched_to_idle_session, dispatched_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                     ON CONFLICT (mesh_id, task_id) DO NOTHING",
                    &[
                        &d.task_id,
                        &d.mesh_id,
                        &d.node_id,
                        &d.session_id,
                        &d.provider_type,
                        &d.message,
                        &d.task_mode,
                        &d.via,
                        &d.status.as_str(),
                        &to_idle,
                        &d.dispatched_at,
                        &d.updated_at,
                    ],
                )?;
                report.tally(n);
            }
        }
        Records::SessionDeliveries(rows) => {
            for d in rows {
                let attempts = i64::from(d.attempt_count);
                let n = db.execute(
                    "INSERT INTO mesh_session_delivery (id, mesh_id, node_id, session_id, provider_type, task_id,
                         kind, priority, message, status, deliver_after, expires_at, attempt_count,
                         source_coordinator_session_id, source_coordinator_daemon_id, last_error, created_at,
                         updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
                     ON CONFLICT (mesh_id, id) DO NOTHING",
                    &[
                        &d.id,
                        &d.mesh_id,
                        &d.node_id,
                        &d.session_id,
                        &d.provider_type,
                        &d.task_id,
                        &d.kind,
                        &d.priority,
                        &d.message,
                        &d.status.as_str(),
                        &d.deliver_after,
                        &d.expires_at,
                        &attempts,
                        &d.source_coordinator_session_id,
                        &d.source_coordinator_daemon_id,
                        &d.last_error,
                        &d.created_at,
                        &d.updated_at,
                    ],
                )?;
                report.tally(n);
            }
        }
        Records::CompletionConflicts(rows) => {
            for c in rows {
                let n = db.execute(
                    "INSERT INTO mesh_completion_conflicts (id, mesh_id, fingerprint, conflicting_task_id,
                         conflicting_session_id, original_task_id, original_session_id, event, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (mesh_id, id) DO NOTHING",
                    &[
                        &c.id,
                        &c.mesh_id,
                        &c.fingerprint,
                        &c.conflicting_task_id,
                        &c.conflicting_session_id,
                        &c.original_task_id,
                        &c.original_session_id,
                        &c.event,
                        &c.created_at,
                    ],
                )?;
                report.tally(n);
            }
        }
        Records::IdleSessions(rows) => {
            for s in rows {
                let metadata = s.metadata.as_ref().map(serde_json::Value::to_string);
                let n = db.execute(
                    "INSERT INTO remote_idle_sessions (mesh_id, node_id, session_id, provider_type, expires_at,
                         metadata)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (mesh_id, node_id, session_id) DO NOTHING",
                    &[&mesh_id, &s.node_id, &s.session_id, &s.provider_type, &s.expires_at_ms, &metadata],
                )?;
                report.tally(n);
            }
        }
        Records::CompletionFingerprints(rows) => {
            for f in rows {
                let n = db.execute(
                    "INSERT INTO mesh_completion_fingerprints (mesh_id, fingerprint, expires_at)
                     VALUES ($1, $2, $3) ON CONFLICT (mesh_id, fingerprint) DO NOTHING",
                    &[&mesh_id, &f.fingerprint, &f.expires_at_ms],
                )?;
                report.tally(n);
            }
        }
        Records::CoordinatorPresence(rows) => {
            for p in rows {
                let n = db.execute(
                    "INSERT INTO mesh_coordinator_presence (mesh_id, coordinator_key, machine, daemon_id, run_id,
                         session_id, last_seen_ms, ended_at_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (mesh_id, coordinator_key) DO NOTHING",
                    &[
                        &mesh_id,
                        &p.coordinator_key,
                        &p.machine,
                        &p.daemon_id,
                        &p.run_id,
                        &p.session_id,
                        &p.last_seen_ms,
                        &p.ended_at_ms,
                    ],
                )?;
                report.tally(n);
            }
        }
        Records::ToolCalls(rows) => {
            // The `occurrence`-th of its identical calls goes in unless that
            // many are in already.
            for r in rows {
                let c = &r.call;
                let n = db.execute(
                    "INSERT INTO mesh_tool_call_log (mesh_id, tool, session_id, called_at, caller_role)
                     SELECT $1, $2, $3, $4, $5
                      WHERE (SELECT COUNT(*) FROM mesh_tool_call_log
                              WHERE mesh_id = $1 AND tool = $2 AND called_at = $4
                                AND session_id IS NOT DISTINCT FROM $3
                                AND caller_role IS NOT DISTINCT FROM $5) < $6",
                    &[
                        &mesh_id,
                        &c.tool,
                        &c.session_id,
                        &c.called_at_ms,
                        &c.caller_role,
                        &i64::from(r.occurrence),
                    ],
                )?;
                report.tally(n);
            }
        }
    }
    Ok(report)
}

/// Inserts an event row as it was stored, with its queue entry when it is
/// undrained, or its event-id dedup record when it was drained; an event whose
/// fingerprint another event of the mesh holds is a conflict.
fn import_event(db: &Db<'_>, e: &StoredEvent, report: &mut ImportReport) -> Res<()> {
    let held = db.query_opt(
        "SELECT id FROM mesh_pending_events
          WHERE mesh_id = $1 AND (id = $2 OR (fingerprint IS NOT NULL AND fingerprint = $3))
          ORDER BY id = $2 DESC LIMIT 1",
        &[&e.mesh_id, &e.id, &e.fingerprint],
    )?;
    if let Some(row) = held {
        let holder: String = row.get(0);
        if holder == e.id {
            report.existing += 1;
        } else {
            report.conflicts.push(TransferConflict {
                kind: RecordKind::InboxEvents,
                id: e.id.clone(),
                reason: format!("its fingerprint is used by event {holder} of the mesh in the target"),
            });
        }
        return Ok(());
    }
    let r = &e.route;
    let row = db.query_one(
        "INSERT INTO mesh_pending_events
             (id, mesh_id, coordinator_daemon_id, event, payload, fingerprint, queued_at,
              event_id, intended_for, route_class, to_machine, to_key, to_fallback, to_session, lane)
         VALUES ($2, $1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
         RETURNING row_id",
        &crate::db::refs(&crate::inbox::event_values(e.clone())),
    )?;
    let row_id: i64 = row.get(0);
    if !e.drained {
        db.execute(
            "INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_row_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[&e.mesh_id, &r.lane, &e.queued_at_ms, &e.id, &e.coordinator_daemon_id, &e.name, &row_id],
        )?;
    } else if let Some(event_id) = &r.event_id {
        db.execute(
            "INSERT INTO mesh_inbox_drained (mesh_id, event_id, id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&e.mesh_id, event_id, &e.id],
        )?;
    }
    report.inserted += 1;
    Ok(())
}

impl TransferStore for PgStore {
    fn transfer_meshes(&self) -> StoreResult<Vec<String>> {
        self.read(|db| Ok(db.query(MESHES, &[])?.iter().map(|r| r.get(0)).collect()))
    }

    fn export_page(
        &self,
        mesh_id: &str,
        kind: RecordKind,
        after: Option<&PageKey>,
        limit: u32,
    ) -> StoreResult<ExportPage> {
        let from = from(kind, after)?;
        self.read(|db| export(db, mesh_id, kind, &from, limit))
    }

    fn import_page(&self, mesh_id: &str, records: &Records) -> StoreResult<ImportReport> {
        records.check_mesh(mesh_id)?;
        if records.is_empty() {
            return Ok(ImportReport::default());
        }
        self.write_exclusive(mesh_id, |db| import(db, mesh_id, records))
    }
}

/// Whether the installation `options` names exists: its schema holds an
/// agentmesh schema (what [`PgStore::open`] would otherwise create). Creates
/// nothing.
pub fn installation_exists(options: &PgOptions) -> StoreResult<bool> {
    let config = postgres::Config::from(crate::parse_url(&options.url)?);
    crate::validate_schema(&options.schema).map_err(StoreError::InvalidInput)?;
    let mut client = config.connect(postgres::NoTls).map_err(crate::classify)?;
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables
                             WHERE table_schema = $1 AND table_name = 'agentmesh_migrations')",
            &[&options.schema],
        )
        .map_err(crate::classify)?;
    Ok(row.get(0))
}

/// Whether two options name the same installation: the same server, database
/// and schema (compared as parsed, so spellings of one URL agree).
pub fn same_installation(a: &PgOptions, b: &PgOptions) -> bool {
    let place = |o: &PgOptions| -> Option<(String, String)> {
        let config = crate::parse_url(&o.url).ok()?;
        Some((crate::describe(&config), o.schema.clone()))
    };
    match (place(a), place(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.url.trim() == b.url.trim() && a.schema == b.schema,
    }
}
