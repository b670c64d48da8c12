//! The task (the original's `MeshWorkQueueEntry`): its fields, statuses, modes and
//! priorities.
//!
//! The JSON shape of [`Task`] is the original's queue-entry payload, field for field
//! (camelCase). It is the persistent format shared with databases the original wrote,
//! which is why the core owns it. Fields this runtime does not interpret are kept in
//! [`Task::extra`] and survive every read-modify-write untouched.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::InvalidInput;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Waiting to be claimed.
    Pending,
    /// Claimed by a worker session and being worked on.
    Assigned,
    /// Finished successfully.
    Completed,
    /// Finished unsuccessfully (or ran out of retries).
    Failed,
    /// Withdrawn by the coordinator.
    Cancelled,
}

impl TaskStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Pending,
        TaskStatus::Assigned,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Assigned => "assigned",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Completed, failed and cancelled are terminal: nothing moves a task out of them
    /// except an explicit forced requeue.
    pub const fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL.into_iter().find(|st| st.as_str() == s.trim()).ok_or_else(|| {
            InvalidInput::new(
                "status",
                format!("unknown status {s:?} (expected pending, assigned, completed, failed or cancelled)"),
            )
        })
    }
}

/// What kind of work a task is; decides which nodes may take it and beside what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskMode {
    /// Edits code: needs a node with no other write task in flight.
    CodeChange,
    /// Runs checks.
    Validation,
    /// Reads and diagnoses only: may run beside other tasks on a busy node.
    LiveDebugReadonly,
    /// Starts an application.
    LaunchApp,
    /// Lands work onto the base checkout: never claimed by a worktree node.
    Convergence,
}

impl TaskMode {
    /// Every mode.
    pub const ALL: [TaskMode; 5] = [
        TaskMode::CodeChange,
        TaskMode::Validation,
        TaskMode::LiveDebugReadonly,
        TaskMode::LaunchApp,
        TaskMode::Convergence,
    ];

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskMode::CodeChange => "code_change",
            TaskMode::Validation => "validation",
            TaskMode::LiveDebugReadonly => "live_debug_readonly",
            TaskMode::LaunchApp => "launch_app",
            TaskMode::Convergence => "convergence",
        }
    }
}

impl FromStr for TaskMode {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s.trim())
            .ok_or_else(|| {
                InvalidInput::new(
                    "taskMode",
                    format!(
                        "unknown task mode {s:?} (expected code_change, validation, live_debug_readonly, launch_app or convergence)"
                    ),
                )
            })
    }
}

/// How eagerly a task is pulled; higher first within a claim tier.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TaskPriority {
    /// Pulled after normal and high.
    Low,
    /// The default.
    Normal,
    /// Pulled first.
    High,
}

impl TaskPriority {
    /// Every priority, lowest first.
    pub const ALL: [TaskPriority; 3] = [TaskPriority::Low, TaskPriority::Normal, TaskPriority::High];

    /// The original's rank: high 2, normal 1, low 0.
    pub const fn rank(self) -> i64 {
        match self {
            TaskPriority::Low => 0,
            TaskPriority::Normal => 1,
            TaskPriority::High => 2,
        }
    }

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskPriority::Low => "low",
            TaskPriority::Normal => "normal",
            TaskPriority::High => "high",
        }
    }
}

impl FromStr for TaskPriority {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "low" => Ok(TaskPriority::Low),
            "normal" => Ok(TaskPriority::Normal),
            "high" => Ok(TaskPriority::High),
            other => Err(InvalidInput::new(
                "priority",
                format!("unknown priority {other:?} (expected low, normal or high)"),
            )),
        }
    }
}

/// A queue entry. Optional fields are omitted from JSON when unset, as the original
/// omits them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Task id: caller-given or a fresh UUID.
    pub id: String,
    /// The mesh the task belongs to.
    pub mesh_id: String,
    /// The instruction text, non-empty after trimming.
    pub message: String,
    /// Lifecycle status.
    pub status: TaskStatus,
    /// Multipart input envelope (for example an image) that travels with the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Pin parking: the task stays pending but nobody may claim it; a requeue clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<Value>,
    /// Kind of work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_mode: Option<TaskMode>,
    /// Explicit read-only flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readonly: Option<bool>,
    /// Only this node (any id form of it) may claim the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_id: Option<String>,
    /// Only this session may claim the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_session_id: Option<String>,
    /// Capability tags the claiming node must offer, every one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_tags: Option<Vec<String>>,
    /// Pull priority; stored only when not normal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<TaskPriority>,
    /// The task may not be claimed before this instant (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// Ids of tasks that must be completed first; forward references are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<String>>,
    /// The mission this task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
    /// Fan-out group whose replicas must not be collapsed by completion dedup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consensus_group_id: Option<String>,
    /// Launch override: model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Launch override: thinking level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// Where the model came from (`explicit` or `preset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_source: Option<String>,
    /// Where the thinking level came from (`explicit` or `preset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level_source: Option<String>,
    /// Difficulty (`easy`, `medium`, `difficult`, `freeform`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difficulty: Option<String>,
    /// The paths the task will touch (patterns of [`Task::paths_scope`]): a
    /// claim reserves them exclusively for as long as the task is held, and
    /// skips the task while another holder's reservation overlaps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<crate::reservation::PathPattern>>,
    /// The repository scope of [`Task::paths`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths_scope: Option<String>,
    /// System hold, such as `dependency_failed:<id>`; blocks claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    /// Node that claimed the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_node_id: Option<String>,
    /// Session that claimed the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_session_id: Option<String>,
    /// Provider type of the claiming session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_provider_type: Option<String>,
    /// Model of the claiming session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_model: Option<String>,
    /// Transcript profile stamped at claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_transcript_profile: Option<Value>,
    /// Why the task was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// When the task was cancelled (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_at: Option<String>,
    /// Why the task was last requeued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_reason: Option<String>,
    /// When the task was last requeued (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeued_at: Option<String>,
    /// How often the task was requeued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_count: Option<u32>,
    /// Retry budget for requeues; 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// How often a stranded assignment was reclaimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stranded_reclaim_count: Option<u32>,
    /// The latest reclaim record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reclaim: Option<Value>,
    /// Pre-start dispatch failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_failure_count: Option<u32>,
    /// The latest auto-launch record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_launch: Option<Value>,
    /// Spawn-budget counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_launch_unclaimed_count: Option<u32>,
    /// Spawn-budget counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_launch_dispatch_failed_count: Option<u32>,
    /// When the current assignment was made (ISO). Immutable for the assignment's
    /// life; completions are matched against it, never against `updatedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_timestamp: Option<String>,
    /// The fencing epoch: increases on every claim, reclaim and cancel. A completion
    /// or heartbeat carrying an older value is stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_nonce: Option<u64>,
    /// Turn-ledger attempt of the current dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<String>,
    /// The coordinator session that enqueued the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_coordinator_session_id: Option<String>,
    /// The daemon of the coordinator that enqueued the task; its completion event
    /// is addressed there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_coordinator_daemon_id: Option<String>,
    /// The run id of the coordinator that enqueued the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_coordinator_run_id: Option<String>,
    /// Paths a code-change task declares it will touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_paths: Option<Vec<String>>,
    /// When the current lease runs out (ISO); set at claim, extended by heartbeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<String>,
    /// The worker's summary of a finished task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_summary: Option<String>,
    /// Why a task failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// When the task reached completed or failed (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Creation time (ISO).
    pub created_at: String,
    /// Last change (ISO).
    pub updated_at: String,
    /// What the worker last said of its progress (with a heartbeat); cleared by
    /// every claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// `true` on a task read from the archive (see [`crate::retention`]): it
    /// finished long enough ago to leave the hot database, and no write
    /// reaches it any more. Never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
    /// Every field this runtime does not model, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A running task's progress as its worker last reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// How far along, 0 to 100, when the worker can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u8>,
    /// A short line: what the worker is doing now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When it was reported (ISO).
    pub at: String,
    /// How many `task_progress` ledger entries this assignment has written (the
    /// trail is bounded by [`Progress::TRAIL`]).
    #[serde(default)]
    pub recorded: u32,
}

impl Progress {
    /// The longest note, in characters.
    pub const NOTE_MAX_CHARS: usize = 200;
    /// The most `task_progress` entries one assignment writes to the ledger;
    /// later reports still update the task.
    pub const TRAIL: u32 = 50;
}

/// A progress report carried by a heartbeat, checked by [`ProgressReport::check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgressReport {
    /// How far along, 0 to 100.
    pub percent: Option<u8>,
    /// What the worker is doing now: one line, at most
    /// [`Progress::NOTE_MAX_CHARS`] characters.
    pub note: Option<String>,
}

impl ProgressReport {
    /// Refuses a percent above 100, and a note that is blank, spans lines or holds
    /// other control characters, or is longer than [`Progress::NOTE_MAX_CHARS`];
    /// a note is kept trimmed.
    pub fn check(mut self) -> Result<ProgressReport, crate::InvalidInput> {
        use crate::InvalidInput;
        if let Some(percent) = self.percent.filter(|p| *p > 100) {
            return Err(InvalidInput::new("progress.percent", format!("{percent} is above 100")));
        }
        if let Some(note) = self.note.take() {
            self.note = Some(InvalidInput::one_line("progress.note", &note, Progress::NOTE_MAX_CHARS)?);
        }
        if self.percent.is_none() && self.note.is_none() {
            return Err(InvalidInput::new("progress", "needs a percent or a note"));
        }
        Ok(self)
    }
}

impl Task {
    /// A bare pending task, as a starting point.
    pub fn new(
        id: impl Into<String>,
        mesh_id: impl Into<String>,
        message: impl Into<String>,
        created_at: &str,
    ) -> Task {
        Task {
            id: id.into(),
            mesh_id: mesh_id.into(),
            message: message.into(),
            status: TaskStatus::Pending,
            input: None,
            parked: None,
            task_mode: None,
            readonly: None,
            target_node_id: None,
            target_session_id: None,
            required_tags: None,
            priority: None,
            not_before: None,
            depends_on: None,
            mission_id: None,
            consensus_group_id: None,
            model: None,
            thinking_level: None,
            model_source: None,
            thinking_level_source: None,
            difficulty: None,
            paths: None,
            paths_scope: None,
            blocked_reason: None,
            assigned_node_id: None,
            assigned_session_id: None,
            assigned_provider_type: None,
            assigned_model: None,
            assigned_transcript_profile: None,
            progress: None,
            cancel_reason: None,
            cancelled_at: None,
            requeue_reason: None,
            requeued_at: None,
            requeue_count: None,
            max_retries: None,
            stranded_reclaim_count: None,
            last_reclaim: None,
            dispatch_failure_count: None,
            auto_launch: None,
            auto_launch_unclaimed_count: None,
            auto_launch_dispatch_failed_count: None,
            dispatch_timestamp: None,
            dispatch_nonce: None,
            attempt_id: None,
            source_coordinator_session_id: None,
            source_coordinator_daemon_id: None,
            source_coordinator_run_id: None,
            owned_paths: None,
            lease_expires_at: None,
            final_summary: None,
            failure_reason: None,
            finished_at: None,
            created_at: created_at.to_owned(),
            updated_at: created_at.to_owned(),
            archived: None,
            extra: Map::new(),
        }
    }

    /// Read-only tasks may run beside other work on a busy node.
    pub fn is_readonly(&self) -> bool {
        self.readonly == Some(true) || self.task_mode == Some(TaskMode::LiveDebugReadonly)
    }

    /// The priority rank used for ordering (normal when unset).
    pub fn priority_rank(&self) -> i64 {
        self.priority.unwrap_or(TaskPriority::Normal).rank()
    }

    /// The dependency ids (empty when unset).
    pub fn dependencies(&self) -> &[String] {
        self.depends_on.as_deref().unwrap_or(&[])
    }

    /// The required capability tags (empty when unset).
    pub fn tags_required(&self) -> &[String] {
        self.required_tags.as_deref().unwrap_or(&[])
    }

    /// Whether the task may be stored as it is in `mesh_id` (an import or a
    /// queue replaced whole): it has an id and belongs to that mesh.
    pub fn check_storable_in(&self, mesh_id: &str) -> Result<(), InvalidInput> {
        InvalidInput::non_blank("id", &self.id)?;
        if self.mesh_id != mesh_id {
            return Err(InvalidInput::new(
                "meshId",
                format!("belongs to mesh {:?}, not {mesh_id:?}", self.mesh_id),
            ));
        }
        Ok(())
    }

    /// The current fencing epoch (0 before the first claim).
    pub fn epoch(&self) -> u64 {
        self.dispatch_nonce.unwrap_or(0)
    }

    /// The `notBefore` gate as milliseconds; `None` when unset or unparsable (the
    /// gate fails open, as in the original).
    pub fn not_before_millis(&self) -> Option<i64> {
        self.not_before.as_deref().and_then(crate::Timestamp::parse_iso).map(crate::Timestamp::millis)
    }

    /// Whether the task is parked (a non-null `parked` record).
    pub fn is_parked(&self) -> bool {
        matches!(&self.parked, Some(v) if !v.is_null())
    }

    /// The task as the original's JSON payload.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a task always serializes")
    }

    /// Parses a stored payload.
    pub fn from_json(text: &str) -> Result<Task, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_survive_a_round_trip() {
        let raw = r#"{"id":"t1","meshId":"m","message":"do it","status":"pending","model":"opus",
            "autoLaunchStatus":"started","nested":{"a":[1,2]},"createdAt":"2025-01-01T00:00:00.000Z",
            "updatedAt":"2025-01-01T00:00:00.000Z"}"#;
        let task = Task::from_json(raw).unwrap();
        assert_eq!(task.model.as_deref(), Some("opus"));
        assert_eq!(task.extra["autoLaunchStatus"], "started");
        let back: Value = serde_json::from_str(&task.to_json()).unwrap();
        let orig: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(back, orig);
    }

    #[test]
    fn readonly_and_rank() {
        let mut t = Task::new("t", "m", "x", "2025-01-01T00:00:00.000Z");
        assert!(!t.is_readonly());
        assert_eq!(t.priority_rank(), 1);
        t.task_mode = Some(TaskMode::LiveDebugReadonly);
        assert!(t.is_readonly());
        t.priority = Some(TaskPriority::High);
        assert_eq!(t.priority_rank(), 2);
    }

    #[test]
    fn parsing_names() {
        assert_eq!("assigned".parse::<TaskStatus>().unwrap(), TaskStatus::Assigned);
        let err = "done".parse::<TaskStatus>().unwrap_err();
        assert_eq!(err.field, "status");
        assert!("urgent".parse::<TaskPriority>().is_err());
        assert_eq!("convergence".parse::<TaskMode>().unwrap(), TaskMode::Convergence);
    }
}
