//! The advisory locks a write takes: for each rule, only what that rule needs
//! run one at a time (the list at the end gives each operation's locks).
//!
//! Task rows are guarded by row locks (`FOR UPDATE`, `FOR NO KEY UPDATE SKIP
//! LOCKED` for claims, `FOR KEY SHARE` for an enqueue's dependencies). What a
//! row lock cannot guard is a fact about a set of rows, and those are the
//! advisory locks here:
//!
//! - [`Lock::Session`] and [`Lock::Node`]: a claim's gates (the session holds
//!   nothing, the node is not busy, the per-(node, provider) cap) are counts of
//!   assigned rows; only a claim adds to them, so claims of one session, and of
//!   one node, run one at a time. All daemon-id forms of a node share one key.
//! - [`Lock::Graph`]: an enqueue that adds dependency edges checks for a cycle
//!   over every edge, so those run one at a time (exclusive). An enqueue
//!   without edges takes it shared: it still waits for one with edges, which
//!   may have counted one of its tasks as missing.
//! - [`Lock::Inbox`]: drains hand each event to one drainer and route over the
//!   coordinators' presence; the inbox's writes of a mesh run one at a time.
//! - [`Lock::Reservations`]: a reservation is granted after checking every
//!   reservation in force that it may overlap; grants, renewals, releases and
//!   expiries of a mesh's reservations run one at a time.
//! - [`Lock::Mesh`]: the runtime records (dispatches, deliveries, tool calls,
//!   missions) and the administrative writes.
//! - [`Lock::Archive`]: the mesh's ledger leaves for the archive in order, and
//!   an export's drop removes a prefix of the archive; those run one at a time.
//!
//! A transaction takes all of its keys at its start, in ascending key order,
//! so two writes never wait on each other's keys in a cycle. The one key taken
//! later is the reservations key, by a claim that meets a task declaring paths;
//! no cycle can pass through it, since whoever holds it waits for no other key
//! and no row: a reservation write takes no other lock, and a claim holding it
//! only writes its own task's row (already locked) and reservation rows. Keys are 64-bit
//! FNV-1a hashes of the installation's schema, the kind, the mesh and the id:
//! two that collide only share a lock, which costs concurrency, never
//! correctness.
//!
//! Each operation's locks:
//!
//! - claim: the session and node keys, and the task it takes, locked
//!   `FOR NO KEY UPDATE SKIP LOCKED` (see `tasks::claim`); when that task
//!   declares paths, the reservations key too, before its paths are checked.
//! - complete, fail, heartbeat, cancel, requeue, priority, reclaim: the task
//!   `FOR UPDATE`, and each dependent `FOR UPDATE` before its readiness is
//!   recounted. The decision reads the row it writes (or, for a task this
//!   store claimed, its remembered copy, which the lock's statement checks
//!   equal to the row: see `tasks::remembered`); two completions of one task's
//!   dependencies recount it one after the other, the second seeing the first.
//! - `complete_and_claim`: the claim's keys, then the row locks of a
//!   completion and of a claim, in one transaction.
//! - enqueue without dependencies: the graph key, shared. With dependencies:
//!   the graph key, exclusive, and its existing dependencies `FOR KEY SHARE`
//!   before it counts the unmet ones, so a completion of a dependency either
//!   committed before the count or waits and then finds the new edge.
//! - drain, ack, presence, held requeue, queueing through the API, the
//!   retention sweep: the inbox key. An event queued by a task write takes
//!   none, unless it needs the refine-terminal check (see `inbox`).
//! - missions, the scheduler cursor, dispatch and delivery records, the rate
//!   guard: the mesh key. Recording a directly dispatched task: the mesh key
//!   (two recordings of one id: the second finds the first) and the graph key,
//!   shared (it adds a task without edges).
//! - reserve, renew, release, and each mesh's expiry sweep: the
//!   reservations key.
//! - retention (see `archive`): a mesh's move of finished tasks, the graph
//!   key, exclusive (an enqueue counts a dependency met or refuses a taken id
//!   either before the move or after it, never between), and the tasks it
//!   moves `FOR UPDATE SKIP LOCKED` (a task another write holds waits for the
//!   next step); a mesh's move of ledger entries, and a drop from its archive:
//!   the archive key; a mesh's own windows: the mesh key.
//! - replacing or inserting raw queue entries, a transfer import: every key of
//!   the mesh (`write_exclusive`), and row locks as above.
//! - writes that decide nothing (idle sessions, fingerprints, deletes by key)
//!   or decide in one statement (an in-flight hold's upsert keeps its `held_at`
//!   in its `ON CONFLICT`)
//!   and sweeps across meshes: none, or each mesh's key in a transaction of
//!   its own.
//! - reads: none (one statement, or a snapshot).

use agentmesh_core::daemon_id;

/// One advisory lock of a write, within its mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock<'a> {
    /// The mesh's runtime records and the administrative writes.
    Mesh,
    /// The mesh's coordinator inbox.
    Inbox,
    /// The mesh's dependency graph: exclusive for writes that add edges,
    /// shared for enqueues that add none.
    Graph { exclusive: bool },
    /// The mesh's path reservations.
    Reservations,
    /// The mesh's archive: moves of its ledger and drops.
    Archive,
    /// One claimant session.
    Session(&'a str),
    /// One node, in any of its daemon-id forms.
    Node(&'a str),
}

impl Lock<'_> {
    /// The key of this lock in `mesh_id` of the installation salted `salt`,
    /// and whether it is taken exclusively.
    pub(crate) fn key(&self, salt: &str, mesh_id: &str) -> (i64, bool) {
        match self {
            Lock::Mesh => (hash(salt, &[mesh_id]), true),
            Lock::Inbox => (hash(salt, &["inbox", mesh_id]), true),
            Lock::Graph { exclusive } => (hash(salt, &["graph", mesh_id]), *exclusive),
            Lock::Reservations => (hash(salt, &["reservations", mesh_id]), true),
            Lock::Archive => (hash(salt, &["archive", mesh_id]), true),
            Lock::Session(session) => (hash(salt, &["session", mesh_id, session.trim()]), true),
            Lock::Node(node) => {
                let canonical = daemon_id::canonical_daemon_id(node).unwrap_or_default();
                (hash(salt, &["node", mesh_id, &canonical]), true)
            }
        }
    }
}

/// The statements that take `locks` of `mesh_id` as a transaction begins,
/// for the simple query that begins it (empty when there are none): one
/// `SELECT` a key, in ascending key order, each key once (exclusive when any
/// asks for it so). They go out in the query of the `BEGIN`, so beginning a
/// transaction and taking its locks costs the server one query cycle and one
/// reply, whatever their number; a key is a number, written out as one.
pub(crate) fn opening(salt: &str, mesh_id: &str, locks: &[Lock<'_>]) -> String {
    let mut sql = String::new();
    for (key, exclusive) in ordered(salt, mesh_id, locks) {
        let function = if exclusive { "pg_advisory_xact_lock" } else { "pg_advisory_xact_lock_shared" };
        sql.push_str(&format!("; SELECT {function}({key})"));
    }
    sql
}

/// The keys of `locks` in ascending order, each once, exclusive when any of
/// its locks asks for it so.
fn ordered(salt: &str, mesh_id: &str, locks: &[Lock<'_>]) -> Vec<(i64, bool)> {
    let mut keys: Vec<(i64, bool)> = locks.iter().map(|l| l.key(salt, mesh_id)).collect();
    keys.sort_unstable();
    let mut out: Vec<(i64, bool)> = Vec::with_capacity(keys.len());
    for (key, exclusive) in keys {
        match out.last_mut() {
            Some(last) if last.0 == key => last.1 |= exclusive,
            _ => out.push((key, exclusive)),
        }
    }
    out
}

/// 64-bit FNV-1a over the parts, each followed by a zero byte (so that
/// ("ab", "c") and ("a", "bc") differ).
pub(crate) fn hash(salt: &str, parts: &[&str]) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in std::iter::once(salt).chain(parts.iter().copied()) {
        for byte in part.bytes().chain([0u8]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_kind_mesh_installation_and_id_and_are_stable() {
        let a = Lock::Mesh.key("agentmesh", "mesh-a");
        assert_eq!(a, Lock::Mesh.key("agentmesh", "mesh-a"));
        assert_ne!(a, Lock::Mesh.key("agentmesh", "mesh-b"));
        assert_ne!(a, Lock::Mesh.key("other", "mesh-a"));
        assert_ne!(a.0, Lock::Inbox.key("agentmesh", "mesh-a").0);
        assert_ne!(Lock::Session("s1").key("x", "m"), Lock::Session("s2").key("x", "m"));
        assert_ne!(Lock::Session("n1").key("x", "m").0, Lock::Node("n1").key("x", "m").0);
        assert_ne!(hash("ab", &["c"]), hash("a", &["bc"]));
    }

    #[test]
    fn every_form_of_a_node_shares_one_key() {
        let key = Lock::Node("mach_A").key("x", "m");
        assert_eq!(key, Lock::Node("daemon_mach_A").key("x", "m"));
        assert_eq!(key, Lock::Node(" standalone_mach_A ").key("x", "m"));
        assert_ne!(key, Lock::Node("mach_B").key("x", "m"));
    }

    #[test]
    fn a_transaction_takes_its_keys_once_in_ascending_order() {
        let locks = [
            Lock::Node("mach_A"),
            Lock::Session("w1"),
            Lock::Graph { exclusive: false },
            Lock::Graph { exclusive: true },
            Lock::Session("w1"),
        ];
        let taken = ordered("x", "m", &locks);
        assert_eq!(taken.len(), 3);
        let keys: Vec<i64> = taken.iter().map(|k| k.0).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
        assert!(taken.iter().all(|k| k.1), "the graph is taken exclusively when any asks");
        assert_eq!(ordered("x", "m", &[Lock::Graph { exclusive: false }]).len(), 1);
        assert!(!ordered("x", "m", &[Lock::Graph { exclusive: false }])[0].1);
        let two = opening("x", "m", &[Lock::Node("b"), Lock::Session("a"), Lock::Graph { exclusive: false }]);
        let keys =
            ordered("x", "m", &[Lock::Session("a"), Lock::Node("b"), Lock::Graph { exclusive: false }]);
        let expected: String = keys
            .iter()
            .map(|(key, exclusive)| {
                let shared = if *exclusive { "" } else { "_shared" };
                format!("; SELECT pg_advisory_xact_lock{shared}({key})")
            })
            .collect();
        assert_eq!(two, expected);
        assert!(opening("x", "m", &[]).is_empty());
    }
}
