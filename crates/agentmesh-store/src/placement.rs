//! "Which node should take this task?": the eligible nodes ranked under a
//! scheduling strategy. The rules are the core's (`agentmesh_core::placement`);
//! this composes them with a store's loads and round-robin cursor, so it works on
//! every backend.

use agentmesh_core::placement::{self, NodeCandidate, Strategy};
use agentmesh_core::{Task, daemon_id, tags};

use crate::{ActiveAssignment, Store, StoreResult};

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

/// A node's load: how many of the mesh's assigned tasks (`assigned`, as
/// [`QueueStore::active_assignments`](crate::QueueStore::active_assignments)
/// lists them) name exactly `node_id`.
pub fn node_load(assigned: &[ActiveAssignment], node_id: &str) -> u64 {
    assigned.iter().filter(|a| a.node_id.as_deref() == Some(node_id)).count() as u64
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
    let assigned = store.active_assignments(mesh_id)?;
    let candidates: Vec<NodeCandidate> = nodes
        .iter()
        .filter(|n| eligible(task, n))
        .map(|node| NodeCandidate {
            node_id: node.node_id.clone(),
            scheduling_priority: node.scheduling_priority,
            load: node_load(&assigned, &node.node_id),
        })
        .collect();
    let cursor = if strategy.uses_cursor() && candidates.len() > 1 {
        store.bump_scheduler_cursor(mesh_id)?
    } else {
        0
    };
    Ok(placement::rank(strategy, &candidates, cursor))
}
