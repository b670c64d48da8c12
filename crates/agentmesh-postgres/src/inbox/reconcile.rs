//! The SQL of the refine reconciliation (`agentmesh_store::inbox_writes`
//! reconciles what a drain or peek hands out): the ledger entry of a refine
//! job's outcome.

use agentmesh_core::LedgerEntry;
use agentmesh_store::cells::LEDGER_COLUMNS as COLUMNS;

use crate::Res;
use crate::db::Db;
use crate::ledger::entry_from_row;

/// The newest refine outcome entry of a job: source in $2, job id in $3. The
/// ledger's payloads are JSON (every append serializes one).
static REFINE_OUTCOME: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {COLUMNS} FROM mesh_event_ledger
  WHERE mesh_id = $1 AND kind IN ('task_completed', 'task_failed')
    AND payload::jsonb ->> 'source' = $2
    AND btrim(payload::jsonb -> 'refineJob' ->> 'jobId') = $3
  ORDER BY timestamp DESC, seq DESC LIMIT 1"
    )
});

/// The newest `task_completed`/`task_failed` entry of the refine job `job`.
pub(super) fn refine_outcome(db: &Db<'_>, mesh_id: &str, job: &str) -> Res<Option<LedgerEntry>> {
    use agentmesh_core::events::refine::REFINE_SOURCE;
    db.query_opt(&REFINE_OUTCOME, &[&mesh_id, &REFINE_SOURCE, &job])?.as_ref().map(entry_from_row).transpose()
}
