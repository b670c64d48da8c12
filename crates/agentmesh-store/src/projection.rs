//! The projected columns of a task row: what every backend writes from a
//! task's payload on every write, so that claims select candidates through
//! indexes and decode only the winner's payload. One encoding for both backends.

use agentmesh_core::{Task, TaskMode, Timestamp};

/// The claim hold of a task: 1 when a dependency is unmet or it is blocked, 2 when
/// parked, else 0. (9, an unreadable payload, is set by the backends only.)
pub fn hold_of(deps_unmet: i64, blocked: bool, parked: bool) -> i64 {
    if deps_unmet > 0 || blocked {
        1
    } else if parked {
        2
    } else {
        0
    }
}

/// The projected columns of a task row.
pub struct Projection {
    /// The task, as stored (the source of truth).
    pub payload: String,
    /// `priority_rank`: higher claims first.
    pub priority_rank: i64,
    /// `blocked`: the task carries a `blockedReason`.
    pub blocked: bool,
    /// `parked`.
    pub parked: bool,
    /// `readonly`.
    pub readonly: bool,
    /// `task_mode`.
    pub task_mode: Option<&'static str>,
    /// `required_tags`, as a JSON array, when there are any.
    pub required_tags: Option<String>,
    /// `not_before_ms`.
    pub not_before_ms: Option<i64>,
    /// `lease_expires_ms`.
    pub lease_expires_ms: Option<i64>,
}

impl Projection {
    /// The columns of `task`.
    pub fn of(task: &Task) -> Projection {
        Projection {
            payload: task.to_json(),
            priority_rank: task.priority_rank(),
            blocked: task.blocked_reason.as_deref().is_some_and(|r| !r.is_empty()),
            parked: task.is_parked(),
            readonly: task.is_readonly(),
            task_mode: task.task_mode.map(TaskMode::as_str),
            required_tags: (!task.tags_required().is_empty())
                .then(|| serde_json::to_string(task.tags_required()).expect("strings serialize")),
            not_before_ms: task.not_before_millis(),
            lease_expires_ms: task
                .lease_expires_at
                .as_deref()
                .and_then(Timestamp::parse_iso)
                .map(Timestamp::millis),
        }
    }
}
