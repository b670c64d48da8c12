//! What the store holds per mesh, counted.

use agentmesh_store::MeshSummary;

use crate::Res;
use crate::db::Db;

/// Every mesh with a row, with its counts.
pub(crate) fn mesh_summaries(_db: &Db<'_>) -> Res<Vec<MeshSummary>> {
    Err(crate::Fail(crate::compat::pending("mesh_summaries")))
}
