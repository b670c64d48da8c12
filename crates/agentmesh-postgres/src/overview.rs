//! What the store holds per mesh, counted.

use std::collections::BTreeMap;

use agentmesh_core::TaskStatus;
use agentmesh_store::{MeshSummary, StatusCount};

use crate::Res;
use crate::db::{Db, unsigned};

/// Every mesh with a row in a mesh-scoped table, with its undrained events,
/// ledger entries and missions, by mesh id.
const MESHES: &str = "/* all meshes */
    SELECT m.mesh_id,
           (SELECT COUNT(*) FROM mesh_inbox_queue q WHERE q.mesh_id = m.mesh_id),
           (SELECT COUNT(*) FROM mesh_event_ledger l WHERE l.mesh_id = m.mesh_id),
           (SELECT COUNT(*) FROM mesh_missions s WHERE s.mesh_id = m.mesh_id)
      FROM (SELECT mesh_id FROM mesh_queue UNION SELECT mesh_id FROM mesh_event_ledger
            UNION SELECT mesh_id FROM mesh_pending_events UNION SELECT mesh_id FROM mesh_missions
            UNION SELECT mesh_id FROM mesh_session_delivery UNION SELECT mesh_id FROM mesh_direct_dispatches
            UNION SELECT mesh_id FROM remote_idle_sessions) AS m
     ORDER BY m.mesh_id";

/// Task counts by mesh and status.
const TASKS: &str =
    "/* all meshes */ SELECT mesh_id, status, COUNT(*) FROM mesh_queue GROUP BY mesh_id, status";

/// Every mesh with a row in any mesh-scoped table, with its counts, by mesh id.
/// The caller runs it in one snapshot, so the counts are of one moment.
pub(crate) fn mesh_summaries(db: &Db<'_>) -> Res<Vec<MeshSummary>> {
    let mut meshes: BTreeMap<String, MeshSummary> = BTreeMap::new();
    for row in db.query(MESHES, &[])? {
        let mesh_id: String = row.get(0);
        let summary = MeshSummary {
            mesh_id: mesh_id.clone(),
            tasks: Vec::new(),
            pending_events: unsigned(row.get(1)),
            ledger_entries: unsigned(row.get(2)),
            missions: unsigned(row.get(3)),
        };
        meshes.insert(mesh_id, summary);
    }
    for row in db.query(TASKS, &[])? {
        let mesh_id: String = row.get(0);
        let status: String = row.get(1);
        // A status this build does not know (a row written by something else) is
        // not counted under a wrong name.
        if let (Some(summary), Ok(status)) = (meshes.get_mut(&mesh_id), status.parse::<TaskStatus>()) {
            summary.tasks.push(StatusCount { status, count: unsigned(row.get(2)) });
        }
    }
    let mut out: Vec<MeshSummary> = meshes.into_values().collect();
    for summary in &mut out {
        summary.tasks.sort_by_key(|c| TaskStatus::ALL.iter().position(|s| *s == c.status));
    }
    Ok(out)
}
