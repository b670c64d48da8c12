//! The core's errors: bad input and illegal transitions. Both name what was wrong
//! so a caller can show the user exactly which field or which task to fix.

use std::fmt;

use crate::TaskStatus;

/// Input that fails validation. `field` uses the wire name (`message`,
/// `taskMode`, `dependsOn[2]`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {problem}")]
pub struct InvalidInput {
    /// The offending field, by its wire name.
    pub field: String,
    /// What is wrong with it, in words.
    pub problem: String,
}

impl InvalidInput {
    /// An error for `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> InvalidInput {
        InvalidInput { field: field.into(), problem: problem.into() }
    }

    /// `Ok` when `value` is not blank; else this error, "must not be blank",
    /// naming `field`.
    pub fn non_blank(field: &str, value: &str) -> Result<(), InvalidInput> {
        if value.trim().is_empty() {
            return Err(InvalidInput::new(field, "must not be blank"));
        }
        Ok(())
    }

    /// A one-line text a caller gave, trimmed: refused when it is blank, spans
    /// lines or holds other control characters, or is longer than `max_chars`.
    pub fn one_line(field: &str, value: &str, max_chars: usize) -> Result<String, InvalidInput> {
        let value = value.trim();
        if value.is_empty() {
            return Err(InvalidInput::new(field, "must not be blank"));
        }
        if value.chars().any(char::is_control) {
            return Err(InvalidInput::new(field, "must be one line without control characters"));
        }
        let chars = value.chars().count();
        if chars > max_chars {
            return Err(InvalidInput::new(
                field,
                format!("is {chars} characters; at most {max_chars} are taken"),
            ));
        }
        Ok(value.to_owned())
    }

    /// The same error for a field nested under `path`: `within("tasks[2]")` turns
    /// `message` into `tasks[2].message`.
    pub fn within(self, path: impl fmt::Display) -> InvalidInput {
        InvalidInput { field: format!("{path}.{}", self.field), problem: self.problem }
    }
}

/// The operations a task can undergo, for transition errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskAction {
    /// Claim by a worker.
    Claim,
    /// Completion by its worker.
    Complete,
    /// Failure reported by its worker.
    Fail,
    /// Cancellation by the coordinator.
    Cancel,
    /// Return to the queue.
    Requeue,
    /// Recovery of a stranded assignment.
    Reclaim,
    /// Lease extension by its worker.
    Heartbeat,
    /// A change of its pull priority.
    Reprioritize,
}

impl fmt::Display for TaskAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskAction::Claim => "claim",
            TaskAction::Complete => "complete",
            TaskAction::Fail => "fail",
            TaskAction::Cancel => "cancel",
            TaskAction::Requeue => "requeue",
            TaskAction::Reclaim => "reclaim",
            TaskAction::Heartbeat => "heartbeat",
            TaskAction::Reprioritize => "change the priority of",
        })
    }
}

/// An operation that the task's current status does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {action} task {task_id}: it is {from}")]
pub struct InvalidTransition {
    /// The task.
    pub task_id: String,
    /// Its status when the operation was attempted.
    pub from: TaskStatus,
    /// What was attempted.
    pub action: TaskAction,
}
