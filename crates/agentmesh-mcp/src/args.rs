//! Tool arguments, as the agent sends them, and the tool error it gets back.
//!
//! Each tool takes its own argument struct: the field docs are what the agent
//! reads in the tool's input schema, so they say what a field means and when to
//! set it, in the agent's terms. The structs convert into the shared wire bodies
//! of `agentmesh_api::wire`; identity fields (the coordinator of a task, the
//! drainer of events) are filled from the server's identity and never asked for.
//!
//! Arguments are parsed with `serde_path_to_error`, so a wrong one is reported by
//! its path (`tasks[1].dependsOn`), as a tool error the agent can correct, never
//! as a protocol error that would look like a broken server. Ids follow the core's
//! one id rule, checked where the wire bodies are converted (or, for an id that
//! becomes a path segment, under the argument's own name), so an id the CLI or the
//! HTTP API refuses is refused here too, naming the argument.

use agentmesh_api::MeshError;
use agentmesh_api::wire::NodeBody;
use agentmesh_store::StoreError;
use rmcp::ErrorData;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, JsonObject};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A failure the agent sees as a tool result with `isError: true`, whose one text
/// block is this value as JSON.
///
/// It is never put in `structuredContent`: clients validate structured content
/// against a tool's output schema even on errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolError {
    /// Stable machine-readable code: `invalid_argument`, `task_not_found`, ...
    pub code: String,
    /// What went wrong, in words.
    pub message: String,
    /// The argument at fault, by its path, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ToolError {
    /// An argument the agent must correct.
    pub fn invalid_argument(field: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError { code: "invalid_argument".into(), message: message.into(), field: Some(field.into()) }
    }

    /// A failure of the server itself (a panicked or lost operation).
    pub fn internal(message: impl Into<String>) -> ToolError {
        ToolError { code: "internal".into(), message: message.into(), field: None }
    }

    /// The tool result carrying this error.
    pub fn to_result(&self) -> CallToolResult {
        let text = serde_json::to_string(self).unwrap_or_else(|_| self.message.clone());
        CallToolResult::error(vec![ContentBlock::text(text)])
    }
}

impl From<MeshError> for ToolError {
    fn from(err: MeshError) -> ToolError {
        let field = match &err {
            MeshError::Store(StoreError::InvalidInput(input)) => Some(input.field.clone()),
            _ => None,
        };
        let message = if err.is_transient() {
            // A fault of the environment, not of the call: the agent should
            // call again rather than change its arguments or give up.
            format!("{err} (a fault of the environment, not of this call): call the tool again in a moment")
        } else {
            err.to_string()
        };
        ToolError { code: err.code().to_owned(), message, field }
    }
}

impl From<agentmesh_core::InvalidInput> for ToolError {
    fn from(err: agentmesh_core::InvalidInput) -> ToolError {
        ToolError { code: "invalid_input".into(), message: err.to_string(), field: Some(err.field) }
    }
}

/// An id argument, checked by the core's id rule under the argument's own name
/// (`taskId`, `missionId`) before it travels on as a path id.
pub(crate) fn id_argument(field: &str, value: String) -> Result<String, ToolError> {
    Ok(agentmesh_core::ids::validate_owned_id(field, value)?)
}

impl IntoCallToolResult for ToolError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        Ok(self.to_result().into())
    }
}

/// Deserializes tool arguments; a failure names the argument's path.
pub(crate) fn parse<T: DeserializeOwned>(arguments: JsonObject) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(Value::Object(arguments)).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        if path == "." {
            // At the root serde names the field itself: "missing field `message`".
            let field = backticked(&inner).unwrap_or_default();
            ToolError {
                code: "invalid_argument".into(),
                message: format!("invalid arguments: {inner}"),
                field: Some(field).filter(|f| !f.is_empty()),
            }
        } else {
            ToolError::invalid_argument(path.clone(), format!("invalid argument `{path}`: {inner}"))
        }
    })
}

/// The first name in backticks in a serde message.
fn backticked(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

/// A tool that takes no arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArgs {}

/// One task to enqueue.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TaskSpec {
    /// The instruction for the worker, written so a coding agent with no other
    /// context can do the work: what to change, where, and what "done" means.
    pub message: String,
    /// Your own id for the task. Leave it out to get a fresh one.
    #[serde(default)]
    pub id: Option<String>,
    /// Only in `enqueue_tasks`: a short name for this task within the batch (e.g.
    /// `parser`), so another task of the batch can say `"dependsOn": ["parser"]`.
    #[serde(default, rename = "ref")]
    #[schemars(example = &"parser")]
    pub reference: Option<String>,
    /// Pull priority: `low`, `normal` (default) or `high`. Higher is claimed first.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::priority")]
    pub priority: Option<String>,
    /// Ids of tasks that must complete before this one may be claimed. In
    /// `enqueue_tasks` you may also name the `ref` of another task of the same batch.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Capability tags the claiming node must offer (e.g. `gpu`, `macos`).
    #[serde(default)]
    #[schemars(example = &["gpu", "macos"])]
    pub required_tags: Vec<String>,
    /// Only this node may claim the task.
    #[serde(default)]
    pub target_node_id: Option<String>,
    /// Only this worker session may claim the task.
    #[serde(default)]
    pub target_session_id: Option<String>,
    /// The mission the task belongs to (see `upsert_mission`); its progress counts it.
    #[serde(default)]
    pub mission_id: Option<String>,
    /// Kind of work, when it matters for where the task may run: `code_change`
    /// (edits code; a node runs one such task at a time), `validation` (runs
    /// checks), `live_debug_readonly` (reads and diagnoses only, so it counts as
    /// read-only), `launch_app` (starts an application) or `convergence` (lands
    /// work onto the base checkout; never claimed by a worktree node). Leave it out
    /// for anything else.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::task_mode")]
    pub task_mode: Option<String>,
    /// True when the work only reads (review, research); such tasks may run beside
    /// other work on a busy node.
    #[serde(default)]
    pub readonly: Option<bool>,
    /// How often the task may be requeued before it fails (the mesh default when absent).
    #[serde(default)]
    pub max_retries: Option<i64>,
    /// How hard the work is: `easy`, `medium`, `difficult` or `freeform` (no
    /// particular difficulty), so it can go to a worker that suits it.
    #[serde(default)]
    pub difficulty: Option<String>,
    /// The paths the task will touch, relative to `pathsScope` (`src/parser`
    /// is that directory and everything in it): the worker's claim reserves
    /// them, and no other worker is handed a task over the same files while it
    /// holds this one.
    #[serde(default)]
    #[schemars(example = &["src/parser"])]
    pub paths: Vec<String>,
    /// The repository of `paths`: its root's absolute path, as reserve_paths
    /// takes it. Required with paths.
    #[serde(default)]
    pub paths_scope: Option<String>,
    /// Structured input handed to the worker with the message.
    #[serde(default)]
    pub input: Option<Value>,
}

impl TaskSpec {
    pub(crate) fn into_body(self) -> agentmesh_api::wire::EnqueueBody {
        agentmesh_api::wire::EnqueueBody {
            message: self.message,
            id: self.id,
            reference: self.reference,
            priority: self.priority,
            depends_on: self.depends_on,
            required_tags: self.required_tags,
            target_node_id: self.target_node_id,
            target_session_id: self.target_session_id,
            mission_id: self.mission_id,
            task_mode: self.task_mode,
            readonly: self.readonly,
            max_retries: self.max_retries,
            input: self.input,
            difficulty: self.difficulty,
            paths: self.paths,
            paths_scope: self.paths_scope,
            ..Default::default()
        }
    }
}

/// Arguments of `enqueue_tasks`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct EnqueueTasksArgs {
    /// The tasks, in order. All are enqueued or none.
    pub tasks: Vec<TaskSpec>,
}

/// Arguments of `list_tasks`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ListTasksArgs {
    /// Only tasks in these statuses, comma-separated: `pending`, `assigned`,
    /// `completed`, `failed`, `cancelled`. Every task when absent.
    #[serde(default)]
    #[schemars(
        example = &"pending",
        example = &"assigned",
        example = &"completed",
        example = &"failed",
        example = &"cancelled",
        example = &"pending,assigned"
    )]
    pub status: Option<String>,
}

/// A tool that names one task.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TaskIdArgs {
    /// The task's id, as `enqueue_task` or `list_tasks` returned it.
    pub task_id: String,
}

/// Arguments of `record_dispatched_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RecordDispatchedArgs {
    /// The task's id, chosen by you.
    pub task_id: String,
    /// The instruction text you sent.
    pub message: String,
    /// The node you sent it to.
    pub node_id: String,
    /// The worker session you sent it to.
    pub session_id: String,
    /// That session's provider type.
    #[serde(default)]
    pub provider_type: Option<String>,
    /// The mission the task belongs to.
    #[serde(default)]
    pub mission_id: Option<String>,
}

/// Arguments of `hold_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HoldArgs {
    /// The task to hold, as `enqueue_task` or `list_tasks` returned it.
    pub task_id: String,
    /// Why it is held.
    #[schemars(example = &"acked", example = &"idle_after_ack")]
    pub hold_reason: String,
    /// When the worker's session was first seen idle since it acknowledged the
    /// task (ISO-8601). Leave it out while it has not been.
    #[serde(default)]
    #[schemars(example = &"2025-01-01T00:00:00Z")]
    pub first_idle_since_ack: Option<String>,
    /// How many reads of the worker's session failed so far (0 when absent).
    #[serde(default)]
    pub read_failure_count: Option<u32>,
}

/// Arguments of `list_holds`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ListHoldsArgs {
    /// Only the hold of this task (an error when it is not held).
    #[serde(default)]
    pub task_id: Option<String>,
}

/// Arguments of `cancel_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CancelTaskArgs {
    /// The task to withdraw (pending or assigned).
    pub task_id: String,
    /// Why, for the ledger.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Arguments of `set_task_priority`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SetPriorityArgs {
    /// The task to reorder (pending or assigned).
    pub task_id: String,
    /// The new pull priority: `low`, `normal` or `high`. Higher is claimed first.
    #[schemars(schema_with = "crate::schema::required_priority")]
    pub priority: String,
    /// Why, for the ledger.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Arguments of `requeue_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RequeueTaskArgs {
    /// The task to put back in the queue.
    pub task_id: String,
    /// Why, for the ledger.
    #[serde(default)]
    pub reason: Option<String>,
    /// Requeue even an assigned or finished task and ignore its retry budget.
    #[serde(default)]
    pub force: bool,
}

/// Arguments of `get_pending_mesh_events`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DrainArgs {
    /// Budget on the characters of event text returned. The oldest events that
    /// fit are returned (always at least one); the rest stay queued for the next
    /// call. Leave it out to take everything (up to `limit`).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_chars: Option<u64>,
    /// At most this many events (100 when absent).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
}

/// Arguments of `wait_for_mesh_events`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WaitArgs {
    /// How long to wait for an event, in seconds (25 when absent, at most 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 50))]
    pub seconds: Option<u64>,
}

/// Arguments of `ledger_tail`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LedgerArgs {
    /// How many of the newest entries (20 when absent).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub tail: Option<u32>,
    /// Only entries of these kinds, comma-separated (e.g. `task_completed,task_failed`).
    #[serde(default)]
    #[schemars(example = &"task_completed,task_failed", example = &"task_claimed")]
    pub kind: Option<String>,
    /// Only entries at or after this ISO-8601 instant.
    #[serde(default)]
    #[schemars(example = &"2025-01-31T09:30:00.000Z")]
    pub since: Option<String>,
    /// Only entries about this task: its history, archived or not.
    #[serde(default)]
    #[schemars(example = &"auth-login")]
    pub task_id: Option<String>,
}

/// Arguments of `upsert_mission`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct MissionArgs {
    /// The mission's id, chosen by you (e.g. `auth-rewrite`). An existing id updates it.
    #[schemars(example = &"auth-rewrite")]
    pub mission_id: String,
    /// A short title.
    pub title: String,
    /// What done looks like (kept on update when absent).
    #[serde(default)]
    pub goal: Option<String>,
    /// `active` (default for a new mission), `paused`, `completed` or `abandoned`;
    /// kept on update when absent.
    #[serde(default)]
    #[schemars(example = &"active", example = &"paused", example = &"completed", example = &"abandoned")]
    pub status: Option<String>,
    /// Where the mission came from; written once, a mission that has one keeps it.
    #[serde(default)]
    #[schemars(example = &"coordinator")]
    pub source: Option<String>,
}

/// Arguments of `list_missions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ListMissionsArgs {
    /// Only missions in these statuses, comma-separated (e.g. `active,paused`).
    /// Every mission when absent.
    #[serde(default)]
    #[schemars(example = &"active", example = &"active,paused")]
    pub status: Option<String>,
}

/// Arguments of `show_mission`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct MissionIdArgs {
    /// The mission's id.
    pub mission_id: String,
}

/// Arguments of `suggest_node`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SuggestNodeArgs {
    /// The task to place.
    pub task_id: String,
    /// The nodes to choose from, in your order of preference.
    pub nodes: Vec<NodeBody>,
    /// `first_eligible` (default), `least_loaded`, `round_robin` or `priority_only`.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::strategy")]
    pub strategy: Option<String>,
}

/// How `send_to_session` hands a message over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SendMode {
    /// Queue it; the session reads it with `read_deliveries`.
    #[default]
    Queue,
    /// Dispatch task `taskId` to the session directly (recorded as a direct
    /// dispatch) and queue the message for it as a delivery of kind `task`.
    Dispatch,
}

/// Arguments of `send_to_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SendArgs {
    /// The worker session to reach.
    pub session_id: String,
    /// The text to hand over.
    pub message: String,
    /// The node the session runs on, when you know it.
    #[serde(default)]
    pub node_id: Option<String>,
    /// The task the message concerns (required with `mode: "dispatch"`).
    #[serde(default)]
    pub task_id: Option<String>,
    /// `queue` (default) or `dispatch`.
    #[serde(default)]
    pub mode: SendMode,
    /// Higher goes first among the session's deliveries (0 when absent).
    #[serde(default)]
    pub priority: Option<i64>,
}

/// Arguments of `claim_task`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ClaimArgs {
    /// The worker session to act as. Leave it out to act as this server's own
    /// session (`--session`, else one made for this server; `mesh_status` shows it
    /// as `you.sessionId`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The node you run on (this machine's daemon id when absent).
    #[serde(default)]
    pub node_id: Option<String>,
    /// Capability tags you offer; tasks requiring other tags are not handed to you.
    #[serde(default)]
    pub capability_tags: Vec<String>,
    /// Your provider type, e.g. `claude-code`.
    #[serde(default)]
    #[schemars(example = &"claude-code")]
    pub provider_type: Option<String>,
    /// Lease length in milliseconds (the mesh default when absent). Send
    /// `heartbeat_task` before it runs out, or the task goes back to the queue.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub lease_ms: Option<u32>,
    /// How your transcript is read, stamped on the task you claim.
    #[serde(default)]
    pub assigned_transcript_profile: Option<TranscriptProfileArgs>,
    /// Take only tasks of these difficulties (`easy`, `medium`, `difficult`,
    /// `freeform`); tasks without a difficulty are taken too. Any when absent.
    #[serde(default)]
    pub allowed_task_difficulties: Option<Vec<String>>,
}

/// How a worker's transcript is read (`assignedTranscriptProfile`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TranscriptProfileArgs {
    /// The transcript's class.
    pub class: String,
    /// When the transcript is written.
    pub timing: String,
    /// Whether the session emits PTY turn events.
    #[serde(default)]
    pub emits_pty_turn_events: bool,
}

impl From<TranscriptProfileArgs> for agentmesh_core::TranscriptProfile {
    fn from(args: TranscriptProfileArgs) -> Self {
        agentmesh_core::TranscriptProfile {
            class: args.class,
            timing: args.timing,
            emits_pty_turn_events: args.emits_pty_turn_events,
        }
    }
}

/// Arguments of `heartbeat_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HeartbeatArgs {
    /// The task you hold.
    pub task_id: String,
    /// The `epoch` that `claim_task` returned with the task.
    pub epoch: u64,
    /// New lease length from now, in milliseconds (300000 = 5 minutes when absent).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub lease_ms: Option<u32>,
    /// The worker session to act as. Leave it out to act as this server's own
    /// session (`--session`, else one made for this server; `mesh_status` shows it
    /// as `you.sessionId`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// How far along you are, 0 to 100, when you can tell. Shown on the task and
    /// to the coordinator.
    #[serde(default)]
    #[schemars(range(max = 100))]
    pub percent: Option<u32>,
    /// What you are doing now, in one short line ("running the tests").
    #[serde(default)]
    #[schemars(length(max = 200), example = &"running the tests")]
    pub note: Option<String>,
}

/// Arguments of `complete_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CompleteArgs {
    /// What you did and what the coordinator should know: files changed, tests
    /// run, open questions. The coordinator reads this text.
    pub summary: String,
    /// The task (your assigned task when absent).
    #[serde(default)]
    pub task_id: Option<String>,
    /// The `epoch` that `claim_task` returned; a report for an older claim is refused.
    #[serde(default)]
    pub epoch: Option<u64>,
    /// The worker session to act as. Leave it out to act as this server's own
    /// session (`--session`, else one made for this server; `mesh_status` shows it
    /// as `you.sessionId`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// When the work ended by your clock, ISO 8601 (such as
    /// `2026-01-01T12:00:00.000Z`). Leave it out to use the daemon's time.
    #[serde(default)]
    pub occurred_at: Option<String>,
}

/// Arguments of `fail_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FailArgs {
    /// Why the task could not be done, so the coordinator can decide what next.
    pub reason: String,
    /// What you did before giving up, if anything.
    #[serde(default)]
    pub summary: Option<String>,
    /// The task (your assigned task when absent).
    #[serde(default)]
    pub task_id: Option<String>,
    /// The `epoch` that `claim_task` returned.
    #[serde(default)]
    pub epoch: Option<u64>,
    /// The worker session to act as. Leave it out to act as this server's own
    /// session (`--session`, else one made for this server; `mesh_status` shows it
    /// as `you.sessionId`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// When the work ended by your clock, ISO 8601 (such as
    /// `2026-01-01T12:00:00.000Z`). Leave it out to use the daemon's time.
    #[serde(default)]
    pub occurred_at: Option<String>,
}

/// A worker tool that needs only the session.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SessionArgs {
    /// The worker session to act as. Leave it out to act as this server's own
    /// session (`--session`, else one made for this server; `mesh_status` shows it
    /// as `you.sessionId`).
    #[serde(default)]
    pub session_id: Option<String>,
}

/// Arguments of `report_idle`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct IdleArgs {
    /// The worker session to act as. Leave it out to act as this server's own
    /// session (`--session`, else one made for this server; `mesh_status` shows it
    /// as `you.sessionId`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The node you run on (this machine's daemon id when absent).
    #[serde(default)]
    pub node_id: Option<String>,
    /// Your provider type (`claude-code` when absent).
    #[serde(default)]
    #[schemars(example = &"claude-code")]
    pub provider_type: Option<String>,
    /// How long the report holds, in seconds (300 when absent).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub ttl_secs: Option<u32>,
}

/// Arguments of `list_held_events`, and the filters of `requeue_held_events`.
/// Every filter given must match.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HeldArgs {
    /// Only events held for this reason: `pending_retention_expired` (never drained,
    /// moved out of the inbox after 30 days), `v2_enforce_unversioned_quarantined`
    /// or `v2_enforce_validation_failed_quarantined` (held back by an enforce-mode
    /// drain), or `pending_trim_dropped`.
    #[serde(default)]
    #[schemars(
        example = &"pending_retention_expired",
        example = &"v2_enforce_unversioned_quarantined",
        example = &"v2_enforce_validation_failed_quarantined",
        example = &"pending_trim_dropped"
    )]
    pub reason: Option<String>,
    /// Only events about this node.
    #[serde(default)]
    pub node_id: Option<String>,
    /// Only events about this task.
    #[serde(default)]
    pub task_id: Option<String>,
    /// Only events of this name, such as `agent:stopped`.
    #[serde(default)]
    #[schemars(example = &"agent:generating_completed", example = &"agent:stopped")]
    pub event: Option<String>,
    /// Only events held at least this many seconds ago.
    #[serde(default)]
    pub older_than_secs: Option<u64>,
}

/// Arguments of `requeue_held_events`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RequeueHeldArgs {
    /// The held events to put back, by the held entry id list_held_events shows
    /// (instead of filters).
    #[serde(default)]
    pub ids: Vec<String>,
    /// With no ids: only events held for this reason (as in list_held_events).
    #[serde(default)]
    pub reason: Option<String>,
    /// With no ids: only events about this node.
    #[serde(default)]
    pub node_id: Option<String>,
    /// With no ids: only events about this task.
    #[serde(default)]
    pub task_id: Option<String>,
    /// With no ids: only events of this name.
    #[serde(default)]
    pub event: Option<String>,
    /// With no ids: only events held at least this many seconds ago.
    #[serde(default)]
    pub older_than_secs: Option<u64>,
    /// Put back every held event of the mesh (only when no id and no filter is given).
    #[serde(default)]
    pub all: bool,
}

/// Arguments of `update_delivery`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DeliveryStatusArgs {
    /// The delivery's `id`, as read_deliveries shows it.
    pub delivery_id: String,
    /// `delivered` (you received it), `acked` (you read it and act on it),
    /// `completed` (you did what it asked) or `failed` (you cannot act on it).
    pub status: String,
    /// Why it failed, with `failed`.
    #[serde(default)]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> JsonObject {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn errors_name_the_argument() {
        let err =
            parse::<EnqueueTasksArgs>(obj(serde_json::json!({"tasks": [{"message": "a"}, {"message": 5}]})))
                .unwrap_err();
        assert_eq!(err.code, "invalid_argument");
        assert_eq!(err.field.as_deref(), Some("tasks[1].message"));
        let err = parse::<TaskIdArgs>(obj(serde_json::json!({}))).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("taskId"));
        let err = parse::<WaitArgs>(obj(serde_json::json!({"secs": 3}))).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("secs"));
    }
}

/// Arguments of `reserve_paths`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ReservePathsArgs {
    /// The repository: its root's absolute path (what `git rev-parse
    /// --show-toplevel` prints, as the CLI and the commit guard use), or the id
    /// your team names it by.
    #[schemars(example = &"/home/me/src/app")]
    pub scope: String,
    /// Path patterns relative to the repository root, anchored there:
    /// `src/parser` is that directory and everything under it, `src/*.rs` the
    /// Rust files directly in src, `**/*.rs` every Rust file.
    #[schemars(example = &["src/parser", "tests/**/*.rs"])]
    pub patterns: Vec<String>,
    /// Exclusive (true, the default: nobody else may reserve an overlapping
    /// pattern) or shared (others may share, none may take it exclusively).
    #[serde(default)]
    pub exclusive: Option<bool>,
    /// Why, in a line: shown to whoever is denied.
    #[serde(default)]
    pub reason: Option<String>,
    /// How long it lives unless renewed, in milliseconds (an hour when absent).
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// Compare names without case (a repository whose core.ignorecase is true).
    #[serde(default)]
    pub ignore_case: Option<bool>,
    /// When denied, wait up to this many seconds for the conflict to clear
    /// (at most 600).
    #[serde(default)]
    pub wait_secs: Option<u64>,
    /// Your session (this server's own session unless you name one).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Your node (this server's own unless you name one).
    #[serde(default)]
    pub node_id: Option<String>,
}

/// Arguments of `release_reservation` and `renew_reservation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ReservationFenceArgs {
    /// The reservation, as reserve_paths returned it.
    pub reservation_id: String,
    /// Its epoch, as reserve_paths returned it.
    pub epoch: u64,
    /// A renewal's time to live from now, in milliseconds (the one it had when
    /// absent). Not for a release.
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// Your session (this server's own session unless you name one).
    #[serde(default)]
    pub session_id: Option<String>,
}

/// Arguments of `list_reservations`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ListReservationsArgs {
    /// Only this repository's reservations.
    #[serde(default)]
    pub scope: Option<String>,
}

/// Arguments of `check_paths`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CheckPathsArgs {
    /// The repository (as reserve_paths takes it).
    pub scope: String,
    /// Paths relative to the repository root that you are about to edit.
    #[schemars(example = &["src/lib.rs"])]
    pub paths: Vec<String>,
    /// Compare names without case.
    #[serde(default)]
    pub ignore_case: Option<bool>,
    /// Your session (this server's own session unless you name one): your own
    /// reservations are not in your way.
    #[serde(default)]
    pub session_id: Option<String>,
}
