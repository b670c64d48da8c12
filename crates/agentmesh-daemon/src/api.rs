//! The `/v1` routes: one handler per [`MeshApi`] operation.
//!
//! Every route but `GET /meshes` (the meshes the store holds) is scoped by the
//! `{mesh}` path segment, checked by the core's id rule. A handler decodes its
//! input into the shared wire types of `agentmesh_api::wire` (a malformed body
//! or query is refused naming the field), runs the operation on the daemon's
//! [`agentmesh_api::LocalMesh`] through [`AppState::with_mesh`] and answers the
//! view as JSON. Creating routes answer 201.

use agentmesh_api::views::{
    AckView, CheckPathsView, ClaimView, CompleteAndClaimView, ConflictView, DeletedEventsView,
    DeliveryChangeView, DeliveryConfirmedView, DeliveryView, DispatchChangeView, DispatchView,
    DispatchedTaskView, DrainView, FingerprintView, HeldEventView, HoldReleasedView, HoldView,
    IdleRemovedView, IdleSessionView, ImportView, InboxEventView, MeshSummaryView, MissionDetailView,
    MissionSaved, MissionView, NodeRankView, PresenceView, PushView, RateVerdictView, RemovedView,
    RequeueHeldView, RequeueView, ReserveView, RetractView, StaleDispatchesView, StatusView, ToolCallLogView,
};
use agentmesh_api::watch::{Look, Watch, watch_timeout_secs};
use agentmesh_api::webhook::{WebhookAddedView, WebhookBody, WebhookTestView};
use agentmesh_api::wire::{
    AckBody, BatchEnqueueBody, CancelBody, CheckPathsBody, ClaimBody, CompleteAndClaimBody, CompletionBody,
    ConflictParams, DeleteEventsBody, DeliveryBody, DeliveryListParams, DeliveryStatusBody, DispatchBody,
    DispatchStatusBody, DispatchedTaskBody, DrainBody, EnqueueBody, FenceBody, FingerprintParams,
    HeartbeatBody, HeldParams, HoldBody, IdleBody, ImportBody, LedgerParams, ListParams, MissionBody,
    MissionListParams, PlacementBody, PresenceBody, PriorityBody, PushEventBody, RemoveDispatchesBody,
    RequeueBody, RequeueHeldBody, ReservationListParams, ReserveBody, RetractBody, SliceParams,
    StaleDispatchesBody, ToolCallBody, ToolCallParams, WatchParams,
};
use agentmesh_api::{ArchivedTasksParams, ArchivedTasksView, MeshApi};
use agentmesh_core::retention::{ArchiveMark, MeshRetention};
use agentmesh_core::{ClaimRefusal, LedgerEntry, LedgerSlice, MeshId, Reservation, Task, Webhook};
use agentmesh_store::StoreError;
use agentmesh_store::archive::ArchiveState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::route::Route;

/// A route may answer that what it names is not there.
const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;
/// A route may answer that the state of what it names refuses the request.
const CONFLICT: StatusCode = StatusCode::CONFLICT;
/// A ledger route may answer that its cursor is before what is kept.
const GONE: StatusCode = StatusCode::GONE;

/// The `/v1` routes, each behind the bearer-token check: the one list the router
/// mounts and the OpenAPI document describes (`crate::route`). A new route is one
/// more entry here.
pub(crate) fn table() -> Vec<Route> {
    vec![
        Route::get("/meshes", list_meshes, "Every mesh the store holds anything of, with its counts")
            .answers::<Vec<MeshSummaryView>>(),
        Route::post("/meshes/{mesh}/tasks", enqueue, "Enqueue one task")
            .body::<EnqueueBody>()
            .example(json!({
                "message": "Fix the flaky parser test",
                "priority": "high",
                "requiredTags": ["rust"],
            }))
            .creates::<Task>()
            .errors(&[CONFLICT]),
        Route::get("/meshes/{mesh}/tasks", list_tasks, "The mesh's tasks, oldest first")
            .query::<ListParams>()
            .answers::<Vec<Task>>(),
        Route::post("/meshes/{mesh}/tasks/batch", enqueue_batch, "Enqueue several tasks, all or none")
            .body::<BatchEnqueueBody>()
            .creates::<Vec<Task>>()
            .errors(&[CONFLICT]),
        Route::post(
            "/meshes/{mesh}/tasks/dispatched",
            record_dispatched_task,
            "Record a task dispatched straight to a session (200 when the id was known)",
        )
        .body::<DispatchedTaskBody>()
        .creates::<DispatchedTaskView>()
        .or(StatusCode::OK)
        .errors(&[CONFLICT]),
        Route::get(
            "/meshes/{mesh}/tasks/{id}/delivery",
            delivery_confirmed,
            "Whether a delivery of the task reached its session",
        )
        .answers::<DeliveryConfirmedView>(),
        Route::get("/meshes/{mesh}/tasks/{id}", show_task, "One task").answers::<Task>().errors(&[NOT_FOUND]),
        Route::post("/meshes/{mesh}/tasks/{id}/cancel", cancel_task, "Cancel a pending or assigned task")
            .body::<CancelBody>()
            .answers::<Task>()
            .errors(&[NOT_FOUND, CONFLICT]),
        Route::post(
            "/meshes/{mesh}/tasks/{id}/requeue",
            requeue_task,
            "Put a task back in the queue, or fail it when its retries are spent",
        )
        .body::<RequeueBody>()
        .answers::<RequeueView>()
        .errors(&[NOT_FOUND, CONFLICT]),
        Route::post(
            "/meshes/{mesh}/tasks/{id}/priority",
            set_priority,
            "Change the pull priority of a pending or assigned task",
        )
        .body::<PriorityBody>()
        .answers::<Task>()
        .errors(&[NOT_FOUND, CONFLICT]),
        Route::post(
            "/meshes/{mesh}/claims",
            claim,
            "Claim the next task for a worker session (nothing to claim is an answer)",
        )
        .body::<ClaimBody>()
        .example(json!({ "nodeId": "node-a", "sessionId": "worker-1", "capabilityTags": ["rust"] }))
        .answers::<ClaimView>(),
        Route::post("/meshes/{mesh}/heartbeats", heartbeat, "Extend the lease of a claimed task")
            .body::<HeartbeatBody>()
            .answers::<Task>()
            .errors(&[NOT_FOUND, CONFLICT]),
        Route::post("/meshes/{mesh}/completions", complete, "Report a claimed task completed or failed")
            .body::<CompletionBody>()
            .example(json!({ "sessionId": "worker-1", "taskId": "task-1", "epoch": 1, "summary": "fixed" }))
            .answers::<Task>()
            .errors(&[NOT_FOUND, CONFLICT]),
        Route::post(
            "/meshes/{mesh}/complete-and-claim",
            complete_and_claim,
            "Report a task done and claim the next, in one transaction",
        )
        .body::<CompleteAndClaimBody>()
        .answers::<CompleteAndClaimView>()
        .errors(&[NOT_FOUND, CONFLICT]),
        Route::get("/meshes/{mesh}/ledger", ledger, "The newest ledger entries, oldest first")
            .query::<LedgerParams>()
            .answers::<Vec<LedgerEntry>>()
            .errors(&[NOT_FOUND]),
        Route::get(
            "/meshes/{mesh}/ledger/slice",
            ledger_slice,
            "One page of the ledger slice protocol (archived entries first, counted in archived)",
        )
        .query::<SliceParams>()
        .answers::<LedgerSlice>()
        .errors(&[GONE]),
        Route::post(
            "/meshes/{mesh}/ledger/import",
            import_ledger,
            "Import ledger entries of this mesh, all or none",
        )
        .body::<ImportBody>()
        .answers::<ImportView>()
        .errors(&[CONFLICT]),
        Route::post(
            "/meshes/{mesh}/events",
            push_event,
            "Queue an event for a coordinator (200 when it is a duplicate)",
        )
        .body::<PushEventBody>()
        .creates::<PushView>()
        .or(StatusCode::OK),
        Route::post(
            "/meshes/{mesh}/events/drain",
            drain,
            "Take the coordinator's events, marking them drained",
        )
        .body::<DrainBody>()
        .answers::<DrainView>(),
        Route::post(
            "/meshes/{mesh}/events/peek",
            peek,
            "The events a drain would deliver now, marking nothing",
        )
        .body::<DrainBody>()
        .answers::<PeekView>(),
        Route::post(
            "/meshes/{mesh}/events/watch",
            watch,
            "A drain that waits for an event, empty at the timeout",
        )
        .query::<WatchParams>()
        .body::<DrainBody>()
        .answers::<DrainView>(),
        Route::post("/meshes/{mesh}/events/ack", ack_events, "Mark events delivered elsewhere as drained")
            .body::<AckBody>()
            .answers::<AckView>(),
        Route::post(
            "/meshes/{mesh}/events/delete",
            delete_events,
            "Delete events by row id, with their fingerprints",
        )
        .body::<DeleteEventsBody>()
        .answers::<DeletedEventsView>(),
        Route::post(
            "/meshes/{mesh}/events/retract",
            retract_dispatch_blocked,
            "Remove a task's undelivered dispatch-blocked events",
        )
        .body::<RetractBody>()
        .answers::<RetractView>(),
        Route::get("/meshes/{mesh}/events/held", held_events, "Held events not put back, oldest hold first")
            .query::<HeldParams>()
            .answers::<Vec<HeldEventView>>(),
        Route::post("/meshes/{mesh}/events/held/requeue", requeue_held, "Put held events back in the inbox")
            .body::<RequeueHeldBody>()
            .answers::<RequeueHeldView>()
            .errors(&[NOT_FOUND]),
        Route::get(
            "/meshes/{mesh}/completions/fingerprints",
            completion_fingerprints,
            "Completion fingerprints in force, newest first",
        )
        .query::<FingerprintParams>()
        .answers::<Vec<FingerprintView>>(),
        Route::get(
            "/meshes/{mesh}/completions/conflicts",
            completion_conflicts,
            "Completion conflicts of the recent past, newest first",
        )
        .query::<ConflictParams>()
        .answers::<Vec<ConflictView>>(),
        Route::post("/meshes/{mesh}/missions", upsert_mission, "Create (201) or update (200) a mission")
            .body::<MissionBody>()
            .creates::<MissionSaved>()
            .or(StatusCode::OK)
            .errors(&[CONFLICT]),
        Route::get(
            "/meshes/{mesh}/missions",
            missions,
            "Missions with their progress, most recently updated first",
        )
        .query::<MissionListParams>()
        .answers::<Vec<MissionView>>(),
        Route::get("/meshes/{mesh}/missions/{id}", mission, "One mission with its progress and tasks")
            .answers::<MissionDetailView>()
            .errors(&[NOT_FOUND]),
        Route::post("/meshes/{mesh}/idle-sessions", report_idle, "Record that a worker session is idle")
            .body::<IdleBody>()
            .answers::<IdleSessionView>(),
        Route::get(
            "/meshes/{mesh}/idle-sessions",
            idle_sessions,
            "Idle sessions whose report has not expired",
        )
        .answers::<Vec<IdleSessionView>>(),
        Route::delete(
            "/meshes/{mesh}/idle-sessions/{node}/{session}",
            remove_idle_session,
            "Forget a session's idle report",
        )
        .answers::<IdleRemovedView>(),
        Route::post(
            "/meshes/{mesh}/reservations",
            reserve,
            "Reserve path patterns of a repository scope (optionally waiting)",
        )
        .body::<ReserveBody>()
        .answers::<ReserveView>()
        .errors(&[CONFLICT]),
        Route::get("/meshes/{mesh}/reservations", reservations, "The reservations in force, oldest first")
            .query::<ReservationListParams>()
            .answers::<Vec<Reservation>>(),
        Route::post(
            "/meshes/{mesh}/reservations/check",
            check_paths,
            "Which paths another holder's exclusive reservation covers",
        )
        .body::<CheckPathsBody>()
        .answers::<CheckPathsView>(),
        Route::post(
            "/meshes/{mesh}/reservations/{id}/renew",
            renew_reservation,
            "Renew a reservation, by its holder",
        )
        .body::<FenceBody>()
        .answers::<Reservation>()
        .errors(&[NOT_FOUND, CONFLICT]),
        Route::post(
            "/meshes/{mesh}/reservations/{id}/release",
            release_reservation,
            "Release a reservation, by its holder",
        )
        .body::<FenceBody>()
        .answers::<Reservation>()
        .errors(&[NOT_FOUND, CONFLICT]),
        Route::get("/meshes/{mesh}/archive", archive, "The mesh's archive and its own retention windows")
            .answers::<ArchiveState>(),
        Route::post(
            "/meshes/{mesh}/retention",
            set_retention,
            "Set the mesh's own retention windows (an empty body: the daemon's), recorded in the ledger",
        )
        .body::<MeshRetention>()
        .example(json!({ "tasks": "3d", "ledger": "off" }))
        .answers::<ArchiveState>(),
        Route::get(
            "/meshes/{mesh}/archive/tasks",
            archived_tasks,
            "A page of the archived tasks in archive order, for an export",
        )
        .query::<ArchivedTasksParams>()
        .answers::<ArchivedTasksView>(),
        Route::post(
            "/meshes/{mesh}/archive/drop",
            drop_archived,
            "Delete from the archive what an export wrote out (never past a webhook's cursor)",
        )
        .body::<ArchiveMark>()
        .answers::<ArchiveMark>(),
        Route::post(
            "/meshes/{mesh}/webhooks",
            add_webhook,
            "Add a webhook subscription; its secret is shown once",
        )
        .body::<WebhookBody>()
        .example(
            json!({ "url": "https://ci.example.com/hooks/mesh", "kinds": ["task_completed", "task_failed"] }),
        )
        .creates::<WebhookAddedView>(),
        Route::get(
            "/meshes/{mesh}/webhooks",
            webhooks,
            "The webhook subscriptions, oldest first (never their secrets)",
        )
        .answers::<WebhookList>(),
        Route::get(
            "/meshes/{mesh}/webhooks/{id}",
            webhook,
            "One webhook subscription, with its last attempts",
        )
        .answers::<Webhook>()
        .errors(&[NOT_FOUND]),
        Route::delete("/meshes/{mesh}/webhooks/{id}", remove_webhook, "Remove a webhook subscription")
            .answers::<Webhook>()
            .errors(&[NOT_FOUND]),
        Route::post(
            "/meshes/{mesh}/webhooks/{id}/resume",
            resume_webhook,
            "Deliver again to a failing subscription, from the entry it is stuck on",
        )
        .answers::<Webhook>()
        .errors(&[NOT_FOUND]),
        Route::post(
            "/meshes/{mesh}/webhooks/{id}/skip",
            skip_webhook,
            "Pass the entry a subscription is stuck on without delivering it",
        )
        .answers::<Webhook>()
        .errors(&[NOT_FOUND]),
        Route::post(
            "/meshes/{mesh}/webhooks/{id}/test",
            test_webhook,
            "Send a signed sample to the subscription's receiver (its cursor does not move)",
        )
        .answers::<WebhookTestView>()
        .errors(&[NOT_FOUND]),
        Route::post(
            "/meshes/{mesh}/holds",
            hold_task,
            "Hold an acknowledged task in flight, or update its hold",
        )
        .body::<HoldBody>()
        .answers::<HoldView>()
        .errors(&[NOT_FOUND, CONFLICT]),
        Route::get("/meshes/{mesh}/holds", holds, "The in-flight holds, in the order they were first held")
            .answers::<Vec<HoldView>>(),
        Route::get("/meshes/{mesh}/holds/{id}", hold, "The hold of one task")
            .answers::<HoldView>()
            .errors(&[NOT_FOUND]),
        Route::delete("/meshes/{mesh}/holds/{id}", release_hold, "Release the hold of one task")
            .answers::<HoldReleasedView>()
            .errors(&[NOT_FOUND]),
        Route::post("/meshes/{mesh}/deliveries", send_delivery, "Queue a message for a worker session")
            .body::<DeliveryBody>()
            .creates::<DeliveryView>()
            .errors(&[CONFLICT]),
        Route::get(
            "/meshes/{mesh}/deliveries",
            deliveries,
            "Deliveries still waiting, for the mesh or one session",
        )
        .query::<DeliveryListParams>()
        .answers::<Vec<DeliveryView>>(),
        Route::get("/meshes/{mesh}/deliveries/{id}", delivery, "One delivery, whatever its status")
            .answers::<DeliveryView>()
            .errors(&[NOT_FOUND]),
        Route::post("/meshes/{mesh}/deliveries/{id}/status", update_delivery, "Move a delivery on")
            .body::<DeliveryStatusBody>()
            .answers::<DeliveryChangeView>()
            .errors(&[NOT_FOUND, CONFLICT]),
        Route::post("/meshes/{mesh}/dispatches", record_dispatch, "Record a direct dispatch")
            .body::<DispatchBody>()
            .creates::<DispatchView>()
            .errors(&[CONFLICT]),
        Route::get("/meshes/{mesh}/dispatches", dispatches, "Dispatches not yet completed, failed or stale")
            .answers::<Vec<DispatchView>>(),
        Route::post(
            "/meshes/{mesh}/dispatches/status",
            update_dispatches,
            "Move the dispatch of a task, or every open one of a session, to a status",
        )
        .body::<DispatchStatusBody>()
        .answers::<DispatchChangeView>(),
        Route::post(
            "/meshes/{mesh}/dispatches/mark-stale",
            mark_stale_dispatches,
            "Mark dispatches nobody acknowledged in time stale",
        )
        .body::<StaleDispatchesBody>()
        .answers::<StaleDispatchesView>(),
        Route::post(
            "/meshes/{mesh}/dispatches/remove",
            remove_dispatches,
            "Forget the dispatches of some tasks",
        )
        .body::<RemoveDispatchesBody>()
        .answers::<RemovedView>(),
        Route::get(
            "/meshes/{mesh}/dispatches/{id}",
            dispatch,
            "The dispatch of one task, whatever its status",
        )
        .answers::<DispatchView>()
        .errors(&[NOT_FOUND]),
        Route::post("/meshes/{mesh}/placement", placement, "Rank nodes for a task, best first")
            .body::<PlacementBody>()
            .answers::<Vec<NodeRankView>>()
            .errors(&[NOT_FOUND]),
        Route::get("/meshes/{mesh}/status", mesh_status, "An overview of the mesh").answers::<StatusView>(),
        Route::post(
            "/meshes/{mesh}/coordinators/presence",
            coordinator_presence,
            "A coordinator reports that it is alive, or that it ended",
        )
        .body::<PresenceBody>()
        .answers::<PresenceView>(),
        Route::post(
            "/meshes/{mesh}/tool-calls",
            record_tool_call,
            "Record a call of an agent-facing tool; answers the rate guard's verdict",
        )
        .body::<ToolCallBody>()
        .answers::<RateVerdictView>(),
        Route::get("/meshes/{mesh}/tool-calls", tool_calls, "The rate guard's recent calls, per caller role")
            .query::<ToolCallParams>()
            .answers::<ToolCallLogView>(),
    ]
}

/// A view answered as JSON with 200.
fn ok<T: Serialize>(view: T) -> Response {
    Json(view).into_response()
}

/// A view answered as JSON with 201.
fn created<T: Serialize>(view: T) -> Response {
    (StatusCode::CREATED, Json(view)).into_response()
}

/// A mesh id from the path, checked by the core's id rule (not blank, at most 200
/// bytes, no control characters) and trimmed.
pub(crate) fn mesh_id(mesh: String) -> Result<MeshId, ApiError> {
    Ok(MeshId::parse(&mesh)?)
}

/// Path `{mesh}`.
#[derive(Debug, Deserialize)]
struct MeshPath {
    mesh: String,
}

/// Path `{mesh}/.../{id}`.
#[derive(Debug, Deserialize)]
struct MeshIdPath {
    mesh: String,
    id: String,
}

/// Path `{mesh}/idle-sessions/{node}/{session}`.
#[derive(Debug, Deserialize)]
struct IdlePath {
    mesh: String,
    node: String,
    session: String,
}

/// Query of routes that take no parameter: one sent is refused, not ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

// ── Meshes ───────────────────────────────────────────────────────────────────

/// Every mesh the store holds anything of, by id, with its counts.
async fn list_meshes(
    State(state): State<AppState>,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Response, ApiError> {
    state.with_mesh(|m| m.meshes()).await.map(ok)
}

// ── Tasks ────────────────────────────────────────────────────────────────────

async fn enqueue(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<EnqueueBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.enqueue(&mesh, body)).await.map(created)
}

async fn enqueue_batch(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<BatchEnqueueBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.enqueue_batch(&mesh, body)).await.map(created)
}

/// A task already dispatched straight to a session: 201 when recorded, 200 when
/// the mesh held the id already (and nothing changed).
async fn record_dispatched_task(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<DispatchedTaskBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let recorded = state.with_mesh(move |m| m.record_dispatched_task(&mesh, body)).await?;
    Ok(if recorded.created { created(recorded) } else { ok(recorded) })
}

async fn delivery_confirmed(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.delivery_confirmed(&mesh, &id)).await.map(ok)
}

async fn list_tasks(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.list_tasks(&mesh, params)).await.map(ok)
}

async fn show_task(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.show_task(&mesh, &id)).await.map(ok)
}

async fn cancel_task(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
    ApiJson(body): ApiJson<CancelBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.cancel_task(&mesh, &id, body)).await.map(ok)
}

async fn set_priority(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
    ApiJson(body): ApiJson<PriorityBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.set_priority(&mesh, &id, body)).await.map(ok)
}

async fn requeue_task(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
    ApiJson(body): ApiJson<RequeueBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.requeue_task(&mesh, &id, body)).await.map(ok)
}

// ── Claims and completions ───────────────────────────────────────────────────

async fn claim(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<ClaimBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let session = body.session_id.clone();
    let view = state.submitted(state.mesh().claim_submitted(&mesh, body)).await?;
    state.metrics.claim(view.refusal.as_deref());
    let view = if view.refusal.as_deref() == Some(ClaimRefusal::PathsReserved.as_str()) {
        state.with_mesh(move |m| m.with_blockers(&mesh, session.trim(), view)).await?
    } else {
        view
    };
    Ok(ok(view))
}

async fn heartbeat(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<HeartbeatBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let beat = state.submitted(state.mesh().heartbeat_submitted(&mesh, body)).await;
    count_fencing(&state, "heartbeat", &beat);
    beat.map(ok)
}

async fn complete(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<CompletionBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let done = state.submitted(state.mesh().complete_submitted(&mesh, body)).await;
    count_fencing(&state, "completion", &done);
    if let Ok(task) = &done {
        state.metrics.completion(task.status);
    }
    done.map(ok)
}

/// A completion and the claim that follows it, in one request and one
/// transaction: the worker loop's two steps at the cost of one.
async fn complete_and_claim(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<CompleteAndClaimBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let session = body.claim.session_id.clone();
    let mut done = state.submitted(state.mesh().complete_and_claim_submitted(&mesh, body)).await;
    if let Ok(view) = &mut done
        && view.next.refusal.as_deref() == Some(ClaimRefusal::PathsReserved.as_str())
    {
        let next = std::mem::replace(
            &mut view.next,
            ClaimView { task: None, refusal: None, blocked_by: Vec::new() },
        );
        view.next = state.with_mesh(move |m| m.with_blockers(&mesh, session.trim(), next)).await?;
    }
    count_fencing(&state, "completion", &done);
    if let Ok(view) = &done {
        state.metrics.completion(view.completed.status);
        state.metrics.claim(view.next.refusal.as_deref());
    }
    done.map(ok)
}

/// Counts a completion or heartbeat the fencing check refused (each such refusal
/// is also in the ledger, as `completion_refused` or `heartbeat_refused`).
fn count_fencing<T>(state: &AppState, operation: &'static str, result: &Result<T, ApiError>) {
    if let Err(ApiError::Store(
        err @ (StoreError::StaleEpoch { .. }
        | StoreError::NotAssignedToSession { .. }
        | StoreError::InvalidTransition(_)),
    )) = result
    {
        state.metrics.fencing_refusal(operation, err.code());
    }
}

// ── Ledger ───────────────────────────────────────────────────────────────────

async fn ledger(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<LedgerParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.ledger_tail(&mesh, params)).await.map(ok)
}

async fn ledger_slice(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<SliceParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.ledger_slice(&mesh, params)).await.map(ok)
}

async fn import_ledger(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<ImportBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.import_ledger(&mesh, body)).await.map(ok)
}

// ── Coordinator inbox ────────────────────────────────────────────────────────

/// Queues the event: 201 with its row id and stamped form, or 200 when it is a
/// duplicate (nothing stored).
async fn push_event(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<PushEventBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let view = state.with_mesh(move |m| m.push_event(&mesh, body)).await?;
    Ok(match view {
        agentmesh_api::views::PushView::Queued(_) => created(view),
        agentmesh_api::views::PushView::Duplicate { .. } => ok(view),
    })
}

async fn drain(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<DrainBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let view = state.with_mesh(move |m| m.drain(&mesh, body)).await?;
    state.metrics.drained(view.events.len(), &view.counters);
    state.metrics.drain_request("drain");
    Ok(ok(view))
}

/// What a peek answers: the events a drain would deliver now.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct PeekView {
    /// The events, oldest first; none is marked drained.
    events: Vec<InboxEventView>,
}

async fn peek(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<DrainBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let events = state.with_mesh(move |m| m.peek(&mesh, body)).await?;
    Ok(ok(PeekView { events }))
}

/// A drain that waits: answers the moment an event for the caller lands (it is
/// delivered and marked drained as by a drain), or empty at the timeout.
///
/// The one watch of `agentmesh_api::watch` ([`Watch`], its timeout rule and the
/// mesh's [`agentmesh_api::WakeUp`]), driven without holding a thread while it
/// waits: every write the daemon commits wakes the waiters, and the daemon's
/// fallback poll notices writes other processes made to the same database file.
async fn watch(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<WatchParams>,
    ApiJson(body): ApiJson<DrainBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let timeout = watch_timeout_secs("timeoutSecs", params.timeout_secs)?;
    // Check the body once up front, so a malformed one is refused at once.
    agentmesh_store::DrainRequest::try_from(body.clone())?;
    let wake_up = state.mesh.wake_up();
    let mut watch = Watch::new(timeout, state.fallback_poll);
    let mut waiting = None;
    loop {
        // The mark is taken before looking, so a write landing between the look
        // and the wait is not missed.
        let seen = wake_up.mark(&mesh);
        let drain = match watch.look() {
            Look::Drain => true,
            Look::Peek => {
                let (m, b) = (mesh.clone(), body.clone());
                watch.peeked(!state.with_mesh(move |api| api.peek(&m, b)).await?.is_empty())
            }
        };
        if drain {
            let (m, b) = (mesh.clone(), body.clone());
            let view: DrainView = state.with_mesh(move |api| api.drain(&m, b)).await?;
            state.metrics.drained(view.events.len(), &view.counters);
            if watch.drained(&view) {
                state.metrics.drain_request("watch");
                return Ok(ok(view));
            }
        }
        let Some(wait) = watch.wait() else {
            // The last drain at the deadline, while the client still waits.
            let (m, b) = (mesh.clone(), body.clone());
            let view: DrainView = state.with_mesh(move |api| api.drain(&m, b)).await?;
            state.metrics.drained(view.events.len(), &view.counters);
            state.metrics.drain_request("watch");
            return Ok(ok(view));
        };
        // Counted as waiting from its first empty look until it returns (or the
        // client goes away and the handler is dropped).
        waiting.get_or_insert_with(|| state.metrics.watch_waiting());
        let (woke, woken) = tokio::sync::oneshot::channel::<()>();
        wake_up.on_wake(
            &mesh,
            seen,
            Box::new(move || {
                let _ = woke.send(());
            }),
        );
        let _ = tokio::time::timeout(wait, woken).await;
    }
}

async fn ack_events(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<AckBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.ack(&mesh, body)).await.map(ok)
}

async fn delete_events(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<DeleteEventsBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.delete_events(&mesh, body)).await.map(ok)
}

async fn retract_dispatch_blocked(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<RetractBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.retract(&mesh, body)).await.map(ok)
}

/// The held events that were not put back, oldest hold first.
async fn held_events(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<HeldParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.held_events(&mesh, params)).await.map(ok)
}

/// Puts held events back in the inbox.
async fn requeue_held(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<RequeueHeldBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.requeue_held(&mesh, body)).await.map(ok)
}

// ── Completion records ───────────────────────────────────────────────────────

async fn completion_fingerprints(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<FingerprintParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.completion_fingerprints(&mesh, params)).await.map(ok)
}

async fn completion_conflicts(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<ConflictParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.completion_conflicts(&mesh, params)).await.map(ok)
}

// ── Missions, sessions, dispatches, placement ───────────────────────────────

/// Creates (201) or updates (200) a mission.
async fn upsert_mission(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<MissionBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let saved = state.with_mesh(move |m| m.upsert_mission(&mesh, body)).await?;
    Ok(if saved.created { created(saved) } else { ok(saved) })
}

async fn missions(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<MissionListParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.missions(&mesh, params)).await.map(ok)
}

async fn mission(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.mission(&mesh, &id)).await.map(ok)
}

async fn report_idle(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<IdleBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.report_idle(&mesh, body)).await.map(ok)
}

async fn idle_sessions(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.idle_sessions(&mesh)).await.map(ok)
}

/// A session shutting down forgets its idle report.
async fn remove_idle_session(
    State(state): State<AppState>,
    ApiPath(IdlePath { mesh, node, session }): ApiPath<IdlePath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.remove_idle_session(&mesh, &node, &session)).await.map(ok)
}

/// A reservation request; with `waitSecs`, a denied one is tried again as the
/// mesh's writes land (a release wakes it), without holding a thread while it
/// waits.
async fn reserve(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<ReserveBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let (request, wait) = body.clone().into_request()?;
    let valid = std::sync::Arc::new(request.validate()?);
    let deadline = tokio::time::Instant::now() + wait;
    let once = ReserveBody { wait_secs: None, ..body };
    let wake_up = state.mesh.wake_up();
    loop {
        let (m, b) = (mesh.clone(), once.clone());
        let view = state.with_mesh(move |api| api.reserve(&m, b)).await?;
        state.metrics.reservation(view.granted);
        if view.granted || wait.is_zero() {
            return Ok(ok(view));
        }
        // Denied (and recorded once): wait, without writing, until a read
        // finds the conflicts gone (a release wakes the wait), then ask again.
        loop {
            let seen = wake_up.mark(&mesh);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(ok(view));
            }
            let (m, v) = (mesh.clone(), std::sync::Arc::clone(&valid));
            if state.with_mesh(move |api| api.clear_for(&m, &v)).await? {
                break;
            }
            let (woke, woken) = tokio::sync::oneshot::channel::<()>();
            wake_up.on_wake(
                &mesh,
                seen,
                Box::new(move || {
                    let _ = woke.send(());
                }),
            );
            let _ = tokio::time::timeout(left.min(state.fallback_poll), woken).await;
        }
    }
}

async fn reservations(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<ReservationListParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.reservations(&mesh, params)).await.map(ok)
}

async fn check_paths(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<CheckPathsBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.check_paths(&mesh, body)).await.map(ok)
}

async fn renew_reservation(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
    ApiJson(body): ApiJson<FenceBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.renew_reservation(&mesh, &id, body)).await.map(ok)
}

async fn release_reservation(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
    ApiJson(body): ApiJson<FenceBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.release_reservation(&mesh, &id, body)).await.map(ok)
}

async fn hold_task(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<HoldBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.hold_task(&mesh, body)).await.map(ok)
}

async fn holds(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.holds(&mesh)).await.map(ok)
}

async fn hold(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.hold(&mesh, &id)).await.map(ok)
}

async fn release_hold(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.release_hold(&mesh, &id)).await.map(ok)
}

// ── Webhooks ─────────────────────────────────────────────────────────────────

async fn archive(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.archive(&mesh)).await.map(ok)
}

async fn set_retention(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<MeshRetention>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.set_retention(&mesh, body)).await.map(ok)
}

async fn archived_tasks(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<ArchivedTasksParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.archived_tasks(&mesh, params)).await.map(ok)
}

async fn drop_archived(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<ArchiveMark>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.drop_archived(&mesh, body)).await.map(ok)
}

async fn add_webhook(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<WebhookBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let added = state.with_mesh(move |m| m.add_webhook(&mesh, body)).await?;
    state.webhooks_changed();
    Ok(created(added))
}

/// The mesh's subscriptions, as `{"webhooks": [...]}`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct WebhookList {
    webhooks: Vec<agentmesh_core::Webhook>,
}

async fn webhooks(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.webhooks(&mesh)).await.map(|webhooks| ok(WebhookList { webhooks }))
}

async fn webhook(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.webhook(&mesh, &id)).await.map(ok)
}

async fn remove_webhook(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let removed = state.with_mesh(move |m| m.remove_webhook(&mesh, &id)).await?;
    state.webhooks_changed();
    Ok(ok(removed))
}

async fn resume_webhook(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let command = agentmesh_store::WebhookCommand::Resume;
    let resumed = state.with_mesh(move |m| m.webhook_command(&mesh, &id, command)).await?;
    state.webhooks_changed();
    Ok(ok(resumed))
}

async fn skip_webhook(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let command = agentmesh_store::WebhookCommand::Skip;
    let skipped = state.with_mesh(move |m| m.webhook_command(&mesh, &id, command)).await?;
    state.webhooks_changed();
    Ok(ok(skipped))
}

async fn test_webhook(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.test_webhook(&mesh, &id)).await.map(ok)
}

async fn delivery(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.delivery(&mesh, &id)).await.map(ok)
}

async fn update_delivery(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
    ApiJson(body): ApiJson<DeliveryStatusBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.update_delivery(&mesh, &id, body)).await.map(ok)
}

async fn send_delivery(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<DeliveryBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.send_delivery(&mesh, body)).await.map(created)
}

async fn deliveries(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<DeliveryListParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.deliveries(&mesh, params)).await.map(ok)
}

async fn record_dispatch(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<DispatchBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.record_dispatch(&mesh, body)).await.map(created)
}

async fn dispatches(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.dispatches(&mesh)).await.map(ok)
}

async fn dispatch(
    State(state): State<AppState>,
    ApiPath(MeshIdPath { mesh, id }): ApiPath<MeshIdPath>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.dispatch(&mesh, &id)).await.map(ok)
}

async fn update_dispatches(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<DispatchStatusBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.update_dispatches(&mesh, body)).await.map(ok)
}

async fn mark_stale_dispatches(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<StaleDispatchesBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.mark_stale_dispatches(&mesh, body)).await.map(ok)
}

async fn remove_dispatches(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<RemoveDispatchesBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.remove_dispatches(&mesh, body)).await.map(ok)
}

async fn placement(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<PlacementBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.placement(&mesh, body)).await.map(ok)
}

/// The mesh's overview. Its parts are read one after another on one blocking
/// trip, each in its own transaction, so they may straddle a concurrent write.
async fn mesh_status(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.status(&mesh)).await.map(ok)
}

/// Records a call of an agent-facing tool; answers the rate guard's verdict.
async fn record_tool_call(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<ToolCallBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.record_tool_call(&mesh, body)).await.map(ok)
}

/// The rate guard's recent calls, per caller role.
async fn tool_calls(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<ToolCallParams>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.tool_calls(&mesh, params)).await.map(ok)
}

/// A coordinator reports that it is alive, or that it ended.
async fn coordinator_presence(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiJson(body): ApiJson<PresenceBody>,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    state.with_mesh(move |m| m.coordinator_presence(&mesh, body)).await.map(ok)
}
