//! What a drain or peek hands out, reconciled: refine terminals rebuilt from the
//! ledger, superseded acceptances and alerts about finished tasks left out.

use agentmesh_core::Timestamp;
use agentmesh_store::{InboxEvent, RawJson};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{Res, ledger};

/// Applies the refine reconciliation to what a drain or peek hands out: a refine
/// job accepted in the batch whose terminal event is missing gets it rebuilt from
/// the ledger (found by job, however many newer entries there are), and accepted
/// events whose terminal is present are left out.
pub(super) fn reconcile_refine(
    conn: &Connection,
    mesh_id: &str,
    events: Vec<InboxEvent>,
    now: Timestamp,
) -> Res<Vec<InboxEvent>> {
    use agentmesh_core::events::refine;
    if !events.iter().any(|e| e.name == agentmesh_core::events::names::REFINE_ACCEPTED) {
        return Ok(events);
    }
    // A batch with a refine acceptance is read as trees (the only kind of batch
    // whose payloads a drain itself looks into).
    let values: Vec<serde_json::Value> = events.iter().map(|e| e.event.parse()).collect();
    let missing = refine::jobs_missing_a_terminal(&values);
    let mut backfilled = Vec::new();
    for job in &missing {
        let mut stmt = conn.prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger
              WHERE mesh_id = ?1 AND kind IN ('task_completed', 'task_failed') AND json_valid(payload)
                AND json_extract(payload, '$.source') = ?2
                AND TRIM(json_extract(payload, '$.refineJob.jobId')) = ?3
              ORDER BY timestamp DESC, seq DESC LIMIT 1",
        )?;
        let entry = stmt
            .query_row(params![mesh_id, refine::REFINE_SOURCE, job], ledger::entry_from_row)
            .optional()?;
        if let Some(entry) = entry.filter(|e| refine::is_refine_outcome(e, job)) {
            backfilled.push(refine::terminal_from_ledger(mesh_id, &entry, now));
        }
    }
    let paired: Vec<(InboxEvent, &serde_json::Value)> = events.into_iter().zip(&values).collect();
    let mut out: Vec<InboxEvent> =
        refine::drop_superseded(paired, |(_, v)| *v, &backfilled).into_iter().map(|(e, _)| e).collect();
    for event in backfilled {
        let (name, id) = refine::rebuilt_name_and_id(&event);
        out.push(InboxEvent {
            id,
            event: RawJson::from_value(&event),
            name,
            fingerprint: None,
            queued_at_ms: now.millis(),
        });
    }
    Ok(out)
}

/// Leaves out of what a drain or peek hands out the alerts about tasks that are
/// already finished ([`agentmesh_core::events::stale`]). A drain has taken them
/// off the queue with the rest: they are dropped, not left for later.
pub(super) fn drop_stale_alerts(
    conn: &Connection,
    mesh_id: &str,
    events: Vec<InboxEvent>,
) -> Res<Vec<InboxEvent>> {
    use agentmesh_core::TaskStatus;
    use agentmesh_core::events::names::is_stale_task_droppable_event;
    use agentmesh_core::events::stale::{alert_is_stale, droppable_alert_task_id};
    if !events.iter().any(|e| is_stale_task_droppable_event(&e.name)) {
        return Ok(events);
    }
    let mut stmt = conn.prepare_cached("SELECT status FROM mesh_queue WHERE mesh_id = ?1 AND id = ?2")?;
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        if is_stale_task_droppable_event(&event.name) {
            let value = event.event.parse();
            if let Some(task_id) = droppable_alert_task_id(&event.name, &value) {
                let status: Option<String> =
                    stmt.query_row(params![mesh_id, task_id], |r| r.get(0)).optional()?;
                let status = status.and_then(|s| s.parse::<TaskStatus>().ok());
                if alert_is_stale(status) {
                    tracing::debug!(mesh_id, task_id, event = %event.name, "dropped an alert about a finished task");
                    continue;
                }
            }
        }
        out.push(event);
    }
    Ok(out)
}
