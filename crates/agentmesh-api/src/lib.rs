//! The agentmesh API: one set of operations, the same on every transport.
//!
//! [`MeshApi`] is everything a coordinator or a worker can ask of a mesh. It has
//! two implementations:
//! - [`LocalMesh`] runs each operation against a [`Store`](agentmesh_store::Store)
//!   in this process (the CLI on its data dir, the daemon behind its HTTP routes,
//!   `agentmesh mcp` without a server);
//! - [`RemoteMesh`] sends it to a running daemon over HTTP.
//!
//! Both take the same request bodies ([`wire`]) and answer the same views
//! ([`views`]), so a caller (the CLI, the worker runner, the MCP tools) is written
//! once and cannot tell which one it holds, and the daemon's HTTP answers are, by
//! construction, what the local path would have produced.
//!
//! Rules stay in the core and the store: a `LocalMesh` operation decodes its body,
//! makes its store calls and builds the view; nothing else.

use std::time::Duration;

use agentmesh_core::{InvalidInput, LedgerEntry, LedgerSlice, Task};
use agentmesh_store::StoreError;

mod local;
mod remote;
mod signal;
pub mod views;
pub mod watch;
pub mod webhook;
pub mod wire;

pub use local::{Clock, DEFAULT_CROSS_PROCESS_POLL, DEFAULT_REQUEST_TIMEOUT, ENFORCE_ENV, LocalMesh};
pub use remote::RemoteMesh;
pub use signal::WriteSignal;
use views::{
    AckView, CheckPathsView, ClaimView, CompleteAndClaimView, ConflictView, DeletedEventsView,
    DeliveryChangeView, DeliveryConfirmedView, DeliveryView, DispatchChangeView, DispatchView,
    DispatchedTaskView, DrainView, FingerprintView, HeldEventView, HoldReleasedView, HoldView,
    IdleRemovedView, IdleSessionView, ImportView, InboxEventView, MissionDetailView, MissionSaved,
    MissionView, NodeRankView, PushView, RateVerdictView, RemovedView, RequeueHeldView, RequeueView,
    ReserveView, RetractView, StaleDispatchesView, StatusView, ToolCallLogView,
};
pub use watch::WakeUp;
use wire::{
    AckBody, BatchEnqueueBody, CancelBody, CheckPathsBody, ClaimBody, CompleteAndClaimBody, CompletionBody,
    ConflictParams, DeleteEventsBody, DeliveryBody, DeliveryListParams, DeliveryStatusBody, DispatchBody,
    DispatchStatusBody, DispatchedTaskBody, DrainBody, EnqueueBody, FenceBody, FingerprintParams,
    HeartbeatBody, HeldParams, HoldBody, IdleBody, ImportBody, LedgerParams, ListParams, MissionBody,
    MissionListParams, PlacementBody, PriorityBody, PushEventBody, RemoveDispatchesBody, RequeueBody,
    RequeueHeldBody, ReservationListParams, ReserveBody, RetractBody, SliceParams, StaleDispatchesBody,
    ToolCallBody, ToolCallParams,
};

/// How long a watch waits when the caller names no timeout.
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a single watch may wait.
pub const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(600);

/// The result of a mesh operation.
pub type MeshResult<T> = Result<T, MeshError>;

/// Why a mesh operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MeshError {
    /// The store refused or failed (local operations; the daemon's own errors).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The daemon answered with an error.
    #[error("{message}")]
    Remote {
        /// The HTTP status.
        status: u16,
        /// The stable error code of the body.
        code: String,
        /// The daemon's message.
        message: String,
    },
    /// No connection to the daemon could be made: nothing listens at its address,
    /// or the address does not resolve.
    #[error("cannot connect to the daemon at {url}: {reason}")]
    CannotConnect {
        /// The daemon's address.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The daemon could not be reached, or its answer could not be read.
    #[error("cannot reach the daemon at {url}: {reason}")]
    Unreachable {
        /// The daemon's address.
        url: String,
        /// What went wrong.
        reason: String,
    },
}

impl From<InvalidInput> for MeshError {
    fn from(err: InvalidInput) -> MeshError {
        MeshError::Store(StoreError::InvalidInput(err))
    }
}

impl MeshError {
    /// The stable machine-readable code (`invalid_input`, `task_not_found`, ...).
    pub fn code(&self) -> &str {
        match self {
            MeshError::Store(err) => err.code(),
            MeshError::Remote { code, .. } => code,
            MeshError::CannotConnect { .. } | MeshError::Unreachable { .. } => "unreachable",
        }
    }

    /// Whether the caller's request was at fault (bad input, an unknown id, a
    /// conflict with the task's state, a stale epoch), as opposed to the system.
    pub fn is_caller_error(&self) -> bool {
        match self {
            MeshError::Store(err) => err.is_caller_error(),
            MeshError::Remote { status, .. } => (400..500).contains(status),
            MeshError::CannotConnect { .. } | MeshError::Unreachable { .. } => false,
        }
    }

    /// Whether the environment is at fault for now and the same request may
    /// succeed when asked again in a moment: the store's contention, a held
    /// lock, an unreachable database (a daemon's 503).
    pub fn is_transient(&self) -> bool {
        match self {
            MeshError::Store(err) => err.is_transient(),
            MeshError::Remote { status, .. } => *status == 503,
            MeshError::CannotConnect { .. } | MeshError::Unreachable { .. } => false,
        }
    }

    /// The HTTP status this error is answered with.
    pub fn http_status(&self) -> u16 {
        match self {
            MeshError::Store(err) => store_error_status(err),
            MeshError::Remote { status, .. } => *status,
            MeshError::CannotConnect { .. } | MeshError::Unreachable { .. } => 502,
        }
    }
}

/// The HTTP status of a store error: the one place that decides it.
pub fn store_error_status(err: &StoreError) -> u16 {
    match err {
        StoreError::InvalidInput(_) => 400,
        StoreError::TaskNotFound { .. } | StoreError::NotFound { .. } => 404,
        StoreError::DuplicateTaskId { .. }
        | StoreError::DependencyCycle { .. }
        | StoreError::IdInOtherMesh { .. }
        | StoreError::InvalidTransition(_)
        | StoreError::StaleEpoch { .. }
        | StoreError::ReservationFenced { .. }
        | StoreError::NotAssignedToSession { .. }
        | StoreError::NoAssignedTask { .. } => 409,
        StoreError::CursorExpired { .. } => 410,
        StoreError::Busy | StoreError::LockTimeout | StoreError::Unavailable(_) => 503,
        StoreError::StorageFull(_) => 507,
        _ => 500,
    }
}

/// Everything a coordinator or a worker can ask of a mesh. Every operation names
/// its mesh; ids and bodies are as the HTTP API takes them.
pub trait MeshApi: Send + Sync {
    /// The deadline of a request that starts now, when this side bounds its
    /// requests (the store in this process does; a daemon bounds its own):
    /// a caller that runs an operation on a thread of its own carries it
    /// there with [`agentmesh_store::deadline::within`].
    fn request_deadline(&self) -> Option<std::time::Instant> {
        None
    }
    /// Enqueues one task.
    fn enqueue(&self, mesh: &str, body: EnqueueBody) -> MeshResult<Task>;
    /// Enqueues several tasks, all or none; `dependsOn` may name another item's `ref`.
    fn enqueue_batch(&self, mesh: &str, body: BatchEnqueueBody) -> MeshResult<Vec<Task>>;
    /// The tasks of the mesh (of some statuses), oldest first.
    fn list_tasks(&self, mesh: &str, params: ListParams) -> MeshResult<Vec<Task>>;
    /// One task; `task_not_found` when the mesh has none with this id.
    fn show_task(&self, mesh: &str, id: &str) -> MeshResult<Task>;
    /// Cancels a pending or assigned task.
    fn cancel_task(&self, mesh: &str, id: &str, body: CancelBody) -> MeshResult<Task>;
    /// Changes the pull priority of a pending or assigned task.
    fn set_priority(&self, mesh: &str, id: &str, body: PriorityBody) -> MeshResult<Task>;
    /// Puts a task back in the queue, or fails it when its retry budget is spent.
    fn requeue_task(&self, mesh: &str, id: &str, body: RequeueBody) -> MeshResult<RequeueView>;
    /// Claims the next task for a worker session; "nothing to claim" is an answer.
    fn claim(&self, mesh: &str, body: ClaimBody) -> MeshResult<ClaimView>;
    /// Extends the lease of a claimed task; a stale epoch is refused.
    fn heartbeat(&self, mesh: &str, body: HeartbeatBody) -> MeshResult<Task>;
    /// Reports a task completed or failed; a stale epoch is refused.
    fn complete(&self, mesh: &str, body: CompletionBody) -> MeshResult<Task>;
    /// Reports a task completed or failed, then claims the next task, in one
    /// transaction; a refused report claims nothing.
    fn complete_and_claim(&self, mesh: &str, body: CompleteAndClaimBody) -> MeshResult<CompleteAndClaimView>;
    /// Queues an event for a coordinator.
    fn push_event(&self, mesh: &str, body: PushEventBody) -> MeshResult<PushView>;
    /// Takes the coordinator's events, marking them drained, in one transaction.
    fn drain(&self, mesh: &str, body: DrainBody) -> MeshResult<DrainView>;
    /// The events a drain would deliver now, marking nothing.
    fn peek(&self, mesh: &str, body: DrainBody) -> MeshResult<Vec<InboxEventView>>;
    /// A drain that waits up to `timeout` for an event to arrive when none is
    /// there; empty when the time runs out.
    fn watch(&self, mesh: &str, body: DrainBody, timeout: Duration) -> MeshResult<DrainView>;
    /// Marks events delivered elsewhere as drained, by row id.
    fn ack(&self, mesh: &str, body: AckBody) -> MeshResult<AckView>;
    /// Deletes events by row id, drained or not, with their fingerprints.
    fn delete_events(&self, mesh: &str, body: DeleteEventsBody) -> MeshResult<DeletedEventsView>;
    /// Removes a task's undelivered `mesh:dispatch_blocked` events.
    fn retract(&self, mesh: &str, body: RetractBody) -> MeshResult<RetractView>;
    /// Held events (quarantined by an enforce-mode drain, or moved out of the inbox
    /// by retention) that were not put back, oldest hold first.
    fn held_events(&self, mesh: &str, params: HeldParams) -> MeshResult<Vec<HeldEventView>>;
    /// Puts held events back in the inbox, by id or by filter. Ids are all
    /// checked before any event moves.
    fn requeue_held(&self, mesh: &str, body: RequeueHeldBody) -> MeshResult<RequeueHeldView>;
    /// Completion fingerprints still in force, the most recently recorded first.
    fn completion_fingerprints(
        &self,
        mesh: &str,
        params: FingerprintParams,
    ) -> MeshResult<Vec<FingerprintView>>;
    /// Completion conflicts of the recent past, newest first.
    fn completion_conflicts(&self, mesh: &str, params: ConflictParams) -> MeshResult<Vec<ConflictView>>;
    /// The newest ledger entries, oldest first.
    fn ledger_tail(&self, mesh: &str, params: LedgerParams) -> MeshResult<Vec<LedgerEntry>>;
    /// One page of the ledger slice protocol.
    fn ledger_slice(&self, mesh: &str, params: SliceParams) -> MeshResult<LedgerSlice>;
    /// Imports ledger entries of this mesh (all or none).
    fn import_ledger(&self, mesh: &str, body: ImportBody) -> MeshResult<ImportView>;
    /// Creates or updates a mission.
    fn upsert_mission(&self, mesh: &str, body: MissionBody) -> MeshResult<MissionSaved>;
    /// Missions (of some statuses), most recently updated first, with progress.
    fn missions(&self, mesh: &str, params: MissionListParams) -> MeshResult<Vec<MissionView>>;
    /// One mission with its progress and tasks.
    fn mission(&self, mesh: &str, id: &str) -> MeshResult<MissionDetailView>;
    /// Records that a worker session is idle.
    fn report_idle(&self, mesh: &str, body: IdleBody) -> MeshResult<IdleSessionView>;
    /// Idle sessions whose report has not expired, by node then session.
    fn idle_sessions(&self, mesh: &str) -> MeshResult<Vec<IdleSessionView>>;
    /// Forgets a session's idle report (a session shutting down).
    fn remove_idle_session(&self, mesh: &str, node_id: &str, session_id: &str)
    -> MeshResult<IdleRemovedView>;
    /// Records a task already dispatched straight to a session: assigned to it,
    /// with its entry and a delivered record; an id the mesh holds changes nothing.
    fn record_dispatched_task(&self, mesh: &str, body: DispatchedTaskBody) -> MeshResult<DispatchedTaskView>;
    /// Whether a delivery of the task reached its session (delivered, acked or
    /// completed).
    fn delivery_confirmed(&self, mesh: &str, task_id: &str) -> MeshResult<DeliveryConfirmedView>;
    /// Holds an acknowledged task in flight, or updates its hold (its first
    /// `heldAt` is kept; the rest is overwritten).
    fn hold_task(&self, mesh: &str, body: HoldBody) -> MeshResult<HoldView>;
    /// The mesh's in-flight holds, in the order they were first held.
    fn holds(&self, mesh: &str) -> MeshResult<Vec<HoldView>>;
    /// The hold of one task; `not_found` when the task is not held.
    fn hold(&self, mesh: &str, task_id: &str) -> MeshResult<HoldView>;
    /// Releases the hold of one task.
    fn release_hold(&self, mesh: &str, task_id: &str) -> MeshResult<HoldReleasedView>;
    /// Reserves path patterns of a repository scope; a conflict denies the
    /// request naming each conflicting reservation once. With `waitSecs`, a
    /// denied request is tried again as the mesh's writes land, until it is
    /// granted or the wait is over.
    fn reserve(&self, mesh: &str, body: ReserveBody) -> MeshResult<ReserveView>;
    /// Renews a reservation, by its holder (session and epoch).
    fn renew_reservation(
        &self,
        mesh: &str,
        id: &str,
        body: FenceBody,
    ) -> MeshResult<agentmesh_core::Reservation>;
    /// Releases a reservation, by its holder (session and epoch).
    fn release_reservation(
        &self,
        mesh: &str,
        id: &str,
        body: FenceBody,
    ) -> MeshResult<agentmesh_core::Reservation>;
    /// The reservations in force, oldest first.
    fn reservations(
        &self,
        mesh: &str,
        params: ReservationListParams,
    ) -> MeshResult<Vec<agentmesh_core::Reservation>>;
    /// Which of some paths another holder's exclusive reservation covers.
    fn check_paths(&self, mesh: &str, body: CheckPathsBody) -> MeshResult<CheckPathsView>;
    /// The mesh's archive (counts, where an export would end, what was
    /// dropped) and its own retention windows.
    fn archive(&self, mesh: &str) -> MeshResult<agentmesh_store::archive::ArchiveState>;
    /// Sets the mesh's own retention windows (an empty body: the daemon's),
    /// recorded in the ledger; answers the archive's state.
    fn set_retention(
        &self,
        mesh: &str,
        body: agentmesh_core::retention::MeshRetention,
    ) -> MeshResult<agentmesh_store::archive::ArchiveState>;
    /// A page of the mesh's archived tasks in archive order, after position
    /// `after`, for an export.
    fn archived_tasks(&self, mesh: &str, params: ArchivedTasksParams) -> MeshResult<ArchivedTasksView>;
    /// Deletes from the mesh's archive what an export wrote out (up to the
    /// marks), never past a webhook subscription's cursor; answers the marks
    /// it dropped through.
    fn drop_archived(
        &self,
        mesh: &str,
        body: agentmesh_core::retention::ArchiveMark,
    ) -> MeshResult<agentmesh_core::retention::ArchiveMark>;
    /// Adds a webhook subscription; its secret is in the answer, the one time
    /// it is shown.
    fn add_webhook(&self, mesh: &str, body: webhook::WebhookBody) -> MeshResult<webhook::WebhookAddedView>;
    /// The mesh's webhook subscriptions, oldest first (never their secrets).
    fn webhooks(&self, mesh: &str) -> MeshResult<Vec<agentmesh_core::Webhook>>;
    /// One webhook subscription, with its delivery log; `not_found` when the
    /// mesh has none by this id.
    fn webhook(&self, mesh: &str, id: &str) -> MeshResult<agentmesh_core::Webhook>;
    /// Removes a webhook subscription (recorded).
    fn remove_webhook(&self, mesh: &str, id: &str) -> MeshResult<agentmesh_core::Webhook>;
    /// Resumes a failing subscription, or makes it skip the entry it is stuck
    /// on (recorded).
    fn webhook_command(
        &self,
        mesh: &str,
        id: &str,
        command: agentmesh_store::WebhookCommand,
    ) -> MeshResult<agentmesh_core::Webhook>;
    /// Sends a signed sample to a subscription's receiver and says how it
    /// went; its cursor does not move.
    fn test_webhook(&self, mesh: &str, id: &str) -> MeshResult<webhook::WebhookTestView>;
    /// Queues a message for a worker session.
    fn send_delivery(&self, mesh: &str, body: DeliveryBody) -> MeshResult<DeliveryView>;
    /// Deliveries still waiting, for the mesh or one session.
    fn deliveries(&self, mesh: &str, params: DeliveryListParams) -> MeshResult<Vec<DeliveryView>>;
    /// One delivery, whatever its status; `not_found` when the mesh has none by this id.
    fn delivery(&self, mesh: &str, id: &str) -> MeshResult<DeliveryView>;
    /// Moves a delivery on (never backwards, never out of a final status, unless
    /// the change counts a retry).
    fn update_delivery(
        &self,
        mesh: &str,
        id: &str,
        body: DeliveryStatusBody,
    ) -> MeshResult<DeliveryChangeView>;
    /// Records a direct dispatch.
    fn record_dispatch(&self, mesh: &str, body: DispatchBody) -> MeshResult<DispatchView>;
    /// Dispatches not yet completed, failed or stale.
    fn dispatches(&self, mesh: &str) -> MeshResult<Vec<DispatchView>>;
    /// The dispatch of one task, whatever its status.
    fn dispatch(&self, mesh: &str, task_id: &str) -> MeshResult<DispatchView>;
    /// Moves the dispatch of a task, or every open one of a session, to a status.
    fn update_dispatches(&self, mesh: &str, body: DispatchStatusBody) -> MeshResult<DispatchChangeView>;
    /// Marks `dispatched` rows nobody acknowledged in time `stale`.
    fn mark_stale_dispatches(&self, mesh: &str, body: StaleDispatchesBody)
    -> MeshResult<StaleDispatchesView>;
    /// Forgets the dispatches of some tasks.
    fn remove_dispatches(&self, mesh: &str, body: RemoveDispatchesBody) -> MeshResult<RemovedView>;
    /// Ranks nodes for a task, best first.
    fn placement(&self, mesh: &str, body: PlacementBody) -> MeshResult<Vec<NodeRankView>>;
    /// An overview of the mesh.
    fn status(&self, mesh: &str) -> MeshResult<StatusView>;
    /// Every mesh the store holds anything of, by id, with its counts.
    fn meshes(&self) -> MeshResult<Vec<views::MeshSummaryView>>;
    /// Records that a coordinator is alive (a drain does this too), or that it ended.
    /// A unicast for a live coordinator is never handed to another run on its
    /// machine; one for a coordinator gone quiet for two minutes, or ended, is.
    fn coordinator_presence(&self, mesh: &str, body: wire::PresenceBody) -> MeshResult<views::PresenceView>;
    /// Records a call of an agent-facing tool and answers the rate guard's verdict
    /// (the guard's default window and limit).
    fn record_tool_call(&self, mesh: &str, body: ToolCallBody) -> MeshResult<RateVerdictView>;
    /// The rate guard's recent calls, per caller role.
    fn tool_calls(&self, mesh: &str, params: ToolCallParams) -> MeshResult<ToolCallLogView>;
}

/// The query of a page of archived tasks.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArchivedTasksParams {
    /// The position after which the page starts (0: the first).
    #[serde(default)]
    pub after: u64,
    /// Page size, 1 to 500 (100 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl ArchivedTasksParams {
    /// The page size, checked.
    pub fn checked_limit(&self) -> Result<u32, agentmesh_core::InvalidInput> {
        match self.limit {
            None => Ok(100),
            Some(n @ 1..=500) => Ok(n),
            Some(_) => Err(agentmesh_core::InvalidInput::new("limit", "must be between 1 and 500")),
        }
    }
}

/// A page of archived tasks.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedTasksView {
    /// The tasks, each with its position in the archive.
    pub tasks: Vec<ArchivedTaskView>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<u64>,
}

/// An archived task and its position in the archive.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedTaskView {
    /// The position (an export's cursor).
    pub pos: u64,
    /// The task, marked archived.
    pub task: Task,
}
