//! [`LocalMesh`]: the operations run against a store in this process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_core::events::held;
use agentmesh_core::{
    Claimant, IdleSession, LedgerEntry, LedgerQuery, LedgerSlice, NewMission, SliceQuery, Task, Timestamp,
};
use agentmesh_store::placement::{NodeInfo, suggest_nodes};
use agentmesh_store::{
    ArchivedTasks, ClaimOptions, CompletionReport, DeliveryQuery, DispatchChange, DrainRequest, EventSettle,
    Heartbeat, HeldRequeue, HoldWrite, IdleWrite, MissionQuery, ReservationCommand, ReservationQuery, Store,
    StoreError, TaskCommand, TaskWrite, submit,
};
use serde_json::Value;

use crate::views::{
    AckView, ActiveAssignmentView, BlockedPathView, CheckPathsView, ClaimView, CompleteAndClaimView,
    ConflictView, DeletedEventsView, DeliveryChangeView, DeliveryConfirmedView, DeliveryView,
    DispatchChangeView, DispatchView, DispatchedTaskView, DrainView, FingerprintView, HeldEventView,
    HoldReleasedView, HoldView, IdleRemovedView, IdleSessionView, ImportView, InboxEventView,
    MeshSummaryView, MissionDetailView, MissionSaved, MissionView, NodeRankView, PendingForCoordinatorView,
    PushView, RateVerdictView, RemovedView, RequeueHeldView, RequeueView, RequeuedHeldView, ReserveView,
    RetractView, StaleDispatchesView, StatusView, ToolCallLogView, ToolCallView,
};
use crate::watch::{Look, Watch, watch_timeout};
use crate::wire::{
    AckBody, BatchEnqueueBody, CancelBody, CheckPathsBody, ClaimBody, CompleteAndClaimBody, CompletionBody,
    ConflictParams, DEFAULT_IDLE_TTL_SECS, DeleteEventsBody, DeliveryBody, DeliveryListParams,
    DeliveryStatusBody, DispatchBody, DispatchStatusBody, DispatchedTaskBody, DrainBody, EnqueueBody,
    FenceBody, FingerprintParams, HeartbeatBody, HeldParams, HeldSelection, HoldBody, IdleBody, ImportBody,
    LedgerParams, ListParams, MissionBody, MissionListParams, PlacementBody, PriorityBody, ProgressBody,
    PushEventBody, RemoveDispatchesBody, RequeueBody, RequeueHeldBody, ReservationListParams, ReserveBody,
    RetractBody, SliceParams, StaleDispatchesBody, StatusFilter, ToolCallBody, ToolCallParams, id as id_rule,
    optional, optional_id, page_limit, required, seconds_before,
};
use crate::{MeshApi, MeshResult, WakeUp, WriteSignal};

/// Where the current time comes from: the binary's clock, or a test's.
pub type Clock = fn() -> Timestamp;

/// The environment variable that switches v2 enforce mode on for drains. A
/// library never reads it: the binary reads it once at start-up and hands the
/// answer to [`LocalMesh::with_enforce`].
pub const ENFORCE_ENV: &str = "MESH_PROTOCOL_V2_ENFORCE";

/// The lease of a claim that names none: ten minutes. A worker that stops
/// heartbeating loses its task to the daemon's lease reaper once it runs out.
const DEFAULT_LEASE_MS: i64 = 10 * 60 * 1000;

/// How many of the newest ledger entries the status shows.
const STATUS_LEDGER_TAIL: u32 = 10;

/// How many rows a filtered diagnostic read (fingerprints, tool calls) looks at
/// before its filter: far more than either table holds in practice, since both
/// are swept within hours.
const DIAGNOSTIC_SCAN: u32 = 10_000;

/// How often a waiting watch looks again without being woken, to notice writes
/// made by other processes on the same database (writes through this `LocalMesh`
/// wake it at once).
pub const DEFAULT_CROSS_PROCESS_POLL: Duration = Duration::from_millis(100);

/// How long one request may take, across every attempt, before it is answered
/// with the fault that held it up (see [`LocalMesh::with_request_timeout`]).
pub use agentmesh_store::deadline::DEFAULT_REQUEST_TIMEOUT;

/// The mesh operations over a [`Store`] in this process.
///
/// Every successful write bumps the [`WriteSignal`], which is what wakes a
/// [`MeshApi::watch`] waiting on the same `LocalMesh` (or a clone of it: clones
/// share the store and the signal).
#[derive(Clone)]
pub struct LocalMesh {
    store: Arc<dyn Store>,
    clock: Clock,
    signal: Arc<WriteSignal>,
    wake_up: Option<Arc<dyn WakeUp>>,
    cross_process_poll: Duration,
    enforce: bool,
    request_timeout: Duration,
    webhook_policy: agentmesh_core::webhook::UrlPolicy,
    webhook_timeout: Duration,
}

impl std::fmt::Debug for LocalMesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMesh").field("signal", &self.signal).finish_non_exhaustive()
    }
}

impl LocalMesh {
    /// The operations over `store`, reading the time from `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Clock) -> LocalMesh {
        LocalMesh {
            store,
            clock,
            signal: Arc::new(WriteSignal::new()),
            wake_up: None,
            cross_process_poll: DEFAULT_CROSS_PROCESS_POLL,
            enforce: false,
            webhook_policy: agentmesh_core::webhook::UrlPolicy::default(),
            webhook_timeout: crate::webhook::DEFAULT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Sets how long one request may take ([`DEFAULT_REQUEST_TIMEOUT`]
    /// otherwise; at least 1 ms): the budget of its store calls across every
    /// attempt ([`agentmesh_store::deadline`]). A request that runs out of it is
    /// answered with what held it up: `busy`, `lock_timeout` or `unavailable`.
    /// A watch's wait is not counted: each of its looks has a budget of its own.
    pub fn with_request_timeout(mut self, timeout: Duration) -> LocalMesh {
        self.request_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The deadline of a request that starts now.
    pub fn request_deadline(&self) -> Instant {
        Instant::now() + self.request_timeout
    }

    /// Runs `op` with a fresh request deadline (replacing the caller's).
    fn bounded<T>(&self, op: impl FnOnce() -> T) -> T {
        agentmesh_store::deadline::within(Some(self.request_deadline()), op)
    }

    /// Reads the time from `clock` instead (a server database's clock, so that
    /// several daemons stamp leases, presence and the ledger by one clock).
    pub fn with_clock(mut self, clock: Clock) -> LocalMesh {
        self.clock = clock;
        self
    }

    /// Sets where webhook receivers may be (checked when a subscription is
    /// added and before `test_webhook` sends) and how long one may take to
    /// answer a test.
    pub fn with_webhooks(
        mut self,
        policy: agentmesh_core::webhook::UrlPolicy,
        timeout: Duration,
    ) -> LocalMesh {
        self.webhook_policy = policy;
        self.webhook_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Runs every drain in v2 enforce mode when `enforce` is set (a drain body
    /// may ask for it too); off unless set.
    pub fn with_enforce(mut self, enforce: bool) -> LocalMesh {
        self.enforce = enforce;
        self
    }

    /// Sets how often a waiting watch looks again unprompted (see
    /// [`DEFAULT_CROSS_PROCESS_POLL`]).
    pub fn with_cross_process_poll(mut self, every: Duration) -> LocalMesh {
        self.cross_process_poll = every.max(Duration::from_millis(1));
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The signal bumped after every write.
    pub fn signal(&self) -> &Arc<WriteSignal> {
        &self.signal
    }

    /// Wakes watches through `wake_up` instead of the write signal: a backend
    /// that learns of commits itself (every process's) supplies its own. It is
    /// also notified after every write this `LocalMesh` commits.
    pub fn with_wake_up(mut self, wake_up: Arc<dyn WakeUp>) -> LocalMesh {
        self.wake_up = Some(wake_up);
        self
    }

    /// What wakes this mesh's watches: the one given to
    /// [`LocalMesh::with_wake_up`], else the write signal.
    pub fn wake_up(&self) -> Arc<dyn WakeUp> {
        match &self.wake_up {
            Some(wake_up) => Arc::clone(wake_up),
            None => Arc::clone(&self.signal) as Arc<dyn WakeUp>,
        }
    }

    /// How often a waiting watch looks again unprompted.
    pub fn cross_process_poll(&self) -> Duration {
        self.cross_process_poll
    }

    /// Records a committed write: the signal's listeners, and the wake-up given
    /// to [`LocalMesh::with_wake_up`]. Writes through this `LocalMesh` call it
    /// themselves; a caller that wrote to its store directly calls it after.
    pub fn wrote(&self) {
        self.signal.bump();
        if let Some(wake_up) = &self.wake_up {
            wake_up.notify();
        }
    }

    /// The current time, from the clock.
    pub fn now(&self) -> Timestamp {
        (self.clock)()
    }

    /// Runs a write and bumps the signal when it succeeded. A write that met
    /// contention changed nothing and is run again, with a fresh clock reading,
    /// after a short back-off ([`agentmesh_store::retry`]): the one place the API
    /// retries.
    ///
    /// Called without a deadline on the thread, the write gets one of its own
    /// ([`LocalMesh::with_request_timeout`]).
    fn write<T>(&self, mut op: impl FnMut(&dyn Store, Timestamp) -> Result<T, StoreError>) -> MeshResult<T> {
        let deadline = agentmesh_store::deadline::current().unwrap_or_else(|| self.request_deadline());
        let out = agentmesh_store::deadline::within(Some(deadline), || {
            agentmesh_store::retry::retrying(|| op(self.store.as_ref(), self.now()))
        })?;
        self.wrote();
        Ok(out)
    }

    /// Awaits a submitted write and bumps the signal when it succeeded: the async
    /// [`LocalMesh::write`]. `submit` hands the write to the store; it is called
    /// again when the write met contention.
    async fn write_submitted<T: Send + 'static>(
        &self,
        submit: impl FnMut() -> agentmesh_store::Submitted<T>,
    ) -> MeshResult<T> {
        let out = agentmesh_store::retry::retrying_submitted(Some(self.request_deadline()), submit).await?;
        self.wrote();
        Ok(out)
    }

    /// The store's drain request for `body`, with this mesh's enforce mode
    /// folded in.
    fn drain_request(&self, body: DrainBody) -> MeshResult<DrainRequest> {
        let mut request = DrainRequest::try_from(body)?;
        request.enforce |= self.enforce;
        Ok(request)
    }

    /// [`MeshApi::claim`], submitted to the store without holding the caller's
    /// thread (see [`agentmesh_store::submit`]): for async callers.
    pub async fn claim_submitted(&self, mesh: &str, body: ClaimBody) -> MeshResult<ClaimView> {
        let mesh = mesh_id(mesh)?;
        let (claimant, opts) = claim_request(body)?;
        let claim = || {
            submit::claim(
                Arc::clone(&self.store),
                mesh.to_owned(),
                claimant.clone(),
                opts.clone(),
                self.now(),
            )
        };
        self.write_submitted(claim).await.map(ClaimView::from)
    }

    /// [`MeshApi::complete`], submitted to the store without holding the caller's
    /// thread.
    pub async fn complete_submitted(&self, mesh: &str, body: CompletionBody) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let now = self.now();
        let report = body.into_report(now)?;
        self.write_submitted(|| {
            submit::task(Arc::clone(&self.store), mesh.to_owned(), TaskWrite::Complete(report.clone()), now)
        })
        .await
    }

    /// [`MeshApi::complete_and_claim`], submitted to the store without holding the
    /// caller's thread.
    pub async fn complete_and_claim_submitted(
        &self,
        mesh: &str,
        body: CompleteAndClaimBody,
    ) -> MeshResult<CompleteAndClaimView> {
        let mesh = mesh_id(mesh)?;
        let now = self.now();
        let (report, claimant, opts) = complete_and_claim_request(body, now)?;
        let write = || {
            submit::complete_and_claim(
                Arc::clone(&self.store),
                mesh.to_owned(),
                report.clone(),
                claimant.clone(),
                opts.clone(),
                now,
            )
        };
        self.write_submitted(write).await.map(CompleteAndClaimView::from)
    }

    /// [`MeshApi::heartbeat`], submitted to the store without holding the caller's
    /// thread.
    pub async fn heartbeat_submitted(&self, mesh: &str, body: HeartbeatBody) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let beat = heartbeat_request(body)?;
        self.write_submitted(|| {
            submit::task(
                Arc::clone(&self.store),
                mesh.to_owned(),
                TaskWrite::Heartbeat(beat.clone()),
                self.now(),
            )
        })
        .await
    }

    /// The mesh's held events that were not put back, oldest hold first.
    fn still_held(&self, mesh: &str) -> MeshResult<Vec<LedgerEntry>> {
        let query = LedgerQuery {
            tail: None,
            since: None,
            kinds: vec![held::HELD_KIND.to_owned(), held::REQUEUED_KIND.to_owned()],
        };
        Ok(held::still_held(self.store.read_ledger_ordered(mesh, &query)?))
    }

    fn mission_view(&self, mesh: &str, mission: agentmesh_core::Mission) -> MeshResult<MissionView> {
        let progress = self.store.mission_progress(mesh, &mission.id)?;
        Ok(MissionView::new(mission, progress))
    }
}

/// The report, claimant and claim options of a complete-and-claim request, both
/// halves checked before anything is written.
fn complete_and_claim_request(
    body: CompleteAndClaimBody,
    now: Timestamp,
) -> MeshResult<(CompletionReport, Claimant, ClaimOptions)> {
    let report = body.completion.into_report(now).map_err(|e| e.within("completion"))?;
    let (claimant, lease_ms) = body.claim.into_claim().map_err(|e| e.within("claim"))?;
    Ok((report, claimant, claim_options(lease_ms)))
}

/// The claimant and options of a claim request.
fn claim_request(body: ClaimBody) -> MeshResult<(Claimant, ClaimOptions)> {
    let (claimant, lease_ms) = body.into_claim()?;
    Ok((claimant, claim_options(lease_ms)))
}

/// The options of a claim asking for a lease of `lease_ms` (the default when
/// absent). Every claim through the API carries a lease, so that a task whose
/// worker vanished is reclaimed instead of staying assigned forever.
fn claim_options(lease_ms: Option<i64>) -> ClaimOptions {
    ClaimOptions { lease_ms: Some(lease_ms.unwrap_or(DEFAULT_LEASE_MS)) }
}

fn heartbeat_request(body: HeartbeatBody) -> MeshResult<Heartbeat> {
    Ok(Heartbeat {
        task_id: id_rule("taskId", body.task_id)?,
        session_id: id_rule("sessionId", body.session_id)?,
        epoch: body.epoch,
        lease_ms: i64::from(body.lease_ms.get()),
        progress: body.progress.map(ProgressBody::check).transpose()?,
    })
}

/// The mesh id of an operation, checked by the core's id rule and trimmed.
fn mesh_id(mesh: &str) -> Result<&str, agentmesh_core::InvalidInput> {
    agentmesh_core::MeshId::check(mesh)
}

impl LocalMesh {
    /// Names what held the paths of the task a refused claim by `session`
    /// stepped over (`paths_reserved`): the conflicts of that session's newest
    /// claim-time `reservation_denied` entry. Any other answer is returned as
    /// it is.
    pub fn with_blockers(&self, mesh: &str, session: &str, mut view: ClaimView) -> MeshResult<ClaimView> {
        if view.refusal.as_deref() != Some(agentmesh_core::ClaimRefusal::PathsReserved.as_str()) {
            return Ok(view);
        }
        let query = LedgerQuery {
            tail: Some(50),
            since: None,
            kinds: vec![agentmesh_core::reservation::kinds::DENIED.to_owned()],
        };
        let recent = self.bounded(|| self.store.read_ledger_ordered(mesh, &query))?;
        let newest = recent.iter().rev().find(|e| {
            e.session_id.as_deref() == Some(session) && e.payload.get("claim") == Some(&Value::Bool(true))
        });
        if let Some(entry) = newest {
            view.blocked_by = serde_json::from_value(entry.payload["conflicts"].clone()).unwrap_or_default();
        }
        Ok(view)
    }

    /// Whether nothing in force conflicts with `request` now (a read; the
    /// grant itself decides again).
    pub fn clear_for(
        &self,
        mesh: &str,
        request: &agentmesh_core::reservation::ValidReservation,
    ) -> MeshResult<bool> {
        let now = self.now();
        let held = self.bounded(|| {
            self.store.reservations(
                mesh,
                ReservationQuery::Near { scope: &request.scope, patterns: &request.patterns },
                now,
            )
        })?;
        let found = agentmesh_core::reservation::conflicts(
            &request.patterns,
            request.exclusive,
            &request.session_id,
            request.ignore_case,
            &held,
            now,
        );
        Ok(found.is_empty())
    }
}

impl MeshApi for LocalMesh {
    fn request_deadline(&self) -> Option<Instant> {
        Some(LocalMesh::request_deadline(self))
    }

    fn enqueue(&self, mesh: &str, body: EnqueueBody) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let new = body.into_new_task()?;
        self.write(|store, now| store.enqueue(mesh, &new, now))
    }

    fn enqueue_batch(&self, mesh: &str, body: BatchEnqueueBody) -> MeshResult<Vec<Task>> {
        let mesh = mesh_id(mesh)?;
        let new = body.into_new_tasks()?;
        self.write(|store, now| store.enqueue_batch(mesh, &new, now))
    }

    fn list_tasks(&self, mesh: &str, params: ListParams) -> MeshResult<Vec<Task>> {
        let mesh = mesh_id(mesh)?;
        let statuses = StatusFilter::parse(params.status.as_deref())?;
        params.check()?;
        let tasks = self.store.queue_entries(mesh, &statuses.stored())?;
        let skip = params.offset.unwrap_or(0) as usize;
        let take = params.limit.map_or(usize::MAX, |limit| limit as usize);
        Ok(tasks
            .into_iter()
            .filter(|task| statuses.selects(task) && params.selects(task))
            .skip(skip)
            .take(take)
            .collect())
    }

    fn show_task(&self, mesh: &str, id: &str) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("id", id.to_owned())?;
        agentmesh_store::archive::find_task(self.store.as_ref(), mesh, &id)?
            .ok_or_else(|| StoreError::task_not_found(mesh, &id).into())
    }

    fn cancel_task(&self, mesh: &str, id: &str, body: CancelBody) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("id", id.to_owned())?;
        let reason = optional(body.reason);
        self.write(|store, now| {
            store.task_command(mesh, &id, TaskCommand::Cancel { reason: reason.as_deref() }, now)
        })
    }

    fn set_priority(&self, mesh: &str, id: &str, body: PriorityBody) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("id", id.to_owned())?;
        let priority: agentmesh_core::TaskPriority = body.priority.parse()?;
        let reason = optional(body.reason);
        self.write(|store, now| {
            store.task_command(
                mesh,
                &id,
                TaskCommand::SetPriority { priority, reason: reason.as_deref() },
                now,
            )
        })
    }

    fn requeue_task(&self, mesh: &str, id: &str, body: RequeueBody) -> MeshResult<RequeueView> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("id", id.to_owned())?;
        let opts = body.into();
        self.write(|store, now| {
            store
                .task_command(mesh, &id, TaskCommand::Requeue(&opts), now)
                .map(agentmesh_core::Requeued::from_task)
        })
        .map(RequeueView::from)
    }

    fn claim(&self, mesh: &str, body: ClaimBody) -> MeshResult<ClaimView> {
        let mesh = mesh_id(mesh)?;
        let (claimant, opts) = claim_request(body)?;
        let view =
            self.write(|store, now| store.claim_next(mesh, &claimant, &opts, now)).map(ClaimView::from)?;
        self.with_blockers(mesh, &claimant.session_id, view)
    }

    fn heartbeat(&self, mesh: &str, body: HeartbeatBody) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let beat = heartbeat_request(body)?;
        self.write(|store, now| store.heartbeat(mesh, &beat, now))
    }

    fn complete(&self, mesh: &str, body: CompletionBody) -> MeshResult<Task> {
        let mesh = mesh_id(mesh)?;
        let report = body.into_report(self.now())?;
        self.write(|store, now| store.complete_task(mesh, &report, now))
    }

    fn complete_and_claim(&self, mesh: &str, body: CompleteAndClaimBody) -> MeshResult<CompleteAndClaimView> {
        let mesh = mesh_id(mesh)?;
        let (report, claimant, opts) = complete_and_claim_request(body, self.now())?;
        let mut view = self
            .write(|store, now| store.complete_and_claim(mesh, &report, &claimant, &opts, now))
            .map(CompleteAndClaimView::from)?;
        view.next = self.with_blockers(mesh, &claimant.session_id, view.next)?;
        Ok(view)
    }

    fn push_event(&self, mesh: &str, body: PushEventBody) -> MeshResult<PushView> {
        let mesh = mesh_id(mesh)?;
        let (event, hint, machine_id) = body.into_parts(mesh, self.now())?;
        self.write(|store, now| store.queue_pending_event(mesh, &event, &hint, machine_id.as_deref(), now))
            .map(PushView::from)
    }

    fn drain(&self, mesh: &str, body: DrainBody) -> MeshResult<DrainView> {
        let mesh = mesh_id(mesh)?;
        let request = self.drain_request(body)?;
        let outcome = self.store.drain_pending_events(mesh, &request, self.now())?;
        Ok(DrainView::from(outcome))
    }

    fn peek(&self, mesh: &str, body: DrainBody) -> MeshResult<Vec<InboxEventView>> {
        let mesh = mesh_id(mesh)?;
        let request = self.drain_request(body)?;
        let events = self.store.peek_pending_events(mesh, &request)?;
        Ok(events.into_iter().map(InboxEventView::from).collect())
    }

    fn watch(&self, mesh: &str, body: DrainBody, timeout: Duration) -> MeshResult<DrainView> {
        let mesh = mesh_id(mesh)?;
        let timeout = watch_timeout("timeout", timeout)?;
        let request = self.drain_request(body)?;
        let wake_up = self.wake_up();
        let mut watch = Watch::new(timeout, self.cross_process_poll);
        loop {
            // The mark is taken before looking: a write landing after the look
            // moves it, and the wait below returns at once.
            let seen = wake_up.mark(mesh);
            // Each look is a request of its own, with a deadline of its own.
            let drain = match watch.look() {
                Look::Drain => true,
                Look::Peek => {
                    watch.peeked(!self.bounded(|| self.store.peek_pending_events(mesh, &request))?.is_empty())
                }
            };
            if drain {
                let view = DrainView::from(
                    self.bounded(|| self.store.drain_pending_events(mesh, &request, self.now()))?,
                );
                if watch.drained(&view) {
                    return Ok(view);
                }
            }
            match watch.wait() {
                Some(wait) => {
                    wake_up.wait_past(mesh, seen, wait);
                }
                None => {
                    return Ok(DrainView::from(
                        self.bounded(|| self.store.drain_pending_events(mesh, &request, self.now()))?,
                    ));
                }
            }
        }
    }

    fn ack(&self, mesh: &str, body: AckBody) -> MeshResult<AckView> {
        let mesh = mesh_id(mesh)?;
        let ids = body.into_ids()?;
        self.write(|store, _| store.settle_pending_events(mesh, EventSettle::Ack(&ids)))
            .map(|acked| AckView { acked })
    }

    fn delete_events(&self, mesh: &str, body: DeleteEventsBody) -> MeshResult<DeletedEventsView> {
        let mesh = mesh_id(mesh)?;
        let ids = body.into_ids()?;
        self.write(|store, _| store.settle_pending_events(mesh, EventSettle::Delete(&ids)))
            .map(|deleted| DeletedEventsView { deleted })
    }

    fn retract(&self, mesh: &str, body: RetractBody) -> MeshResult<RetractView> {
        let mesh = mesh_id(mesh)?;
        let task_id = id_rule("taskId", body.task_id)?;
        self.write(|store, _| {
            store.settle_pending_events(mesh, EventSettle::RetractDispatchBlocked(&task_id))
        })
        .map(|retracted| RetractView { retracted })
    }

    fn held_events(&self, mesh: &str, params: HeldParams) -> MeshResult<Vec<HeldEventView>> {
        let mesh = mesh_id(mesh)?;
        let filter = params.into_filter(self.now())?;
        let held = self.still_held(mesh)?;
        Ok(held.into_iter().filter(|e| filter.matches(e)).map(HeldEventView::from).collect())
    }

    fn requeue_held(&self, mesh: &str, body: RequeueHeldBody) -> MeshResult<RequeueHeldView> {
        let mesh = mesh_id(mesh)?;
        let selection = body.into_selection(self.now())?;
        let held = self.still_held(mesh)?;
        let chosen: Vec<LedgerEntry> = match selection {
            HeldSelection::Filter(filter) => held.into_iter().filter(|e| filter.matches(e)).collect(),
            HeldSelection::Ids(ids) => {
                // Every id is checked before any event moves.
                let mut chosen = Vec::with_capacity(ids.len());
                for id in ids {
                    let entry = held.iter().find(|e| e.id == id).ok_or_else(|| StoreError::NotFound {
                        kind: "held event",
                        mesh_id: mesh.to_owned(),
                        id: id.clone(),
                    })?;
                    if !chosen.iter().any(|c: &LedgerEntry| c.id == id) {
                        chosen.push(entry.clone());
                    }
                }
                chosen
            }
        };
        let mut view = RequeueHeldView::default();
        for entry in chosen {
            let outcome = self.write(|store, now| store.requeue_held_event(mesh, &entry.id, now))?;
            let unrecoverable = outcome == HeldRequeue::Unrecoverable;
            view.requeued += u64::from(outcome.requeued());
            view.unrecoverable += u64::from(unrecoverable);
            view.events.push(RequeuedHeldView {
                event: entry.payload.get("event").and_then(Value::as_str).map(str::to_owned),
                held_entry_id: entry.id,
                requeued: outcome.requeued(),
                unrecoverable,
            });
        }
        Ok(view)
    }

    fn completion_fingerprints(
        &self,
        mesh: &str,
        params: FingerprintParams,
    ) -> MeshResult<Vec<FingerprintView>> {
        let mesh = mesh_id(mesh)?;
        let limit = page_limit("limit", params.limit, 100, 1000)?;
        let task = optional_id("taskId", params.task_id)?;
        let session = optional_id("sessionId", params.session_id)?;
        let scan = if task.is_some() || session.is_some() { DIAGNOSTIC_SCAN } else { limit };
        let mut found: Vec<FingerprintView> = self
            .store
            .completion_fingerprints(mesh, self.now(), scan)?
            .into_iter()
            .map(FingerprintView::from)
            .filter(|f| task.is_none() || f.task_id == task)
            .filter(|f| session.is_none() || f.session_id == session)
            .collect();
        found.truncate(limit as usize);
        Ok(found)
    }

    fn completion_conflicts(&self, mesh: &str, params: ConflictParams) -> MeshResult<Vec<ConflictView>> {
        let mesh = mesh_id(mesh)?;
        let now = self.now();
        let window_ms = match params.within_secs {
            Some(secs) => now.millis() - seconds_before("withinSecs", now, secs)?.millis(),
            None => agentmesh_core::sessions::CONFLICT_WINDOW_MS,
        };
        let task = optional_id("taskId", params.task_id)?;
        let session = optional_id("sessionId", params.session_id)?;
        let either = |want: &Option<String>, a: &Option<String>, b: &Option<String>| {
            want.is_none() || *a == *want || *b == *want
        };
        Ok(self
            .store
            .recent_completion_conflicts(mesh, Some(window_ms), now)?
            .into_iter()
            .filter(|c| either(&task, &c.conflicting_task_id, &c.original_task_id))
            .filter(|c| either(&session, &c.conflicting_session_id, &c.original_session_id))
            .map(ConflictView::from)
            .collect())
    }

    fn ledger_tail(&self, mesh: &str, params: LedgerParams) -> MeshResult<Vec<LedgerEntry>> {
        let mesh = mesh_id(mesh)?;
        let task = params.task.clone().map(|t| id_rule("task", t)).transpose()?;
        let query = LedgerQuery::try_from(params)?;
        let Some(task) = task else {
            return Ok(self.store.read_ledger_ordered(mesh, &query)?);
        };
        agentmesh_store::archive::task_history(self.store.as_ref(), mesh, &task, &query)?
            .ok_or_else(|| StoreError::task_not_found(mesh, &task).into())
    }

    fn ledger_slice(&self, mesh: &str, params: SliceParams) -> MeshResult<LedgerSlice> {
        let mesh = mesh_id(mesh)?;
        let query = SliceQuery::try_from(params)?;
        Ok(agentmesh_store::archive::slice(self.store.as_ref(), mesh, &query)?)
    }

    fn import_ledger(&self, mesh: &str, body: ImportBody) -> MeshResult<ImportView> {
        let mesh = mesh_id(mesh)?;
        if let Some((i, entry)) = body.entries.iter().enumerate().find(|(_, e)| e.mesh_id != mesh) {
            return Err(agentmesh_core::InvalidInput::new(
                format!("entries[{i}].meshId"),
                format!("the entry belongs to mesh {:?}, not {mesh:?}", entry.mesh_id),
            )
            .into());
        }
        self.write(|store, _| store.import_ledger(&body.entries)).map(|imported| ImportView { imported })
    }

    fn upsert_mission(&self, mesh: &str, body: MissionBody) -> MeshResult<MissionSaved> {
        let mesh = mesh_id(mesh)?;
        let new = NewMission::try_from(body)?;
        // Whether it was created is decided inside the upsert's transaction, so of two
        // concurrent upserts of a new id exactly one answers "created".
        let saved = self.write(|store, now| store.upsert_mission(mesh, &new, now))?;
        Ok(MissionSaved { mission: self.mission_view(mesh, saved.mission)?, created: saved.created })
    }

    fn missions(&self, mesh: &str, params: MissionListParams) -> MeshResult<Vec<MissionView>> {
        let mesh = mesh_id(mesh)?;
        let mut statuses: Vec<String> = Vec::new();
        for part in params.status.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            agentmesh_core::mission::validate_status(part)?;
            if !statuses.iter().any(|s| s == part) {
                statuses.push(part.to_owned());
            }
        }
        self.store
            .missions(mesh, MissionQuery::Statuses(&statuses))?
            .into_iter()
            .map(|m| self.mission_view(mesh, m))
            .collect()
    }

    fn mission(&self, mesh: &str, id: &str) -> MeshResult<MissionDetailView> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("id", id.to_owned())?;
        let mission = self.store.missions(mesh, MissionQuery::Id(&id))?.pop().ok_or_else(|| {
            StoreError::NotFound { kind: "mission", mesh_id: mesh.to_owned(), id: id.clone() }
        })?;
        let tasks: Vec<Task> = self
            .store
            .queue_entries(mesh, &[])?
            .into_iter()
            .filter(|task| task.mission_id.as_deref() == Some(id.as_str()))
            .collect();
        Ok(MissionDetailView { mission: self.mission_view(mesh, mission)?, tasks })
    }

    fn report_idle(&self, mesh: &str, body: IdleBody) -> MeshResult<IdleSessionView> {
        let mesh = mesh_id(mesh)?;
        let ttl_secs = body.ttl_secs.unwrap_or(DEFAULT_IDLE_TTL_SECS);
        if ttl_secs == 0 {
            return Err(agentmesh_core::InvalidInput::new("ttlSecs", "must be at least 1").into());
        }
        let session = IdleSession {
            mesh_id: mesh.to_owned(),
            node_id: id_rule("nodeId", body.node_id)?,
            session_id: id_rule("sessionId", body.session_id)?,
            provider_type: required("providerType", body.provider_type)?,
            expires_at_ms: self.now().millis() + i64::from(ttl_secs) * 1000,
            metadata: body.metadata.filter(|m| !m.is_null()),
        };
        session.validate()?;
        self.write(|store, _| store.write_idle_session(IdleWrite::Report(&session)))?;
        Ok(IdleSessionView::from(session))
    }

    fn idle_sessions(&self, mesh: &str) -> MeshResult<Vec<IdleSessionView>> {
        let mesh = mesh_id(mesh)?;
        let mut sessions: Vec<IdleSessionView> =
            self.store.idle_sessions(mesh, self.now())?.into_iter().map(IdleSessionView::from).collect();
        sessions.sort_by(|a, b| (&a.node_id, &a.session_id).cmp(&(&b.node_id, &b.session_id)));
        Ok(sessions)
    }

    fn remove_idle_session(
        &self,
        mesh: &str,
        node_id: &str,
        session_id: &str,
    ) -> MeshResult<IdleRemovedView> {
        let mesh = mesh_id(mesh)?;
        let node_id = id_rule("nodeId", node_id.to_owned())?;
        let session_id = id_rule("sessionId", session_id.to_owned())?;
        let forget = IdleWrite::Forget { mesh_id: mesh, node_id: &node_id, session_id: &session_id };
        let removed = self.write(|store, _| store.write_idle_session(forget))?;
        Ok(IdleRemovedView { removed })
    }

    fn record_dispatched_task(&self, mesh: &str, body: DispatchedTaskBody) -> MeshResult<DispatchedTaskView> {
        let mesh = mesh_id(mesh)?;
        let new = agentmesh_core::NewDispatchedTask::try_from(body)?;
        let recorded = self.write(|store, now| store.record_dispatched_task(mesh, &new, now))?;
        Ok(DispatchedTaskView { task: recorded.task, created: recorded.created })
    }

    fn delivery_confirmed(&self, mesh: &str, task_id: &str) -> MeshResult<DeliveryConfirmedView> {
        let mesh = mesh_id(mesh)?;
        let task_id = id_rule("taskId", task_id.to_owned())?;
        let confirmed = !self.store.session_deliveries(mesh, DeliveryQuery::Confirmed(&task_id))?.is_empty();
        Ok(DeliveryConfirmedView { task_id, confirmed })
    }

    fn hold_task(&self, mesh: &str, body: HoldBody) -> MeshResult<HoldView> {
        let mesh = mesh_id(mesh)?;
        let hold = agentmesh_core::NewInflightHold::try_from(body)?;
        let stored = self.write(|store, now| store.write_inflight_hold(mesh, HoldWrite::Hold(&hold), now))?;
        stored.ok_or_else(|| StoreError::Backend("a hold was written but not answered".into()).into())
    }

    fn holds(&self, mesh: &str) -> MeshResult<Vec<HoldView>> {
        let mesh = mesh_id(mesh)?;
        Ok(self.store.inflight_holds(mesh, None)?)
    }

    fn hold(&self, mesh: &str, task_id: &str) -> MeshResult<HoldView> {
        let mesh = mesh_id(mesh)?;
        let task_id = id_rule("taskId", task_id.to_owned())?;
        let hold = self.store.inflight_holds(mesh, Some(&task_id))?.pop().ok_or_else(|| {
            StoreError::NotFound { kind: "inflight hold", mesh_id: mesh.to_owned(), id: task_id.clone() }
        })?;
        Ok(hold)
    }

    fn release_hold(&self, mesh: &str, task_id: &str) -> MeshResult<HoldReleasedView> {
        let mesh = mesh_id(mesh)?;
        let task_id = id_rule("taskId", task_id.to_owned())?;
        let released = self
            .write(|store, now| store.write_inflight_hold(mesh, HoldWrite::Release(&task_id), now))?
            .is_some();
        Ok(HoldReleasedView { released })
    }

    fn reserve(&self, mesh: &str, body: ReserveBody) -> MeshResult<ReserveView> {
        let mesh = mesh_id(mesh)?;
        let (request, wait) = body.into_request()?;
        let valid = request.validate()?;
        let wake_up = self.wake_up();
        let deadline = std::time::Instant::now() + wait;
        loop {
            let view = ReserveView::from(self.write(|store, now| store.reserve(mesh, &request, now))?);
            if view.granted || wait.is_zero() {
                return Ok(view);
            }
            // Denied (and recorded once): wait, without writing, until a read
            // finds the conflicts gone, then ask again. The mark is taken
            // before each read, so a release landing after it ends the wait
            // at once; writes of other processes are looked for as often as
            // a watch looks.
            loop {
                let seen = wake_up.mark(mesh);
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Ok(view);
                }
                if self.clear_for(mesh, &valid)? {
                    break;
                }
                wake_up.wait_past(mesh, seen, left.min(self.cross_process_poll));
            }
        }
    }

    fn renew_reservation(
        &self,
        mesh: &str,
        id: &str,
        body: FenceBody,
    ) -> MeshResult<agentmesh_core::Reservation> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("reservationId", id.to_owned())?;
        let fence = body.fence()?;
        self.write(|store, now| {
            store.reservation_command(
                mesh,
                &id,
                &fence,
                ReservationCommand::Renew { ttl_ms: body.ttl_ms },
                now,
            )
        })
    }

    fn release_reservation(
        &self,
        mesh: &str,
        id: &str,
        body: FenceBody,
    ) -> MeshResult<agentmesh_core::Reservation> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("reservationId", id.to_owned())?;
        if body.ttl_ms.is_some() {
            return Err(agentmesh_core::InvalidInput::new("ttlMs", "a release takes no time to live").into());
        }
        let fence = body.fence()?;
        self.write(|store, now| {
            store.reservation_command(mesh, &id, &fence, ReservationCommand::Release, now)
        })
    }

    fn reservations(
        &self,
        mesh: &str,
        params: ReservationListParams,
    ) -> MeshResult<Vec<agentmesh_core::Reservation>> {
        let mesh = mesh_id(mesh)?;
        let scope = params.scope.as_deref().map(agentmesh_core::reservation::check_scope).transpose()?;
        Ok(self.store.reservations(mesh, ReservationQuery::All(scope.as_deref()), self.now())?)
    }

    fn check_paths(&self, mesh: &str, body: CheckPathsBody) -> MeshResult<CheckPathsView> {
        let mesh = mesh_id(mesh)?;
        let scope = agentmesh_core::reservation::check_scope(&body.scope)?;
        if body.paths.is_empty() {
            return Err(agentmesh_core::InvalidInput::new("paths", "must name at least one path").into());
        }
        let paths = agentmesh_core::reservation::parse_patterns("paths", &body.paths)?;
        let session = body.session_id.map(|s| id_rule("sessionId", s)).transpose()?;
        let now = self.now();
        let held =
            self.store.reservations(mesh, ReservationQuery::Near { scope: &scope, patterns: &paths }, now)?;
        let ignore_case = body.ignore_case.unwrap_or(false);
        let blocked: Vec<BlockedPathView> = paths
            .iter()
            .filter_map(|path| {
                let held_by =
                    agentmesh_core::reservation::covering(path, session.as_deref(), ignore_case, &held, now);
                (!held_by.is_empty()).then(|| BlockedPathView { path: path.to_string(), held_by })
            })
            .collect();
        Ok(CheckPathsView { clear: blocked.is_empty(), blocked })
    }

    fn archive(&self, mesh: &str) -> MeshResult<agentmesh_store::archive::ArchiveState> {
        let mesh = mesh_id(mesh)?;
        Ok(self.store.archive_state(mesh, None, self.now())?)
    }

    fn set_retention(
        &self,
        mesh: &str,
        body: agentmesh_core::retention::MeshRetention,
    ) -> MeshResult<agentmesh_store::archive::ArchiveState> {
        let mesh = mesh_id(mesh)?;
        self.write(|store, now| store.archive_state(mesh, Some(&body), now))
    }

    fn archived_tasks(
        &self,
        mesh: &str,
        params: crate::ArchivedTasksParams,
    ) -> MeshResult<crate::ArchivedTasksView> {
        let mesh = mesh_id(mesh)?;
        let limit = params.checked_limit()?;
        let page = self.store.archived_tasks(mesh, ArchivedTasks::After { after: params.after, limit })?;
        let next_after = if page.len() == limit as usize { page.last().map(|(pos, _)| *pos) } else { None };
        let tasks = page
            .into_iter()
            .map(|(pos, task)| crate::ArchivedTaskView {
                pos,
                task: agentmesh_store::archive::mark_archived(task),
            })
            .collect();
        Ok(crate::ArchivedTasksView { tasks, next_after })
    }

    fn drop_archived(
        &self,
        mesh: &str,
        body: agentmesh_core::retention::ArchiveMark,
    ) -> MeshResult<agentmesh_core::retention::ArchiveMark> {
        let mesh = mesh_id(mesh)?;
        self.write(|store, _| store.drop_archived(mesh, &body))
    }

    fn add_webhook(
        &self,
        mesh: &str,
        body: crate::webhook::WebhookBody,
    ) -> MeshResult<crate::webhook::WebhookAddedView> {
        let mesh = mesh_id(mesh)?;
        let valid = agentmesh_core::NewWebhook::from(body).validate(self.webhook_policy)?;
        let secret = match &valid.secret {
            Some(secret) => secret.clone(),
            None => crate::webhook::new_secret()
                .map_err(|reason| crate::MeshError::Store(StoreError::Unavailable(reason)))?,
        };
        let webhook = self.write(|store, now| store.add_webhook(mesh, &valid, &secret, now))?;
        Ok(crate::webhook::WebhookAddedView { webhook, secret })
    }

    fn webhooks(&self, mesh: &str) -> MeshResult<Vec<agentmesh_core::Webhook>> {
        let mesh = mesh_id(mesh)?;
        Ok(self.store.webhooks(Some(mesh))?)
    }

    fn webhook(&self, mesh: &str, id: &str) -> MeshResult<agentmesh_core::Webhook> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("webhookId", id.to_owned())?;
        let found = self.store.webhooks(Some(mesh))?.into_iter().find(|h| h.id == id);
        found.ok_or_else(|| {
            crate::MeshError::Store(StoreError::NotFound { kind: "webhook", mesh_id: mesh.to_owned(), id })
        })
    }

    fn remove_webhook(&self, mesh: &str, id: &str) -> MeshResult<agentmesh_core::Webhook> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("webhookId", id.to_owned())?;
        self.write(|store, now| {
            store.webhook_command(mesh, &id, agentmesh_store::WebhookCommand::Remove, now)
        })
    }

    fn webhook_command(
        &self,
        mesh: &str,
        id: &str,
        command: agentmesh_store::WebhookCommand,
    ) -> MeshResult<agentmesh_core::Webhook> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("webhookId", id.to_owned())?;
        self.write(|store, now| store.webhook_command(mesh, &id, command, now))
    }

    fn test_webhook(&self, mesh: &str, id: &str) -> MeshResult<crate::webhook::WebhookTestView> {
        let hook = self.webhook(mesh, id)?;
        let secret = self.store.webhook_secret(&hook.mesh_id, &hook.id)?.ok_or_else(|| {
            crate::MeshError::Store(StoreError::NotFound {
                kind: "webhook",
                mesh_id: hook.mesh_id.clone(),
                id: hook.id.clone(),
            })
        })?;
        let now = self.now();
        let sample = LedgerEntry {
            id: format!("test_{}", agentmesh_store::ids::mint_at(now)),
            mesh_id: hook.mesh_id.clone(),
            timestamp: now.iso(),
            kind: "webhook_test".to_owned(),
            node_id: None,
            session_id: None,
            provider_type: None,
            payload: serde_json::json!({ "webhookId": hook.id }),
        };
        let sender = crate::webhook::Sender::new(self.webhook_policy, self.webhook_timeout)
            .map_err(|reason| crate::MeshError::Store(StoreError::Unavailable(reason)))?;
        let key = agentmesh_core::webhook::secret_key("secret", &secret)?;
        let attempt = sender.send_blocking(&hook, &key, &crate::webhook::Message::of(&sample, None), now);
        Ok(crate::webhook::WebhookTestView { webhook_id: hook.id, attempt })
    }

    fn send_delivery(&self, mesh: &str, body: DeliveryBody) -> MeshResult<DeliveryView> {
        let mesh = mesh_id(mesh)?;
        let new = agentmesh_core::NewSessionDelivery::try_from(body)?;
        self.write(|store, now| store.insert_session_delivery(mesh, &new, now)).map(DeliveryView::from)
    }

    fn deliveries(&self, mesh: &str, params: DeliveryListParams) -> MeshResult<Vec<DeliveryView>> {
        let mesh = mesh_id(mesh)?;
        let session = optional_id("sessionId", params.session_id)?;
        let deliveries = self.store.session_deliveries(
            mesh,
            DeliveryQuery::Waiting { session_id: session.as_deref(), now: self.now() },
        )?;
        Ok(deliveries.into_iter().map(DeliveryView::from).collect())
    }

    fn delivery(&self, mesh: &str, id: &str) -> MeshResult<DeliveryView> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("id", id.to_owned())?;
        let found = self.store.session_deliveries(mesh, DeliveryQuery::Id(&id))?.pop();
        let delivery = found.ok_or_else(|| StoreError::NotFound {
            kind: "delivery",
            mesh_id: mesh.to_owned(),
            id: id.clone(),
        })?;
        Ok(DeliveryView::from(delivery))
    }

    fn update_delivery(
        &self,
        mesh: &str,
        id: &str,
        body: DeliveryStatusBody,
    ) -> MeshResult<DeliveryChangeView> {
        let mesh = mesh_id(mesh)?;
        let id = id_rule("id", id.to_owned())?;
        let (status, update) = body.into_update()?;
        let changed =
            self.write(|store, now| store.set_session_delivery_status(mesh, &id, status, &update, now))?;
        Ok(DeliveryChangeView { changed, delivery: self.delivery(mesh, &id)? })
    }

    fn record_dispatch(&self, mesh: &str, body: DispatchBody) -> MeshResult<DispatchView> {
        let mesh = mesh_id(mesh)?;
        let new = agentmesh_core::NewDirectDispatch::try_from(body)?;
        self.write(|store, now| store.record_direct_dispatch(mesh, &new, now)).map(DispatchView::from)
    }

    fn dispatches(&self, mesh: &str) -> MeshResult<Vec<DispatchView>> {
        let mesh = mesh_id(mesh)?;
        Ok(self.store.direct_dispatches(mesh, None)?.into_iter().map(DispatchView::from).collect())
    }

    fn dispatch(&self, mesh: &str, task_id: &str) -> MeshResult<DispatchView> {
        let mesh = mesh_id(mesh)?;
        let task_id = id_rule("taskId", task_id.to_owned())?;
        let found = self.store.direct_dispatches(mesh, Some(&task_id))?.pop();
        let dispatch = found.ok_or_else(|| StoreError::NotFound {
            kind: "direct dispatch",
            mesh_id: mesh.to_owned(),
            id: task_id.clone(),
        })?;
        Ok(DispatchView::from(dispatch))
    }

    fn update_dispatches(&self, mesh: &str, body: DispatchStatusBody) -> MeshResult<DispatchChangeView> {
        let mesh = mesh_id(mesh)?;
        let (status, session, task) = body.into_parts()?;
        let changed = self.write(|store, now| {
            let change =
                DispatchChange::Status { session_id: session.as_deref(), task_id: task.as_deref(), status };
            store.change_direct_dispatches(mesh, change, now)
        })?;
        Ok(DispatchChangeView { changed })
    }

    fn mark_stale_dispatches(
        &self,
        mesh: &str,
        body: StaleDispatchesBody,
    ) -> MeshResult<StaleDispatchesView> {
        let mesh = mesh_id(mesh)?;
        let now = self.now();
        let cutoff = seconds_before("olderThanSecs", now, body.older_than_secs)?;
        let marked_stale = self.write(|store, now| {
            store.change_direct_dispatches(mesh, DispatchChange::MarkStale(cutoff), now)
        })?;
        Ok(StaleDispatchesView { marked_stale })
    }

    fn remove_dispatches(&self, mesh: &str, body: RemoveDispatchesBody) -> MeshResult<RemovedView> {
        let mesh = mesh_id(mesh)?;
        let ids = body.into_ids()?;
        let removed =
            self.write(|store, now| store.change_direct_dispatches(mesh, DispatchChange::Delete(&ids), now))?;
        Ok(RemovedView { removed })
    }

    fn placement(&self, mesh: &str, body: PlacementBody) -> MeshResult<Vec<NodeRankView>> {
        let mesh = mesh_id(mesh)?;
        let task_id = id_rule("taskId", body.task_id)?;
        let strategy = match optional(body.strategy) {
            Some(text) => text.parse()?,
            None => agentmesh_core::Strategy::default(),
        };
        let mut nodes = Vec::with_capacity(body.nodes.len());
        for (i, node) in body.nodes.into_iter().enumerate() {
            nodes.push(NodeInfo {
                node_id: id_rule(&format!("nodes[{i}].nodeId"), node.node_id)?,
                capability_tags: node.capability_tags,
                scheduling_priority: node.scheduling_priority,
            });
        }
        let task = self.show_task(mesh, &task_id)?;
        let ranked = suggest_nodes(self.store.as_ref(), mesh, &task, &nodes, strategy)?;
        self.signal.bump();
        Ok(ranked.into_iter().map(NodeRankView::from).collect())
    }

    fn coordinator_presence(
        &self,
        mesh: &str,
        body: crate::wire::PresenceBody,
    ) -> MeshResult<crate::views::PresenceView> {
        let mesh = mesh_id(mesh)?;
        let ended = body.ended;
        let identity = agentmesh_core::events::CoordinatorIdentity::try_from(body)?;
        self.write(|store, now| store.coordinator_presence(mesh, &identity, ended, now))?;
        Ok(crate::views::PresenceView { live: !ended })
    }

    fn status(&self, mesh: &str) -> MeshResult<StatusView> {
        let mesh = mesh_id(mesh)?;
        let store = self.store.as_ref();
        let tasks = crate::views::task_counts(&store.stats_by_status(mesh)?);
        let recent = LedgerQuery { tail: Some(STATUS_LEDGER_TAIL), ..LedgerQuery::default() };
        Ok(StatusView {
            mesh_id: mesh.to_owned(),
            tasks,
            active_assignments: store
                .active_assignments(mesh)?
                .into_iter()
                .map(ActiveAssignmentView::from)
                .collect(),
            pending_events: store.pending_event_count(mesh)?,
            pending_by_coordinator: store
                .pending_events_by_addressee(mesh)?
                .into_iter()
                .map(|a| PendingForCoordinatorView {
                    daemon_id: a.daemon_id,
                    run_id: a.run_id,
                    session_id: a.session_id,
                    count: a.count,
                })
                .collect(),
            idle_sessions: self.idle_sessions(mesh)?,
            recent_ledger: store.read_ledger_ordered(mesh, &recent)?,
            durability: Some(store.profile().durability.as_str().to_owned()),
            webhooks: store.webhooks(Some(mesh))?,
        })
    }

    fn meshes(&self) -> MeshResult<Vec<MeshSummaryView>> {
        Ok(self.store.mesh_summaries()?.into_iter().map(MeshSummaryView::from).collect())
    }

    fn record_tool_call(&self, mesh: &str, body: ToolCallBody) -> MeshResult<RateVerdictView> {
        let mesh = mesh_id(mesh)?;
        let call = agentmesh_store::ToolCall {
            mesh_id: mesh.to_owned(),
            tool: required("tool", body.tool)?,
            session_id: optional_id("sessionId", body.session_id)?,
            caller_role: body
                .caller_role
                .as_deref()
                .map(|role| agentmesh_core::rate_guard::caller_role("callerRole", role))
                .transpose()?,
        };
        // Not a write anyone waits for: the signal stays where it is.
        let verdict = self.store.record_tool_call(&call, agentmesh_core::RateGuard::default(), self.now())?;
        Ok(verdict.into())
    }

    fn tool_calls(&self, mesh: &str, params: ToolCallParams) -> MeshResult<ToolCallLogView> {
        let mesh = mesh_id(mesh)?;
        let now = self.now();
        let limit = page_limit("limit", params.limit, 100, 1000)?;
        let role = optional(params.role)
            .map(|role| agentmesh_core::rate_guard::caller_role("role", &role))
            .transpose()?;
        let within_ms = agentmesh_core::RateGuard::default().retention_ms();
        let since = match params.within_secs {
            Some(secs) => seconds_before("withinSecs", now, secs)?,
            None => now.plus_millis(-within_ms),
        };
        let calls: Vec<ToolCallView> = self
            .store
            .recent_tool_calls(mesh, since, DIAGNOSTIC_SCAN)?
            .into_iter()
            .map(ToolCallView::from)
            .filter(|c| role.as_ref().is_none_or(|r| c.caller_role == *r))
            .collect();
        let mut view = ToolCallLogView::new(calls);
        view.calls.truncate(limit as usize);
        Ok(view)
    }
}
