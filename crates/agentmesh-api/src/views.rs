//! Response views: what every transport answers, in the original's camelCase
//! field names.
//!
//! Tasks, ledger entries and ledger slices go out in the core's own serde shape
//! (the original's). Everything else the core keeps without serde gets a view
//! here, converted field by field, so the wire shape is decided in one place.
//! Views deserialize too: the remote client reads the daemon's answers into the
//! same types the local path builds, which is what keeps the CLI's `--json`
//! output identical whichever way it ran.

use agentmesh_core::events::{DrainCounters, PendingEvent};
use agentmesh_core::{
    CompletionConflict, CompletionFingerprint, DirectDispatch, IdleSession, LedgerEntry, Mission,
    MissionProgress, NodeCandidate, Requeued, SessionDelivery, Task, TaskStatus, fingerprint_parts,
};
use agentmesh_store::{
    ActiveAssignment, ClaimOutcome, DrainOutcome, DuplicateReason, InboxEvent, MeshSummary, QueueOutcome,
    RawJson, RecordedToolCall, StatusCount,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a claim answers: the task, or `null` and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClaimView {
    /// The claimed task, if any.
    pub task: Option<Task>,
    /// Why nothing was claimed (the refusal reason of the furthest gate reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// With `paths_reserved`: the reservations that held the paths of the task
    /// the claim stepped over (as the claim's `reservation_denied` entry
    /// records them).
    #[serde(default, rename = "blockedBy", skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<agentmesh_core::Conflict>,
}

impl From<ClaimOutcome> for ClaimView {
    fn from(outcome: ClaimOutcome) -> ClaimView {
        match outcome {
            ClaimOutcome::Claimed(task) => {
                ClaimView { task: Some(task), refusal: None, blocked_by: Vec::new() }
            }
            ClaimOutcome::Refused(reason) => {
                ClaimView { task: None, refusal: Some(reason.as_str().to_owned()), blocked_by: Vec::new() }
            }
        }
    }
}

/// What a complete-and-claim answers: the task as completed (or failed), and the
/// claim that followed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CompleteAndClaimView {
    /// The reported task, as it is now.
    pub completed: Task,
    /// The next task, or why there is none.
    pub next: ClaimView,
}

impl From<(Task, ClaimOutcome)> for CompleteAndClaimView {
    fn from((completed, next): (Task, ClaimOutcome)) -> CompleteAndClaimView {
        CompleteAndClaimView { completed, next: ClaimView::from(next) }
    }
}

/// What a requeue answers: the task, and whether it is pending again or failed
/// because its retry budget was spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RequeueView {
    /// The task as it is now.
    pub task: Task,
    /// `pending` or `retries_exhausted`.
    pub outcome: String,
}

impl From<Requeued> for RequeueView {
    fn from(requeued: Requeued) -> RequeueView {
        match requeued {
            Requeued::Pending(task) => RequeueView { task, outcome: "pending".to_owned() },
            Requeued::RetriesExhausted(task) => RequeueView { task, outcome: "retries_exhausted".to_owned() },
        }
    }
}

/// What a presence report answers: whether the coordinator now counts as live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PresenceView {
    /// Live (it touched), or not (it ended).
    pub live: bool,
}

/// What an ack answers: how many events it marked drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AckView {
    /// Events marked drained.
    pub acked: u64,
}

/// What deleting events answers: how many events it deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeletedEventsView {
    /// Events deleted, drained or not.
    pub deleted: u64,
}

/// What a retract answers: how many undelivered events it removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RetractView {
    /// Events removed.
    pub retracted: u64,
}

/// What a ledger import answers: how many entries were new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ImportView {
    /// Entries stored.
    pub imported: u64,
}

/// A coordinator inbox event: the original's inbox row (`id`, `event`, `queuedAt`
/// in epoch milliseconds, `fingerprint`), with the whole event, v2 envelope
/// included, as `payload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InboxEventView {
    /// The row id (what `ack` takes).
    pub id: String,
    /// The event name.
    pub event: Value,
    /// When it was queued (epoch milliseconds).
    pub queued_at: i64,
    /// Its content fingerprint, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The event as stored, passed through unparsed.
    pub payload: RawJson,
}

impl InboxEventView {
    /// The view of an event just queued under row id `id`.
    pub fn queued(id: String, event: &PendingEvent) -> InboxEventView {
        InboxEventView {
            id,
            event: Value::from(event.event.as_str()),
            queued_at: event.queued_at.millis(),
            fingerprint: None,
            payload: RawJson::from_value(&event.to_value()),
        }
    }

    /// The event name, or `""` when the payload has none.
    pub fn name(&self) -> &str {
        self.event.as_str().unwrap_or_default()
    }

    /// The text written for the coordinator (`coordinatorMessage`) in the parsed
    /// `payload`, when it has one.
    pub fn coordinator_message(payload: &Value) -> Option<&str> {
        payload.get("coordinatorMessage").and_then(Value::as_str).filter(|t| !t.trim().is_empty())
    }
}

impl From<InboxEvent> for InboxEventView {
    fn from(e: InboxEvent) -> InboxEventView {
        InboxEventView {
            id: e.id,
            event: Value::from(e.name),
            queued_at: e.queued_at_ms,
            fingerprint: e.fingerprint,
            payload: e.event,
        }
    }
}

/// What a push answers: the stored event, or why it was a duplicate.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum PushView {
    /// Refused as a duplicate; nothing was stored.
    Duplicate {
        /// `fingerprint` or `refine_terminal`.
        duplicate: String,
    },
    /// Stored.
    Queued(Box<InboxEventView>),
}

impl<'de> Deserialize<'de> for PushView {
    /// Told apart by the `duplicate` field. (Not derived: an untagged enum buffers
    /// its input, and the stored event inside cannot be read back from a buffer.)
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<PushView, D::Error> {
        #[derive(Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct Duplicate {
            duplicate: String,
        }
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        if let Ok(Duplicate { duplicate }) = serde_json::from_str(raw.get()) {
            return Ok(PushView::Duplicate { duplicate });
        }
        serde_json::from_str(raw.get()).map(PushView::Queued).map_err(serde::de::Error::custom)
    }
}

impl From<QueueOutcome> for PushView {
    fn from(outcome: QueueOutcome) -> PushView {
        match outcome {
            QueueOutcome::Queued { id, event } => {
                PushView::Queued(Box::new(InboxEventView::queued(id, &event)))
            }
            QueueOutcome::Duplicate(reason) => PushView::Duplicate {
                duplicate: match reason {
                    DuplicateReason::Fingerprint => "fingerprint",
                    DuplicateReason::RefineTerminal => "refine_terminal",
                }
                .to_owned(),
            },
        }
    }
}

/// A drain (or a watch): the delivered events, the drain's counters under the
/// original's names, and the row ids it held back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DrainView {
    /// Events delivered, oldest first.
    pub events: Vec<InboxEventView>,
    /// The drain's counters.
    pub counters: DrainCounters,
    /// Row ids quarantined by this drain.
    pub quarantined: Vec<String>,
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

/// A mission's progress, counted from its tasks when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressView {
    /// Tasks in the mission.
    pub total: u64,
    /// Pending tasks.
    pub pending: u64,
    /// Assigned tasks.
    pub assigned: u64,
    /// Completed tasks.
    pub completed: u64,
    /// Failed tasks.
    pub failed: u64,
    /// Cancelled tasks.
    pub cancelled: u64,
    /// Completed tasks as a whole percentage of all tasks.
    pub percent_complete: u8,
}

impl From<MissionProgress> for ProgressView {
    fn from(p: MissionProgress) -> ProgressView {
        ProgressView {
            total: p.total,
            pending: p.pending,
            assigned: p.assigned,
            completed: p.completed,
            failed: p.failed,
            cancelled: p.cancelled,
            percent_complete: p.percent_complete(),
        }
    }
}

/// A mission: the original's mission row plus its derived progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MissionView {
    /// Mission id.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// Short title.
    pub title: String,
    /// What done looks like (empty when unset).
    pub goal: String,
    /// Status word.
    pub status: String,
    /// Where the mission came from (`null` when it was never given).
    #[serde(default)]
    pub source: Option<String>,
    /// Creation time (ISO).
    pub created_at: String,
    /// Last change (ISO).
    pub updated_at: String,
    /// Progress counted from the mission's tasks.
    pub progress: ProgressView,
}

impl MissionView {
    /// The view of `mission` with `progress`.
    pub fn new(mission: Mission, progress: MissionProgress) -> MissionView {
        MissionView {
            id: mission.id,
            mesh_id: mission.mesh_id,
            title: mission.title,
            goal: mission.goal,
            status: mission.status,
            source: mission.source,
            created_at: mission.created_at,
            updated_at: mission.updated_at,
            progress: progress.into(),
        }
    }
}

/// What a mission upsert answers: the mission, and whether it was new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MissionSaved {
    /// The mission as it is now.
    #[serde(flatten)]
    pub mission: MissionView,
    /// It did not exist before.
    pub created: bool,
}

/// One mission with its tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MissionDetailView {
    /// The mission and its progress.
    #[serde(flatten)]
    pub mission: MissionView,
    /// The mission's tasks, oldest first.
    pub tasks: Vec<Task>,
}

/// An idle worker session. `expiresAt` is epoch milliseconds, as the original's
/// rows carry it; `metadata` is left out when the session reported none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdleSessionView {
    /// The mesh.
    pub mesh_id: String,
    /// The node the session runs on.
    pub node_id: String,
    /// The session.
    pub session_id: String,
    /// Its provider type.
    pub provider_type: String,
    /// When the idle report runs out (epoch milliseconds).
    pub expires_at: i64,
    /// Anything else the session reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl From<IdleSession> for IdleSessionView {
    fn from(s: IdleSession) -> IdleSessionView {
        IdleSessionView {
            mesh_id: s.mesh_id,
            node_id: s.node_id,
            session_id: s.session_id,
            provider_type: s.provider_type,
            expires_at: s.expires_at_ms,
            metadata: s.metadata,
        }
    }
}

/// A session delivery: every column of the original's row, unset ones as `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// Delivery id.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// Target node.
    pub node_id: Option<String>,
    /// Target session.
    pub session_id: Option<String>,
    /// Provider type of the target session.
    pub provider_type: Option<String>,
    /// The task it carries.
    pub task_id: Option<String>,
    /// What it is (`task`, `nudge`, `message`, ...).
    pub kind: String,
    /// Higher goes first.
    pub priority: i64,
    /// The text to hand over.
    pub message: String,
    /// Where it is.
    pub status: String,
    /// Not before this instant (ISO).
    pub deliver_after: Option<String>,
    /// Expires at this instant (ISO).
    pub expires_at: Option<String>,
    /// Delivery attempts so far.
    pub attempt_count: u32,
    /// The coordinator session that sent it.
    pub source_coordinator_session_id: Option<String>,
    /// The coordinator daemon that sent it.
    pub source_coordinator_daemon_id: Option<String>,
    /// The last delivery error.
    pub last_error: Option<String>,
    /// Creation time (ISO).
    pub created_at: String,
    /// Last change (ISO).
    pub updated_at: String,
}

impl From<SessionDelivery> for DeliveryView {
    fn from(d: SessionDelivery) -> DeliveryView {
        DeliveryView {
            id: d.id,
            mesh_id: d.mesh_id,
            node_id: d.node_id,
            session_id: d.session_id,
            provider_type: d.provider_type,
            task_id: d.task_id,
            kind: d.kind,
            priority: d.priority,
            message: d.message,
            status: d.status.as_str().to_owned(),
            deliver_after: d.deliver_after,
            expires_at: d.expires_at,
            attempt_count: d.attempt_count,
            source_coordinator_session_id: d.source_coordinator_session_id,
            source_coordinator_daemon_id: d.source_coordinator_daemon_id,
            last_error: d.last_error,
            created_at: d.created_at,
            updated_at: d.updated_at,
        }
    }
}

/// A direct dispatch: every column of the original's row, unset ones as `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DispatchView {
    /// The dispatched task's id.
    pub task_id: String,
    /// The mesh.
    pub mesh_id: String,
    /// Target node.
    pub node_id: Option<String>,
    /// Target session.
    pub session_id: Option<String>,
    /// Provider type of the target session.
    pub provider_type: Option<String>,
    /// The instruction text.
    pub message: String,
    /// Task mode by name.
    pub task_mode: Option<String>,
    /// How it was sent (`pty`, `p2p`, `api`, ...).
    pub via: String,
    /// Where it is.
    pub status: String,
    /// It went to a session that was idle at the time.
    pub dispatched_to_idle_session: bool,
    /// When it was sent (ISO).
    pub dispatched_at: String,
    /// Last change (ISO).
    pub updated_at: String,
}

impl From<DirectDispatch> for DispatchView {
    fn from(d: DirectDispatch) -> DispatchView {
        DispatchView {
            task_id: d.task_id,
            mesh_id: d.mesh_id,
            node_id: d.node_id,
            session_id: d.session_id,
            provider_type: d.provider_type,
            message: d.message,
            task_mode: d.task_mode,
            via: d.via,
            status: d.status.as_str().to_owned(),
            dispatched_to_idle_session: d.dispatched_to_idle_session,
            dispatched_at: d.dispatched_at,
            updated_at: d.updated_at,
        }
    }
}

/// A node ranked for a task, best first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRankView {
    /// The node.
    pub node_id: String,
    /// Its scheduling priority.
    pub scheduling_priority: i64,
    /// Tasks assigned to it now.
    pub load: u64,
}

impl From<NodeCandidate> for NodeRankView {
    fn from(c: NodeCandidate) -> NodeRankView {
        NodeRankView { node_id: c.node_id, scheduling_priority: c.scheduling_priority, load: c.load }
    }
}

/// An assigned task, as the status shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveAssignmentView {
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
    /// When it was claimed (ISO).
    pub dispatch_timestamp: Option<String>,
    /// When its lease runs out (ISO).
    pub lease_expires_at: Option<String>,
    /// Its fencing epoch (the task's `dispatchNonce`).
    pub epoch: u64,
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

/// Undrained events addressed to one coordinator (or to none in particular).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingForCoordinatorView {
    /// The addressed daemon, when the events name one.
    pub daemon_id: Option<String>,
    /// The addressed coordinator run, when the events name one.
    pub run_id: Option<String>,
    /// The addressed coordinator session, when the events name one.
    pub session_id: Option<String>,
    /// How many events wait.
    pub count: u64,
}

/// The count of every task status, in lifecycle order, zero included: the `tasks`
/// object of the status and of the mesh listing.
pub fn task_counts(counts: &[StatusCount]) -> Map<String, Value> {
    TaskStatus::ALL
        .into_iter()
        .map(|status| {
            let count = counts.iter().find(|c| c.status == status).map_or(0, |c| c.count);
            (status.as_str().to_owned(), Value::from(count))
        })
        .collect()
}

/// One mesh of a data dir, with its counts, as `GET /v1/meshes` and `agentmesh
/// meshes` list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeshSummaryView {
    /// The mesh.
    pub mesh_id: String,
    /// Task count of every status, in lifecycle order (zero included).
    pub tasks: Map<String, Value>,
    /// Undrained coordinator events.
    pub pending_events: u64,
    /// Ledger entries.
    pub ledger_entries: u64,
    /// Missions.
    pub missions: u64,
}

impl From<MeshSummary> for MeshSummaryView {
    fn from(summary: MeshSummary) -> MeshSummaryView {
        MeshSummaryView {
            tasks: task_counts(&summary.tasks),
            mesh_id: summary.mesh_id,
            pending_events: summary.pending_events,
            ledger_entries: summary.ledger_entries,
            missions: summary.missions,
        }
    }
}

/// An overview of the mesh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// The mesh.
    pub mesh_id: String,
    /// Task count of every status, in lifecycle order (zero included).
    pub tasks: Map<String, Value>,
    /// Assigned tasks, oldest dispatch first.
    pub active_assignments: Vec<ActiveAssignmentView>,
    /// Undrained coordinator events.
    pub pending_events: u64,
    /// Undrained events by the coordinator they are addressed to.
    pub pending_by_coordinator: Vec<PendingForCoordinatorView>,
    /// Idle sessions whose report has not expired.
    pub idle_sessions: Vec<IdleSessionView>,
    /// The newest ledger entries, oldest first.
    pub recent_ledger: Vec<LedgerEntry>,
    /// What an acknowledged write of the store survives (`full`,
    /// `process-crash-only`); absent from a daemon that does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<String>,
    /// The mesh's webhook subscriptions (never their secrets).
    #[serde(default)]
    pub webhooks: Vec<agentmesh_core::Webhook>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_views_read_back_as_they_were_written() {
        let dup = PushView::Duplicate { duplicate: "fingerprint".into() };
        let text = serde_json::to_string(&dup).unwrap();
        assert_eq!(text, r#"{"duplicate":"fingerprint"}"#);
        assert_eq!(serde_json::from_str::<PushView>(&text).unwrap(), dup);
        let queued = PushView::Queued(Box::new(InboxEventView {
            id: "row".into(),
            event: Value::from("agent:stopped"),
            queued_at: 5,
            fingerprint: None,
            payload: RawJson::from_value(&serde_json::json!({ "event": "agent:stopped" })),
        }));
        let text = serde_json::to_string(&queued).unwrap();
        assert_eq!(serde_json::from_str::<PushView>(&text).unwrap(), queued);
    }
}

/// What recording a tool call answers: the rate guard's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateVerdictView {
    /// More calls of the tool than allowed within the guard's window.
    pub rate_limit_exceeded: bool,
    /// Calls of the tool within the window, this one included.
    pub calls_in_window: u64,
    /// The text to show the caller when the guard tripped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advisory: Option<String>,
}

impl From<agentmesh_core::RateVerdict> for RateVerdictView {
    fn from(v: agentmesh_core::RateVerdict) -> RateVerdictView {
        RateVerdictView {
            rate_limit_exceeded: v.rate_limit_exceeded,
            calls_in_window: v.calls_in_window,
            advisory: v.advisory,
        }
    }
}

/// A held event: its `event_held` ledger entry, with the fields an operator
/// filters by lifted out of the payload, and the whole event as it was held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldEventView {
    /// The ledger entry id: what a requeue by id takes.
    pub held_entry_id: String,
    /// When it was held (ISO).
    pub held_at: String,
    /// The event name.
    pub event: Option<String>,
    /// Why it was held.
    pub reason: Option<String>,
    /// The node it is about.
    pub node_id: Option<String>,
    /// The task it is about.
    pub task_id: Option<String>,
    /// Its v2 event id.
    pub event_id: Option<String>,
    /// When it was first queued (epoch milliseconds).
    pub queued_at: Option<i64>,
    /// The coordinator daemon it was for.
    pub target_coordinator_daemon_id: Option<String>,
    /// The inbox row it was held from.
    pub pending_event_id: Option<String>,
    /// The event, as it was held.
    pub held_event: Value,
}

impl From<LedgerEntry> for HeldEventView {
    fn from(entry: LedgerEntry) -> HeldEventView {
        let text = |key: &str| entry.payload.get(key).and_then(Value::as_str).map(str::to_owned);
        HeldEventView {
            event: text("event"),
            reason: text("reason"),
            node_id: entry.node_id.clone(),
            task_id: agentmesh_core::events::held::held_task_id(&entry).map(str::to_owned),
            event_id: text("eventId"),
            queued_at: entry.payload.get("queuedAt").and_then(Value::as_i64),
            target_coordinator_daemon_id: text("targetCoordinatorDaemonId"),
            pending_event_id: text("pendingEventId"),
            held_event: entry.payload.get("heldEvent").cloned().unwrap_or(Value::Null),
            held_entry_id: entry.id,
            held_at: entry.timestamp,
        }
    }
}

/// What became of one held event a requeue took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequeuedHeldView {
    /// The held entry.
    pub held_entry_id: String,
    /// The event name.
    pub event: Option<String>,
    /// Queued again (`false`: it was already queued, or a live event holds its
    /// fingerprint, or it is unrecoverable).
    pub requeued: bool,
    /// Its row is gone and its event cannot be read (an old entry of the
    /// original): skipped, and still held.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unrecoverable: bool,
}

/// What a requeue of held events answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequeueHeldView {
    /// How many are queued again.
    pub requeued: u64,
    /// How many were skipped as unrecoverable (see [`RequeuedHeldView::unrecoverable`]).
    #[serde(default)]
    pub unrecoverable: u64,
    /// Each held event the requeue took, oldest hold first.
    pub events: Vec<RequeuedHeldView>,
}

/// A completion fingerprint, with what its text names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FingerprintView {
    /// The key, as recorded.
    pub fingerprint: String,
    /// When it stops counting (epoch milliseconds).
    pub expires_at: i64,
    /// A durable dedup record (`pending::`), which outlives the drain.
    pub durable: bool,
    /// The event name.
    pub event: Option<String>,
    /// The task.
    pub task_id: Option<String>,
    /// The session, when the key names one.
    pub session_id: Option<String>,
    /// The node, when the key names one.
    pub node_id: Option<String>,
    /// `weak` or `genuine`, for a task-keyed completion.
    pub strength: Option<String>,
}

impl From<CompletionFingerprint> for FingerprintView {
    fn from(f: CompletionFingerprint) -> FingerprintView {
        let parts = fingerprint_parts(&f.fingerprint);
        FingerprintView {
            fingerprint: f.fingerprint,
            expires_at: f.expires_at_ms,
            durable: parts.durable,
            event: parts.event,
            task_id: parts.task_id,
            session_id: parts.session_id,
            node_id: parts.node_id,
            strength: parts.strength,
        }
    }
}

/// A completion conflict: every column of the original's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConflictView {
    /// Record id.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// The contested fingerprint.
    pub fingerprint: String,
    /// The task whose completion was suppressed.
    pub conflicting_task_id: Option<String>,
    /// Its session.
    pub conflicting_session_id: Option<String>,
    /// The task that owned the fingerprint first.
    pub original_task_id: Option<String>,
    /// Its session.
    pub original_session_id: Option<String>,
    /// The event name.
    pub event: String,
    /// When (ISO).
    pub created_at: String,
}

impl From<CompletionConflict> for ConflictView {
    fn from(c: CompletionConflict) -> ConflictView {
        ConflictView {
            id: c.id,
            mesh_id: c.mesh_id,
            fingerprint: c.fingerprint,
            conflicting_task_id: c.conflicting_task_id,
            conflicting_session_id: c.conflicting_session_id,
            original_task_id: c.original_task_id,
            original_session_id: c.original_session_id,
            event: c.event,
            created_at: c.created_at,
        }
    }
}

/// What a delivery status change answers: whether it moved, and the delivery as
/// it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryChangeView {
    /// The status changed (`false`: it would have moved backwards or out of a
    /// final status).
    pub changed: bool,
    /// The delivery now.
    pub delivery: DeliveryView,
}

/// What a dispatch status change answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DispatchChangeView {
    /// Dispatches that changed.
    pub changed: u64,
}

/// What marking stale dispatches answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaleDispatchesView {
    /// Dispatches now `stale`.
    pub marked_stale: u64,
}

/// What a removal answers: how many rows went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemovedView {
    /// Rows removed.
    pub removed: u64,
}

/// One recorded tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    /// The tool.
    pub tool: String,
    /// The calling session, if known.
    pub session_id: Option<String>,
    /// Who called (`unknown` when the call did not say).
    pub caller_role: String,
    /// When (epoch milliseconds).
    pub called_at: i64,
}

impl From<RecordedToolCall> for ToolCallView {
    fn from(c: RecordedToolCall) -> ToolCallView {
        ToolCallView {
            tool: c.tool,
            session_id: c.session_id,
            caller_role: c.caller_role.unwrap_or_else(|| "unknown".to_owned()),
            called_at: c.called_at_ms,
        }
    }
}

/// The calls of one caller role, counted by tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleCallsView {
    /// The role.
    pub caller_role: String,
    /// Its calls in the window.
    pub calls: u64,
    /// Its calls by tool, most called first.
    pub by_tool: Vec<ToolCountView>,
}

/// Calls of one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolCountView {
    /// The tool.
    pub tool: String,
    /// How many calls.
    pub calls: u64,
}

/// The rate guard's recent calls: per caller role, then each call, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallLogView {
    /// Calls per caller role, the busiest role first.
    pub by_role: Vec<RoleCallsView>,
    /// The calls, newest first.
    pub calls: Vec<ToolCallView>,
}

impl ToolCallLogView {
    /// The log view of `calls` (newest first).
    pub fn new(calls: Vec<ToolCallView>) -> ToolCallLogView {
        let mut by_role: Vec<RoleCallsView> = Vec::new();
        for call in &calls {
            let role = match by_role.iter_mut().find(|r| r.caller_role == call.caller_role) {
                Some(role) => role,
                None => {
                    by_role.push(RoleCallsView {
                        caller_role: call.caller_role.clone(),
                        calls: 0,
                        by_tool: Vec::new(),
                    });
                    by_role.last_mut().expect("just pushed")
                }
            };
            role.calls += 1;
            match role.by_tool.iter_mut().find(|t| t.tool == call.tool) {
                Some(tool) => tool.calls += 1,
                None => role.by_tool.push(ToolCountView { tool: call.tool.clone(), calls: 1 }),
            }
        }
        for role in &mut by_role {
            role.by_tool.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.tool.cmp(&b.tool)));
        }
        by_role.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.caller_role.cmp(&b.caller_role)));
        ToolCallLogView { by_role, calls }
    }
}

/// An in-flight hold: every column of the original's row, as the core keeps it
/// (`firstIdleSinceAck` is `null` when none was recorded).
pub type HoldView = agentmesh_core::InflightHold;

/// What recording a direct dispatch answers: the task, and whether the recording
/// created it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DispatchedTaskView {
    /// The recorded task, or the one the mesh already held by that id.
    pub task: Task,
    /// The id was new to the mesh.
    pub created: bool,
}

/// Whether a task's delivery reached its session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryConfirmedView {
    /// The task.
    pub task_id: String,
    /// One of its deliveries is delivered, acked or completed.
    pub confirmed: bool,
}

/// What releasing an in-flight hold answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HoldReleasedView {
    /// The task was held, and its hold is gone.
    pub released: bool,
}

/// What removing an idle session answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IdleRemovedView {
    /// It had an idle record, and that record is gone.
    pub removed: bool,
}

/// What a reservation request answers: granted with the reservation, or
/// denied with every conflicting reservation once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReserveView {
    /// Whether it was granted.
    pub granted: bool,
    /// The reservation, when granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<agentmesh_core::Reservation>,
    /// The conflicts, when denied.
    #[serde(default)]
    pub conflicts: Vec<agentmesh_core::Conflict>,
}

impl From<agentmesh_store::Reserved> for ReserveView {
    fn from(reserved: agentmesh_store::Reserved) -> ReserveView {
        match reserved {
            agentmesh_store::Reserved::Granted(r) => {
                ReserveView { granted: true, reservation: Some(r), conflicts: Vec::new() }
            }
            agentmesh_store::Reserved::Denied(conflicts) => {
                ReserveView { granted: false, reservation: None, conflicts }
            }
        }
    }
}

/// What a path check answers: whether every path is clear, and for each path
/// that is not, the reservations in its way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckPathsView {
    /// No other holder's exclusive reservation covers any of the paths.
    pub clear: bool,
    /// The paths in another holder's way, each with what covers it.
    pub blocked: Vec<BlockedPathView>,
}

/// One path and the reservations that cover it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockedPathView {
    /// The path, normalized.
    pub path: String,
    /// The exclusive reservations of other holders that cover it.
    pub held_by: Vec<agentmesh_core::Conflict>,
}
