//! What a drain or peek hands out, reconciled: refine terminals rebuilt from the
//! ledger, superseded acceptances and alerts about finished tasks left out.

use agentmesh_core::{LedgerEntry, Timestamp};
use agentmesh_store::{InboxEvent, RawJson};
use postgres::Row;

use crate::Res;
use crate::db::Db;

/// A ledger row read as (id, mesh_id, timestamp, kind, node_id, session_id,
/// provider_type, payload); an unparsable payload reads as `{}`.
pub(super) fn ledger_entry(row: &Row) -> LedgerEntry {
    let payload: String = row.get(7);
    LedgerEntry {
        id: row.get(0),
        mesh_id: row.get(1),
        timestamp: row.get(2),
        kind: row.get(3),
        node_id: row.get(4),
        session_id: row.get(5),
        provider_type: row.get(6),
        payload: serde_json::from_str(&payload).unwrap_or_else(|_| serde_json::json!({})),
    }
}

/// The newest refine outcome entry of a job: source in $2, job id in $3. The
/// ledger's payloads are JSON (every append serializes one).
const REFINE_OUTCOME: &str =
    "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
   FROM mesh_event_ledger
  WHERE mesh_id = $1 AND kind IN ('task_completed', 'task_failed')
    AND payload::jsonb ->> 'source' = $2
    AND btrim(payload::jsonb -> 'refineJob' ->> 'jobId') = $3
  ORDER BY timestamp DESC, seq DESC LIMIT 1";

/// Applies the refine reconciliation to what a drain or peek hands out: a refine
/// job accepted in the batch whose terminal event is missing gets it rebuilt from
/// the ledger, and accepted events whose terminal is present are left out.
pub(super) fn reconcile_refine(
    db: &Db<'_>,
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
        let job: &str = job.as_ref();
        let entry = db.query_opt(REFINE_OUTCOME, &[&mesh_id, &refine::REFINE_SOURCE, &job])?;
        if let Some(entry) = entry.as_ref().map(ledger_entry).filter(|e| refine::is_refine_outcome(e, job)) {
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
pub(super) fn drop_stale_alerts(db: &Db<'_>, mesh_id: &str, events: Vec<InboxEvent>) -> Res<Vec<InboxEvent>> {
    use agentmesh_core::TaskStatus;
    use agentmesh_core::events::names::is_stale_task_droppable_event;
    use agentmesh_core::events::stale::{alert_is_stale, droppable_alert_task_id};
    if !events.iter().any(|e| is_stale_task_droppable_event(&e.name)) {
        return Ok(events);
    }
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        if is_stale_task_droppable_event(&event.name) {
            let value = event.event.parse();
            if let Some(task_id) = droppable_alert_task_id(&event.name, &value) {
                let status = db
                    .query_opt(
                        "SELECT status FROM mesh_queue WHERE mesh_id = $1 AND id = $2",
                        &[&mesh_id, &task_id],
                    )?
                    .and_then(|r| r.get::<_, String>(0).parse::<TaskStatus>().ok());
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
