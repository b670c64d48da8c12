//! The storage boundary of agentmesh.
//!
//! [`Store`] is the one interface every backend implements (embedded SQLite today,
//! PostgreSQL later) and [`StoreError`] the one error type callers match on,
//! whatever the backend. The `conformance` feature ships the behaviour suite every
//! backend must pass ([`conformance`]), expanded into one `#[test]` per rule by
//! [`conformance_tests!`].
//!
//! The trait is synchronous. Every operation is a short transaction; async callers
//! (the daemon) run them on a blocking thread. A synchronous trait keeps backends
//! and the conformance suite free of an executor; ARCHITECTURE.md records this.

use agentmesh_core::{
    ClaimRefusal, Claimant, LedgerEntry, LedgerQuery, LedgerSlice, NewTask, RequeueOptions, Requeued,
    SliceQuery, Task, TaskStatus, Timestamp,
};

mod error;
pub mod legacy;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use error::StoreError;

/// Result of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Options of one claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimOptions {
    /// Lease length in milliseconds; the task's `leaseExpiresAt` is set from it.
    pub lease_ms: Option<i64>,
}

/// What a claim produced.
///
/// The task is not boxed: an outcome is built once per claim and moved straight to
/// the caller, so its size costs nothing that an allocation would not cost more.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum ClaimOutcome {
    /// The claimant now holds this task.
    Claimed(Task),
    /// Nothing could be claimed, and why.
    Refused(ClaimRefusal),
}

impl ClaimOutcome {
    /// The claimed task, if any.
    pub fn task(&self) -> Option<&Task> {
        match self {
            ClaimOutcome::Claimed(t) => Some(t),
            ClaimOutcome::Refused(_) => None,
        }
    }

    /// The claimed task; panics with the refusal otherwise (for tests and benches).
    #[track_caller]
    pub fn expect_claimed(self) -> Task {
        match self {
            ClaimOutcome::Claimed(t) => t,
            ClaimOutcome::Refused(r) => panic!("expected a claim, got refusal {r}"),
        }
    }
}

/// How a worker's task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the summary is the worker's account of it.
    Completed {
        /// The worker's summary.
        summary: Option<String>,
    },
    /// Not done.
    Failed {
        /// Why.
        reason: String,
        /// The worker's summary, if any.
        summary: Option<String>,
    },
}

/// A worker's report that its task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionReport {
    /// The reporting session.
    pub session_id: String,
    /// The task, when the worker knows it. Without it the session's assigned task is
    /// found by completion matching.
    pub task_id: Option<String>,
    /// The fencing epoch the worker got at claim; a different current epoch makes
    /// the report stale.
    pub epoch: Option<u64>,
    /// When the work ended by the worker's clock (ISO); used only to choose among
    /// several assigned tasks.
    pub occurred_at: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
}

/// Count of tasks in one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCount {
    /// The status.
    pub status: TaskStatus,
    /// How many tasks have it.
    pub count: u64,
}

/// An assigned task, as status views show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveAssignment {
    /// Task id.
    pub id: String,
    /// Assigned node.
    pub node_id: Option<String>,
    /// Assigned session.
    pub session_id: Option<String>,
    /// Assigned provider type.
    pub provider_type: Option<String>,
    /// The instruction text.
    pub message: String,
    /// When it was claimed.
    pub dispatch_timestamp: Option<String>,
    /// When its lease runs out.
    pub lease_expires_at: Option<String>,
    /// Its fencing epoch.
    pub epoch: u64,
}

/// The operations of a mesh runtime store. Every query is scoped by mesh id, and
/// every state change commits together with the ledger entry that records it.
pub trait Store: Send + Sync {
    // ── Tasks ────────────────────────────────────────────────────────────────

    /// Validates and enqueues one task (ledger `task_dispatched`). Rejects a
    /// duplicate id and a dependency cycle, changing nothing.
    fn enqueue(&self, mesh_id: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task>;

    /// Enqueues several tasks in one transaction: all or none. Tasks may depend on
    /// tasks earlier in the batch.
    fn enqueue_batch(&self, mesh_id: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>>;

    /// Tasks of a mesh in creation order, only those in `statuses` unless it is empty.
    fn queue_entries(&self, mesh_id: &str, statuses: &[TaskStatus]) -> StoreResult<Vec<Task>>;

    /// A string that changes whenever any task of the mesh changes: one
    /// `id\tstatus\tupdatedAt` line per task, ordered by id.
    fn queue_revision(&self, mesh_id: &str) -> StoreResult<String>;

    /// Replaces every task of the mesh with `entries`, as they are.
    fn replace_queue(&self, mesh_id: &str, entries: &[Task]) -> StoreResult<()>;

    /// Deletes every task of the mesh; returns how many.
    fn delete_queue(&self, mesh_id: &str) -> StoreResult<u64>;

    /// Inserts a task as it is (no validation beyond the id being new).
    fn insert_queue_entry(&self, entry: &Task) -> StoreResult<()>;

    /// Rewrites a task as given, stamping `updatedAt = now`; returns the stored task.
    fn update_queue_entry(&self, entry: &Task, now: Timestamp) -> StoreResult<Task>;

    /// One task by id.
    fn find_task(&self, mesh_id: &str, task_id: &str) -> StoreResult<Option<Task>>;

    /// Some assigned task runs on this session or exactly this node id.
    fn has_active_assignment(&self, mesh_id: &str, session_id: &str, node_id: &str) -> StoreResult<bool>;

    /// Assigned tasks whose node is exactly `node_id`.
    fn node_active_assignment_count(&self, mesh_id: &str, node_id: &str) -> StoreResult<u64>;

    /// Pending tasks of the mesh.
    fn pending_count(&self, mesh_id: &str) -> StoreResult<u64>;

    /// Task counts by status (statuses with no task are left out).
    fn stats_by_status(&self, mesh_id: &str) -> StoreResult<Vec<StatusCount>>;

    /// Every assigned task, oldest dispatch first.
    fn active_assignments(&self, mesh_id: &str) -> StoreResult<Vec<ActiveAssignment>>;

    /// The assigned task a completion event from `session_id` belongs to: the exact
    /// `task_id` first, then the session's single task, then by dispatch time (see
    /// [`agentmesh_core::lifecycle::match_completion`]).
    fn find_assigned_by_session(
        &self,
        mesh_id: &str,
        session_id: &str,
        occurred_at: Option<&str>,
        task_id: Option<&str>,
    ) -> StoreResult<Option<Task>>;

    /// Claims the next task for `claimant` (ledger `task_claimed`), or says why not.
    fn claim_next(
        &self,
        mesh_id: &str,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome>;

    /// Records a worker's completion or failure (ledger `task_completed` /
    /// `task_failed`). Dependents of a completed task become claimable; pending
    /// dependents of a failed one are blocked. A stale report is refused with
    /// [`StoreError::StaleEpoch`] or [`StoreError::NotAssignedToSession`] and the
    /// refusal is recorded in the ledger.
    fn complete_task(&self, mesh_id: &str, report: &CompletionReport, now: Timestamp) -> StoreResult<Task>;

    /// Extends the lease of an assigned task held by `session_id` at `epoch`.
    fn heartbeat(
        &self,
        mesh_id: &str,
        task_id: &str,
        session_id: &str,
        epoch: u64,
        lease_ms: i64,
        now: Timestamp,
    ) -> StoreResult<Task>;

    /// Cancels a pending or assigned task (ledger `task_cancelled`); pending
    /// dependents are blocked.
    fn cancel_task(
        &self,
        mesh_id: &str,
        task_id: &str,
        reason: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<Task>;

    /// Puts a task back in the queue within its retry budget (ledger
    /// `task_requeued`), or fails it when the budget is spent (`task_failed`).
    fn requeue_task(
        &self,
        mesh_id: &str,
        task_id: &str,
        opts: &RequeueOptions,
        now: Timestamp,
    ) -> StoreResult<Requeued>;

    /// Recovers a stranded assignment (ledger `task_reclaimed`): back to pending, or
    /// failed after more than three reclaims.
    fn reclaim_task(&self, mesh_id: &str, task_id: &str, reason: &str, now: Timestamp) -> StoreResult<Task>;

    /// Assigned tasks whose lease ran out before `now`, across every mesh, as
    /// `(mesh id, task id)`.
    fn expired_leases(&self, now: Timestamp) -> StoreResult<Vec<(String, String)>>;

    // ── Ledger ───────────────────────────────────────────────────────────────

    /// Appends one entry; `false` when its id exists already (nothing changes).
    fn append_ledger(&self, entry: &LedgerEntry) -> StoreResult<bool>;

    /// Entries newest first (timestamp, then insertion order), filtered by `query`;
    /// at most `tail` (200 when unset).
    fn read_ledger(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>>;

    /// Entries in append order (timestamp, then insertion order); with `tail`, the
    /// newest `tail` entries, still in append order.
    fn read_ledger_ordered(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>>;

    /// Deletes entries by id; returns how many.
    fn delete_ledger_entries(&self, mesh_id: &str, ids: &[String]) -> StoreResult<u64>;

    /// Deletes every entry of the mesh; returns how many.
    fn clear_ledger(&self, mesh_id: &str) -> StoreResult<u64>;

    /// Whether an entry with this id exists in the mesh.
    fn has_ledger_entry(&self, mesh_id: &str, id: &str) -> StoreResult<bool>;

    /// Number of entries in the mesh.
    fn ledger_count(&self, mesh_id: &str) -> StoreResult<u64>;

    /// Imports entries from elsewhere (each validated first; all or none); returns
    /// how many were new.
    fn import_ledger(&self, entries: &[LedgerEntry]) -> StoreResult<u64>;

    /// One page of the slice protocol, after `query.after_id` in (timestamp, id)
    /// order. An unknown `after_id` gives an empty page. The cost of a page does not
    /// depend on where the cursor is.
    fn ledger_slice(&self, mesh_id: &str, query: &SliceQuery) -> StoreResult<LedgerSlice>;
}
