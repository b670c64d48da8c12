//! The SQL of the refine reconciliation (`agentmesh_store::inbox_writes`
//! reconciles what a drain or peek hands out): the ledger entry of a refine
//! job's outcome.

use agentmesh_core::LedgerEntry;
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

/// The newest `task_completed`/`task_failed` entry of the refine job `job`.
pub(super) fn refine_outcome(db: &Db<'_>, mesh_id: &str, job: &str) -> Res<Option<LedgerEntry>> {
    use agentmesh_core::events::refine::REFINE_SOURCE;
    Ok(db.query_opt(REFINE_OUTCOME, &[&mesh_id, &REFINE_SOURCE, &job])?.as_ref().map(ledger_entry))
}
