//! "Which node should take this task?": the eligible nodes ranked under a
//! scheduling strategy. The rules are the core's (`agentmesh_core::placement`);
//! this composes them with a store's loads and round-robin cursor, so it works on
//! every backend.

use agentmesh_core::placement::{self, NodeCandidate, Strategy};
use agentmesh_core::{Task, daemon_id, tags};

use crate::{Store, StoreResult};

/// A node that may take work, as the coordinator knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node.
    pub node_id: String,
    /// Its capability tags.
    pub capability_tags: Vec<String>,
    /// Higher is preferred.
    pub scheduling_priority: i64,
}

/// Whether `node` may take `task`: it offers every required tag, and the task's node
/// pin, if any, names it.
pub fn eligible(task: &Task, node: &NodeInfo) -> bool {
    tags::satisfies_required_tags(task.tags_required(), &node.capability_tags)
        && task.target_node_id.as_deref().is_none_or(|pin| daemon_id::node_pin_matches(pin, &node.node_id))
}

/// The nodes that may take `task`, best first under `strategy`. Loads are the
/// nodes' assigned tasks now; round robin with two or more eligible nodes takes a
/// turn of the mesh's scheduler cursor.
pub fn suggest_nodes(
    store: &dyn Store,
    mesh_id: &str,
    task: &Task,
    nodes: &[NodeInfo],
    strategy: Strategy,
) -> StoreResult<Vec<NodeCandidate>> {
    let mut candidates = Vec::new();
    for node in nodes.iter().filter(|n| eligible(task, n)) {
        candidates.push(NodeCandidate {
            node_id: node.node_id.clone(),
            scheduling_priority: node.scheduling_priority,
            load: store.node_active_assignment_count(mesh_id, &node.node_id)?,
        });
    }
    let cursor = if strategy.uses_cursor() && candidates.len() > 1 {
        store.bump_scheduler_cursor(mesh_id)?
    } else {
        0
    };
    Ok(placement::rank(strategy, &candidates, cursor))
}
