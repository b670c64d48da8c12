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

use agentmesh_core::events::{CoordinatorIdentity, DrainCounters, Drainer};
use agentmesh_core::{
    Claimant, InvalidInput, LedgerEntry, LedgerQuery, NewTask, NotBefore, Task, TaskStatus,
};
use agentmesh_store::{
    ClaimOptions, ClaimOutcome, CompletionReport, DrainOutcome, DrainRequest, InboxEvent, Outcome, StoreError,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::{AppState, auth, now};

/// The failure reason of a failed completion that gives none.
const DEFAULT_FAILURE_REASON: &str = "worker reported failure";

/// The `/v1` routes, behind the bearer-token check.
pub fn routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/meshes/{mesh}/tasks", post(enqueue).get(list_tasks))
        .route("/meshes/{mesh}/tasks/{id}", get(show_task))
        .route("/meshes/{mesh}/claims", post(claim))
        .route("/meshes/{mesh}/completions", post(complete))
        .route("/meshes/{mesh}/ledger", get(ledger))
        .route("/meshes/{mesh}/events/drain", post(drain))
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

// ── Coordinator inbox ────────────────────────────────────────────────────────

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
