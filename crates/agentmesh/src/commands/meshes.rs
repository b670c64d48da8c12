//! `agentmesh meshes`: the meshes the data dir (or the daemon) holds, with their
//! counts.
//!
//! The answer to "which mesh did I mean?": every mesh with a task, ledger entry,
//! inbox event, mission, delivery, dispatch or idle session, by id, with its tasks
//! by status, undrained events, ledger entries and missions. `--json` prints the
//! views `GET /v1/meshes` answers. Like every command that only reads, it refuses a
//! data dir with no database instead of creating one.

use std::io::{self, Write};

use agentmesh_api::views::MeshSummaryView;
use agentmesh_core::TaskStatus;
use serde_json::Value;

use super::Context;
use crate::output::{Output, Table};

/// Runs `meshes`.
pub(super) fn run(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    let meshes = ctx.read_api()?.meshes()?;
    out.emit(&meshes, |w| write_meshes(w, &meshes))
}

/// Writes one row per mesh (or `no meshes`): its id, its tasks by status, its
/// undrained events, ledger entries and missions.
fn write_meshes(w: &mut dyn Write, meshes: &[MeshSummaryView]) -> io::Result<()> {
    if meshes.is_empty() {
        return writeln!(w, "no meshes");
    }
    let mut table = Table::new(vec![
        "MESH",
        "PENDING",
        "ASSIGNED",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "EVENTS",
        "LEDGER",
        "MISSIONS",
    ]);
    for mesh in meshes {
        let mut row = vec![mesh.mesh_id.clone()];
        row.extend(
            TaskStatus::ALL.into_iter().map(|status| {
                mesh.tasks.get(status.as_str()).and_then(Value::as_u64).unwrap_or(0).to_string()
            }),
        );
        row.extend([mesh.pending_events, mesh.ledger_entries, mesh.missions].map(|n| n.to_string()));
        table.row(row);
    }
    table.write(w)
}

#[cfg(test)]
mod tests {
    use agentmesh_store::{MeshSummary, StatusCount};

    use super::*;

    #[test]
    fn each_mesh_is_one_row_of_counts() {
        let view = MeshSummaryView::from(MeshSummary {
            mesh_id: "prod".into(),
            tasks: vec![StatusCount { status: TaskStatus::Completed, count: 3 }],
            pending_events: 2,
            ledger_entries: 9,
            missions: 1,
        });
        let mut text = Vec::new();
        write_meshes(&mut text, &[view]).unwrap();
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("MESH  PENDING  ASSIGNED  COMPLETED"), "{text}");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cells, ["prod", "0", "0", "3", "0", "0", "2", "9", "1"]);
        let mut empty = Vec::new();
        write_meshes(&mut empty, &[]).unwrap();
        assert_eq!(String::from_utf8(empty).unwrap(), "no meshes\n");
    }
}
