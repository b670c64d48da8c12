//! The storage boundary of agentmesh.
//!
//! [`Store`] is the one interface every backend implements (the embedded SQLite
//! file and PostgreSQL) and [`StoreError`] the one error type callers match on,
//! whatever the backend. The `conformance` feature ships the behaviour suite every
//! backend must pass ([`conformance`]), expanded into one `#[test]` per rule by
//! [`conformance_tests!`].
//!
//! The trait is synchronous. Every operation is a short transaction; async callers
//! (the daemon) run them on a blocking thread, except the hot-path writes, which
//! they submit without holding a thread ([`submit`]). A synchronous trait keeps
//! backends and the conformance suite free of an executor; ARCHITECTURE.md
//! records this.

use std::sync::Arc;

use agentmesh_core::TaskPriority;

use agentmesh_core::{
    ClaimRefusal, Claimant, CompletionConflict, CompletionFingerprint, DeliveryStatus, DirectDispatch,
    DispatchStatus, IdleSession, InflightHold, LedgerEntry, LedgerQuery, LedgerSlice, Mission,
    MissionProgress, NewDirectDispatch, NewDispatchedTask, NewInflightHold, NewMission, NewSessionDelivery,
    NewTask, RateGuard, RateVerdict, RequeueOptions, SessionDelivery, SliceQuery, Task, TaskStatus,
    Timestamp,
};

pub mod archive;
pub mod cells;
pub mod deadline;
mod durability;
mod error;
pub mod ids;
pub mod inbox_sweep;
pub mod inbox_writes;
pub mod legacy;
pub mod packed;
pub mod placement;
pub mod projection;
mod raw_json;
pub mod reservation_writes;
pub mod retry;
pub mod route_columns;
pub mod submit;
pub mod task_writes;
pub mod transfer;
pub mod webhook_writes;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "conformance")]
pub mod model;

pub use durability::{Durability, UnknownDurability};
pub use error::{FullStorage, IdScope, StoreError};
pub use raw_json::RawJson;
pub use reservation_writes::{Fence, ReservationCommand, Reserved};
pub use submit::{Submitted, TaskWrite, TaskWritten};
pub use webhook_writes::WebhookCommand;

/// Declares a backend's internal error, `Fail`: a [`StoreError`] that `?` can
/// build from core errors, JSON errors and (through a `From` impl the backend
/// adds) its driver's errors, which the orphan rule keeps out of `StoreError`;
/// and `Res<T>`, the result of internal operations. Public methods unwrap it.
#[macro_export]
macro_rules! backend_fail {
    () => {
        /// The crate's internal error: a [`StoreError`] that `?` can build from the
        /// driver's and the core's errors alike. Public methods unwrap it.
        #[derive(Debug)]
        pub(crate) struct Fail(pub(crate) $crate::StoreError);

        /// Result of internal operations.
        pub(crate) type Res<T> = Result<T, Fail>;

        impl From<$crate::StoreError> for Fail {
            fn from(err: $crate::StoreError) -> Fail {
                Fail(err)
            }
        }

        impl From<agentmesh_core::InvalidInput> for Fail {
            fn from(err: agentmesh_core::InvalidInput) -> Fail {
                Fail($crate::StoreError::InvalidInput(err))
            }
        }

        impl From<agentmesh_core::InvalidTransition> for Fail {
            fn from(err: agentmesh_core::InvalidTransition) -> Fail {
                Fail($crate::StoreError::InvalidTransition(err))
            }
        }

        impl From<serde_json::Error> for Fail {
            fn from(err: serde_json::Error) -> Fail {
                Fail($crate::StoreError::Corrupt {
                    what: String::from("JSON value"),
                    problem: err.to_string(),
                })
            }
        }
    };
}

/// The store traits, for `use agentmesh_store::prelude::*`: calling an operation
/// needs the trait of its group in scope.
pub mod prelude {
    pub use crate::transfer::TransferStore;
    pub use crate::{
        ArchiveStore, InboxStore, LedgerStore, MissionStore, QueueStore, ReservationStore, RuntimeStore,
        Store, WebhookStore,
    };
}

/// Result of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// What an operator does to a task ([`QueueStore::task_command`]).
#[derive(Debug, Clone, Copy)]
pub enum TaskCommand<'a> {
    /// Changes the pull priority of a pending or assigned task (ledger
    /// `task_priority_changed`, naming the old and new priority and the reason);
    /// a finished task is refused.
    SetPriority {
        /// The new priority.
        priority: TaskPriority,
        /// Why, when given.
        reason: Option<&'a str>,
    },
    /// Cancels a pending or assigned task (ledger `task_cancelled`); pending
    /// dependents are blocked.
    Cancel {
        /// Why, when given.
        reason: Option<&'a str>,
    },
    /// Puts a task back in the queue within its retry budget (ledger
    /// `task_requeued`), or fails it when the budget is spent (`task_failed`):
    /// [`agentmesh_core::Requeued::from_task`] tells which.
    Requeue(&'a RequeueOptions),
}

/// What [`InboxStore::settle_pending_events`] does to events.
#[derive(Debug, Clone, Copy)]
pub enum EventSettle<'a> {
    /// Marks events drained by row id (an acknowledgement after delivery
    /// elsewhere). No acknowledgement time is kept: retention goes by queue time.
    Ack(&'a [String]),
    /// Deletes events of these row ids, drained or not, with their queue
    /// entries and dedup history (their fingerprints and event ids take new
    /// events again): the original's `deletePendingEventsById`.
    Delete(&'a [String]),
    /// Deletes the undelivered `mesh:dispatch_blocked` events of a task.
    RetractDispatchBlocked(&'a str),
}

/// Which deliveries [`RuntimeStore::session_deliveries`] reads.
#[derive(Debug, Clone, Copy)]
pub enum DeliveryQuery<'a> {
    /// The delivery of this id, whatever its status.
    Id(&'a str),
    /// The deliveries of a task that reached its session (delivered, acked or
    /// completed; the original's `taskHasConfirmedDelivery`), oldest first.
    Confirmed(&'a str),
    /// Deliveries still waiting (delivering, queued, acked) and not expired at
    /// `now`, for the mesh or one session: highest priority first, then oldest.
    Waiting {
        /// Only this session's, when given.
        session_id: Option<&'a str>,
        /// The instant expiry is judged at.
        now: Timestamp,
    },
}

/// Which reservations in force [`ReservationStore::reservations`] reads.
#[derive(Debug, Clone, Copy)]
pub enum ReservationQuery<'a> {
    /// Every one of the mesh, or of one scope when given.
    All(Option<&'a str>),
    /// Those of `scope` that may overlap one of `patterns`, found by the
    /// literal prefixes of their patterns (a superset of those that do: the
    /// core decides, with [`agentmesh_core::reservation::conflicts`] or
    /// `covering`). What a check reads, however many reservations the mesh holds.
    Near {
        /// The repository scope.
        scope: &'a str,
        /// The patterns a request names.
        patterns: &'a [agentmesh_core::PathPattern],
    },
}

/// Which missions [`MissionStore::missions`] reads.
#[derive(Debug, Clone, Copy)]
pub enum MissionQuery<'a> {
    /// The mission of this id.
    Id(&'a str),
    /// Missions in these statuses (all when empty).
    Statuses(&'a [String]),
}

/// What [`RuntimeStore::write_inflight_hold`] writes.
#[derive(Debug, Clone, Copy)]
pub enum HoldWrite<'a> {
    /// Holds a task in flight, or updates its hold: an existing hold of the
    /// task keeps the instant it was first held (`heldAt`); its reason, idle
    /// anchor (`None` clears it) and read-failure count are overwritten, and
    /// `updatedAt` is `now`.
    Hold(&'a NewInflightHold),
    /// Releases the hold of this task.
    Release(&'a str),
}

/// What [`RuntimeStore::write_idle_session`] writes.
#[derive(Debug, Clone, Copy)]
pub enum IdleWrite<'a> {
    /// Records (or refreshes) this idle session.
    Report(&'a IdleSession),
    /// Forgets one idle session.
    Forget {
        /// Its mesh.
        mesh_id: &'a str,
        /// Its node.
        node_id: &'a str,
        /// The session.
        session_id: &'a str,
    },
}

/// What [`RuntimeStore::change_direct_dispatches`] does.
#[derive(Debug, Clone, Copy)]
pub enum DispatchChange<'a> {
    /// Moves dispatches to `status`. With a task id only that row changes;
    /// without one, every row of `session_id` does (never rows without a
    /// session). Completed and failed rows never change.
    Status {
        /// The session whose rows move, without a task id.
        session_id: Option<&'a str>,
        /// The one task whose row moves.
        task_id: Option<&'a str>,
        /// The new status.
        status: DispatchStatus,
    },
    /// Marks `dispatched` rows sent before this instant stale.
    MarkStale(Timestamp),
    /// Deletes the dispatches of these tasks.
    Delete(&'a [String]),
}

/// Which archived tasks [`ArchiveStore::archived_tasks`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchivedTasks<'a> {
    /// The archived task of this id (at most one), whether or not the hot
    /// table holds it again.
    Id(&'a str),
    /// The tasks after position `after` in archive order, at most `limit`,
    /// leaving out any the hot table holds again (a page of an export).
    After {
        /// The position the page starts after (0: from the first).
        after: u64,
        /// How many tasks at most.
        limit: u32,
    },
}

/// Which expired runtime records [`RuntimeStore::prune_runtime`] deletes, in
/// every mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimePrune {
    /// Completed, failed and stale direct dispatches last changed before this
    /// instant.
    EndedDispatches(Timestamp),
    /// Idle sessions whose report has expired at this instant.
    IdleSessions(Timestamp),
    /// Completion fingerprints expired at this instant (found through an
    /// index, not a scan).
    Fingerprints(Timestamp),
    /// Recorded tool calls made before this instant.
    ToolCalls(Timestamp),
}

/// What a backend promises ([`Store::profile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreProfile {
    /// What an acknowledged write survives.
    pub durability: Durability,
    /// Where task and mission ids are unique: per database (an id another mesh
    /// holds is refused, naming that mesh) or per mesh (each mesh has its own
    /// ids).
    pub id_scope: IdScope,
}

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

/// A directly dispatched task as recording it left it, and whether that recording
/// created it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedDispatch {
    /// The task: the one recorded, or the one the mesh already held by that id.
    pub task: Task,
    /// The recording created the task (the id was new to the mesh).
    pub created: bool,
}

/// A mission as an upsert left it, and whether that upsert created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpsertedMission {
    /// The mission after the upsert.
    pub mission: Mission,
    /// The upsert created the mission (it did not exist before).
    pub created: bool,
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

/// A worker's heartbeat: [`QueueStore::heartbeat`]'s arguments, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The task whose lease is extended.
    pub task_id: String,
    /// The worker session that holds it.
    pub session_id: String,
    /// The epoch of the claim the worker holds.
    pub epoch: u64,
    /// The lease from now on, in milliseconds.
    pub lease_ms: i64,
    /// What the worker says of its progress, checked
    /// ([`ProgressReport::check`](agentmesh_core::ProgressReport::check)).
    pub progress: Option<agentmesh_core::ProgressReport>,
}

impl Heartbeat {
    /// A heartbeat that brings no progress report.
    pub fn new(
        task_id: impl Into<String>,
        session_id: impl Into<String>,
        epoch: u64,
        lease_ms: i64,
    ) -> Heartbeat {
        Heartbeat { task_id: task_id.into(), session_id: session_id.into(), epoch, lease_ms, progress: None }
    }
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

/// What the store holds for one mesh, counted: what `agentmesh meshes` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshSummary {
    /// The mesh.
    pub mesh_id: String,
    /// Task counts by status (statuses with no task are left out).
    pub tasks: Vec<StatusCount>,
    /// Undrained coordinator events.
    pub pending_events: u64,
    /// Ledger entries.
    pub ledger_entries: u64,
    /// Missions.
    pub missions: u64,
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

impl From<Task> for ActiveAssignment {
    /// The assignment an assigned task holds.
    fn from(t: Task) -> ActiveAssignment {
        ActiveAssignment {
            epoch: t.epoch(),
            id: t.id,
            node_id: t.assigned_node_id,
            session_id: t.assigned_session_id,
            provider_type: t.assigned_provider_type,
            message: t.message,
            dispatch_timestamp: t.dispatch_timestamp,
            lease_expires_at: t.lease_expires_at,
        }
    }
}

/// Options of a delivery status change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryUpdate {
    /// The delivery error to record (cleared when `None`).
    pub last_error: Option<String>,
    /// Count one more delivery attempt. Such a write is a retry and skips the
    /// no-going-back rule, as in the original.
    pub increment_attempt: bool,
}

/// A tool call, for the rate guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The mesh.
    pub mesh_id: String,
    /// The tool's name.
    pub tool: String,
    /// The calling session, if known.
    pub session_id: Option<String>,
    /// Who called: `coordinator`, `worker` or `unknown` (see
    /// [`agentmesh_core::rate_guard::CALLER_ROLES`]); unrecorded when `None`.
    pub caller_role: Option<String>,
}

/// A tool call as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedToolCall {
    /// The tool's name.
    pub tool: String,
    /// The calling session, if known.
    pub session_id: Option<String>,
    /// Who called, when recorded.
    pub caller_role: Option<String>,
    /// When (epoch milliseconds).
    pub called_at_ms: i64,
}

/// Undrained events addressed to one coordinator, for overviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAddressee {
    /// The addressed daemon, when the events name one.
    pub daemon_id: Option<String>,
    /// The addressed coordinator run, when the events name one.
    pub run_id: Option<String>,
    /// The addressed coordinator session, when the events name one.
    pub session_id: Option<String>,
    /// How many events wait.
    pub count: u64,
}

/// A pending event as a drain or a peek hands it out.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxEvent {
    /// The row id (what `ack` and `delete` take).
    pub id: String,
    /// The event's name (`agent:generating_completed`, ...).
    pub name: String,
    /// The event, as stored (the original's JSON shape, v2 envelope included),
    /// unparsed.
    pub event: RawJson,
    /// Its content fingerprint, if it has one.
    pub fingerprint: Option<String>,
    /// When it was queued (epoch milliseconds).
    pub queued_at_ms: i64,
}

/// Why a queued event was refused as a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DuplicateReason {
    /// An event with the same fingerprint exists in the mesh (drained or not).
    Fingerprint,
    /// The refine job already has its terminal event.
    RefineTerminal,
}

/// What putting a held event back in the inbox did
/// ([`InboxStore::requeue_held_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldRequeue {
    /// The event is queued again, and an `event_held_requeued` entry says so.
    Requeued,
    /// Nothing was left to put back (the event is queued already, or a live
    /// event took its fingerprint); an `event_held_requeued` entry settles it.
    NotNeeded,
    /// Its row is gone and its event cannot be read: nothing changed, and the
    /// entry stays held.
    Unrecoverable,
}

impl HeldRequeue {
    /// Whether the event is queued again.
    pub fn requeued(self) -> bool {
        self == HeldRequeue::Requeued
    }
}

/// What queueing an event did. (Not boxed, for the reason [`ClaimOutcome`] gives.)
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum QueueOutcome {
    /// Stored under this row id, as stamped.
    Queued {
        /// The row id.
        id: String,
        /// The event as stored.
        event: agentmesh_core::events::PendingEvent,
    },
    /// Refused as a duplicate; nothing was stored.
    Duplicate(DuplicateReason),
}

/// How long a coordinator stays live after its latest drain or
/// [`InboxStore::coordinator_presence`]: two minutes. A drain refreshes the presence at
/// most every fifteen seconds, so a coordinator that drains (or touches) at least
/// once a minute and a half is never taken for gone.
pub const COORDINATOR_PRESENCE_TTL_MS: i64 = 120_000;

/// A drain (or peek) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainRequest {
    /// Who drains: identity and daemon id forms.
    pub drainer: agentmesh_core::events::Drainer,
    /// Only these event names (applied in SQL); `Some(empty)` drains nothing.
    pub only_events: Option<Vec<String>>,
    /// v2 enforce mode: unversioned and invalid events are quarantined.
    pub enforce: bool,
    /// At most this many delivered events (100 when unset).
    pub limit: Option<u32>,
}

/// Events a drain or peek hands out at most when the request sets no limit.
pub const DEFAULT_DRAIN_LIMIT: u32 = 100;

impl DrainRequest {
    /// The most events this drain or peek hands out ([`DEFAULT_DRAIN_LIMIT`]
    /// when unset; 0 hands out none).
    pub fn effective_limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_DRAIN_LIMIT) as usize
    }
}

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DrainOutcome {
    /// Events delivered to the drainer, oldest first; marked drained.
    pub events: Vec<InboxEvent>,
    /// The drain's counters.
    pub counters: agentmesh_core::events::DrainCounters,
    /// Row ids quarantined (held) by this drain, each with its `event_held` entry.
    pub quarantined: Vec<String>,
}

/// What a retention sweep of the coordinator inboxes did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Drained events deleted. Until then they were the mesh's dedup history: their
    /// fingerprints and event ids kept duplicates out.
    pub drained_expired: u64,
    /// Undrained events removed, each mirrored to a recoverable `event_held` ledger
    /// entry in the transaction that removed it.
    pub undrained_expired: u64,
    /// Undrained events past the cutoff that were kept because their name never
    /// expires ([`agentmesh_core::events::names::NEVER_EXPIRE_EVENTS`]).
    pub terminal_exempt: u64,
}

/// The operations of a mesh runtime store. Every query is scoped by mesh id, and
/// every state change commits together with the ledger entry that records it.
///
/// The operations are grouped by concern, one supertrait each, so a backend can
/// be written one group at a time: [`QueueStore`] (tasks, claims, the task
/// lifecycle), [`LedgerStore`], [`RuntimeStore`] (dispatches, deliveries, idle
/// sessions, completion records, the rate guard), [`MissionStore`] and
/// [`InboxStore`] (the coordinator inbox), [`ReservationStore`] (path
/// reservations); `Store` itself adds the overview and
/// the health probe. Callers import them all with `use agentmesh_store::prelude::*`.
///
/// # Isolation contract
///
/// Several callers use one store at once: threads sharing one handle, and several
/// handles (processes, daemons) on one database. Whatever the backend's native
/// isolation, each operation must behave as if the writes of one mesh ran one at a
/// time, for the decisions below; a backend that runs them concurrently must lock
/// or serialize them (SQLite does, by having one writer per database).
///
/// Must appear serial, per mesh (each read-then-write is one atomic step):
/// - **claim gates**: a claim's checks (the session already holds a task, the node
///   is busy, the per-(node, provider) cap) and the assignment it makes. Two claims
///   by one session never both succeed; a node never runs more than its gates
///   allow; a task is never handed to two claimants.
/// - **dependency readiness**: enqueueing a task counts its unmet dependencies,
///   and completing a dependency updates the counts of its dependents. An enqueue
///   racing the completion of its dependency leaves the dependent claimable
///   exactly once, never waiting forever.
/// - **cycle detection**: the graph read that refuses a cycle and the insert it
///   allows. Of A→B and B→A enqueued together at most one succeeds; no cycle is
///   ever stored.
/// - **guarded row updates**: a completion, failure, cancel, requeue, reclaim or
///   heartbeat re-reads the task's status, holder and epoch and changes it only if
///   they still hold. Of a completion racing a reclaim exactly one wins, and a
///   report carrying an epoch the task moved past is refused.
/// - **drains**: one event is handed to exactly one drain, even when one
///   coordinator drains twice at once.
/// - **upserts**: of concurrent upserts of a new mission, exactly one says
///   created; the same holds for every "insert unless it exists" (ledger append by
///   id, event fingerprints).
///
/// May interleave: reads (each sees one committed state, but two reads may see
/// different ones), operations on different meshes, and writes to different rows
/// whose outcome does not depend on each other (heartbeats of different tasks,
/// ledger appends, tool-call records).
///
/// Errors: an operation either commits all of its effect with its ledger entries
/// or none. [`StoreError::Busy`] is contention (the backend could not serialize
/// the operation in time): nothing changed, and the caller may run the same
/// operation again ([`StoreError::is_retryable`], [`retry`]). Every other error is
/// final for that request; retrying it gives the same answer.
pub trait Store:
    QueueStore
    + LedgerStore
    + RuntimeStore
    + MissionStore
    + InboxStore
    + ReservationStore
    + WebhookStore
    + ArchiveStore
    + Send
    + Sync
    + 'static
{
    /// Every mesh the store holds a row of (a task, ledger entry, inbox event,
    /// mission, session delivery, direct dispatch or idle session), by mesh id, with
    /// its counts. Rows are read as they are stored: a mesh id no caller could pass
    /// today is listed too.
    fn mesh_summaries(&self) -> StoreResult<Vec<MeshSummary>>;

    /// Commits a write that changes no data, through the same path as every
    /// other write: whether the store can write right now. Fails as a real write
    /// would ([`StoreError::StorageFull`], [`StoreError::Busy`], ...), and with
    /// [`FullStorage::NearlyFull`] when the write went through but the storage
    /// has too little left for more than the smallest writes.
    fn probe_write(&self) -> StoreResult<()>;

    /// What this backend promises: what an acknowledged write survives, and
    /// where it keeps ids unique ([`StoreProfile`]).
    fn profile(&self) -> StoreProfile;
}

/// Path reservations of repository scopes (see
/// [`agentmesh_core::reservation`]). Part of [`Store`]. The reservations of a
/// mesh must appear serial: a grant is checked against every reservation in
/// force, and two overlapping exclusive grants never both commit.
pub trait ReservationStore: Send + Sync + 'static {
    /// Grants `request` unless another holder's reservation in force conflicts
    /// with it (ledger `reservation_granted`); a denial names every conflict
    /// once and is recorded too (`reservation_denied`). Bad input changes
    /// nothing.
    fn reserve(
        &self,
        mesh_id: &str,
        request: &agentmesh_core::NewReservation,
        now: Timestamp,
    ) -> StoreResult<Reserved>;

    /// Runs its holder's command on the reservation `id` (a renew or the
    /// release, [`ReservationCommand`]). A wrong session or epoch, a lapsed
    /// reservation or a renew of a task's reservation is refused
    /// ([`StoreError::ReservationFenced`]), an unknown id is
    /// [`StoreError::NotFound`]; nothing changes then.
    fn reservation_command(
        &self,
        mesh_id: &str,
        id: &str,
        fence: &Fence,
        command: ReservationCommand,
        now: Timestamp,
    ) -> StoreResult<agentmesh_core::Reservation>;

    /// The reservations in force at `now` that [`ReservationQuery`] asks for,
    /// oldest first.
    fn reservations(
        &self,
        mesh_id: &str,
        query: ReservationQuery<'_>,
        now: Timestamp,
    ) -> StoreResult<Vec<agentmesh_core::Reservation>>;

    /// Removes every reservation of every mesh lapsed at `now`, each with its
    /// `reservation_expired` entry; how many.
    fn expire_reservations(&self, now: Timestamp) -> StoreResult<u64>;
}

/// Webhook subscriptions: the receivers a mesh's ledger is sent to, their
/// cursors and delivery state ([`webhook_writes`]). Part of [`Store`].
pub trait WebhookStore: Send + Sync + 'static {
    /// Adds a subscription with its signing secret (ledger `webhook_added`,
    /// without the secret). It follows from its own entry, or from the
    /// ledger's first entry when `valid.from_start`.
    fn add_webhook(
        &self,
        mesh_id: &str,
        valid: &agentmesh_core::webhook::ValidWebhook,
        secret: &str,
        now: Timestamp,
    ) -> StoreResult<agentmesh_core::Webhook>;

    /// The subscriptions of `mesh_id`, or of every mesh when `None`, oldest
    /// first. Never their secrets.
    fn webhooks(&self, mesh_id: Option<&str>) -> StoreResult<Vec<agentmesh_core::Webhook>>;

    /// The signing secret of a subscription; `None` for an unknown one.
    fn webhook_secret(&self, mesh_id: &str, id: &str) -> StoreResult<Option<String>>;

    /// Runs an operator's command on a subscription (a resume, a skip or the
    /// removal), recorded in the ledger ([`WebhookCommand`]); an unknown id is
    /// [`StoreError::NotFound`].
    fn webhook_command(
        &self,
        mesh_id: &str,
        id: &str,
        command: WebhookCommand,
        now: Timestamp,
    ) -> StoreResult<agentmesh_core::Webhook>;

    /// Writes a deliverer's progress by version
    /// ([`webhook_writes::save_progress`]): `None`, with nothing changed, when
    /// the subscription changed or went since it was read.
    fn save_webhook_progress(
        &self,
        hook: &agentmesh_core::Webhook,
        now: Timestamp,
    ) -> StoreResult<Option<agentmesh_core::Webhook>>;
}

/// Retention and the archive ([`archive`], [`agentmesh_core::retention`]):
/// finished tasks and old ledger entries move out of the hot database in
/// bounded steps, and stay readable. Part of [`Store`].
pub trait ArchiveStore: Send + Sync + 'static {
    /// One bounded step of retention over every mesh: moves at most `limit`
    /// finished tasks (with their dependency edges) and `limit` ledger
    /// entries that outlived `policy` (with each mesh's own windows in place
    /// of its) to the archive. A task is never archived unless finished; the
    /// ledger leaves oldest first in sequence order, and never past the
    /// cursor of a mesh's webhook subscription. A row is in the hot database
    /// or in the archive, never lost between: a step cut short leaves each
    /// row where it was or where it went.
    fn archive_expired(
        &self,
        policy: &agentmesh_core::retention::RetentionPolicy,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<archive::ArchiveReport>;

    /// The mesh's archived tasks [`ArchivedTasks`] asks for, each with its
    /// position in archive order, as they were when archived (not marked; see
    /// [`archive::find_task`]).
    fn archived_tasks(&self, mesh_id: &str, query: ArchivedTasks<'_>) -> StoreResult<Vec<(u64, Task)>>;

    /// A page of the mesh's archived ledger alone, as [`LedgerStore::ledger_slice`]
    /// pages the hot one; [`archive::slice`] joins the two. A cursor by
    /// sequence before what was dropped is [`StoreError::CursorExpired`].
    fn archived_ledger(&self, mesh_id: &str, query: &SliceQuery) -> StoreResult<archive::ArchivedPage>;

    /// Deletes from the mesh's archive the tasks and ledger entries up to
    /// `through` (what an export wrote out), never an entry past the cursor
    /// of one of the mesh's webhook subscriptions; returns what was dropped.
    /// Later cursors before the last dropped entry have expired.
    fn drop_archived(
        &self,
        mesh_id: &str,
        through: &agentmesh_core::retention::ArchiveMark,
    ) -> StoreResult<agentmesh_core::retention::ArchiveMark>;

    /// The mesh's archive and retention settings; with `set`, first makes
    /// those the mesh's own windows (an empty one: the daemon's), recorded in
    /// the ledger (`retention_changed`) at `now`.
    fn archive_state(
        &self,
        mesh_id: &str,
        set: Option<&agentmesh_core::retention::MeshRetention>,
        now: Timestamp,
    ) -> StoreResult<archive::ArchiveState>;
}

/// Tasks: the queue, claims and the lifecycle of a claimed task (completion,
/// heartbeat, cancel, requeue, lease expiry). Part of [`Store`].
pub trait QueueStore: Send + Sync + 'static {
    /// Validates and enqueues one task (ledger `task_dispatched`). Rejects a
    /// duplicate id and a dependency cycle, changing nothing.
    fn enqueue(&self, mesh_id: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task>;

    /// Enqueues several tasks in one transaction: all or none. Tasks may depend on
    /// tasks earlier in the batch.
    fn enqueue_batch(&self, mesh_id: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>>;

    /// Records a task a coordinator already dispatched straight to a session (the
    /// original's `recordDirectDispatchTask`), in one transaction: the task
    /// assigned to that node and session (epoch 1, dispatched at `now`, no lease),
    /// its `task_dispatched` entry, and a session delivery already `delivered`, so
    /// it counts as delivered ([`DeliveryQuery::Confirmed`]). An id the mesh
    /// holds is a no-op that returns the task as it is.
    fn record_dispatched_task(
        &self,
        mesh_id: &str,
        task: &NewDispatchedTask,
        now: Timestamp,
    ) -> StoreResult<RecordedDispatch>;

    /// Tasks of a mesh in creation order, only those in `statuses` unless it is empty.
    fn queue_entries(&self, mesh_id: &str, statuses: &[TaskStatus]) -> StoreResult<Vec<Task>>;

    /// One task by id.
    fn find_task(&self, mesh_id: &str, task_id: &str) -> StoreResult<Option<Task>>;

    /// Task counts by status (statuses with no task are left out).
    fn stats_by_status(&self, mesh_id: &str) -> StoreResult<Vec<StatusCount>>;

    /// When the oldest pending task of the mesh was enqueued (tasks waiting for
    /// their dependencies or their `notBefore` included); `None` when none is
    /// pending. A backend answers from an index, without walking the queue.
    fn oldest_pending_created_at(&self, mesh_id: &str) -> StoreResult<Option<Timestamp>>;

    /// Every assigned task, oldest dispatch first.
    fn active_assignments(&self, mesh_id: &str) -> StoreResult<Vec<ActiveAssignment>>;

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

    /// Records a worker's completion or failure as [`QueueStore::complete_task`] does,
    /// then claims the next task for `claimant` as [`QueueStore::claim_next`] does: the
    /// worker loop's two steps in one call. A refused report claims nothing. A
    /// backend should run both in one transaction, so the claim sees the completion
    /// (a dependent it unblocked is claimable at once) and a crash never keeps one
    /// without the other; the default runs them one after the other.
    fn complete_and_claim(
        &self,
        mesh_id: &str,
        report: &CompletionReport,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)> {
        let completed = self.complete_task(mesh_id, report, now)?;
        Ok((completed, self.claim_next(mesh_id, claimant, opts, now)?))
    }

    /// Extends the lease of an assigned task held by the beat's session at its
    /// epoch, and takes its progress report (a `task_progress` entry when it says
    /// something new, a bounded trail an assignment).
    fn heartbeat(&self, mesh_id: &str, beat: &Heartbeat, now: Timestamp) -> StoreResult<Task>;

    /// A hot-path write ([`TaskWrite`]: a claim, a completion, a heartbeat, or a
    /// completion and the next claim), submitted without holding the caller's
    /// thread (see [`submit`]; [`submit::claim`], [`submit::task`] and
    /// [`submit::complete_and_claim`] type its answer). The default runs it on
    /// a thread of its own ([`submit::on_thread`]); a backend whose writes block
    /// their thread runs it on a fixed set ([`submit::Workers`]).
    fn submit_task_write(
        self: Arc<Self>,
        mesh_id: String,
        write: TaskWrite,
        now: Timestamp,
    ) -> Submitted<TaskWritten> {
        submit::on_thread(move || write.run(&*self, &mesh_id, now))
    }

    /// Runs an operator's command on a task ([`TaskCommand`]: a priority
    /// change, a cancel or a requeue) and answers the task as it left it. An
    /// unknown task is [`StoreError::TaskNotFound`]; a command its status does
    /// not allow is refused with `InvalidTransition`, changing nothing.
    fn task_command(
        &self,
        mesh_id: &str,
        task_id: &str,
        command: TaskCommand<'_>,
        now: Timestamp,
    ) -> StoreResult<Task>;

    /// Assigned tasks whose lease ran out before `now`, across every mesh, as
    /// `(mesh id, task id)`.
    fn expired_leases(&self, now: Timestamp) -> StoreResult<Vec<(String, String)>>;

    /// Reclaims the task (ledger `task_reclaimed`, reason `lease_expired`: back
    /// to pending with a higher epoch, or failed after more than three reclaims)
    /// only if, inside the same transaction, it is still assigned and its lease
    /// ran out before `now`; `None` when it is not (a heartbeat
    /// extended the lease, or it completed, was cancelled or is unknown). A lease
    /// reaper uses this, so a heartbeat that lands after the reaper listed the
    /// task keeps it.
    fn reclaim_if_lease_expired(
        &self,
        mesh_id: &str,
        task_id: &str,
        now: Timestamp,
    ) -> StoreResult<Option<Task>>;
}

/// The event ledger: reads in append order, import from a peer, the slice
/// protocol. (Entries are written by the operations they record.) Part of
/// [`Store`].
pub trait LedgerStore: Send + Sync + 'static {
    /// Entries in append order (timestamp, then insertion order); with `tail`, the
    /// newest `tail` entries, still in append order.
    fn read_ledger_ordered(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>>;

    /// Imports entries from elsewhere (each validated first; all or none); returns
    /// how many were new.
    fn import_ledger(&self, entries: &[LedgerEntry]) -> StoreResult<u64>;

    /// One page of the slice protocol, after `query.after_id` in (timestamp, id)
    /// order. An unknown `after_id` gives an empty page. The cost of a page does not
    /// depend on where the cursor is.
    fn ledger_slice(&self, mesh_id: &str, query: &SliceQuery) -> StoreResult<LedgerSlice>;
}

/// Runtime records beside the queue: direct dispatches, session deliveries,
/// in-flight holds, idle sessions, completion fingerprints and conflicts, the tool-call rate guard.
/// Part of [`Store`].
pub trait RuntimeStore: Send + Sync + 'static {
    /// Records a direct dispatch (status `dispatched`), replacing the row of the
    /// same task id.
    fn record_direct_dispatch(
        &self,
        mesh_id: &str,
        dispatch: &NewDirectDispatch,
        now: Timestamp,
    ) -> StoreResult<DirectDispatch>;

    /// With `task_id`, the dispatch of that task whatever its status (none or
    /// one); without, the dispatches that are not completed, failed or stale,
    /// oldest first.
    fn direct_dispatches(&self, mesh_id: &str, task_id: Option<&str>) -> StoreResult<Vec<DirectDispatch>>;

    /// Changes the mesh's dispatches ([`DispatchChange`]: their status, the
    /// stale marking, or deletion by task); returns how many rows changed.
    fn change_direct_dispatches(
        &self,
        mesh_id: &str,
        change: DispatchChange<'_>,
        now: Timestamp,
    ) -> StoreResult<u64>;

    /// Deletes the expired runtime records of one kind ([`RuntimePrune`]) in
    /// every mesh; returns how many. A record refreshed while the sweep runs
    /// no longer qualifies, and stays.
    fn prune_runtime(&self, prune: RuntimePrune) -> StoreResult<u64>;

    /// Records a delivery (status `queued` unless given); replaces one with the same id.
    fn insert_session_delivery(
        &self,
        mesh_id: &str,
        delivery: &NewSessionDelivery,
        now: Timestamp,
    ) -> StoreResult<SessionDelivery>;

    /// Moves a delivery to `status` unless that would move it backwards or out of a
    /// final status; returns whether it changed. Unknown id: [`StoreError::NotFound`].
    fn set_session_delivery_status(
        &self,
        mesh_id: &str,
        id: &str,
        status: DeliveryStatus,
        update: &DeliveryUpdate,
        now: Timestamp,
    ) -> StoreResult<bool>;

    /// The deliveries [`DeliveryQuery`] asks for: one by id whatever its
    /// status (none or one), a task's confirmed ones, or those still waiting.
    fn session_deliveries(
        &self,
        mesh_id: &str,
        query: DeliveryQuery<'_>,
    ) -> StoreResult<Vec<SessionDelivery>>;

    /// Moves waiting deliveries whose expiry passed to `expired`; returns how many.
    fn expire_stale_session_deliveries(&self, mesh_id: &str, now: Timestamp) -> StoreResult<u64>;

    /// The meshes that have session deliveries or direct dispatches, each once,
    /// sorted: what the per-mesh delivery and dispatch sweeps have to visit.
    fn meshes_with_deliveries_or_dispatches(&self) -> StoreResult<Vec<String>>;

    /// Holds a task in flight, updates its hold, or releases it
    /// ([`HoldWrite`]). Answers the hold as stored, or the hold released
    /// (`None` when the task was not held).
    fn write_inflight_hold(
        &self,
        mesh_id: &str,
        write: HoldWrite<'_>,
        now: Timestamp,
    ) -> StoreResult<Option<InflightHold>>;

    /// The mesh's holds, in the order they were first held (then by task id);
    /// with `task_id`, only that task's hold (none when it is not held).
    fn inflight_holds(&self, mesh_id: &str, task_id: Option<&str>) -> StoreResult<Vec<InflightHold>>;

    /// Records (or refreshes) an idle session, or forgets one ([`IdleWrite`]).
    /// Answers, for a forget, whether the session was there; a report answers
    /// `true`.
    fn write_idle_session(&self, write: IdleWrite<'_>) -> StoreResult<bool>;

    /// The mesh's idle sessions whose report has not expired at `now`.
    fn idle_sessions(&self, mesh_id: &str, now: Timestamp) -> StoreResult<Vec<IdleSession>>;

    /// The mesh's fingerprints that have not expired at `now`, the latest expiry
    /// (the most recently recorded, for one ttl) first, at most `limit`.
    fn completion_fingerprints(
        &self,
        mesh_id: &str,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<CompletionFingerprint>>;

    /// Conflicts of the last `window_ms` (one hour when `None`), newest first, at most 50.
    fn recent_completion_conflicts(
        &self,
        mesh_id: &str,
        window_ms: Option<i64>,
        now: Timestamp,
    ) -> StoreResult<Vec<CompletionConflict>>;

    /// Records a call and says whether the tool is called too often in the mesh
    /// (calls within `guard.window_ms`, this one included, above `guard.max_calls`).
    /// Every 200 calls, rows older than the guard's retention are swept.
    fn record_tool_call(&self, call: &ToolCall, guard: RateGuard, now: Timestamp)
    -> StoreResult<RateVerdict>;

    /// The mesh's recorded calls at or after `since`, newest first, at most `limit`.
    /// (The log keeps calls for the guard's retention only.)
    fn recent_tool_calls(
        &self,
        mesh_id: &str,
        since: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<RecordedToolCall>>;
}

/// Missions, their progress, and the round-robin placement cursor. Part of
/// [`Store`].
pub trait MissionStore: Send + Sync + 'static {
    /// Creates or updates a mission (ledger `mission_created` or
    /// `mission_status_changed` / `mission_goal_updated`); an update keeps the
    /// creation time. An id used by another mesh is refused. Of concurrent
    /// upserts of a new id, exactly one is told it created the mission.
    fn upsert_mission(
        &self,
        mesh_id: &str,
        mission: &NewMission,
        now: Timestamp,
    ) -> StoreResult<UpsertedMission>;

    /// The missions [`MissionQuery`] asks for: one by id (none or one), or
    /// those in some statuses, most recently updated first.
    fn missions(&self, mesh_id: &str, query: MissionQuery<'_>) -> StoreResult<Vec<Mission>>;

    /// A mission's progress, counted from its tasks now.
    fn mission_progress(&self, mesh_id: &str, id: &str) -> StoreResult<MissionProgress>;

    /// Advances the cursor by one, atomically; returns the value before.
    fn bump_scheduler_cursor(&self, mesh_id: &str) -> StoreResult<u64>;
}

/// The coordinator inbox: queue, drain, peek, ack and retract events, coordinator
/// presence, retention, and putting held events back. Part of [`Store`].
pub trait InboxStore: Send + Sync + 'static {
    /// Queues an event for a coordinator: stamps its v2 envelope
    /// ([`agentmesh_core::events::stamp_event`] with `hint`, a fresh event id and
    /// `self_machine_id`), refuses a refine terminal that already exists and a
    /// fingerprint already used in the mesh (even by a drained event), then stores it.
    fn queue_pending_event(
        &self,
        mesh_id: &str,
        event: &agentmesh_core::events::PendingEvent,
        hint: &agentmesh_core::events::EmitHint,
        self_machine_id: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome>;

    /// Drains the drainer's events in one transaction, oldest first, routing each
    /// inside the transaction ([`agentmesh_core::events::route_event`]): only
    /// delivered, deduplicated and quarantined events are marked drained (a
    /// quarantined one with its `event_held` ledger entry); events routed away stay
    /// queued for their own coordinator and never keep the drainer from reaching
    /// its own. The drain refreshes its drainer's presence (see
    /// [`InboxStore::coordinator_presence`]) in the same transaction.
    fn drain_pending_events(
        &self,
        mesh_id: &str,
        request: &DrainRequest,
        now: Timestamp,
    ) -> StoreResult<DrainOutcome>;

    /// What a drain would deliver now, marking nothing and counting nothing.
    ///
    /// A peek takes no clock and writes nothing: it refreshes no presence, and
    /// judges which coordinators are live at the newest presence instant recorded
    /// for the mesh.
    fn peek_pending_events(&self, mesh_id: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>>;

    /// Acknowledges or deletes events of the mesh ([`EventSettle`]); returns
    /// how many events changed. Unknown ids and other meshes' events are passed
    /// over.
    fn settle_pending_events(&self, mesh_id: &str, settle: EventSettle<'_>) -> StoreResult<u64>;

    /// Undrained events of the mesh.
    fn pending_event_count(&self, mesh_id: &str) -> StoreResult<u64>;

    /// The inbox retention sweep, across every mesh.
    ///
    /// Drained events queued before `drained_older_than` are deleted; in a mesh
    /// with an events window of its own, those queued before that window's
    /// cutoff at `now` (none when it is off). Undrained
    /// events queued before `undrained_older_than` are removed, each with an
    /// `event_held` ledger entry (reason `pending_retention_expired`, recoverable,
    /// the whole event under `heldEvent`) committed in the same transaction as the
    /// removal, so an expired event is moved to the ledger and never simply lost.
    /// Events named in [`agentmesh_core::events::names::NEVER_EXPIRE_EVENTS`] stay
    /// at any age and are counted as exempt. `now` stamps the ledger entries. (The
    /// original swept with 7 days for drained and 30 days for undrained events.)
    fn prune_pending_events(
        &self,
        drained_older_than: Timestamp,
        undrained_older_than: Timestamp,
        now: Timestamp,
    ) -> StoreResult<PruneReport>;

    /// Records the presence of the coordinator `identity` in the mesh as of
    /// `now`: live, or (with `ended`) exited gracefully.
    ///
    /// Every drain refreshes its drainer's presence inside its transaction; a
    /// coordinator that stays quiet for a while refreshes it here to keep its
    /// unicasts (a heartbeat). A coordinator is live from its latest refresh for
    /// [`COORDINATOR_PRESENCE_TTL_MS`], unless it ended. A unicast for another
    /// run on the drainer's machine is re-attributed to the drainer (the restart
    /// rule) only while its addressee is not live; a live one keeps it queued. An
    /// ended coordinator is no longer live, so the next coordinator on its
    /// machine inherits its unicasts; a refresh after its end makes it live
    /// again. Answers, for an end, whether it had a presence record; a refresh
    /// answers `true`.
    fn coordinator_presence(
        &self,
        mesh_id: &str,
        identity: &agentmesh_core::events::CoordinatorIdentity,
        ended: bool,
        now: Timestamp,
    ) -> StoreResult<bool>;

    /// Puts a held event back in the inbox: the event of the `event_held` ledger
    /// entry `held_entry_id` becomes undrained again (re-inserted when retention
    /// already removed its row), and an `event_held_requeued` entry records it.
    /// An entry whose row is gone and whose event cannot be read (an old
    /// entry of the original) changes nothing and is answered
    /// [`HeldRequeue::Unrecoverable`], so a bulk requeue counts it and goes on.
    /// An unknown entry: [`StoreError::NotFound`].
    fn requeue_held_event(
        &self,
        mesh_id: &str,
        held_entry_id: &str,
        now: Timestamp,
    ) -> StoreResult<HeldRequeue>;

    /// Undrained events counted by the coordinator they are addressed to (the v2
    /// `intendedFor`, else the v1 targets; `None` parts for broadcasts and
    /// unaddressed events), largest group first, at most 50 groups.
    fn pending_events_by_addressee(&self, mesh_id: &str) -> StoreResult<Vec<PendingAddressee>>;
}
