//! Copying meshes out of and into the file ([`TransferStore`]).
//!
//! Pages follow the tables' rowids (the ledger's `seq`, its append order), so the
//! rows a copy inserts keep the source's row order, which is every listing's
//! tie-break; the tables without a row order of their own (idle sessions,
//! fingerprints, presence) page by their key. Task, mission, ledger entry, event,
//! dispatch, delivery and conflict ids are unique per database here: a record
//! whose id another mesh holds is reported as a conflict and not inserted.

use agentmesh_core::{CompletionFingerprint, IdleSession, Task};
use agentmesh_store::transfer::{
    EventRoute, ExportPage, ImportReport, PageKey, PresenceRecord, RecordKind, Records, StoredEvent,
    ToolCallRecord, TransferConflict, TransferStore, bad_key,
};
use agentmesh_store::{RecordedToolCall, StoreResult};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::payload::{Bytes, Json};
use crate::{Res, SqliteStore};

/// Every mesh with a record of any kind.
const MESHES: &str = "SELECT mesh_id FROM mesh_queue UNION SELECT mesh_id FROM mesh_missions
    UNION SELECT mesh_id FROM mesh_event_ledger UNION SELECT mesh_id FROM mesh_pending_events
    UNION SELECT mesh_id FROM mesh_scheduler_cursor UNION SELECT mesh_id FROM mesh_direct_dispatches
    UNION SELECT mesh_id FROM mesh_session_delivery UNION SELECT mesh_id FROM remote_idle_sessions
    UNION SELECT mesh_id FROM mesh_completion_fingerprints UNION SELECT mesh_id FROM mesh_completion_conflicts
    UNION SELECT mesh_id FROM mesh_tool_call_log UNION SELECT mesh_id FROM mesh_coordinator_presence
    ORDER BY 1";

const EVENT_COLUMNS: &str =
    "e.id, e.mesh_id, e.coordinator_daemon_id, e.event, e.payload, e.fingerprint, e.queued_at,
    e.event_id, e.intended_for, e.route_class, e.to_machine, e.to_key, e.to_fallback, e.to_session, e.lane";

const CONFLICT_COLUMNS: &str = "id, mesh_id, fingerprint, conflicting_task_id, conflicting_session_id, \
                                original_task_id, original_session_id, event, created_at";

fn taken_elsewhere(kind: RecordKind, id: &str, mesh: &str) -> TransferConflict {
    TransferConflict {
        kind,
        id: id.to_owned(),
        reason: format!("the id is used in mesh {mesh} of the target (ids are unique per database there)"),
    }
}

/// A rowid cursor: after the key's row, or from the start.
fn after_row(after: Option<&PageKey>) -> StoreResult<i64> {
    match after {
        None => Ok(0),
        Some(key) => key.as_number().ok_or_else(|| bad_key(key)),
    }
}

/// A natural-key cursor of `parts` text parts (empty strings from the start).
fn after_text(after: Option<&PageKey>, parts: usize) -> StoreResult<Option<Vec<String>>> {
    match after {
        None => Ok(None),
        Some(key) => match key.as_text() {
            Some(text) if text.len() == parts => Ok(Some(text)),
            _ => Err(bad_key(key)),
        },
    }
}

/// Rows of `sql` (bound to the mesh, the cursor and the limit), each mapped with
/// its rowid, the statement's last column (`key`).
fn paged<T>(
    conn: &Connection,
    sql: &str,
    (mesh_id, after, limit): (&str, i64, u32),
    key: usize,
    map: impl Fn(&Row<'_>) -> Res<T>,
) -> Res<(Vec<T>, Option<i64>)> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params![mesh_id, after, limit])?;
    let mut out = Vec::new();
    let mut last = None;
    while let Some(row) = rows.next()? {
        last = Some(row.get::<_, i64>(key)?);
        out.push(map(row)?);
    }
    Ok((out, last))
}

fn export(conn: &Connection, mesh_id: &str, kind: RecordKind, after: &Cursor, limit: u32) -> Res<ExportPage> {
    let by_row = |key: Option<i64>| key.map(PageKey::number);
    let page = match kind {
        RecordKind::Tasks => {
            let (tasks, last) = paged(
                conn,
                "SELECT id, payload, rowid FROM mesh_queue WHERE mesh_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3",
                (mesh_id, after.row, limit),
                2,
                |r| {
                    let id: String = r.get(0)?;
                    let payload: Bytes = r.get(1)?;
                    crate::tasks::decode(&id, &payload.0)
                },
            )?;
            ExportPage::new(Records::Tasks(tasks), limit, by_row(last))
        }
        RecordKind::Missions => {
            let sql = format!(
                "SELECT {}, rowid FROM mesh_missions WHERE mesh_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3",
                crate::missions::COLUMNS
            );
            let (missions, last) =
                paged(conn, &sql, (mesh_id, after.row, limit), 8, |r| Ok(crate::missions::from_row(r)?))?;
            ExportPage::new(Records::Missions(missions), limit, by_row(last))
        }
        RecordKind::Ledger => {
            let (entries, last) = paged(
                conn,
                "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload, seq
                   FROM mesh_event_ledger WHERE mesh_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                (mesh_id, after.row, limit),
                8,
                |r| Ok(crate::ledger::entry_from_row(r)?),
            )?;
            ExportPage::new(Records::Ledger(entries), limit, by_row(last))
        }
        RecordKind::InboxEvents => {
            let sql = format!(
                "SELECT {EVENT_COLUMNS},
                        EXISTS (SELECT 1 FROM mesh_inbox_queue q
                                 WHERE q.mesh_id = e.mesh_id AND q.lane = e.lane AND q.queued_at = e.queued_at
                                   AND q.id = e.id),
                        e.rowid
                   FROM mesh_pending_events e WHERE e.mesh_id = ?1 AND e.rowid > ?2 ORDER BY e.rowid LIMIT ?3"
            );
            let (events, last) = paged(conn, &sql, (mesh_id, after.row, limit), 16, event_from_row)?;
            ExportPage::new(Records::InboxEvents(events), limit, by_row(last))
        }
        RecordKind::SchedulerCursor => {
            let cursor: Option<i64> = conn
                .prepare_cached("SELECT cursor FROM mesh_scheduler_cursor WHERE mesh_id = ?1")?
                .query_row([mesh_id], |r| r.get(0))
                .optional()?;
            let values = if after.started {
                Vec::new()
            } else {
                cursor.map(|c| c.max(0) as u64).into_iter().collect()
            };
            ExportPage { records: Records::SchedulerCursor(values), next: None }
        }
        RecordKind::DirectDispatches => {
            let sql = format!(
                "SELECT {}, rowid FROM mesh_direct_dispatches WHERE mesh_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3",
                crate::runtime::DISPATCH_COLUMNS
            );
            let (rows, last) = paged(conn, &sql, (mesh_id, after.row, limit), 12, |r| {
                Ok(crate::runtime::dispatch_from_row(r)?)
            })?;
            ExportPage::new(Records::DirectDispatches(rows), limit, by_row(last))
        }
        RecordKind::SessionDeliveries => {
            let sql = format!(
                "SELECT {}, rowid FROM mesh_session_delivery WHERE mesh_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3",
                crate::runtime::DELIVERY_COLUMNS
            );
            let (rows, last) = paged(conn, &sql, (mesh_id, after.row, limit), 18, |r| {
                Ok(crate::runtime::delivery_from_row(r)?)
            })?;
            ExportPage::new(Records::SessionDeliveries(rows), limit, by_row(last))
        }
        RecordKind::CompletionConflicts => {
            let sql = format!(
                "SELECT {CONFLICT_COLUMNS}, rowid FROM mesh_completion_conflicts
                  WHERE mesh_id = ?1 AND rowid > ?2 ORDER BY rowid LIMIT ?3"
            );
            let (rows, last) = paged(conn, &sql, (mesh_id, after.row, limit), 9, |r| {
                Ok(agentmesh_core::CompletionConflict {
                    id: r.get(0)?,
                    mesh_id: r.get(1)?,
                    fingerprint: r.get(2)?,
                    conflicting_task_id: r.get(3)?,
                    conflicting_session_id: r.get(4)?,
                    original_task_id: r.get(5)?,
                    original_session_id: r.get(6)?,
                    event: r.get(7)?,
                    created_at: r.get(8)?,
                })
            })?;
            ExportPage::new(Records::CompletionConflicts(rows), limit, by_row(last))
        }
        RecordKind::ToolCalls => {
            let (rows, last) = paged(
                conn,
                "SELECT t.id, t.tool, t.session_id, t.caller_role, t.called_at,
                        (SELECT COUNT(*) FROM mesh_tool_call_log o
                          WHERE o.mesh_id = t.mesh_id AND o.tool = t.tool AND o.called_at = t.called_at
                            AND o.session_id IS t.session_id AND o.caller_role IS t.caller_role AND o.id <= t.id)
                   FROM mesh_tool_call_log t WHERE t.mesh_id = ?1 AND t.id > ?2 ORDER BY t.id LIMIT ?3",
                (mesh_id, after.row, limit),
                0,
                |r| {
                    Ok(ToolCallRecord {
                        call: RecordedToolCall {
                            tool: r.get(1)?,
                            session_id: r.get(2)?,
                            caller_role: r.get(3)?,
                            called_at_ms: r.get(4)?,
                        },
                        occurrence: r.get(5)?,
                    })
                },
            )?;
            ExportPage::new(Records::ToolCalls(rows), limit, by_row(last))
        }
        RecordKind::IdleSessions => {
            let (sql, from) = match &after.text {
                None => (
                    "SELECT mesh_id, node_id, session_id, provider_type, expires_at, metadata
                       FROM remote_idle_sessions WHERE mesh_id = ?1 AND ?2 IS NULL AND ?3 IS NULL
                      ORDER BY node_id, session_id LIMIT ?4",
                    (None, None),
                ),
                Some(parts) => (
                    "SELECT mesh_id, node_id, session_id, provider_type, expires_at, metadata
                       FROM remote_idle_sessions WHERE mesh_id = ?1 AND (node_id, session_id) > (?2, ?3)
                      ORDER BY node_id, session_id LIMIT ?4",
                    (Some(parts[0].as_str()), Some(parts[1].as_str())),
                ),
            };
            let mut stmt = conn.prepare_cached(sql)?;
            let rows = stmt
                .query_map(params![mesh_id, from.0, from.1, limit], |r| {
                    let metadata: Option<String> = r.get(5)?;
                    Ok(IdleSession {
                        mesh_id: r.get(0)?,
                        node_id: r.get(1)?,
                        session_id: r.get(2)?,
                        provider_type: r.get(3)?,
                        expires_at_ms: r.get(4)?,
                        metadata: metadata.and_then(|m| serde_json::from_str(&m).ok()),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let last = rows.last().map(|s| PageKey::text(&[&s.node_id, &s.session_id]));
            ExportPage::new(Records::IdleSessions(rows), limit, last)
        }
        RecordKind::CompletionFingerprints => {
            let from = after.text.as_ref().map(|p| p[0].as_str());
            let sql = if from.is_some() {
                "SELECT fingerprint, expires_at FROM mesh_completion_fingerprints
                  WHERE mesh_id = ?1 AND fingerprint > ?2 ORDER BY fingerprint LIMIT ?3"
            } else {
                "SELECT fingerprint, expires_at FROM mesh_completion_fingerprints
                  WHERE mesh_id = ?1 AND ?2 IS NULL ORDER BY fingerprint LIMIT ?3"
            };
            let rows = conn
                .prepare_cached(sql)?
                .query_map(params![mesh_id, from, limit], |r| {
                    Ok(CompletionFingerprint { fingerprint: r.get(0)?, expires_at_ms: r.get(1)? })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let last = rows.last().map(|f| PageKey::text(&[&f.fingerprint]));
            ExportPage::new(Records::CompletionFingerprints(rows), limit, last)
        }
        RecordKind::CoordinatorPresence => {
            let from = after.text.as_ref().map(|p| p[0].as_str());
            let sql = if from.is_some() {
                "SELECT coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms, ended_at_ms
                   FROM mesh_coordinator_presence WHERE mesh_id = ?1 AND coordinator_key > ?2
                  ORDER BY coordinator_key LIMIT ?3"
            } else {
                "SELECT coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms, ended_at_ms
                   FROM mesh_coordinator_presence WHERE mesh_id = ?1 AND ?2 IS NULL
                  ORDER BY coordinator_key LIMIT ?3"
            };
            let rows = conn
                .prepare_cached(sql)?
                .query_map(params![mesh_id, from, limit], |r| {
                    Ok(PresenceRecord {
                        coordinator_key: r.get(0)?,
                        machine: r.get(1)?,
                        daemon_id: r.get(2)?,
                        run_id: r.get(3)?,
                        session_id: r.get(4)?,
                        last_seen_ms: r.get(5)?,
                        ended_at_ms: r.get(6)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let last = rows.last().map(|p| PageKey::text(&[&p.coordinator_key]));
            ExportPage::new(Records::CoordinatorPresence(rows), limit, last)
        }
    };
    Ok(page)
}

fn event_from_row(r: &Row<'_>) -> Res<StoredEvent> {
    let queued: bool = r.get(15)?;
    Ok(StoredEvent {
        id: r.get(0)?,
        mesh_id: r.get(1)?,
        coordinator_daemon_id: r.get(2)?,
        name: r.get(3)?,
        payload: r.get::<_, Json>(4)?.0,
        fingerprint: r.get(5)?,
        queued_at_ms: r.get(6)?,
        drained: !queued,
        route: EventRoute {
            event_id: r.get(7)?,
            intended_for: r.get(8)?,
            route_class: r.get(9)?,
            to_machine: r.get(10)?,
            to_key: r.get(11)?,
            to_fallback: r.get(12)?,
            to_session: r.get(13)?,
            lane: r.get(14)?,
        },
    })
}

/// Where an export starts, decoded from its key.
struct Cursor {
    /// After this rowid (0: from the start).
    row: i64,
    /// After this natural key.
    text: Option<Vec<String>>,
    /// A key was given at all.
    started: bool,
}

fn cursor(kind: RecordKind, after: Option<&PageKey>) -> StoreResult<Cursor> {
    let started = after.is_some();
    Ok(match kind {
        RecordKind::IdleSessions => Cursor { row: 0, text: after_text(after, 2)?, started },
        RecordKind::CompletionFingerprints | RecordKind::CoordinatorPresence => {
            Cursor { row: 0, text: after_text(after, 1)?, started }
        }
        RecordKind::SchedulerCursor => Cursor { row: 0, text: None, started },
        _ => Cursor { row: after_row(after)?, text: None, started },
    })
}

/// The mesh holding `id` in a table whose ids are unique per database.
fn holder(conn: &Connection, sql: &str, id: &str) -> Res<Option<String>> {
    Ok(conn.prepare_cached(sql)?.query_row([id], |r| r.get(0)).optional()?)
}

/// Sorts `ids` (with their records) into new, existing and conflicting, by the
/// mesh that holds each id in the database.
fn triage<'r, T>(
    conn: &Connection,
    mesh_id: &str,
    kind: RecordKind,
    sql: &str,
    records: &'r [T],
    id: impl Fn(&T) -> &str,
    report: &mut ImportReport,
) -> Res<Vec<&'r T>> {
    let mut fresh = Vec::new();
    for record in records {
        match holder(conn, sql, id(record))? {
            None => fresh.push(record),
            Some(m) if m == mesh_id => report.existing += 1,
            Some(m) => report.conflicts.push(taken_elsewhere(kind, id(record), &m)),
        }
    }
    Ok(fresh)
}

fn import(conn: &Connection, mesh_id: &str, records: &Records) -> Res<ImportReport> {
    let mut report = ImportReport::default();
    let kind = records.kind();
    match records {
        Records::Tasks(tasks) => {
            let fresh = triage(
                conn,
                mesh_id,
                kind,
                "SELECT mesh_id FROM mesh_queue WHERE id = ?1
                 UNION ALL SELECT mesh_id FROM archive.archived_tasks WHERE id = ?1",
                tasks,
                |t| &t.id,
                &mut report,
            )?;
            let fresh: Vec<Task> = fresh.into_iter().cloned().collect();
            report.inserted = crate::tasks::import_entries(conn, &fresh)?;
        }
        Records::Missions(missions) => {
            let fresh = triage(
                conn,
                mesh_id,
                kind,
                "SELECT mesh_id FROM mesh_missions WHERE id = ?1",
                missions,
                |m| &m.id,
                &mut report,
            )?;
            let mut insert = conn.prepare_cached(&format!(
                "INSERT INTO mesh_missions ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                crate::missions::COLUMNS
            ))?;
            for m in fresh {
                insert.execute(params![
                    m.id,
                    m.mesh_id,
                    m.title,
                    m.goal,
                    m.status,
                    m.created_at,
                    m.updated_at,
                    m.source
                ])?;
                report.inserted += 1;
            }
        }
        Records::Ledger(entries) => {
            let fresh = triage(
                conn,
                mesh_id,
                kind,
                "SELECT mesh_id FROM mesh_event_ledger WHERE id = ?1
                 UNION ALL SELECT mesh_id FROM archive.archived_ledger WHERE id = ?1",
                entries,
                |e| &e.id,
                &mut report,
            )?;
            for entry in fresh {
                report.inserted += u64::from(crate::ledger::append(conn, entry)?);
            }
        }
        Records::InboxEvents(events) => {
            let fresh = triage(
                conn,
                mesh_id,
                kind,
                "SELECT mesh_id FROM mesh_pending_events WHERE id = ?1",
                events,
                |e| &e.id,
                &mut report,
            )?;
            for event in fresh {
                if let Some(other) = fingerprint_holder(conn, event)? {
                    report.conflicts.push(TransferConflict {
                        kind,
                        id: event.id.clone(),
                        reason: format!("its fingerprint is used by event {other} of the mesh in the target"),
                    });
                    continue;
                }
                report.tally(u64::from(crate::inbox::store_event(conn, event)?));
            }
        }
        Records::SchedulerCursor(values) => {
            for value in values {
                let n = conn
                    .prepare_cached(
                        "INSERT INTO mesh_scheduler_cursor (mesh_id, cursor) VALUES (?1, ?2)
                         ON CONFLICT (mesh_id) DO NOTHING",
                    )?
                    .execute(params![mesh_id, i64::try_from(*value).unwrap_or(i64::MAX)])?;
                report.tally(n as u64);
            }
        }
        Records::DirectDispatches(rows) => {
            let fresh = triage(
                conn,
                mesh_id,
                kind,
                "SELECT mesh_id FROM mesh_direct_dispatches WHERE task_id = ?1",
                rows,
                |d| &d.task_id,
                &mut report,
            )?;
            let mut insert = conn.prepare_cached(&format!(
                "INSERT INTO mesh_direct_dispatches ({})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                crate::runtime::DISPATCH_COLUMNS
            ))?;
            for d in fresh {
                insert.execute(params![
                    d.task_id,
                    d.mesh_id,
                    d.node_id,
                    d.session_id,
                    d.provider_type,
                    d.message,
                    d.task_mode,
                    d.via,
                    d.status.as_str(),
                    d.dispatched_to_idle_session,
                    d.dispatched_at,
                    d.updated_at,
                ])?;
                report.inserted += 1;
            }
        }
        Records::SessionDeliveries(rows) => {
            let fresh = triage(
                conn,
                mesh_id,
                kind,
                "SELECT mesh_id FROM mesh_session_delivery WHERE id = ?1",
                rows,
                |d| &d.id,
                &mut report,
            )?;
            let mut insert = conn.prepare_cached(&format!(
                "INSERT INTO mesh_session_delivery ({})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                crate::runtime::DELIVERY_COLUMNS
            ))?;
            for d in fresh {
                insert.execute(params![
                    d.id,
                    d.mesh_id,
                    d.node_id,
                    d.session_id,
                    d.provider_type,
                    d.task_id,
                    d.kind,
                    d.priority,
                    d.message,
                    d.status.as_str(),
                    d.deliver_after,
                    d.expires_at,
                    d.attempt_count,
                    d.source_coordinator_session_id,
                    d.source_coordinator_daemon_id,
                    d.last_error,
                    d.created_at,
                    d.updated_at,
                ])?;
                report.inserted += 1;
            }
        }
        Records::CompletionConflicts(rows) => {
            let fresh = triage(
                conn,
                mesh_id,
                kind,
                "SELECT mesh_id FROM mesh_completion_conflicts WHERE id = ?1",
                rows,
                |c| &c.id,
                &mut report,
            )?;
            let mut insert = conn.prepare_cached(&format!(
                "INSERT INTO mesh_completion_conflicts ({CONFLICT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ))?;
            for c in fresh {
                insert.execute(params![
                    c.id,
                    c.mesh_id,
                    c.fingerprint,
                    c.conflicting_task_id,
                    c.conflicting_session_id,
                    c.original_task_id,
                    c.original_session_id,
                    c.event,
                    c.created_at,
                ])?;
                report.inserted += 1;
            }
        }
        Records::IdleSessions(rows) => {
            let mut insert = conn.prepare_cached(
                "INSERT OR IGNORE INTO remote_idle_sessions
                     (mesh_id, node_id, session_id, provider_type, expires_at, metadata)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for s in rows {
                let metadata = s.metadata.as_ref().map(serde_json::Value::to_string);
                let n = insert.execute(params![
                    mesh_id,
                    s.node_id,
                    s.session_id,
                    s.provider_type,
                    s.expires_at_ms,
                    metadata
                ])?;
                report.tally(n as u64);
            }
        }
        Records::CompletionFingerprints(rows) => {
            let mut insert = conn.prepare_cached(
                "INSERT OR IGNORE INTO mesh_completion_fingerprints (mesh_id, fingerprint, expires_at)
                 VALUES (?1, ?2, ?3)",
            )?;
            for f in rows {
                report.tally(insert.execute(params![mesh_id, f.fingerprint, f.expires_at_ms])? as u64);
            }
        }
        Records::CoordinatorPresence(rows) => {
            let mut insert = conn.prepare_cached(
                "INSERT OR IGNORE INTO mesh_coordinator_presence
                     (mesh_id, coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms, ended_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for p in rows {
                let n = insert.execute(params![
                    mesh_id,
                    p.coordinator_key,
                    p.machine,
                    p.daemon_id,
                    p.run_id,
                    p.session_id,
                    p.last_seen_ms,
                    p.ended_at_ms
                ])?;
                report.tally(n as u64);
            }
        }
        Records::ToolCalls(rows) => {
            for r in rows {
                let c = &r.call;
                let held: u32 = conn
                    .prepare_cached(
                        "SELECT COUNT(*) FROM mesh_tool_call_log
                          WHERE mesh_id = ?1 AND tool = ?2 AND called_at = ?3 AND session_id IS ?4
                            AND caller_role IS ?5",
                    )?
                    .query_row(
                        params![mesh_id, c.tool, c.called_at_ms, c.session_id, c.caller_role],
                        |r| r.get(0),
                    )?;
                if held >= r.occurrence {
                    report.existing += 1;
                    continue;
                }
                conn.prepare_cached(
                    "INSERT INTO mesh_tool_call_log (mesh_id, tool, session_id, called_at, caller_role)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    mesh_id,
                    c.tool,
                    c.session_id,
                    c.called_at_ms,
                    c.caller_role
                ])?;
                report.inserted += 1;
            }
        }
    }
    Ok(report)
}

/// The id of another event of the mesh holding `event`'s fingerprint.
fn fingerprint_holder(conn: &Connection, event: &StoredEvent) -> Res<Option<String>> {
    let Some(fingerprint) = &event.fingerprint else { return Ok(None) };
    Ok(conn
        .prepare_cached("SELECT id FROM mesh_pending_events WHERE mesh_id = ?1 AND fingerprint = ?2")?
        .query_row(params![event.mesh_id, fingerprint], |r| r.get(0))
        .optional()?)
}

impl TransferStore for SqliteStore {
    fn transfer_meshes(&self) -> StoreResult<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(MESHES)?;
            Ok(stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?)
        })
    }

    fn export_page(
        &self,
        mesh_id: &str,
        kind: RecordKind,
        after: Option<&PageKey>,
        limit: u32,
    ) -> StoreResult<ExportPage> {
        let after = cursor(kind, after)?;
        if kind == RecordKind::Tasks {
            self.ensure_legacy_queue(mesh_id);
        }
        self.read(|conn| export(conn, mesh_id, kind, &after, limit))
    }

    fn import_page(&self, mesh_id: &str, records: &Records) -> StoreResult<ImportReport> {
        records.check_mesh(mesh_id)?;
        if records.is_empty() {
            return Ok(ImportReport::default());
        }
        self.ensure_legacy_queue(mesh_id);
        self.write(|conn| import(conn, mesh_id, records))
    }
}
