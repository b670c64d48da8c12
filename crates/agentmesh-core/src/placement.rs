//! Placement: which eligible node should take a task, under the mesh's scheduling
//! strategy. Pure ranking; the store supplies loads and the round-robin cursor.

use std::fmt;
use std::str::FromStr;

use crate::InvalidInput;

/// How nodes are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// The nodes in the order given.
    #[default]
    FirstEligible,
    /// Higher scheduling priority first, then the least loaded, then input order.
    LeastLoaded,
    /// As least loaded, but nodes tied at the same priority and load take turns:
    /// the tie order is rotated by the mesh's scheduler cursor.
    RoundRobin,
    /// Higher scheduling priority first, then input order; load is ignored.
    PriorityOnly,
}

impl Strategy {
    /// Every strategy.
    pub const ALL: [Strategy; 4] =
        [Strategy::FirstEligible, Strategy::LeastLoaded, Strategy::RoundRobin, Strategy::PriorityOnly];

    /// The persisted name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Strategy::FirstEligible => "first_eligible",
            Strategy::LeastLoaded => "least_loaded",
            Strategy::RoundRobin => "round_robin",
            Strategy::PriorityOnly => "priority_only",
        }
    }

    /// Whether ranking consumes a turn of the scheduler cursor.
    pub const fn uses_cursor(self) -> bool {
        matches!(self, Strategy::RoundRobin)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL.into_iter().find(|st| st.as_str() == s.trim()).ok_or_else(|| {
            InvalidInput::new(
                "strategy",
                format!("unknown strategy {s:?} (expected first_eligible, least_loaded, round_robin or priority_only)"),
            )
        })
    }
}

/// One eligible node, with what ranking needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCandidate {
    /// The node.
    pub node_id: String,
    /// Higher is preferred.
    pub scheduling_priority: i64,
    /// Tasks assigned to it now.
    pub load: u64,
}

/// Ranks `nodes` (in their input order) best first. `cursor` is the mesh's
/// scheduler cursor, used by round robin only.
pub fn rank(strategy: Strategy, nodes: &[NodeCandidate], cursor: u64) -> Vec<NodeCandidate> {
    let n = nodes.len();
    let mut order: Vec<usize> = (0..n).collect();
    if n <= 1 || strategy == Strategy::FirstEligible {
        return nodes.to_vec();
    }
    let rotation = (cursor % n as u64) as usize;
    let rotated = |i: usize| (i + n - rotation) % n;
    match strategy {
        Strategy::FirstEligible => {}
        Strategy::PriorityOnly => {
            order.sort_by_key(|&i| (std::cmp::Reverse(nodes[i].scheduling_priority), i));
        }
        Strategy::LeastLoaded => {
            order.sort_by_key(|&i| (std::cmp::Reverse(nodes[i].scheduling_priority), nodes[i].load, i));
        }
        Strategy::RoundRobin => {
            order.sort_by_key(|&i| {
                (std::cmp::Reverse(nodes[i].scheduling_priority), nodes[i].load, rotated(i))
            });
        }
    }
    order.into_iter().map(|i| nodes[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, priority: i64, load: u64) -> NodeCandidate {
        NodeCandidate { node_id: id.into(), scheduling_priority: priority, load }
    }

    fn ids(v: Vec<NodeCandidate>) -> Vec<String> {
        v.into_iter().map(|n| n.node_id).collect()
    }

    #[test]
    fn strategies_rank_as_documented() {
        let nodes = [node("a", 0, 2), node("b", 1, 5), node("c", 0, 0)];
        assert_eq!(ids(rank(Strategy::FirstEligible, &nodes, 7)), ["a", "b", "c"]);
        assert_eq!(ids(rank(Strategy::PriorityOnly, &nodes, 0)), ["b", "a", "c"]);
        assert_eq!(ids(rank(Strategy::LeastLoaded, &nodes, 0)), ["b", "c", "a"]);
    }

    #[test]
    fn round_robin_rotates_ties_with_the_cursor() {
        let nodes = [node("a", 0, 1), node("b", 0, 1), node("c", 0, 1), node("busy", 0, 9)];
        let winners: Vec<String> =
            (0..4).map(|cursor| ids(rank(Strategy::RoundRobin, &nodes, cursor))[0].clone()).collect();
        assert_eq!(winners, ["a", "b", "c", "a"]);
        assert_eq!(ids(rank(Strategy::RoundRobin, &nodes, 1)).last().unwrap(), "busy", "load still counts");
    }
}
