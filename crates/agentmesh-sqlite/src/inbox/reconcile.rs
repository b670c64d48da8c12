//! The SQL of the refine reconciliation (`agentmesh_store::inbox_writes`
//! reconciles what a drain or peek hands out): the ledger entry of a refine
//! job's outcome.

use agentmesh_core::LedgerEntry;
use rusqlite::{Connection, OptionalExtension, params};

use crate::{Res, ledger};

/// The newest `task_completed`/`task_failed` entry of the refine job `job`.
pub(super) fn refine_outcome(conn: &Connection, mesh_id: &str, job: &str) -> Res<Option<LedgerEntry>> {
    use agentmesh_core::events::refine::REFINE_SOURCE;
    let mut stmt = conn.prepare_cached(
        "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
           FROM mesh_event_ledger
          WHERE mesh_id = ?1 AND kind IN ('task_completed', 'task_failed') AND json_valid(payload)
            AND json_extract(payload, '$.source') = ?2
            AND TRIM(json_extract(payload, '$.refineJob.jobId')) = ?3
          ORDER BY timestamp DESC, seq DESC LIMIT 1",
    )?;
    Ok(stmt.query_row(params![mesh_id, REFINE_SOURCE, job], ledger::entry_from_row).optional()?)
}
