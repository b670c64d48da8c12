//! The `/v1` routes: request bodies, handlers and response views.
//!
//! Every route is scoped by the `{mesh}` path segment. A handler decodes its
//! input (bodies are camelCase with the original's field names; bodies where a
//! mistyped field would silently change the request deny unknown fields), makes
//! one store call through [`AppState::with_store`] and converts the result.
//! Tasks and ledger entries are sent in their stored JSON shape, the original's.
//!
//! The request and response types live here until the shared wire-types crate
//! exists.

use agentmesh_core::events::{CoordinatorIdentity, DrainCounters, Drainer, EmitHint, PendingEvent, Scope};
use agentmesh_core::{
    Claimant, IdleSession, InvalidInput, LedgerEntry, LedgerQuery, LedgerSlice, NewTask, NotBefore,
    RequeueOptions, Requeued, SliceQuery, Task, TaskStatus, Timestamp,
};
use agentmesh_store::{
    ActiveAssignment, ClaimOptions, ClaimOutcome, CompletionReport, DrainOutcome, DrainRequest,
    DuplicateReason, InboxEvent, Outcome, QueueOutcome, StoreError,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::{AppState, auth, now};

/// The failure reason of a failed completion that gives none.
const DEFAULT_FAILURE_REASON: &str = "worker reported failure";

/// How many of the newest ledger entries the mesh status shows.
const STATUS_LEDGER_TAIL: u32 = 10;

/// The `/v1` routes, behind the bearer-token check.
pub fn routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/meshes/{mesh}/tasks", post(enqueue).get(list_tasks))
        .route("/meshes/{mesh}/tasks/{id}", get(show_task))
        .route("/meshes/{mesh}/tasks/{id}/cancel", post(cancel_task))
        .route("/meshes/{mesh}/tasks/{id}/requeue", post(requeue_task))
        .route("/meshes/{mesh}/claims", post(claim))
        .route("/meshes/{mesh}/heartbeats", post(heartbeat))
        .route("/meshes/{mesh}/completions", post(complete))
        .route("/meshes/{mesh}/ledger", get(ledger))
        .route("/meshes/{mesh}/ledger/slice", get(ledger_slice))
        .route("/meshes/{mesh}/ledger/import", post(import_ledger))
        .route("/meshes/{mesh}/events", post(push_event))
        .route("/meshes/{mesh}/events/drain", post(drain))
        .route("/meshes/{mesh}/events/peek", post(peek))
        .route("/meshes/{mesh}/events/ack", post(ack_events))
        .route("/meshes/{mesh}/events/retract", post(retract_dispatch_blocked))
        .route("/meshes/{mesh}/status", get(mesh_status))
        .route_layer(middleware::from_fn_with_state(state, auth::require_token))
}

// ── Tasks ────────────────────────────────────────────────────────────────────

/// The coordinator that enqueues a task; its completion event is addressed to it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CoordinatorBody {
    /// The coordinator's daemon.
    daemon_id: Option<String>,
    /// The coordinator's run id.
    run_id: Option<String>,
    /// The coordinator's session.
    session_id: Option<String>,
}

/// `notBefore`: an ISO-8601 instant, or milliseconds (an offset from now below one
/// year, else epoch milliseconds).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum NotBeforeBody {
    /// Milliseconds.
    Millis(i64),
    /// An instant.
    Iso(String),
}

/// `POST /v1/meshes/{mesh}/tasks`. Strings go to the core as sent, so its
/// validation error names the field.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnqueueBody {
    /// The instruction for the worker.
    message: String,
    /// Task id (a fresh one when absent).
    id: Option<String>,
    /// Kind of work.
    task_mode: Option<String>,
    /// Read-only work may run beside other work on a busy node.
    readonly: Option<bool>,
    /// Pull priority: low, normal or high.
    priority: Option<String>,
    /// Tasks that must complete first.
    #[serde(default)]
    depends_on: Vec<String>,
    /// Capability tags the claiming node must offer.
    #[serde(default)]
    required_tags: Vec<String>,
    /// Only this node may claim the task.
    target_node_id: Option<String>,
    /// Only this session may claim the task.
    target_session_id: Option<String>,
    /// The mission the task belongs to.
    mission_id: Option<String>,
    /// Earliest claim time.
    not_before: Option<NotBeforeBody>,
    /// How often the task may be requeued before it fails.
    max_retries: Option<i64>,
    /// Consensus group.
    consensus_group_id: Option<String>,
    /// Model hint for the worker.
    model: Option<String>,
    /// Thinking-level hint for the worker.
    thinking_level: Option<String>,
    /// Difficulty hint.
    difficulty: Option<String>,
    /// Structured input for the worker.
    input: Option<Value>,
    /// The enqueuing coordinator.
    coordinator: Option<CoordinatorBody>,
}

impl From<EnqueueBody> for NewTask {
    fn from(body: EnqueueBody) -> NewTask {
        let coordinator =
            body.coordinator.unwrap_or(CoordinatorBody { daemon_id: None, run_id: None, session_id: None });
        NewTask {
            id: body.id,
            message: body.message,
            task_mode: body.task_mode,
            readonly: body.readonly,
            target_node_id: body.target_node_id,
            target_session_id: body.target_session_id,
            required_tags: body.required_tags,
            priority: body.priority,
            not_before: body.not_before.map(|nb| match nb {
                NotBeforeBody::Millis(ms) => NotBefore::Millis(ms),
                NotBeforeBody::Iso(text) => NotBefore::Iso(text),
            }),
            depends_on: body.depends_on,
            mission_id: body.mission_id,
            consensus_group_id: body.consensus_group_id,
            model: body.model,
            thinking_level: body.thinking_level,
            difficulty: body.difficulty,
            max_retries: body.max_retries,
            source_coordinator_session_id: coordinator.session_id,
            source_coordinator_daemon_id: coordinator.daemon_id,
            source_coordinator_run_id: coordinator.run_id,
            input: body.input,
        }
    }
}

/// Enqueues one task; 201 with the stored task.
async fn enqueue(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<EnqueueBody>,
) -> Result<(StatusCode, Json<Task>), ApiError> {
    let new = NewTask::from(body);
    let task = state.with_store(move |store| store.enqueue(&mesh, &new, now())).await?;
    Ok((StatusCode::CREATED, Json(task)))
}

/// Query of `GET /v1/meshes/{mesh}/tasks`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only these statuses, comma-separated (every status when absent).
    status: Option<String>,
}

/// The tasks of the mesh, oldest first.
async fn list_tasks(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Vec<Task>>, ApiError> {
    let mut statuses: Vec<TaskStatus> = Vec::new();
    for text in params.status.iter().flat_map(|s| s.split(',')).filter(|s| !s.trim().is_empty()) {
        let status: TaskStatus = text.parse()?;
        if !statuses.contains(&status) {
            statuses.push(status);
        }
    }
    let tasks = state.with_store(move |store| store.queue_entries(&mesh, &statuses)).await?;
    Ok(Json(tasks))
}

/// One task; 404 when the mesh has no task with this id.
async fn show_task(
    State(state): State<AppState>,
    ApiPath((mesh, id)): ApiPath<(String, String)>,
) -> Result<Json<Task>, ApiError> {
    let task = state
        .with_store(move |store| {
            store.find_task(&mesh, &id)?.ok_or(StoreError::TaskNotFound { mesh_id: mesh, task_id: id })
        })
        .await?;
    Ok(Json(task))
}

/// `POST /v1/meshes/{mesh}/tasks/{id}/cancel`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelBody {
    /// Why the task is withdrawn.
    reason: Option<String>,
}

/// Cancels a pending or assigned task; answers with the task as it is now.
async fn cancel_task(
    State(state): State<AppState>,
    ApiPath((mesh, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<CancelBody>,
) -> Result<Json<Task>, ApiError> {
    let reason = optional(body.reason);
    let task = state.with_store(move |store| store.cancel_task(&mesh, &id, reason.as_deref(), now())).await?;
    Ok(Json(task))
}

/// `POST /v1/meshes/{mesh}/tasks/{id}/requeue`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequeueBody {
    /// Why the task goes back.
    reason: Option<String>,
    /// Requeue even an assigned or completed task, and ignore the retry budget.
    #[serde(default)]
    force: bool,
    /// Overrides the task's retry budget.
    max_retries: Option<u32>,
    /// Keep the session pin (dropped by default).
    #[serde(default)]
    keep_session_pin: bool,
}

/// What a requeue answers: the task, and whether it is pending again or failed
/// because its retry budget was spent.
#[derive(Debug, Serialize)]
pub struct RequeueView {
    /// The task as it is now.
    task: Task,
    /// `pending` or `retries_exhausted`.
    outcome: &'static str,
}

impl From<Requeued> for RequeueView {
    fn from(requeued: Requeued) -> RequeueView {
        match requeued {
            Requeued::Pending(task) => RequeueView { task, outcome: "pending" },
            Requeued::RetriesExhausted(task) => RequeueView { task, outcome: "retries_exhausted" },
        }
    }
}

/// Puts a task back in the queue, or fails it when its retry budget is spent.
async fn requeue_task(
    State(state): State<AppState>,
    ApiPath((mesh, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<RequeueBody>,
) -> Result<Json<RequeueView>, ApiError> {
    let opts = RequeueOptions {
        reason: optional(body.reason),
        force: body.force,
        max_retries: body.max_retries,
        keep_session_pin: body.keep_session_pin,
    };
    let requeued = state.with_store(move |store| store.requeue_task(&mesh, &id, &opts, now())).await?;
    Ok(Json(RequeueView::from(requeued)))
}

// ── Claims and completions ───────────────────────────────────────────────────

/// `POST /v1/meshes/{mesh}/claims`: a worker session asks for its next task.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimBody {
    /// The node the session runs on.
    node_id: String,
    /// The session asking for work.
    session_id: String,
    /// Capability tags the node offers.
    #[serde(default)]
    capability_tags: Vec<String>,
    /// The session's provider type.
    provider_type: Option<String>,
    /// At most this many tasks at once for this provider on this node.
    provider_max_parallel: Option<u32>,
    /// The node is a worktree clone.
    #[serde(default)]
    node_is_worktree: bool,
    /// Lease length in milliseconds.
    lease_ms: Option<std::num::NonZeroU32>,
}

/// What a claim answers: the task, or `null` and why.
#[derive(Debug, Serialize)]
pub struct ClaimView {
    /// The claimed task, if any.
    task: Option<Task>,
    /// Why nothing was claimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'static str>,
}

/// Claims the next task. "Nothing to claim" is a 200 answer, not an error.
async fn claim(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<ClaimBody>,
) -> Result<Json<ClaimView>, ApiError> {
    let claimant = Claimant {
        node_id: required("nodeId", body.node_id)?,
        session_id: required("sessionId", body.session_id)?,
        capability_tags: body.capability_tags,
        provider_type: body.provider_type,
        provider_max_parallel: body.provider_max_parallel,
        node_is_worktree: body.node_is_worktree,
    };
    let opts = ClaimOptions { lease_ms: body.lease_ms.map(|ms| i64::from(ms.get())) };
    let outcome = state.with_store(move |store| store.claim_next(&mesh, &claimant, &opts, now())).await?;
    Ok(Json(match outcome {
        ClaimOutcome::Claimed(task) => ClaimView { task: Some(task), refusal: None },
        ClaimOutcome::Refused(reason) => ClaimView { task: None, refusal: Some(reason.as_str()) },
    }))
}

/// `POST /v1/meshes/{mesh}/heartbeats`: a worker extends the lease of its task.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeartbeatBody {
    /// The task.
    task_id: String,
    /// The session holding it.
    session_id: String,
    /// The epoch the claim returned; an older one is refused.
    epoch: u64,
    /// The new lease length from now, in milliseconds.
    lease_ms: std::num::NonZeroU32,
}

/// Extends the lease; answers with the task as it is now.
async fn heartbeat(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<HeartbeatBody>,
) -> Result<Json<Task>, ApiError> {
    let task_id = required("taskId", body.task_id)?;
    let session_id = required("sessionId", body.session_id)?;
    let lease_ms = i64::from(body.lease_ms.get());
    let task = state
        .with_store(move |store| store.heartbeat(&mesh, &task_id, &session_id, body.epoch, lease_ms, now()))
        .await?;
    Ok(Json(task))
}

/// `POST /v1/meshes/{mesh}/completions`: a worker reports that its task ended.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompletionBody {
    /// The reporting session.
    session_id: String,
    /// The task (the session's assigned task when absent).
    task_id: Option<String>,
    /// The epoch the claim returned; a report for an older epoch is refused.
    epoch: Option<u64>,
    /// The worker's account of what was done.
    summary: Option<String>,
    /// The task failed.
    #[serde(default)]
    failed: bool,
    /// Why it failed (only with `failed`).
    reason: Option<String>,
}

/// Records the completion or failure; answers with the task as it is now.
async fn complete(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<CompletionBody>,
) -> Result<Json<Task>, ApiError> {
    let outcome = match (body.failed, body.reason) {
        (true, reason) => Outcome::Failed {
            reason: reason.unwrap_or_else(|| DEFAULT_FAILURE_REASON.to_owned()),
            summary: body.summary,
        },
        (false, None) => Outcome::Completed { summary: body.summary },
        (false, Some(_)) => {
            return Err(InvalidInput::new("reason", "is allowed only with failed: true").into());
        }
    };
    let session_id = required("sessionId", body.session_id)?;
    let task_id = body.task_id.map(|id| id.trim().to_owned()).filter(|id| !id.is_empty());
    let task = state
        .with_store(move |store| {
            let now = now();
            let report = CompletionReport {
                session_id,
                task_id,
                epoch: body.epoch,
                occurred_at: Some(now.iso()),
                outcome,
            };
            store.complete_task(&mesh, &report, now)
        })
        .await?;
    Ok(Json(task))
}

// ── Ledger ───────────────────────────────────────────────────────────────────

/// Query of `GET /v1/meshes/{mesh}/ledger`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerParams {
    /// How many of the newest entries (200 when absent).
    tail: Option<u32>,
}

/// The newest entries, oldest first.
async fn ledger(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiQuery(params): ApiQuery<LedgerParams>,
) -> Result<Json<Vec<LedgerEntry>>, ApiError> {
    let query = LedgerQuery { tail: params.tail, ..LedgerQuery::default() };
    let entries = state.with_store(move |store| store.read_ledger_ordered(&mesh, &query)).await?;
    Ok(Json(entries))
}

/// Query of `GET /v1/meshes/{mesh}/ledger/slice`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SliceParams {
    /// Entries strictly after this one.
    after_id: Option<String>,
    /// Page size (100 when absent, at most 500).
    limit: Option<u32>,
    /// Only entries of this kind.
    kind: Option<String>,
    /// Only entries at or after this ISO-8601 instant.
    since: Option<String>,
}

impl TryFrom<SliceParams> for SliceQuery {
    type Error = InvalidInput;

    fn try_from(params: SliceParams) -> Result<SliceQuery, InvalidInput> {
        // Stored timestamps compare as text: normalise the instant to their form.
        let since = match params.since {
            Some(text) => Some(
                Timestamp::parse_iso(text.trim())
                    .ok_or_else(|| {
                        InvalidInput::new("since", format!("{text:?} is not an ISO-8601 instant"))
                    })?
                    .iso(),
            ),
            None => None,
        };
        Ok(SliceQuery {
            after_id: optional(params.after_id),
            since,
            kind: optional(params.kind),
            limit: params.limit,
        })
    }
}

/// One page of the ledger slice protocol (`adhdev.mesh.ledger.slice.v1`).
async fn ledger_slice(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiQuery(params): ApiQuery<SliceParams>,
) -> Result<Json<LedgerSlice>, ApiError> {
    let query = SliceQuery::try_from(params)?;
    let slice = state.with_store(move |store| store.ledger_slice(&mesh, &query)).await?;
    Ok(Json(slice))
}

/// `POST /v1/meshes/{mesh}/ledger/import`: entries from elsewhere, all of this mesh.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportBody {
    /// The entries, in the original's shape.
    entries: Vec<LedgerEntry>,
}

/// Imports the entries (all or none); answers how many were new.
async fn import_ledger(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<ImportBody>,
) -> Result<Json<Value>, ApiError> {
    if let Some((i, entry)) = body.entries.iter().enumerate().find(|(_, e)| e.mesh_id != mesh) {
        return Err(InvalidInput::new(
            format!("entries[{i}].meshId"),
            format!("the entry belongs to mesh {:?}, not {mesh:?}", entry.mesh_id),
        )
        .into());
    }
    let imported = state.with_store(move |store| store.import_ledger(&body.entries)).await?;
    Ok(Json(serde_json::json!({ "imported": imported })))
}

// ── Coordinator inbox ────────────────────────────────────────────────────────

/// The emit hint of a pushed event: what the pusher knows better than the event.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmitHintBody {
    /// The real coordinator run id, folded into the derived identity.
    coordinator_run_id: Option<String>,
    /// Overrides the scope defaulted from the event name.
    scope: Option<Scope>,
}

/// `POST /v1/meshes/{mesh}/events`: queue an event for a coordinator.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PushEventBody {
    /// The event in the original's JSON shape; `meshId` defaults to the path's mesh.
    event: Map<String, Value>,
    /// The emit hint (empty when absent).
    #[serde(default)]
    hint: EmitHintBody,
    /// This daemon's machine id, for the self-dispatched fallback stamp.
    self_machine_id: Option<String>,
}

/// What a push answers: the stored event, or why it was a duplicate. (Not boxed:
/// built once per request and serialized at once, as the store's `QueueOutcome`.)
#[derive(Debug, Serialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)]
pub enum PushView {
    /// Stored.
    Queued {
        /// The row id.
        id: String,
        /// The event as stored (stamped).
        event: PendingEvent,
    },
    /// Refused as a duplicate; nothing was stored.
    Duplicate {
        /// `fingerprint` or `refine_terminal`.
        duplicate: &'static str,
    },
}

/// Queues the event: 201 with its row id and stamped form, or 200 when it is a
/// duplicate. An event of another mesh is refused.
async fn push_event(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<PushEventBody>,
) -> Result<(StatusCode, Json<PushView>), ApiError> {
    let mut raw = body.event;
    raw.entry("meshId").or_insert_with(|| Value::from(mesh.as_str()));
    let event = PendingEvent::from_map(raw).map_err(|mut err| {
        err.field = format!("event.{}", err.field);
        err
    })?;
    let hint = EmitHint {
        coordinator_run_id: optional(body.hint.coordinator_run_id),
        scope: body.hint.scope,
        ..EmitHint::default()
    };
    let machine_id = optional(body.self_machine_id);
    let outcome = state
        .with_store(move |store| {
            store.queue_pending_event(&mesh, &event, &hint, machine_id.as_deref(), now())
        })
        .await?;
    Ok(match outcome {
        QueueOutcome::Queued { id, event } => (StatusCode::CREATED, Json(PushView::Queued { id, event })),
        QueueOutcome::Duplicate(reason) => {
            let duplicate = match reason {
                DuplicateReason::Fingerprint => "fingerprint",
                DuplicateReason::RefineTerminal => "refine_terminal",
            };
            (StatusCode::OK, Json(PushView::Duplicate { duplicate }))
        }
    })
}

/// `POST /v1/meshes/{mesh}/events/drain`: a coordinator takes its events.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainBody {
    /// The draining coordinator's daemon (any of its id forms).
    daemon_id: String,
    /// The draining coordinator's run id.
    run_id: String,
    /// The draining coordinator's session.
    session_id: Option<String>,
    /// Other ids this daemon answers to.
    #[serde(default)]
    also_known_as: Vec<String>,
    /// Only events with these names; the others stay queued.
    only_events: Option<Vec<String>>,
    /// At most this many events (100 when absent).
    limit: Option<u32>,
    /// Hold back unversioned and invalid v2 events instead of delivering them.
    #[serde(default)]
    enforce: bool,
}

impl TryFrom<DrainBody> for DrainRequest {
    type Error = InvalidInput;

    fn try_from(body: DrainBody) -> Result<DrainRequest, InvalidInput> {
        let session_id = body.session_id.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        let identity = CoordinatorIdentity::new(
            required("daemonId", body.daemon_id)?,
            required("runId", body.run_id)?,
            session_id,
        );
        let also_known_as: Vec<&str> =
            body.also_known_as.iter().map(|id| id.trim()).filter(|id| !id.is_empty()).collect();
        Ok(DrainRequest {
            drainer: Drainer::new(identity, &also_known_as),
            only_events: body.only_events,
            enforce: body.enforce,
            limit: body.limit,
        })
    }
}

/// One delivered event.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxEventView {
    /// The row id.
    id: String,
    /// The event name.
    event: Value,
    /// When it was queued (epoch milliseconds).
    queued_at: i64,
    /// Its content fingerprint, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    fingerprint: Option<String>,
    /// The event as stored.
    payload: Value,
}

impl From<InboxEvent> for InboxEventView {
    fn from(e: InboxEvent) -> InboxEventView {
        InboxEventView {
            id: e.id,
            event: e.event.get("event").cloned().unwrap_or(Value::Null),
            queued_at: e.queued_at_ms,
            fingerprint: e.fingerprint,
            payload: e.event,
        }
    }
}

/// What a drain answers: delivered events, counters, quarantined row ids.
#[derive(Debug, Serialize)]
pub struct DrainView {
    /// Events delivered, oldest first.
    events: Vec<InboxEventView>,
    /// The drain's counters.
    counters: DrainCounters,
    /// Row ids held back by this drain.
    quarantined: Vec<String>,
}

impl From<DrainOutcome> for DrainView {
    fn from(d: DrainOutcome) -> DrainView {
        DrainView {
            events: d.events.into_iter().map(InboxEventView::from).collect(),
            counters: d.counters,
            quarantined: d.quarantined,
        }
    }
}

/// Drains the coordinator's events and marks them drained, in one transaction.
async fn drain(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<DrainBody>,
) -> Result<Json<DrainView>, ApiError> {
    let request = DrainRequest::try_from(body)?;
    let outcome = state.with_store(move |store| store.drain_pending_events(&mesh, &request, now())).await?;
    Ok(Json(DrainView::from(outcome)))
}

/// What a peek answers: the events a drain would deliver now.
#[derive(Debug, Serialize)]
pub struct PeekView {
    /// The events, oldest first; none is marked drained.
    events: Vec<InboxEventView>,
}

/// The events a drain would deliver now, marking nothing.
async fn peek(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<DrainBody>,
) -> Result<Json<PeekView>, ApiError> {
    let request = DrainRequest::try_from(body)?;
    let events = state.with_store(move |store| store.peek_pending_events(&mesh, &request)).await?;
    Ok(Json(PeekView { events: events.into_iter().map(InboxEventView::from).collect() }))
}

/// `POST /v1/meshes/{mesh}/events/ack`: events delivered elsewhere, by row id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckBody {
    /// Row ids, as a drain or peek handed them out.
    ids: Vec<String>,
}

/// Marks the events drained; answers how many changed.
async fn ack_events(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<AckBody>,
) -> Result<Json<Value>, ApiError> {
    let ids = body
        .ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| required(&format!("ids[{i}]"), id))
        .collect::<Result<Vec<String>, InvalidInput>>()?;
    let acked = state.with_store(move |store| store.ack_pending_events(&mesh, &ids, now())).await?;
    Ok(Json(serde_json::json!({ "acked": acked })))
}

/// `POST /v1/meshes/{mesh}/events/retract`: a task's dispatch is no longer blocked.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetractBody {
    /// The task whose undelivered `mesh:dispatch_blocked` events go.
    task_id: String,
}

/// Deletes the task's undelivered `mesh:dispatch_blocked` events; answers how many.
async fn retract_dispatch_blocked(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiJson(body): ApiJson<RetractBody>,
) -> Result<Json<Value>, ApiError> {
    let task_id = required("taskId", body.task_id)?;
    let retracted = state.with_store(move |store| store.retract_dispatch_blocked(&mesh, &task_id)).await?;
    Ok(Json(serde_json::json!({ "retracted": retracted })))
}

// ── Mesh status ──────────────────────────────────────────────────────────────

/// An assigned task, as the status shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveAssignmentView {
    /// Task id.
    id: String,
    /// Assigned node.
    node_id: Option<String>,
    /// Assigned session.
    session_id: Option<String>,
    /// Assigned provider type.
    provider_type: Option<String>,
    /// The instruction text.
    message: String,
    /// When it was claimed (ISO).
    dispatch_timestamp: Option<String>,
    /// When its lease runs out (ISO).
    lease_expires_at: Option<String>,
    /// Its fencing epoch (the task's `dispatchNonce`).
    epoch: u64,
}

impl From<ActiveAssignment> for ActiveAssignmentView {
    fn from(a: ActiveAssignment) -> ActiveAssignmentView {
        ActiveAssignmentView {
            id: a.id,
            node_id: a.node_id,
            session_id: a.session_id,
            provider_type: a.provider_type,
            message: a.message,
            dispatch_timestamp: a.dispatch_timestamp,
            lease_expires_at: a.lease_expires_at,
            epoch: a.epoch,
        }
    }
}

/// An idle worker session, as the status shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleSessionView {
    /// The node the session runs on.
    node_id: String,
    /// The session.
    session_id: String,
    /// Its provider type.
    provider_type: String,
    /// When its idle report runs out (ISO).
    expires_at: String,
    /// Anything else the session reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Value>,
}

impl From<IdleSession> for IdleSessionView {
    fn from(s: IdleSession) -> IdleSessionView {
        IdleSessionView {
            node_id: s.node_id,
            session_id: s.session_id,
            provider_type: s.provider_type,
            expires_at: Timestamp::from_millis(s.expires_at_ms).iso(),
            metadata: s.metadata,
        }
    }
}

/// `GET /v1/meshes/{mesh}/status`: an overview of the mesh.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// The mesh.
    mesh_id: String,
    /// Task count of every status, in lifecycle order (zero included).
    tasks: Map<String, Value>,
    /// Assigned tasks, oldest dispatch first.
    active_assignments: Vec<ActiveAssignmentView>,
    /// Undrained coordinator events.
    pending_events: u64,
    /// Idle sessions whose report has not expired.
    idle_sessions: Vec<IdleSessionView>,
    /// The newest ledger entries, oldest first.
    recent_ledger: Vec<LedgerEntry>,
}

/// Query of `GET /v1/meshes/{mesh}/status`: none. Declared so that a parameter is
/// refused rather than silently ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {}

/// The mesh's overview. Its parts are read one after another on one blocking
/// trip, each in its own transaction, so they may straddle a concurrent write.
async fn mesh_status(
    State(state): State<AppState>,
    ApiPath(mesh): ApiPath<String>,
    ApiQuery(StatusParams {}): ApiQuery<StatusParams>,
) -> Result<Json<StatusView>, ApiError> {
    let view = state
        .with_store(move |store| {
            let now = now();
            let counts = store.stats_by_status(&mesh)?;
            let tasks = TaskStatus::ALL
                .into_iter()
                .map(|status| {
                    let count = counts.iter().find(|c| c.status == status).map_or(0, |c| c.count);
                    (status.as_str().to_owned(), Value::from(count))
                })
                .collect();
            let recent = LedgerQuery { tail: Some(STATUS_LEDGER_TAIL), ..LedgerQuery::default() };
            Ok(StatusView {
                tasks,
                active_assignments: store
                    .active_assignments(&mesh)?
                    .into_iter()
                    .map(ActiveAssignmentView::from)
                    .collect(),
                pending_events: store.pending_event_count(&mesh)?,
                idle_sessions: store
                    .idle_sessions(&mesh, now)?
                    .into_iter()
                    .map(IdleSessionView::from)
                    .collect(),
                recent_ledger: store.read_ledger_ordered(&mesh, &recent)?,
                mesh_id: mesh,
            })
        })
        .await?;
    Ok(Json(view))
}

/// Refuses a blank value for `field`, returning it trimmed.
fn required(field: &str, value: String) -> Result<String, InvalidInput> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        Err(InvalidInput::new(field, "must not be blank"))
    } else if trimmed.len() == value.len() {
        Ok(value)
    } else {
        Ok(trimmed.to_owned())
    }
}

/// An optional text with surrounding whitespace removed; blank counts as absent.
fn optional(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}
