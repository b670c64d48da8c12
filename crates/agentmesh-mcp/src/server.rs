//! [`MeshTools`]: the MCP tool server, one instance per MCP session.
//!
//! Every tool is an adapter: it parses its arguments (a mistake is a tool error
//! naming the argument), runs one or two [`MeshApi`] operations and answers a text
//! the agent reads plus the same data as structured content. `MeshApi` is
//! synchronous (a SQLite transaction, or a blocking HTTP request to a daemon), so
//! every operation runs on Tokio's blocking pool, never on a runtime worker.
//!
//! Every call is recorded for the rate guard before the tool runs; when the guard
//! says a tool is called too often, its advisory is appended to the result and the
//! agent is pointed at `wait_for_mesh_events`.

use std::sync::Arc;
use std::time::Duration;

use agentmesh_api::views::DrainView;
use agentmesh_api::wire::{
    BatchEnqueueBody, CancelBody, CheckPathsBody, ClaimBody, CompletionBody, DeliveryBody,
    DeliveryListParams, DeliveryStatusBody, DispatchBody, DispatchedTaskBody, DrainBody, FenceBody,
    HeartbeatBody, HeldParams, HoldBody, IdleBody, LedgerParams, ListParams, MissionBody, MissionListParams,
    PlacementBody, PresenceBody, PriorityBody, RequeueBody, RequeueHeldBody, ReservationListParams,
    ReserveBody, ToolCallBody,
};
use agentmesh_api::{MeshApi, MeshResult};
use agentmesh_core::MeshId;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::args::{
    self, CancelTaskArgs, CheckPathsArgs, ClaimArgs, CompleteArgs, DeliveryStatusArgs, DrainArgs,
    EnqueueTasksArgs, FailArgs, HeartbeatArgs, HeldArgs, HoldArgs, IdleArgs, LedgerArgs, ListHoldsArgs,
    ListMissionsArgs, ListReservationsArgs, ListTasksArgs, MissionArgs, MissionIdArgs, NoArgs,
    RecordDispatchedArgs, RequeueHeldArgs, RequeueTaskArgs, ReservationFenceArgs, ReservePathsArgs, SendArgs,
    SendMode, SessionArgs, SetPriorityArgs, SuggestNodeArgs, TaskIdArgs, TaskSpec, ToolError, WaitArgs,
};
use crate::identity::Identity;
use crate::render::{EventForAgent, events_text, fit_budget};

/// The name of the wait tool, which the rate guard's advice points to.
pub const WAIT_TOOL: &str = "wait_for_mesh_events";
/// How long `wait_for_mesh_events` waits when the agent names no time, in seconds.
pub const DEFAULT_WAIT_SECS: u64 = 25;
/// The longest `wait_for_mesh_events` waits, in seconds: below the 60 s request
/// timeout common MCP clients apply.
pub const MAX_WAIT_SECS: u64 = 50;
/// How many ledger entries `ledger_tail` shows when the agent names no number.
const DEFAULT_LEDGER_TAIL: u32 = 20;
/// The lease a heartbeat extends to when the agent names none.
const DEFAULT_HEARTBEAT_LEASE_MS: u32 = 300_000;
/// The provider type of an idle report that names none.
const DEFAULT_PROVIDER: &str = "claude-code";

/// The tools a worker session calls; every other tool is a coordinator's. The
/// rate guard's log records the caller role by this.
const WORKER_TOOLS: [&str; 7] = [
    "claim_task",
    "heartbeat_task",
    "complete_task",
    "fail_task",
    "read_deliveries",
    "update_delivery",
    "report_idle",
];

/// The MCP tool server over one mesh, acting under one [`Identity`].
#[derive(Clone)]
pub struct MeshTools {
    api: Arc<dyn MeshApi>,
    mesh: Arc<str>,
    identity: Arc<Identity>,
    tool_router: ToolRouter<MeshTools>,
    /// When this coordinator last said it is alive.
    last_presence: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// Held by every handle of a session's server that keeps its presence (see
    /// [`MeshTools::keeping_presence`]): dropping the last one ends the session's
    /// presence.
    session: Option<Arc<tokio_util::sync::DropGuard>>,
    /// The (node, session) pairs this server reported idle: their records are
    /// removed when the server's session ends (see [`MeshTools::forget_idle`]).
    reported_idle: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

/// The longest a wait blocks in one piece before it looks whether its caller
/// has cancelled it.
const WAIT_SLICE: Duration = Duration::from_secs(1);

/// How often a coordinator renews its presence while it calls tools or runs: well
/// inside the store's two-minute liveness window.
pub const PRESENCE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

impl std::fmt::Debug for MeshTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshTools")
            .field("mesh", &self.mesh)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The input schema of a tool whose arguments are `T`.
fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    crate::schema::input_schema::<T>()
}

/// A successful result: `text` for the agent to read, `data` as structured content.
fn answer(text: impl Into<String>, data: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.into())]);
    result.structured_content = Some(data);
    result
}

/// A successful result whose text is `data` as indented JSON.
fn answer_json(data: impl Serialize) -> Result<CallToolResult, ToolError> {
    let value = serde_json::to_value(data).map_err(|err| ToolError::internal(err.to_string()))?;
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    Ok(answer(text, value))
}

type ToolResult = Result<CallToolResult, ToolError>;

impl MeshTools {
    /// A server for `mesh` over `api`, acting as `identity`. The mesh is a
    /// [`MeshId`]: whoever names it (a flag, a URL path) parsed it by the id rule.
    pub fn new(api: Arc<dyn MeshApi>, mesh: MeshId, identity: Identity) -> MeshTools {
        MeshTools {
            api,
            mesh: mesh.into(),
            identity: Arc::new(identity),
            tool_router: Self::tool_router(),
            last_presence: Arc::new(std::sync::Mutex::new(None)),
            session: None,
            reported_idle: Arc::new(std::sync::Mutex::new(Vec::new())),
        }
    }

    /// Removes the idle records this server reported (`report_idle`), as a
    /// session shutting down does, so coordinators stop counting on it. A failure
    /// is logged, never fatal; the records also run out on their own.
    pub async fn forget_idle(&self) {
        let reported = std::mem::take(
            &mut *self.reported_idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (node, session) in reported {
            let (n, s) = (node.clone(), session.clone());
            if let Err(err) = self.run(move |api, mesh| api.remove_idle_session(mesh, &n, &s)).await {
                tracing::warn!(node, session, error = %err.message, "could not remove the idle report");
            }
        }
    }

    /// This server, keeping its coordinator's presence for as long as a handle to
    /// it lives: it reports the presence now and every `every`, and reports the
    /// end once the last handle is dropped (an HTTP session closed or timed out).
    /// Without a Tokio runtime to run on, it is returned as it is.
    pub fn keeping_presence(mut self, every: Duration) -> MeshTools {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self;
        };
        let ended = tokio_util::sync::CancellationToken::new();
        // The keeper's own handle holds no guard, so it never keeps the session alive.
        let keeper = self.clone();
        self.session = Some(Arc::new(ended.clone().drop_guard()));
        runtime.spawn(async move {
            keeper.report_presence(false).await;
            let mut ticks = tokio::time::interval(every);
            ticks.tick().await;
            loop {
                tokio::select! {
                    () = ended.cancelled() => break,
                    _ = ticks.tick() => keeper.report_presence(false).await,
                }
            }
            // Gone: the next coordinator run on this machine inherits what is queued,
            // and an idle report it made no longer stands.
            keeper.report_presence(true).await;
            keeper.forget_idle().await;
        });
        self
    }

    /// Tells the mesh this coordinator is alive (`ended: false`) or gone
    /// (`ended: true`), so unicasts addressed to its run stay its own while it lives
    /// and pass to the next run on this machine once it is gone. A failure is
    /// logged, never fatal.
    pub async fn report_presence(&self, ended: bool) {
        let body = PresenceBody {
            daemon_id: self.identity.daemon_id.clone(),
            run_id: self.identity.run_id.clone(),
            session_id: self.identity.session_id.clone(),
            ended,
        };
        match self.run(move |api, mesh| api.coordinator_presence(mesh, body)).await {
            Ok(_) => {
                let mut last = self.last_presence.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *last = (!ended).then(std::time::Instant::now);
            }
            Err(err) => {
                tracing::warn!(ended, error = %err.message, "could not report the coordinator's presence")
            }
        }
    }

    /// Renews the presence when the last report is older than [`PRESENCE_EVERY`].
    async fn renew_presence(&self) {
        let due = self
            .last_presence
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none_or(|at| at.elapsed() >= PRESENCE_EVERY);
        if due {
            self.report_presence(false).await;
        }
    }

    /// The identity the server acts under.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Runs one mesh operation on the blocking pool.
    async fn run<T, F>(&self, op: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn MeshApi, &str) -> MeshResult<T> + Send + 'static,
    {
        let api = Arc::clone(&self.api);
        let mesh = Arc::clone(&self.mesh);
        // The request's budget starts now, not when a blocking thread is free.
        let deadline = api.request_deadline();
        let run = move || agentmesh_store::deadline::within(deadline, || op(api.as_ref(), &mesh));
        match tokio::task::spawn_blocking(run).await {
            Ok(result) => result.map_err(ToolError::from),
            Err(err) => Err(ToolError::internal(format!("the mesh operation did not finish: {err}"))),
        }
    }

    /// The worker session: the argument, else the server's own worker session.
    fn session(&self, given: Option<String>) -> String {
        given
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.identity.worker_session.clone())
    }

    /// The node: the argument, else this machine's daemon id.
    fn node(&self, given: Option<String>) -> String {
        given
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.identity.daemon_id.clone())
    }

    /// Records a call of `tool`; the guard's advisory when it tripped. A failure to
    /// record never fails the tool.
    async fn record_call(&self, tool: &str) -> Option<String> {
        let role = if WORKER_TOOLS.contains(&tool) { "worker" } else { "coordinator" };
        let body = ToolCallBody {
            tool: tool.to_owned(),
            session_id: self.identity.session_id.clone(),
            caller_role: Some(role.to_owned()),
        };
        match self.run(move |api, mesh| api.record_tool_call(mesh, body)).await {
            Ok(verdict) => verdict.advisory.filter(|_| verdict.rate_limit_exceeded),
            Err(err) => {
                tracing::warn!(tool, error = %err.message, "could not record the tool call");
                None
            }
        }
    }

    /// The answer of a drain or a wait.
    fn events_answer(events: Vec<EventForAgent>, left: Option<usize>, empty: &str) -> CallToolResult {
        let mut text = if events.is_empty() { empty.to_owned() } else { events_text(&events) };
        if let Some(left) = left.filter(|n| *n > 0) {
            text.push_str(&format!(
                "\n\n{left} more event(s) stay queued (over the maxChars budget); call get_pending_mesh_events again to read them."
            ));
        }
        let mut data = json!({ "events": events });
        if let Some(left) = left {
            data["remaining"] = json!(left);
        }
        answer(text, data)
    }
}

#[tool_router]
impl MeshTools {
    #[tool(
        description = "Overview of the mesh: task counts by status, active assignments, idle worker sessions, \
queued coordinator events and the newest ledger entries. Use it to orient yourself or when the user asks for \
status; do not call it in a loop to wait for progress (use wait_for_mesh_events).",
        input_schema = schema::<NoArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn mesh_status(&self, arguments: JsonObject) -> ToolResult {
        let NoArgs {} = args::parse(arguments)?;
        let identity = Arc::clone(&self.identity);
        let status = self.run(|api, mesh| api.status(mesh)).await?;
        let mut data = serde_json::to_value(&status).map_err(|e| ToolError::internal(e.to_string()))?;
        data["you"] = json!({
            "daemonId": identity.daemon_id,
            "runId": identity.run_id,
            "sessionId": identity.worker_session,
            "sessionPinned": identity.session_id.is_some(),
        });
        answer_json(data)
    }

    #[tool(
        description = "Enqueue one task for a worker agent. Returns the task with its id. When a worker \
completes or fails it, the event comes to you (this coordinator run) through wait_for_mesh_events or \
get_pending_mesh_events, with the worker's summary. For several related tasks use enqueue_tasks.",
        input_schema = schema::<TaskSpec>()
    )]
    async fn enqueue_task(&self, arguments: JsonObject) -> ToolResult {
        let spec: TaskSpec = args::parse(arguments)?;
        let mut body = spec.into_body();
        body.coordinator = Some(self.identity.coordinator());
        let task = self.run(move |api, mesh| api.enqueue(mesh, body)).await?;
        answer_json(json!({ "task": task }))
    }

    #[tool(
        description = "Enqueue several tasks at once, all or none. Give a task a `ref` and another task of \
the batch can depend on it with `\"dependsOn\": [\"<ref>\"]`; a dependent task is claimed only after its \
dependencies complete. Returns the tasks with their ids, in order.",
        input_schema = schema::<EnqueueTasksArgs>()
    )]
    async fn enqueue_tasks(&self, arguments: JsonObject) -> ToolResult {
        let batch: EnqueueTasksArgs = args::parse(arguments)?;
        let body = BatchEnqueueBody {
            tasks: batch.tasks.into_iter().map(TaskSpec::into_body).collect(),
            coordinator: Some(self.identity.coordinator()),
        };
        let tasks = self.run(move |api, mesh| api.enqueue_batch(mesh, body)).await?;
        answer_json(json!({ "tasks": tasks }))
    }

    #[tool(
        description = "List the tasks of the mesh, oldest first, optionally only some statuses. For one \
task in full use show_task.",
        input_schema = schema::<ListTasksArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn list_tasks(&self, arguments: JsonObject) -> ToolResult {
        let ListTasksArgs { status } = args::parse(arguments)?;
        let tasks = self.run(move |api, mesh| api.list_tasks(mesh, ListParams::statuses(status))).await?;
        answer_json(json!({ "tasks": tasks }))
    }

    #[tool(
        description = "Show one task: status, assignment, attempts, dependencies, the worker's final \
summary or failure reason, and whether its delivery to the worker was confirmed (delivered, acknowledged \
or completed; a task without a confirmed delivery may be reclaimed).",
        input_schema = schema::<TaskIdArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn show_task(&self, arguments: JsonObject) -> ToolResult {
        let TaskIdArgs { task_id } = args::parse(arguments)?;
        let task_id = args::id_argument("taskId", task_id)?;
        let (task, delivery) = self
            .run(move |api, mesh| {
                Ok((api.show_task(mesh, &task_id)?, api.delivery_confirmed(mesh, &task_id)?))
            })
            .await?;
        answer_json(json!({ "task": task, "deliveryConfirmed": delivery.confirmed }))
    }

    #[tool(
        description = "Record a task you already sent straight to a worker session (not through the \
queue), so the mesh tracks it: it becomes a task assigned to that session, its delivery confirmed, and \
the worker completes it with complete_task. Recording an id the mesh holds changes nothing.",
        input_schema = schema::<RecordDispatchedArgs>()
    )]
    async fn record_dispatched_task(&self, arguments: JsonObject) -> ToolResult {
        let RecordDispatchedArgs { task_id, message, node_id, session_id, provider_type, mission_id } =
            args::parse(arguments)?;
        let body = DispatchedTaskBody {
            id: task_id,
            message,
            node_id,
            session_id,
            provider_type,
            mission_id,
            task_mode: None,
        };
        let recorded = self.run(move |api, mesh| api.record_dispatched_task(mesh, body)).await?;
        answer_json(recorded)
    }

    #[tool(
        description = "Hold a task in flight once its worker acknowledged it, or update its hold: the \
reason, when the worker's session was first seen idle since (firstIdleSinceAck) and how many reads of it \
failed. The time it was first held is kept; release_hold ends the hold.",
        input_schema = schema::<HoldArgs>()
    )]
    async fn hold_task(&self, arguments: JsonObject) -> ToolResult {
        let HoldArgs { task_id, hold_reason, first_idle_since_ack, read_failure_count } =
            args::parse(arguments)?;
        let body = HoldBody { task_id, hold_reason, first_idle_since_ack, read_failure_count };
        let hold = self.run(move |api, mesh| api.hold_task(mesh, body)).await?;
        answer_json(json!({ "hold": hold }))
    }

    #[tool(
        description = "List the tasks held in flight (hold_task), in the order they were first held, \
with why and since when; with taskId, only that task's hold.",
        input_schema = schema::<ListHoldsArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn list_holds(&self, arguments: JsonObject) -> ToolResult {
        let ListHoldsArgs { task_id } = args::parse(arguments)?;
        match task_id {
            Some(task_id) => {
                let task_id = args::id_argument("taskId", task_id)?;
                let hold = self.run(move |api, mesh| api.hold(mesh, &task_id)).await?;
                answer_json(json!({ "holds": [hold] }))
            }
            None => {
                let holds = self.run(move |api, mesh| api.holds(mesh)).await?;
                answer_json(json!({ "holds": holds }))
            }
        }
    }

    #[tool(
        description = "Release the in-flight hold of a task (hold_task); the answer says whether it \
was held.",
        input_schema = schema::<TaskIdArgs>()
    )]
    async fn release_hold(&self, arguments: JsonObject) -> ToolResult {
        let TaskIdArgs { task_id } = args::parse(arguments)?;
        let task_id = args::id_argument("taskId", task_id)?;
        let released = self.run(move |api, mesh| api.release_hold(mesh, &task_id)).await?;
        answer_json(released)
    }

    #[tool(
        description = "Worker: before editing files, reserve them so no other agent edits them at the \
same time. Patterns are relative to the repository root (src/parser is that directory and everything in \
it). Granted: keep the reservation's id and epoch, and release_reservation when done (it lapses after \
ttlMs, an hour by default). Denied: `granted: false` and every conflicting reservation (who holds which \
pattern, for which task, until when); pick other work, ask the holder, or retry with waitSecs.",
        input_schema = schema::<ReservePathsArgs>()
    )]
    async fn reserve_paths(&self, arguments: JsonObject) -> ToolResult {
        let ReservePathsArgs {
            scope,
            patterns,
            exclusive,
            reason,
            ttl_ms,
            ignore_case,
            wait_secs,
            session_id,
            node_id,
        } = args::parse(arguments)?;
        let body = ReserveBody {
            scope,
            session_id: self.session(session_id),
            node_id: self.node(node_id),
            patterns,
            exclusive,
            reason,
            ttl_ms,
            ignore_case,
            wait_secs,
        };
        let view = self.run(move |api, mesh| api.reserve(mesh, body)).await?;
        answer_json(view)
    }

    #[tool(
        description = "Worker: release a path reservation you hold (its id and epoch, as reserve_paths \
returned them). Your other reservations stay.",
        input_schema = schema::<ReservationFenceArgs>()
    )]
    async fn release_reservation(&self, arguments: JsonObject) -> ToolResult {
        let ReservationFenceArgs { reservation_id, epoch, ttl_ms, session_id } = args::parse(arguments)?;
        let id = args::id_argument("reservationId", reservation_id)?;
        let body = FenceBody { session_id: self.session(session_id), epoch, ttl_ms };
        let released = self.run(move |api, mesh| api.release_reservation(mesh, &id, body)).await?;
        answer_json(json!({ "released": released }))
    }

    #[tool(
        description = "Worker: extend a path reservation you hold before it lapses (ttlMs from now; the \
time it was last given when absent).",
        input_schema = schema::<ReservationFenceArgs>()
    )]
    async fn renew_reservation(&self, arguments: JsonObject) -> ToolResult {
        let ReservationFenceArgs { reservation_id, epoch, ttl_ms, session_id } = args::parse(arguments)?;
        let id = args::id_argument("reservationId", reservation_id)?;
        let body = FenceBody { session_id: self.session(session_id), epoch, ttl_ms };
        let renewed = self.run(move |api, mesh| api.renew_reservation(mesh, &id, body)).await?;
        answer_json(json!({ "reservation": renewed }))
    }

    #[tool(
        description = "List the path reservations in force (who holds which patterns, exclusive or \
shared, for which task, until when), of one repository when scope is given.",
        input_schema = schema::<ListReservationsArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn list_reservations(&self, arguments: JsonObject) -> ToolResult {
        let ListReservationsArgs { scope } = args::parse(arguments)?;
        let held = self.run(move |api, mesh| api.reservations(mesh, ReservationListParams { scope })).await?;
        answer_json(json!({ "reservations": held }))
    }

    #[tool(
        description = "Worker: check paths before editing them. `clear: true` when no other holder's \
exclusive reservation covers any; else, for each blocked path, who holds it.",
        input_schema = schema::<CheckPathsArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn check_paths(&self, arguments: JsonObject) -> ToolResult {
        let CheckPathsArgs { scope, paths, ignore_case, session_id } = args::parse(arguments)?;
        let body = CheckPathsBody { scope, paths, session_id: Some(self.session(session_id)), ignore_case };
        let view = self.run(move |api, mesh| api.check_paths(mesh, body)).await?;
        answer_json(view)
    }

    #[tool(
        description = "Cancel a pending or assigned task: it will not be claimed (again). Use it when the \
work is no longer wanted.",
        input_schema = schema::<CancelTaskArgs>()
    )]
    async fn cancel_task(&self, arguments: JsonObject) -> ToolResult {
        let CancelTaskArgs { task_id, reason } = args::parse(arguments)?;
        let task_id = args::id_argument("taskId", task_id)?;
        let task = self.run(move |api, mesh| api.cancel_task(mesh, &task_id, CancelBody { reason })).await?;
        answer_json(json!({ "task": task }))
    }

    #[tool(
        description = "Change the pull priority of a pending or assigned task: a higher one is claimed \
sooner. Use it when the plan's order changed.",
        input_schema = schema::<SetPriorityArgs>()
    )]
    async fn set_task_priority(&self, arguments: JsonObject) -> ToolResult {
        let SetPriorityArgs { task_id, priority, reason } = args::parse(arguments)?;
        let task_id = args::id_argument("taskId", task_id)?;
        let body = PriorityBody { priority, reason };
        let task = self.run(move |api, mesh| api.set_priority(mesh, &task_id, body)).await?;
        answer_json(json!({ "task": task }))
    }

    #[tool(
        description = "Put a task back in the queue so another worker can claim it (e.g. after a failure \
you want retried). Answers `pending`, or `retries_exhausted` when its retry budget is spent (use force to \
override).",
        input_schema = schema::<RequeueTaskArgs>()
    )]
    async fn requeue_task(&self, arguments: JsonObject) -> ToolResult {
        let RequeueTaskArgs { task_id, reason, force } = args::parse(arguments)?;
        let task_id = args::id_argument("taskId", task_id)?;
        let body = RequeueBody { reason, force, ..RequeueBody::default() };
        let requeued = self.run(move |api, mesh| api.requeue_task(mesh, &task_id, body)).await?;
        answer_json(requeued)
    }

    #[tool(
        description = "Take the events queued for you (this coordinator run): task completions with the \
worker's summary, failures with the reason, and other mesh notices, oldest first, each as a sentence plus \
its fields. Returned events are removed from the queue. Does not wait; to block until something happens \
use wait_for_mesh_events. Set maxChars to cap how much text comes back: what does not fit stays queued.",
        input_schema = schema::<DrainArgs>()
    )]
    async fn get_pending_mesh_events(&self, arguments: JsonObject) -> ToolResult {
        let DrainArgs { max_chars, limit } = args::parse(arguments)?;
        if max_chars == Some(0) {
            return Err(ToolError::invalid_argument("maxChars", "must be at least 1"));
        }
        let body = self.identity.drain_body(limit);
        let Some(budget) = max_chars else {
            let drained: DrainView = self.run(move |api, mesh| api.drain(mesh, body)).await?;
            let events = drained.events.iter().map(EventForAgent::from_view).collect();
            return Ok(Self::events_answer(events, None, "No events are queued for you."));
        };
        // Peek to learn how many of the oldest events fit, then drain exactly that
        // many: the drain routes, dedups and marks in one transaction as any drain
        // does, so nothing is handed out twice and what does not fit stays queued.
        let peek_body = body.clone();
        let peeked = self.run(move |api, mesh| api.peek(mesh, peek_body)).await?;
        let all: Vec<EventForAgent> = peeked.iter().map(EventForAgent::from_view).collect();
        let taken = fit_budget(&all, Some(budget));
        let mut events = Vec::new();
        if taken > 0 {
            let body = DrainBody { limit: Some(u32::try_from(taken).unwrap_or(u32::MAX)), ..body };
            let drained: DrainView = self.run(move |api, mesh| api.drain(mesh, body)).await?;
            events = drained.events.iter().map(EventForAgent::from_view).collect();
        }
        let left = all.len().saturating_sub(events.len());
        Ok(Self::events_answer(events, Some(left), "No events are queued for you."))
    }

    #[tool(
        description = "Wait until an event for you (this coordinator run) arrives, up to `seconds` \
(default 25, at most 50), and take it: this is how to wait for workers instead of polling. Returns the \
events (completions carry the worker's summary), or says that none came yet; then simply call it again.",
        input_schema = schema::<WaitArgs>(),
    )]
    async fn wait_for_mesh_events(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let WaitArgs { seconds } = args::parse(arguments)?;
        let seconds = seconds.unwrap_or(DEFAULT_WAIT_SECS);
        if !(1..=MAX_WAIT_SECS).contains(&seconds) {
            return Err(ToolError::invalid_argument(
                "seconds",
                format!("must be between 1 and {MAX_WAIT_SECS}"),
            ));
        }
        // Wait in short slices and stop between them once the call is cancelled:
        // a wait abandoned by its caller must not go on to take events nobody
        // will read. (A slice drains only once an event is there.)
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        let drained = loop {
            if context.ct.is_cancelled() {
                return Err(ToolError::internal("the wait was cancelled"));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let slice = left.min(WAIT_SLICE);
            let body = self.identity.drain_body(None);
            let drained: DrainView = self.run(move |api, mesh| api.watch(mesh, body, slice)).await?;
            if !drained.events.is_empty() || left <= WAIT_SLICE {
                break drained;
            }
        };
        let events = drained.events.iter().map(EventForAgent::from_view).collect();
        let empty = format!("No events yet (waited {seconds}s). Call {WAIT_TOOL} again to keep waiting.");
        Ok(Self::events_answer(events, None, &empty))
    }

    #[tool(
        description = "The newest entries of the mesh's ledger (the durable record of every task change), \
oldest first. Use it to see what happened recently, e.g. which tasks were claimed, completed or requeued; \
with taskId, one task's history.",
        input_schema = schema::<LedgerArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn ledger_tail(&self, arguments: JsonObject) -> ToolResult {
        let LedgerArgs { tail, kind, since, task_id } = args::parse(arguments)?;
        let task = task_id.map(|id| args::id_argument("taskId", id)).transpose()?;
        let params = LedgerParams { tail: Some(tail.unwrap_or(DEFAULT_LEDGER_TAIL)), since, kind, task };
        let entries = self.run(move |api, mesh| api.ledger_tail(mesh, params)).await?;
        answer_json(json!({ "entries": entries }))
    }

    #[tool(
        description = "Create or update a mission: a named goal that groups tasks (enqueue them with \
missionId). Its progress is counted from its tasks.",
        input_schema = schema::<MissionArgs>()
    )]
    async fn upsert_mission(&self, arguments: JsonObject) -> ToolResult {
        let MissionArgs { mission_id, title, goal, status, source } = args::parse(arguments)?;
        let mission_id = args::id_argument("missionId", mission_id)?;
        let body = MissionBody { id: mission_id, title, goal, status, source };
        let saved = self.run(move |api, mesh| api.upsert_mission(mesh, body)).await?;
        answer_json(saved)
    }

    #[tool(
        description = "List the missions of the mesh, most recently updated first, each with its progress \
(tasks by status, percent complete).",
        input_schema = schema::<ListMissionsArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn list_missions(&self, arguments: JsonObject) -> ToolResult {
        let ListMissionsArgs { status } = args::parse(arguments)?;
        let missions = self.run(move |api, mesh| api.missions(mesh, MissionListParams { status })).await?;
        answer_json(json!({ "missions": missions }))
    }

    #[tool(
        description = "Show one mission with its progress and its tasks.",
        input_schema = schema::<MissionIdArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn show_mission(&self, arguments: JsonObject) -> ToolResult {
        let MissionIdArgs { mission_id } = args::parse(arguments)?;
        let mission_id = args::id_argument("missionId", mission_id)?;
        let mission = self.run(move |api, mesh| api.mission(mesh, &mission_id)).await?;
        answer_json(mission)
    }

    #[tool(
        description = "Rank candidate nodes for a task, best first, by its required tags, pins and the \
nodes' current load. Use it before pinning a task (targetNodeId) or dispatching it to a session.",
        input_schema = schema::<SuggestNodeArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn suggest_node(&self, arguments: JsonObject) -> ToolResult {
        let SuggestNodeArgs { task_id, nodes, strategy } = args::parse(arguments)?;
        let body = PlacementBody { task_id, nodes, strategy };
        let ranked = self.run(move |api, mesh| api.placement(mesh, body)).await?;
        answer_json(json!({ "nodes": ranked }))
    }

    #[tool(
        description = "Send a message to a worker session. `queue` (default) puts it in the session's \
delivery queue, which the worker reads with read_deliveries. `dispatch` hands task `taskId` to the session \
directly: it is recorded as a direct dispatch and the message is queued for the session as its task.",
        input_schema = schema::<SendArgs>()
    )]
    async fn send_to_session(&self, arguments: JsonObject) -> ToolResult {
        let SendArgs { session_id, message, node_id, task_id, mode, priority } = args::parse(arguments)?;
        let coordinator = Some(self.identity.coordinator());
        let dispatch = match mode {
            SendMode::Queue => None,
            SendMode::Dispatch => Some(DispatchBody {
                task_id: task_id.clone().ok_or_else(|| {
                    ToolError::invalid_argument("taskId", "is required with mode \"dispatch\"")
                })?,
                node_id: node_id.clone(),
                session_id: Some(session_id.clone()),
                message: message.clone(),
                ..DispatchBody::default()
            }),
        };
        let delivery = DeliveryBody {
            node_id,
            session_id: Some(session_id),
            task_id,
            kind: dispatch.as_ref().map(|_| "task".to_owned()),
            priority,
            message,
            coordinator,
            ..DeliveryBody::default()
        };
        let (delivery, dispatch) = self
            .run(move |api, mesh| {
                let dispatch = dispatch.map(|d| api.record_dispatch(mesh, d)).transpose()?;
                Ok((api.send_delivery(mesh, delivery)?, dispatch))
            })
            .await?;
        answer_json(json!({ "delivery": delivery, "dispatch": dispatch }))
    }

    #[tool(
        description = "Worker: claim the next task you may do. Returns the task (its `message` is your \
instruction) and its `epoch` (keep both the task id and the epoch) or, when there is nothing for you, `task: null` and why, \
with the `sessionId` you claimed as (this server's own session unless you name one). While \
working call heartbeat_task before the lease runs out; finish with complete_task or fail_task.",
        input_schema = schema::<ClaimArgs>()
    )]
    async fn claim_task(&self, arguments: JsonObject) -> ToolResult {
        let ClaimArgs {
            session_id,
            node_id,
            capability_tags,
            provider_type,
            lease_ms,
            assigned_transcript_profile,
            allowed_task_difficulties,
        } = args::parse(arguments)?;
        let body = ClaimBody {
            node_id: self.node(node_id),
            session_id: self.session(session_id),
            capability_tags,
            provider_type,
            lease_ms: lease_ms
                .map(|ms| {
                    std::num::NonZeroU32::new(ms)
                        .ok_or_else(|| ToolError::invalid_argument("leaseMs", "must be at least 1"))
                })
                .transpose()?,
            assigned_transcript_profile: assigned_transcript_profile.map(Into::into),
            allowed_task_difficulties,
            ..ClaimBody::default()
        };
        let session = body.session_id.clone();
        let claim = self.run(move |api, mesh| api.claim(mesh, body)).await?;
        // The epoch is the task's `dispatchNonce`; named here as the other worker
        // tools take it.
        let epoch = claim.task.as_ref().map(agentmesh_core::Task::epoch);
        answer_json(
            json!({ "task": claim.task, "epoch": epoch, "sessionId": session, "refusal": claim.refusal }),
        )
    }

    #[tool(
        description = "Worker: extend the lease of the task you hold, so it is not given to another \
worker while you are still on it, and say how far along you are (percent, note). Call it regularly \
during long work.",
        input_schema = schema::<HeartbeatArgs>()
    )]
    async fn heartbeat_task(&self, arguments: JsonObject) -> ToolResult {
        let HeartbeatArgs { task_id, epoch, lease_ms, session_id, percent, note } = args::parse(arguments)?;
        let lease_ms = std::num::NonZeroU32::new(lease_ms.unwrap_or(DEFAULT_HEARTBEAT_LEASE_MS))
            .ok_or_else(|| ToolError::invalid_argument("leaseMs", "must be at least 1"))?;
        let progress = (percent.is_some() || note.is_some())
            .then_some(agentmesh_api::wire::ProgressBody { percent, note });
        let body = HeartbeatBody { task_id, session_id: self.session(session_id), epoch, lease_ms, progress };
        let task = self.run(move |api, mesh| api.heartbeat(mesh, body)).await?;
        answer_json(json!({ "task": task }))
    }

    #[tool(
        description = "Worker: report your task done, with a summary of what you did. The coordinator that \
enqueued it receives the summary.",
        input_schema = schema::<CompleteArgs>()
    )]
    async fn complete_task(&self, arguments: JsonObject) -> ToolResult {
        let CompleteArgs { summary, task_id, epoch, session_id, occurred_at } = args::parse(arguments)?;
        let body = CompletionBody {
            session_id: self.session(session_id),
            task_id,
            epoch,
            summary: Some(summary),
            occurred_at,
            ..CompletionBody::default()
        };
        let task = self.run(move |api, mesh| api.complete(mesh, body)).await?;
        answer_json(json!({ "task": task }))
    }

    #[tool(
        description = "Worker: report that your task could not be done, with the reason. The coordinator \
that enqueued it receives the reason and decides whether to requeue it.",
        input_schema = schema::<FailArgs>()
    )]
    async fn fail_task(&self, arguments: JsonObject) -> ToolResult {
        let FailArgs { reason, summary, task_id, epoch, session_id, occurred_at } = args::parse(arguments)?;
        let body = CompletionBody {
            session_id: self.session(session_id),
            task_id,
            epoch,
            summary,
            failed: true,
            reason: Some(reason),
            occurred_at,
        };
        let task = self.run(move |api, mesh| api.complete(mesh, body)).await?;
        answer_json(json!({ "task": task }))
    }

    #[tool(
        description = "Worker: read the messages coordinators queued for your session (send_to_session), \
highest priority first.",
        input_schema = schema::<SessionArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn read_deliveries(&self, arguments: JsonObject) -> ToolResult {
        let SessionArgs { session_id } = args::parse(arguments)?;
        let params = DeliveryListParams { session_id: Some(self.session(session_id)) };
        let deliveries = self.run(move |api, mesh| api.deliveries(mesh, params)).await?;
        answer_json(json!({ "deliveries": deliveries }))
    }

    #[tool(
        description = "Worker: report that your session is idle and can take work, so coordinators see it \
(mesh_status) and can dispatch to it. The report expires after ttlSecs.",
        input_schema = schema::<IdleArgs>()
    )]
    async fn report_idle(&self, arguments: JsonObject) -> ToolResult {
        let IdleArgs { session_id, node_id, provider_type, ttl_secs } = args::parse(arguments)?;
        let body = IdleBody {
            node_id: self.node(node_id),
            session_id: self.session(session_id),
            provider_type: provider_type.unwrap_or_else(|| DEFAULT_PROVIDER.to_owned()),
            ttl_secs,
            metadata: None,
        };
        let idle = self.run(move |api, mesh| api.report_idle(mesh, body)).await?;
        let pair = (idle.node_id.clone(), idle.session_id.clone());
        let mut reported = self.reported_idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !reported.contains(&pair) {
            reported.push(pair);
        }
        drop(reported);
        answer_json(idle)
    }

    #[tool(
        description = "Worker: move a delivery you read (read_deliveries) on: `delivered` when you \
received it, `acked` when you read it and act on it, `completed` when you did what it asked, `failed` \
(with `error`) when you cannot. A delivery never moves backwards; the answer says whether it changed.",
        input_schema = schema::<DeliveryStatusArgs>()
    )]
    async fn update_delivery(&self, arguments: JsonObject) -> ToolResult {
        let DeliveryStatusArgs { delivery_id, status, error } = args::parse(arguments)?;
        let body = DeliveryStatusBody { status, error, attempt: false };
        let changed = self.run(move |api, mesh| api.update_delivery(mesh, &delivery_id, body)).await?;
        answer_json(changed)
    }

    #[tool(
        description = "List the held events: coordinator events that were held back (an enforce-mode \
drain quarantined them as unversioned or invalid) or that nobody drained for 30 days (moved to the \
ledger). Each shows why it was held, the task and node it is about, and the event itself. Put them back \
with requeue_held_events.",
        input_schema = schema::<HeldArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn list_held_events(&self, arguments: JsonObject) -> ToolResult {
        let HeldArgs { reason, node_id, task_id, event, older_than_secs } = args::parse(arguments)?;
        let params = HeldParams { reason, node_id, task_id, event, older_than_secs };
        let held = self.run(move |api, mesh| api.held_events(mesh, params)).await?;
        answer_json(json!({ "held": held }))
    }

    #[tool(
        description = "Put held events back in the inbox, so a drain (wait_for_mesh_events) delivers \
them again: by `ids` (the held entry ids list_held_events shows), or every held event the filters \
select, or all of them with `all: true`. Answers how many were queued again.",
        input_schema = schema::<RequeueHeldArgs>()
    )]
    async fn requeue_held_events(&self, arguments: JsonObject) -> ToolResult {
        let RequeueHeldArgs { ids, reason, node_id, task_id, event, older_than_secs, all } =
            args::parse(arguments)?;
        let body = RequeueHeldBody { ids, reason, node_id, task_id, event, older_than_secs, all };
        let view = self.run(move |api, mesh| api.requeue_held(mesh, body)).await?;
        answer_json(view)
    }
}

// The instructions are what the agent is told about the server at `initialize`.
#[tool_handler(
    router = self.tool_router,
    name = "agentmesh",
    instructions = "agentmesh coordinates coding agents through a durable task queue. As a coordinator: \
enqueue_task or enqueue_tasks to hand out work, then wait_for_mesh_events to block until workers report \
(completions carry the worker's summary); get_pending_mesh_events takes what is already queued without \
waiting. Do not poll mesh_status or list_tasks in a loop. As a worker: claim_task, heartbeat_task while \
working, then complete_task with a summary or fail_task with a reason."
)]
impl ServerHandler for MeshTools {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        self.renew_presence().await;
        let advisory = if self.tool_router.has_route(&tool) { self.record_call(&tool).await } else { None };
        let mut response = self.tool_router.call(ToolCallContext::new(self, request, context)).await?;
        // Waiting is what the advice asks for, so the wait tool never carries it.
        if let (Some(advisory), CallToolResponse::Complete(result)) = (advisory, &mut response)
            && tool != WAIT_TOOL
            && result.is_error != Some(true)
        {
            result.content.push(ContentBlock::text(format!(
                "{advisory} To wait for workers, call {WAIT_TOOL} (it blocks until an event arrives) instead of polling."
            )));
        }
        Ok(response)
    }
}
