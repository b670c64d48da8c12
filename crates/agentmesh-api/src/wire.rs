//! Request bodies and query parameters: what a caller sends, in the original's
//! camelCase field names.
//!
//! The same types are the HTTP bodies, the MCP tool arguments and what the CLI
//! builds from its flags, so one request means the same thing on every transport.
//! Bodies where a mistyped field would silently change the request deny unknown
//! fields. Each converts into the core's request type with `TryFrom`, and that
//! conversion is the only place a body is checked: strings go to the core as sent,
//! so its validation error names the field. Every id a body carries (task, node,
//! session, mission, delivery, event, coordinator daemon and run) is checked by the
//! core's one id rule ([`agentmesh_core::ids`]), here or in the core's request type.

use agentmesh_core::events::held::HeldFilter;
use agentmesh_core::events::{CoordinatorIdentity, Drainer, EmitHint, PendingEvent, Scope};
use agentmesh_core::{
    Claimant, InvalidInput, LedgerEntry, NewDirectDispatch, NewMission, NewSessionDelivery, NewTask,
    NotBefore, RequeueOptions, SliceQuery, TaskStatus, Timestamp,
};
use agentmesh_store::DrainRequest;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The failure reason of a failed completion that gives none.
pub const DEFAULT_FAILURE_REASON: &str = "worker reported failure";

/// The coordinator that enqueues a task; its completion event is addressed to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CoordinatorBody {
    /// The coordinator's daemon (`mach_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_id: Option<String>,
    /// The coordinator's run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The coordinator's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `notBefore`: an ISO-8601 instant, or milliseconds (an offset from now below one
/// year, else epoch milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum NotBeforeBody {
    /// Milliseconds.
    Millis(i64),
    /// An instant.
    Iso(String),
}

/// Enqueue one task (`POST /v1/meshes/{mesh}/tasks`), or one item of a batch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnqueueBody {
    /// The instruction for the worker.
    pub message: String,
    /// Task id (a fresh one when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Only in a batch: a name other items of the same batch use in `dependsOn`.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Kind of work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_mode: Option<String>,
    /// Read-only work may run beside other work on a busy node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readonly: Option<bool>,
    /// Pull priority: low, normal or high.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// Tasks that must complete first (ids, or refs of the same batch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Capability tags the claiming node must offer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_tags: Vec<String>,
    /// Only this node may claim the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node_id: Option<String>,
    /// Only this session may claim the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_session_id: Option<String>,
    /// The mission the task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
    /// Earliest claim time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<NotBeforeBody>,
    /// How often the task may be requeued before it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i64>,
    /// Consensus group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consensus_group_id: Option<String>,
    /// Model hint for the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Thinking-level hint for the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// Difficulty hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difficulty: Option<String>,
    /// The paths the task will touch, relative to `pathsScope` (patterns, see
    /// the path reservations): a claim reserves them for as long as the task
    /// is held, and skips the task while another holder's reservation overlaps
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The repository of `paths` (its root or id); required with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths_scope: Option<String>,
    /// Structured input for the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The enqueuing coordinator, to whom the completion event goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorBody>,
}

impl EnqueueBody {
    /// The core's request. A `ref` is refused: it means something only in a batch.
    pub fn into_new_task(self) -> Result<NewTask, InvalidInput> {
        if self.reference.is_some() {
            return Err(InvalidInput::new("ref", "is allowed only in a batch enqueue"));
        }
        Ok(self.into_new_task_unchecked())
    }

    fn into_new_task_unchecked(self) -> NewTask {
        let coordinator = self.coordinator.unwrap_or_default();
        NewTask {
            id: self.id,
            message: self.message,
            task_mode: self.task_mode,
            readonly: self.readonly,
            target_node_id: self.target_node_id,
            target_session_id: self.target_session_id,
            required_tags: self.required_tags,
            priority: self.priority,
            not_before: self.not_before.map(|nb| match nb {
                NotBeforeBody::Millis(ms) => NotBefore::Millis(ms),
                NotBeforeBody::Iso(text) => NotBefore::Iso(text),
            }),
            depends_on: self.depends_on,
            mission_id: self.mission_id,
            consensus_group_id: self.consensus_group_id,
            model: self.model,
            thinking_level: self.thinking_level,
            difficulty: self.difficulty,
            paths: self.paths,
            paths_scope: self.paths_scope,
            max_retries: self.max_retries,
            source_coordinator_session_id: coordinator.session_id,
            source_coordinator_daemon_id: coordinator.daemon_id,
            source_coordinator_run_id: coordinator.run_id,
            input: self.input,
        }
    }
}

/// Enqueue several tasks at once, all or none (`POST /v1/meshes/{mesh}/tasks/batch`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchEnqueueBody {
    /// The tasks, in order. An item's `dependsOn` may name another item's `ref`.
    pub tasks: Vec<EnqueueBody>,
    /// The coordinator of every task that names none itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorBody>,
}

impl BatchEnqueueBody {
    /// The core's requests: every `ref` becomes a task id (the item's own `id`, else
    /// a fresh one) and references to it in `dependsOn` are replaced by that id.
    pub fn into_new_tasks(self) -> Result<Vec<NewTask>, InvalidInput> {
        if self.tasks.is_empty() {
            return Err(InvalidInput::new("tasks", "must name at least one task"));
        }
        let mut refs: Vec<(String, String)> = Vec::new();
        let mut items = self.tasks;
        for (i, item) in items.iter_mut().enumerate() {
            if let Some(reference) = item.reference.take() {
                let reference = id(&format!("tasks[{i}].ref"), reference)?;
                if refs.iter().any(|(r, _)| *r == reference) {
                    return Err(InvalidInput::new(
                        format!("tasks[{i}].ref"),
                        format!("{reference:?} names two tasks of the batch"),
                    ));
                }
                let id = item.id.clone().unwrap_or_else(agentmesh_store::ids::mint);
                item.id = Some(id.clone());
                refs.push((reference, id));
            }
        }
        Ok(items
            .into_iter()
            .map(|mut item| {
                for dep in &mut item.depends_on {
                    if let Some((_, id)) = refs.iter().find(|(r, _)| r == dep.trim()) {
                        *dep = id.clone();
                    }
                }
                if item.coordinator.is_none() {
                    item.coordinator = self.coordinator.clone();
                }
                item.into_new_task_unchecked()
            })
            .collect())
    }
}

/// Query of `GET /v1/meshes/{mesh}/tasks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only these statuses, comma-separated (every status when absent); besides
    /// the stored statuses it takes [`BLOCKED_STATUS`] (see [`StatusFilter`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only tasks requiring this capability tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Only tasks held by, or pinned to, this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Only tasks held by, or pinned to, this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Only tasks of this mission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission: Option<String>,
    /// Only tasks whose id or message contains this text (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// How many matching tasks to skip (0 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
    /// Only tasks that depend on this task.
    #[serde(default, rename = "dependsOn", skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<String>,
    /// At most this many tasks, 1 to [`MAX_LIST_LIMIT`] (every match when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The largest page `GET /v1/meshes/{mesh}/tasks?limit=` answers.
pub const MAX_LIST_LIMIT: u32 = 1000;

/// The status word listings show for a pending task that a failed dependency
/// holds back (it carries a `blockedReason`), and that a status filter takes.
pub const BLOCKED_STATUS: &str = "blocked";

/// Whether `task` shows as [`BLOCKED_STATUS`]: pending, held back by a failed
/// dependency.
pub fn is_blocked(task: &agentmesh_core::Task) -> bool {
    task.status == TaskStatus::Pending && task.blocked_reason.is_some()
}

/// The statuses a listing's `status` filter names: stored statuses, and
/// [`BLOCKED_STATUS`] for the pending tasks a failed dependency holds back
/// (`pending` includes those too, as it is their stored status).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusFilter {
    /// The stored statuses named.
    pub statuses: Vec<TaskStatus>,
    /// Whether `blocked` was named.
    pub blocked: bool,
}

impl StatusFilter {
    /// Reads a comma-separated filter; blank parts are skipped, and nothing at
    /// all means every status. An unknown word is refused naming `status`.
    pub fn parse(text: Option<&str>) -> Result<StatusFilter, InvalidInput> {
        let mut filter = StatusFilter::default();
        for part in text.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            if part == BLOCKED_STATUS {
                filter.blocked = true;
                continue;
            }
            let status: TaskStatus = part.parse().map_err(|_| {
                InvalidInput::new(
                    "status",
                    format!(
                        "unknown status {part:?} (expected pending, blocked, assigned, completed, failed or \
                         cancelled)"
                    ),
                )
            })?;
            if !filter.statuses.contains(&status) {
                filter.statuses.push(status);
            }
        }
        Ok(filter)
    }

    /// The stored statuses to read (empty: every status).
    pub fn stored(&self) -> Vec<TaskStatus> {
        let mut stored = self.statuses.clone();
        if self.blocked && !stored.contains(&TaskStatus::Pending) {
            stored.push(TaskStatus::Pending);
        }
        stored
    }

    /// Whether `task` passes the filter.
    pub fn selects(&self, task: &agentmesh_core::Task) -> bool {
        if self.statuses.is_empty() && !self.blocked {
            return true;
        }
        self.statuses.contains(&task.status) || (self.blocked && is_blocked(task))
    }
}

impl ListParams {
    /// Only these statuses, every task of them.
    pub fn statuses(status: Option<String>) -> ListParams {
        ListParams { status, ..ListParams::default() }
    }

    /// Checks the page bounds, naming the field.
    pub fn check(&self) -> Result<(), InvalidInput> {
        if let Some(limit) = self.limit
            && !(1..=MAX_LIST_LIMIT).contains(&limit)
        {
            return Err(InvalidInput::new("limit", format!("must be between 1 and {MAX_LIST_LIMIT}")));
        }
        Ok(())
    }

    /// Whether `task` passes the filters (status aside).
    pub fn selects(&self, task: &agentmesh_core::Task) -> bool {
        let given =
            |f: &Option<String>| f.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let is = |have: &Option<String>, want: &str| have.as_deref() == Some(want);
        if let Some(tag) = given(&self.tag)
            && !task.required_tags.iter().flatten().any(|t| t.eq_ignore_ascii_case(&tag))
        {
            return false;
        }
        if let Some(node) = given(&self.node)
            && !is(&task.assigned_node_id, &node)
            && !is(&task.target_node_id, &node)
        {
            return false;
        }
        if let Some(session) = given(&self.session)
            && !is(&task.assigned_session_id, &session)
            && !is(&task.target_session_id, &session)
        {
            return false;
        }
        if let Some(mission) = given(&self.mission)
            && !is(&task.mission_id, &mission)
        {
            return false;
        }
        if let Some(dependency) = given(&self.depends_on)
            && !task.depends_on.iter().flatten().any(|d| *d == dependency)
        {
            return false;
        }
        if let Some(text) = given(&self.q) {
            let text = text.to_lowercase();
            if !task.id.to_lowercase().contains(&text) && !task.message.to_lowercase().contains(&text) {
                return false;
            }
        }
        true
    }
}

/// `POST /v1/meshes/{mesh}/tasks/{id}/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelBody {
    /// Why the task is withdrawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/meshes/{mesh}/tasks/{id}/priority`: changes the pull priority of a
/// pending or assigned task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorityBody {
    /// The new priority: `low`, `normal` or `high`.
    pub priority: String,
    /// Why it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/meshes/{mesh}/tasks/{id}/requeue`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequeueBody {
    /// Why the task goes back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Requeue even an assigned or completed task, and ignore the retry budget.
    #[serde(default)]
    pub force: bool,
    /// Overrides the task's retry budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Keep the session pin (dropped by default).
    #[serde(default)]
    pub keep_session_pin: bool,
}

impl From<RequeueBody> for RequeueOptions {
    fn from(body: RequeueBody) -> RequeueOptions {
        RequeueOptions {
            reason: optional(body.reason),
            force: body.force,
            max_retries: body.max_retries,
            keep_session_pin: body.keep_session_pin,
        }
    }
}

/// `POST /v1/meshes/{mesh}/claims`: a worker session asks for its next task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimBody {
    /// The node the session runs on.
    pub node_id: String,
    /// The session asking for work.
    pub session_id: String,
    /// Capability tags the node offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capability_tags: Vec<String>,
    /// The session's provider type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_type: Option<String>,
    /// At most this many tasks at once for this provider on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_max_parallel: Option<u32>,
    /// The node is a worktree clone.
    #[serde(default)]
    pub node_is_worktree: bool,
    /// Lease length in milliseconds (ten minutes when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<std::num::NonZeroU32>,
    /// How the session's transcript is read (`{class, timing,
    /// emitsPtyTurnEvents}`), stamped on the task it claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_transcript_profile: Option<agentmesh_core::TranscriptProfile>,
    /// Only tasks of these difficulties (`easy`, `medium`, `difficult`,
    /// `freeform`); a task of another stays pending for this session, one
    /// without a difficulty (or `freeform`) is taken. Any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_task_difficulties: Option<Vec<String>>,
}

impl ClaimBody {
    /// The claimant and the lease length.
    pub fn into_claim(self) -> Result<(Claimant, Option<i64>), InvalidInput> {
        let transcript_profile =
            self.assigned_transcript_profile.map(|p| p.checked("assignedTranscriptProfile")).transpose()?;
        let allowed_difficulties = match self.allowed_task_difficulties {
            None => None,
            Some(list) => {
                let mut allowed = Vec::with_capacity(list.len());
                for (i, d) in list.into_iter().enumerate() {
                    let d = d.trim().to_owned();
                    if !agentmesh_core::DIFFICULTIES.contains(&d.as_str()) {
                        return Err(InvalidInput::new(
                            format!("allowedTaskDifficulties[{i}]"),
                            format!(
                                "unknown difficulty {d:?} (expected one of {})",
                                agentmesh_core::DIFFICULTIES.join(", ")
                            ),
                        ));
                    }
                    allowed.push(d);
                }
                Some(allowed)
            }
        };
        let claimant = Claimant {
            node_id: id("nodeId", self.node_id)?,
            session_id: id("sessionId", self.session_id)?,
            capability_tags: self.capability_tags,
            provider_type: optional(self.provider_type),
            provider_max_parallel: self.provider_max_parallel,
            node_is_worktree: self.node_is_worktree,
            transcript_profile,
            allowed_difficulties,
        };
        Ok((claimant, self.lease_ms.map(|ms| i64::from(ms.get()))))
    }
}

/// `POST /v1/meshes/{mesh}/heartbeats`: a worker extends the lease of its task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeartbeatBody {
    /// The task.
    pub task_id: String,
    /// The session holding it.
    pub session_id: String,
    /// The epoch the claim returned; an older one is refused.
    pub epoch: u64,
    /// The new lease length from now, in milliseconds.
    pub lease_ms: std::num::NonZeroU32,
    /// How the task is getting on, shown on the task and kept in the ledger
    /// (`task_progress`) when it says something new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressBody>,
}

/// A worker's progress report, carried by a heartbeat: a percent, a note, or both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProgressBody {
    /// How far along, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u32>,
    /// What the worker is doing now: one line of at most 200 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ProgressBody {
    /// The report the store takes, checked (a percent above 100, a blank or
    /// multi-line or over-long note, or neither: refused naming the field).
    pub fn check(self) -> Result<agentmesh_core::ProgressReport, agentmesh_core::InvalidInput> {
        let percent = match self.percent {
            None => None,
            Some(p) => Some(u8::try_from(p).map_err(|_| {
                agentmesh_core::InvalidInput::new("progress.percent", format!("{p} is above 100"))
            })?),
        };
        agentmesh_core::ProgressReport { percent, note: self.note }.check()
    }
}

/// `POST /v1/meshes/{mesh}/completions`: a worker reports that its task ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompletionBody {
    /// The reporting session.
    pub session_id: String,
    /// The task (the session's assigned task when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The epoch the claim returned; a report for an older epoch is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The worker's account of what was done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The task failed.
    #[serde(default)]
    pub failed: bool,
    /// Why it failed (only with `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the work ended by the worker's clock (ISO 8601, such as
    /// `2026-01-01T12:00:00.000Z`) [default: the daemon's time]. A report
    /// without a task id that meets several assigned tasks of the session goes
    /// to the latest dispatched at or before it (the latest of all when the
    /// worker's clock runs behind every dispatch); the mutable `updatedAt` is
    /// never compared, so a worker's clock minutes behind still completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
}

/// `POST /v1/meshes/{mesh}/complete-and-claim`: a worker reports that its task
/// ended and asks for its next one, in one request and one transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompleteAndClaimBody {
    /// The report, as `POST …/completions` takes it.
    pub completion: CompletionBody,
    /// The claim that follows it, as `POST …/claims` takes it.
    pub claim: ClaimBody,
}

impl CompletionBody {
    /// The store's report: the work ended at the worker's `occurredAt`, else
    /// at `now`. An `occurredAt` that is not an ISO 8601 time is refused naming
    /// the field.
    pub fn into_report(self, now: Timestamp) -> Result<agentmesh_store::CompletionReport, InvalidInput> {
        use agentmesh_store::Outcome;
        let occurred_at = match self.occurred_at.as_deref().map(str::trim) {
            None => now,
            Some(text) => Timestamp::parse_iso(text).ok_or_else(|| {
                InvalidInput::new(
                    "occurredAt",
                    format!("{text:?} is not an ISO 8601 time (such as 2026-01-01T12:00:00.000Z)"),
                )
            })?,
        };
        let outcome = match (self.failed, self.reason) {
            (true, reason) => Outcome::Failed {
                reason: optional(reason).unwrap_or_else(|| DEFAULT_FAILURE_REASON.to_owned()),
                summary: self.summary,
            },
            (false, None) => Outcome::Completed { summary: self.summary },
            (false, Some(_)) => return Err(InvalidInput::new("reason", "is allowed only with failed: true")),
        };
        Ok(agentmesh_store::CompletionReport {
            session_id: id("sessionId", self.session_id)?,
            task_id: optional_id("taskId", self.task_id)?,
            epoch: self.epoch,
            occurred_at: Some(occurred_at.iso()),
            outcome,
        })
    }
}

/// Query of `GET /v1/meshes/{mesh}/ledger`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerParams {
    /// How many of the newest entries (200 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<u32>,
    /// Only entries at or after this ISO-8601 instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only entries of these kinds, comma-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Only entries about this task, read from its creation on, from the
    /// archive and the hot ledger alike (a task the mesh does not hold, hot or
    /// archived, is `task_not_found`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

impl TryFrom<LedgerParams> for agentmesh_core::LedgerQuery {
    type Error = InvalidInput;

    fn try_from(params: LedgerParams) -> Result<agentmesh_core::LedgerQuery, InvalidInput> {
        Ok(agentmesh_core::LedgerQuery {
            tail: params.tail,
            since: params.since.as_deref().map(|s| instant("since", s)).transpose()?,
            kinds: params
                .kind
                .iter()
                .flat_map(|k| k.split(','))
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// Query of `GET /v1/meshes/{mesh}/ledger/slice`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SliceParams {
    /// Entries strictly after this one, in (timestamp, id) order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_id: Option<String>,
    /// Entries committed after this sequence number, in commit order (0: from the
    /// first); not together with `afterId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Page size (100 when absent, at most 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Only entries of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Only entries at or after this ISO-8601 instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

impl TryFrom<SliceParams> for SliceQuery {
    type Error = InvalidInput;

    fn try_from(params: SliceParams) -> Result<SliceQuery, InvalidInput> {
        let after_id = optional(params.after_id);
        if after_id.is_some() && params.after_seq.is_some() {
            return Err(InvalidInput::new("afterSeq", "give afterId or afterSeq, not both"));
        }
        Ok(SliceQuery {
            after_id,
            after_seq: params.after_seq,
            since: params.since.as_deref().map(|s| instant("since", s)).transpose()?,
            kind: optional(params.kind),
            limit: params.limit,
        })
    }
}

/// `POST /v1/meshes/{mesh}/ledger/import`: entries from elsewhere, all of this mesh.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportBody {
    /// The entries, in the original's shape.
    pub entries: Vec<LedgerEntry>,
}

/// The emit hint of a pushed event: what the pusher knows better than the event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmitHintBody {
    /// The real coordinator run id, folded into the derived identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator_run_id: Option<String>,
    /// Overrides the scope defaulted from the event name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

impl From<EmitHintBody> for EmitHint {
    fn from(body: EmitHintBody) -> EmitHint {
        EmitHint {
            coordinator_run_id: optional(body.coordinator_run_id),
            scope: body.scope,
            ..EmitHint::default()
        }
    }
}

/// `POST /v1/meshes/{mesh}/events`: queue an event for a coordinator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PushEventBody {
    /// The event in the original's JSON shape; `meshId` defaults to the mesh pushed to.
    pub event: Map<String, Value>,
    /// The emit hint (empty when absent).
    #[serde(default)]
    pub hint: EmitHintBody,
    /// This daemon's machine id, for the self-dispatched fallback stamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_machine_id: Option<String>,
}

impl PushEventBody {
    /// The event (its `meshId` defaulted to `mesh`, an event of another mesh refused,
    /// its v2 envelope checked as [`PendingEvent::from_posted`] checks it), the
    /// hint and the machine id.
    pub fn into_parts(
        self,
        mesh: &str,
        now: Timestamp,
    ) -> Result<(PendingEvent, EmitHint, Option<String>), InvalidInput> {
        let mut raw = self.event;
        match raw.get("meshId") {
            None => {
                raw.insert("meshId".to_owned(), Value::from(mesh));
            }
            Some(Value::String(id)) if id != mesh => {
                return Err(InvalidInput::new(
                    "event.meshId",
                    format!("the event belongs to mesh {id:?}, not {mesh:?}"),
                ));
            }
            Some(_) => {}
        }
        raw.entry("queuedAt").or_insert_with(|| Value::from(now.millis()));
        let event = PendingEvent::from_posted(raw).map_err(|err| err.within("event"))?;
        if event.event.trim().is_empty() {
            return Err(InvalidInput::new("event.event", "must not be blank"));
        }
        for (field, value) in [
            ("event.eventId", &event.envelope.event_id),
            ("event.nodeId", &event.node_id),
            ("event.targetCoordinatorDaemonId", &event.target_coordinator_daemon_id),
            ("event.targetCoordinatorSessionId", &event.target_coordinator_session_id),
        ] {
            agentmesh_core::ids::validate_optional_id(field, value.as_deref())?;
        }
        optional_id("hint.coordinatorRunId", self.hint.coordinator_run_id.clone())?;
        let machine_id = optional_id("selfMachineId", self.self_machine_id)?;
        Ok((event, self.hint.into(), machine_id))
    }
}

/// `POST /v1/meshes/{mesh}/events/drain` (and `peek`, `watch`): who takes events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainBody {
    /// The draining coordinator's daemon (any of its id forms).
    pub daemon_id: String,
    /// The draining coordinator's run id.
    pub run_id: String,
    /// The draining coordinator's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Other ids this daemon answers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_known_as: Vec<String>,
    /// Only events with these names; the others stay queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_events: Option<Vec<String>>,
    /// At most this many events (100 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Hold back unversioned and invalid v2 events instead of delivering them.
    #[serde(default)]
    pub enforce: bool,
}

impl TryFrom<DrainBody> for DrainRequest {
    type Error = InvalidInput;

    fn try_from(body: DrainBody) -> Result<DrainRequest, InvalidInput> {
        let identity = CoordinatorIdentity::new(
            id("daemonId", body.daemon_id)?,
            id("runId", body.run_id)?,
            optional_id("sessionId", body.session_id)?,
        );
        let mut also_known_as: Vec<&str> = Vec::with_capacity(body.also_known_as.len());
        for (i, other) in body.also_known_as.iter().enumerate() {
            if !other.trim().is_empty() {
                also_known_as.push(agentmesh_core::validate_id(&format!("alsoKnownAs[{i}]"), other)?);
            }
        }
        let only_events = body
            .only_events
            .map(|names| {
                names
                    .into_iter()
                    .enumerate()
                    .map(|(i, name)| required(&format!("onlyEvents[{i}]"), name))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        if body.limit == Some(0) {
            return Err(InvalidInput::new("limit", "must be at least 1"));
        }
        Ok(DrainRequest {
            drainer: Drainer::new(identity, &also_known_as),
            only_events,
            enforce: body.enforce,
            limit: body.limit,
        })
    }
}

/// Query of `POST /v1/meshes/{mesh}/events/watch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchParams {
    /// How long to wait for an event, in seconds (30 when absent, at most 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

/// `POST /v1/meshes/{mesh}/events/delete`: events deleted outright, by row id,
/// drained or not (their fingerprints take new events again).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteEventsBody {
    /// Row ids, as a drain or peek handed them out.
    pub ids: Vec<String>,
}

impl DeleteEventsBody {
    /// The ids, trimmed; one that breaks the id rule is refused by its index.
    pub fn into_ids(self) -> Result<Vec<String>, InvalidInput> {
        self.ids.into_iter().enumerate().map(|(i, value)| id(&format!("ids[{i}]"), value)).collect()
    }
}

/// `POST /v1/meshes/{mesh}/events/ack`: events delivered elsewhere, by row id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AckBody {
    /// Row ids, as a drain or peek handed them out.
    pub ids: Vec<String>,
}

impl AckBody {
    /// The ids, trimmed; one that breaks the id rule is refused by its index.
    pub fn into_ids(self) -> Result<Vec<String>, InvalidInput> {
        self.ids.into_iter().enumerate().map(|(i, value)| id(&format!("ids[{i}]"), value)).collect()
    }
}

/// `POST /v1/meshes/{mesh}/events/retract`: a task's dispatch is no longer blocked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetractBody {
    /// The task whose undelivered `mesh:dispatch_blocked` events go.
    pub task_id: String,
}

/// `POST /v1/meshes/{mesh}/missions`: create or update a mission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MissionBody {
    /// Mission id.
    pub id: String,
    /// Short title.
    pub title: String,
    /// What done looks like (kept on update when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// Status word (`active` for a new mission when absent; kept on update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Where the mission came from; written once (a mission that has a source
    /// keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl TryFrom<MissionBody> for NewMission {
    type Error = InvalidInput;

    fn try_from(body: MissionBody) -> Result<NewMission, InvalidInput> {
        let new = NewMission {
            id: body.id.trim().to_owned(),
            title: body.title,
            goal: body.goal,
            status: body.status.map(|s| s.trim().to_owned()),
            source: optional(body.source),
        };
        new.validate()?;
        Ok(new)
    }
}

/// Query of `GET /v1/meshes/{mesh}/missions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MissionListParams {
    /// Only these statuses, comma-separated (every status when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// `POST /v1/meshes/{mesh}/idle-sessions`: a worker session reports that it is idle.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdleBody {
    /// The node the session runs on.
    pub node_id: String,
    /// The session.
    pub session_id: String,
    /// Its provider type.
    pub provider_type: String,
    /// How long the report holds, in seconds (300 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u32>,
    /// Anything else worth knowing about the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// How long an idle report holds when the session gives no ttl.
pub const DEFAULT_IDLE_TTL_SECS: u32 = 300;

/// `POST /v1/meshes/{mesh}/tasks/dispatched`: record a task already dispatched
/// straight to a session (an id the mesh holds changes nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DispatchedTaskBody {
    /// The task's id.
    pub id: String,
    /// The instruction text that was sent.
    pub message: String,
    /// The node it was sent to.
    pub node_id: String,
    /// The session it was sent to.
    pub session_id: String,
    /// The session's provider type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_type: Option<String>,
    /// The mission the task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
    /// Kind of work, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_mode: Option<String>,
}

impl TryFrom<DispatchedTaskBody> for agentmesh_core::NewDispatchedTask {
    type Error = InvalidInput;
    fn try_from(body: DispatchedTaskBody) -> Result<Self, InvalidInput> {
        let new = agentmesh_core::NewDispatchedTask {
            id: body.id,
            message: body.message,
            node_id: body.node_id,
            session_id: body.session_id,
            provider_type: optional(body.provider_type),
            mission_id: optional(body.mission_id),
            task_mode: optional(body.task_mode),
        };
        new.validate()?;
        Ok(new)
    }
}

/// `POST /v1/meshes/{mesh}/holds`: hold an acknowledged task in flight, or update
/// its hold (its first `heldAt` is kept).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HoldBody {
    /// The held task.
    pub task_id: String,
    /// Why it is held (`acked`, `awaiting_completion`, ...).
    pub hold_reason: String,
    /// When its session was first seen idle since it acknowledged the task
    /// (ISO-8601); absent records none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_idle_since_ack: Option<String>,
    /// How many reads of the session failed so far (0 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_failure_count: Option<u32>,
}

impl TryFrom<HoldBody> for agentmesh_core::NewInflightHold {
    type Error = InvalidInput;
    fn try_from(body: HoldBody) -> Result<Self, InvalidInput> {
        let first_idle_since_ack = match optional(body.first_idle_since_ack) {
            None => None,
            Some(text) => Some(Timestamp::parse_iso(&text).ok_or_else(|| {
                InvalidInput::new("firstIdleSinceAck", format!("{text:?} is not an ISO-8601 instant"))
            })?),
        };
        let hold = agentmesh_core::NewInflightHold {
            task_id: id("taskId", body.task_id)?,
            hold_reason: required("holdReason", body.hold_reason)?,
            first_idle_since_ack,
            read_failure_count: body.read_failure_count.unwrap_or(0),
        };
        hold.validate()?;
        Ok(hold)
    }
}

/// `POST /v1/meshes/{mesh}/deliveries`: a message for a worker session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryBody {
    /// Delivery id (a fresh one when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Target node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Target session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Provider type of the target session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_type: Option<String>,
    /// The task it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// What it is (`message` when absent; `task`, `nudge`, `answer`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Higher goes first (0 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// The text to hand over (empty when absent).
    #[serde(default)]
    pub message: String,
    /// Not before this instant (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_after: Option<String>,
    /// Expires at this instant (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The coordinator that sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorBody>,
}

impl TryFrom<DeliveryBody> for NewSessionDelivery {
    type Error = InvalidInput;

    fn try_from(body: DeliveryBody) -> Result<NewSessionDelivery, InvalidInput> {
        let node_id = optional(body.node_id);
        let session_id = optional(body.session_id);
        if node_id.is_none() && session_id.is_none() {
            return Err(InvalidInput::new("sessionId", "a delivery needs a target session or node"));
        }
        let coordinator = body.coordinator.unwrap_or_default();
        let new = NewSessionDelivery {
            id: optional(body.id).unwrap_or_else(agentmesh_store::ids::mint),
            node_id,
            session_id,
            provider_type: optional(body.provider_type),
            task_id: optional(body.task_id),
            kind: optional(body.kind).unwrap_or_else(|| "message".to_owned()),
            priority: body.priority.unwrap_or(0),
            message: body.message,
            status: None,
            deliver_after: body.deliver_after.as_deref().map(|s| instant("deliverAfter", s)).transpose()?,
            expires_at: body.expires_at.as_deref().map(|s| instant("expiresAt", s)).transpose()?,
            source_coordinator_session_id: optional(coordinator.session_id),
            source_coordinator_daemon_id: optional(coordinator.daemon_id),
        };
        new.validate()?;
        Ok(new)
    }
}

/// Query of `GET /v1/meshes/{mesh}/deliveries`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryListParams {
    /// Only deliveries for this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `POST /v1/meshes/{mesh}/dispatches`: record a direct dispatch to a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DispatchBody {
    /// The dispatched task's id.
    pub task_id: String,
    /// Target node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Target session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Provider type of the target session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_type: Option<String>,
    /// The instruction text.
    pub message: String,
    /// Task mode by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_mode: Option<String>,
    /// How it was sent (`api` when absent; `pty`, `p2p`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// It went to a session that was idle at the time.
    #[serde(default)]
    pub dispatched_to_idle_session: bool,
}

impl TryFrom<DispatchBody> for NewDirectDispatch {
    type Error = InvalidInput;

    fn try_from(body: DispatchBody) -> Result<NewDirectDispatch, InvalidInput> {
        let new = NewDirectDispatch {
            task_id: body.task_id.trim().to_owned(),
            node_id: optional(body.node_id),
            session_id: optional(body.session_id),
            provider_type: optional(body.provider_type),
            message: body.message,
            task_mode: optional(body.task_mode),
            via: optional(body.via).unwrap_or_else(|| "api".to_owned()),
            dispatched_to_idle_session: body.dispatched_to_idle_session,
        };
        new.validate()?;
        Ok(new)
    }
}

/// A node a task could go to, as the placement request describes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeBody {
    /// The node's id (a daemon id such as `mach_...`, or any node name the mesh uses).
    pub node_id: String,
    /// The capability tags the node offers (compared with the task's `requiredTags`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capability_tags: Vec<String>,
    /// Scheduling priority of the node; higher is preferred (0 when absent).
    #[serde(default)]
    pub scheduling_priority: i64,
}

/// `POST /v1/meshes/{mesh}/placement`: rank nodes for a task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlacementBody {
    /// The task to place.
    pub task_id: String,
    /// The nodes to choose from, in preference order.
    pub nodes: Vec<NodeBody>,
    /// `first_eligible` (default), `least_loaded`, `round_robin` or `priority_only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
}

/// `POST /v1/meshes/{mesh}/tool-calls`: record one call of a tool, for the rate guard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallBody {
    /// The tool's name.
    pub tool: String,
    /// The calling session, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Who calls: `coordinator`, `worker` or `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_role: Option<String>,
}

/// `POST /v1/meshes/{mesh}/coordinators/presence`: a coordinator says it is alive
/// (or that it has ended), so unicasts addressed to it stay its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PresenceBody {
    /// The coordinator's daemon.
    pub daemon_id: String,
    /// The coordinator's run id.
    pub run_id: String,
    /// The coordinator's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The coordinator is exiting: its unicasts go to the next run on its machine.
    #[serde(default)]
    pub ended: bool,
}

impl TryFrom<PresenceBody> for CoordinatorIdentity {
    type Error = InvalidInput;

    fn try_from(body: PresenceBody) -> Result<CoordinatorIdentity, InvalidInput> {
        Ok(CoordinatorIdentity::new(
            id("daemonId", body.daemon_id)?,
            id("runId", body.run_id)?,
            optional_id("sessionId", body.session_id)?,
        ))
    }
}

/// Query of `GET /v1/meshes/{mesh}/events/held`: which held events to list. Every
/// filter that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeldParams {
    /// Held for this reason (`pending_retention_expired`,
    /// `v2_enforce_unversioned_quarantined`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// About this node (any of its id forms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// About this task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Of this event name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Held at least this many seconds ago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than_secs: Option<u64>,
}

impl HeldParams {
    /// The core's filter, ages counted back from `now`.
    pub fn into_filter(self, now: Timestamp) -> Result<HeldFilter, InvalidInput> {
        let held_before =
            self.older_than_secs.map(|secs| seconds_before("olderThanSecs", now, secs)).transpose()?;
        let filter = HeldFilter {
            reason: optional(self.reason),
            node_id: optional_id("nodeId", self.node_id)?,
            task_id: optional_id("taskId", self.task_id)?,
            event: optional(self.event),
            held_before,
        };
        filter.validate()?;
        Ok(filter)
    }
}

/// `POST /v1/meshes/{mesh}/events/held/requeue`: put held events back in the
/// inbox, named by `ids` or selected by the filters (the same as the listing's),
/// or every held event with `all`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequeueHeldBody {
    /// The held events' ledger entry ids, as the listing shows them (`heldEntryId`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// Held for this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// About this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// About this task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Of this event name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Held at least this many seconds ago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than_secs: Option<u64>,
    /// Every held event of the mesh (when no id or filter is given).
    #[serde(default)]
    pub all: bool,
}

/// Which held events a requeue means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldSelection {
    /// These held entries, each of which must still be held.
    Ids(Vec<String>),
    /// The held events the filter selects (every one for an empty filter).
    Filter(HeldFilter),
}

impl RequeueHeldBody {
    /// The selection: ids, or a filter; ids with a filter are refused, and so is
    /// a request that names nothing without `all`.
    pub fn into_selection(self, now: Timestamp) -> Result<HeldSelection, InvalidInput> {
        let ids = self.ids;
        let all = self.all;
        let filter = HeldParams {
            reason: self.reason,
            node_id: self.node_id,
            task_id: self.task_id,
            event: self.event,
            older_than_secs: self.older_than_secs,
        }
        .into_filter(now)?;
        if !ids.is_empty() {
            if !filter.is_empty() || all {
                return Err(InvalidInput::new("ids", "name held events by ids or by filters, not both"));
            }
            let ids: Result<Vec<String>, InvalidInput> =
                ids.into_iter().enumerate().map(|(i, value)| id(&format!("ids[{i}]"), value)).collect();
            return ids.map(HeldSelection::Ids);
        }
        if filter.is_empty() && !all {
            return Err(InvalidInput::new(
                "all",
                "name the held events by ids or filters, or pass all: true to requeue every one",
            ));
        }
        Ok(HeldSelection::Filter(filter))
    }
}

/// Query of `GET /v1/meshes/{mesh}/completions/fingerprints`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FingerprintParams {
    /// Only fingerprints of completions of this task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Only fingerprints naming this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// At most this many (100 when absent, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Query of `GET /v1/meshes/{mesh}/completions/conflicts`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConflictParams {
    /// Only conflicts in which this task took part (either side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Only conflicts in which this session took part (either side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// How far back, in seconds (3600 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_secs: Option<u64>,
}

/// `POST /v1/meshes/{mesh}/deliveries/{id}/status`: move a delivery on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryStatusBody {
    /// The new status: `delivering`, `queued`, `delivered`, `acked` (read by the
    /// session), `completed`, `failed`, `expired` or `cancelled`. A status never
    /// moves backwards and never leaves `failed`, `expired` or `cancelled`.
    pub status: String,
    /// The delivery error to record (cleared when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Count one more delivery attempt (a retry, which may move the status back).
    #[serde(default)]
    pub attempt: bool,
}

impl DeliveryStatusBody {
    /// The status and the store's update.
    pub fn into_update(
        self,
    ) -> Result<(agentmesh_core::DeliveryStatus, agentmesh_store::DeliveryUpdate), InvalidInput> {
        let status = self.status.parse()?;
        Ok((
            status,
            agentmesh_store::DeliveryUpdate {
                last_error: optional(self.error),
                increment_attempt: self.attempt,
            },
        ))
    }
}

/// `POST /v1/meshes/{mesh}/dispatches/status`: move direct dispatches on, the one
/// of a task or every open one of a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DispatchStatusBody {
    /// `dispatched`, `acked`, `completed`, `failed` or `stale`; completed and
    /// failed dispatches never change again.
    pub status: String,
    /// The dispatch of this task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Every open dispatch of this session (without `taskId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl DispatchStatusBody {
    /// The status, the session and the task; one of the two must be given.
    pub fn into_parts(
        self,
    ) -> Result<(agentmesh_core::DispatchStatus, Option<String>, Option<String>), InvalidInput> {
        let status = self.status.parse()?;
        let task_id = optional_id("taskId", self.task_id)?;
        let session_id = optional_id("sessionId", self.session_id)?;
        if task_id.is_none() && session_id.is_none() {
            return Err(InvalidInput::new(
                "taskId",
                "name the dispatch by taskId, or a session by sessionId",
            ));
        }
        Ok((status, session_id, task_id))
    }
}

/// `POST /v1/meshes/{mesh}/dispatches/mark-stale`: dispatches nobody acknowledged
/// in time become `stale`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaleDispatchesBody {
    /// `dispatched` rows sent at least this many seconds ago.
    pub older_than_secs: u64,
}

/// `POST /v1/meshes/{mesh}/dispatches/remove`: forget the dispatches of tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoveDispatchesBody {
    /// The tasks whose dispatches go.
    pub task_ids: Vec<String>,
}

impl RemoveDispatchesBody {
    /// The task ids, trimmed; one that breaks the id rule is refused by its index,
    /// and so is none.
    pub fn into_ids(self) -> Result<Vec<String>, InvalidInput> {
        if self.task_ids.is_empty() {
            return Err(InvalidInput::new("taskIds", "must name at least one task"));
        }
        self.task_ids.into_iter().enumerate().map(|(i, value)| id(&format!("taskIds[{i}]"), value)).collect()
    }
}

/// Query of `GET /v1/meshes/{mesh}/tool-calls`: the rate guard's recent calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallParams {
    /// Only calls of this caller role (`coordinator`, `worker` or `unknown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// How far back, in seconds (the log keeps 100 s; that when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_secs: Option<u64>,
    /// At most this many calls listed (100 when absent, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Seconds before `now` as an instant, refusing an age that overflows for `field`.
pub fn seconds_before(field: &str, now: Timestamp, secs: u64) -> Result<Timestamp, InvalidInput> {
    i64::try_from(secs)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .and_then(|ms| now.millis().checked_sub(ms))
        .map(Timestamp::from_millis)
        .ok_or_else(|| InvalidInput::new(field, "is too large"))
}

/// A page size given for `field`: `default` when absent, refused outside 1..=`max`.
pub fn page_limit(field: &str, limit: Option<u32>, default: u32, max: u32) -> Result<u32, InvalidInput> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(_) => Err(InvalidInput::new(field, format!("must be between 1 and {max}"))),
    }
}

/// Refuses a blank value for `field`, returning it trimmed.
pub fn required(field: &str, value: String) -> Result<String, InvalidInput> {
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
pub fn optional(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// An id given for `field`, checked by the core's id rule and returned trimmed.
pub fn id(field: &str, value: String) -> Result<String, InvalidInput> {
    agentmesh_core::ids::validate_owned_id(field, value)
}

/// An optional id: absent or blank counts as absent; any other value must follow
/// the id rule, and is returned trimmed.
pub fn optional_id(field: &str, value: Option<String>) -> Result<Option<String>, InvalidInput> {
    agentmesh_core::ids::validate_optional_id(field, value.as_deref())
}

/// Parses an ISO-8601 instant given for `field` into the stored form
/// (`2025-01-01T00:00:00.000Z`), so comparisons against stored instants hold
/// whatever offset or precision the caller wrote.
pub fn instant(field: &str, text: &str) -> Result<String, InvalidInput> {
    Timestamp::parse_iso(text.trim())
        .map(Timestamp::iso)
        .ok_or_else(|| InvalidInput::new(field, format!("{text:?} is not an ISO-8601 instant")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_refs_become_ids_and_dependencies_follow_them() {
        let body: BatchEnqueueBody = serde_json::from_value(serde_json::json!({
            "tasks": [
                { "message": "a", "ref": "first" },
                { "message": "b", "ref": "second", "id": "b-id" },
                { "message": "c", "dependsOn": ["first", "second", "elsewhere"] }
            ],
            "coordinator": { "daemonId": "mach_1", "runId": "run-1" }
        }))
        .unwrap();
        let tasks = body.into_new_tasks().unwrap();
        let first = tasks[0].id.clone().unwrap();
        assert_eq!(tasks[1].id.as_deref(), Some("b-id"));
        assert_eq!(tasks[2].depends_on, vec![first, "b-id".to_owned(), "elsewhere".to_owned()]);
        assert!(tasks.iter().all(|t| t.source_coordinator_run_id.as_deref() == Some("run-1")));
    }

    #[test]
    fn batch_mistakes_name_the_item() {
        let dup = BatchEnqueueBody {
            tasks: vec![
                EnqueueBody { message: "a".into(), reference: Some("x".into()), ..Default::default() },
                EnqueueBody { message: "b".into(), reference: Some("x".into()), ..Default::default() },
            ],
            coordinator: None,
        };
        assert_eq!(dup.into_new_tasks().unwrap_err().field, "tasks[1].ref");
        let empty = BatchEnqueueBody::default();
        assert_eq!(empty.into_new_tasks().unwrap_err().field, "tasks");
        let single = EnqueueBody { message: "a".into(), reference: Some("x".into()), ..Default::default() };
        assert_eq!(single.into_new_task().unwrap_err().field, "ref");
    }

    #[test]
    fn completion_reason_needs_failed() {
        let body = CompletionBody { session_id: "s".into(), reason: Some("x".into()), ..Default::default() };
        assert_eq!(body.into_report(Timestamp::from_millis(0)).unwrap_err().field, "reason");
        let blank = CompletionBody { session_id: " ".into(), ..Default::default() };
        assert_eq!(blank.into_report(Timestamp::from_millis(0)).unwrap_err().field, "sessionId");
    }

    #[test]
    fn blocked_is_a_status_filter_of_pending_tasks_held_by_a_failed_dependency() {
        let task = |id: &str, status: TaskStatus, blocked: bool| {
            let mut task = agentmesh_core::Task::new(id, "m", "work", "2025-01-01T00:00:00.000Z");
            task.status = status;
            task.blocked_reason = blocked.then(|| "dependency_failed:a".to_owned());
            task
        };
        let free = task("free", TaskStatus::Pending, false);
        let held = task("held", TaskStatus::Pending, true);
        let done = task("done", TaskStatus::Completed, false);

        let blocked = StatusFilter::parse(Some("blocked")).unwrap();
        assert_eq!(blocked.stored(), [TaskStatus::Pending]);
        assert!(blocked.selects(&held) && !blocked.selects(&free) && !blocked.selects(&done));

        let pending = StatusFilter::parse(Some("pending")).unwrap();
        assert!(pending.selects(&held) && pending.selects(&free) && !pending.selects(&done));

        let both = StatusFilter::parse(Some(" blocked, completed ,")).unwrap();
        assert_eq!(both.stored(), [TaskStatus::Completed, TaskStatus::Pending]);
        assert!(both.selects(&held) && both.selects(&done) && !both.selects(&free));

        let every = StatusFilter::parse(None).unwrap();
        assert!(every.stored().is_empty() && every.selects(&free) && every.selects(&done));

        let err = StatusFilter::parse(Some("pending,done")).unwrap_err();
        assert_eq!(err.field, "status");
        assert!(err.problem.contains("\"done\"") && err.problem.contains("blocked"), "{err}");
    }

    #[test]
    fn a_pushed_event_of_another_mesh_is_refused() {
        let mut event = Map::new();
        event.insert("event".into(), Value::from("agent:stopped"));
        event.insert("meshId".into(), Value::from("other"));
        let body = PushEventBody { event, ..Default::default() };
        assert_eq!(body.into_parts("m", Timestamp::from_millis(0)).unwrap_err().field, "event.meshId");
    }
}

/// `POST /v1/meshes/{mesh}/reservations`: reserve path patterns of a
/// repository scope (see [`agentmesh_core::reservation`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReserveBody {
    /// The repository scope (a repository id or root).
    pub scope: String,
    /// The holder's session.
    pub session_id: String,
    /// The holder's node.
    pub node_id: String,
    /// Path patterns, relative to the scope's root.
    pub patterns: Vec<String>,
    /// Exclusive (the default) or shared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long it lives unless renewed, in milliseconds (an hour when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Compare names without case (the repository's `core.ignorecase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_case: Option<bool>,
    /// When the request conflicts, wait up to this many seconds for the
    /// conflict to clear (at most 600; a commit of the mesh wakes the wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_secs: Option<u64>,
}

impl ReserveBody {
    /// The store's request, and how long to wait for a conflict to clear.
    pub fn into_request(self) -> Result<(agentmesh_core::NewReservation, std::time::Duration), InvalidInput> {
        let wait = std::time::Duration::from_secs(self.wait_secs.unwrap_or(0));
        let wait = crate::watch::watch_timeout("waitSecs", wait)?;
        let request = agentmesh_core::NewReservation {
            scope: self.scope,
            session_id: self.session_id,
            node_id: self.node_id,
            patterns: self.patterns,
            exclusive: self.exclusive.unwrap_or(true),
            reason: self.reason,
            ttl_ms: self.ttl_ms,
            ignore_case: self.ignore_case.unwrap_or(false),
        };
        request.validate()?;
        Ok((request, wait))
    }
}

/// `POST /v1/meshes/{mesh}/reservations/{id}/renew` and `.../release`: the
/// holder's session and the reservation's epoch; a renew may give a new time
/// to live.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FenceBody {
    /// The holder's session.
    pub session_id: String,
    /// The epoch the grant gave.
    pub epoch: u64,
    /// A renew's new time to live, in milliseconds (the one it had when
    /// absent); a release refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

impl FenceBody {
    /// The fence, its session checked by the id rule.
    pub fn fence(&self) -> Result<agentmesh_store::Fence, InvalidInput> {
        Ok(agentmesh_store::Fence {
            session_id: id("sessionId", self.session_id.clone())?,
            epoch: self.epoch,
        })
    }
}

/// `GET /v1/meshes/{mesh}/reservations`: the reservations in force.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationListParams {
    /// Only this scope's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// `POST /v1/meshes/{mesh}/reservations/check`: which paths another holder's
/// exclusive reservation stands in the way of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckPathsBody {
    /// The repository scope.
    pub scope: String,
    /// Paths relative to the scope's root (both sides of a rename).
    pub paths: Vec<String>,
    /// The session asking: its own reservations are not in its way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Compare names without case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_case: Option<bool>,
}
