//! Direct dispatches: work a coordinator sends straight to a session, outside the
//! queue, tracked until the session acknowledges and finishes it.

use std::fmt;
use std::str::FromStr;

use crate::{InvalidInput, Timestamp};

/// Where a direct dispatch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DispatchStatus {
    /// Sent, not yet acknowledged.
    Dispatched,
    /// The session acknowledged it.
    Acked,
    /// The session finished it. Final.
    Completed,
    /// It failed. Final.
    Failed,
    /// Nobody acknowledged it in time.
    Stale,
}

impl DispatchStatus {
    /// Every status.
    pub const ALL: [DispatchStatus; 5] = [
        DispatchStatus::Dispatched,
        DispatchStatus::Acked,
        DispatchStatus::Completed,
        DispatchStatus::Failed,
        DispatchStatus::Stale,
    ];

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            DispatchStatus::Dispatched => "dispatched",
            DispatchStatus::Acked => "acked",
            DispatchStatus::Completed => "completed",
            DispatchStatus::Failed => "failed",
            DispatchStatus::Stale => "stale",
        }
    }

    /// Completed and failed dispatches never change again.
    pub const fn is_final(self) -> bool {
        matches!(self, DispatchStatus::Completed | DispatchStatus::Failed)
    }

    /// Active dispatches are the ones not completed, failed or stale.
    pub const fn is_active(self) -> bool {
        matches!(self, DispatchStatus::Dispatched | DispatchStatus::Acked)
    }
}

impl fmt::Display for DispatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DispatchStatus {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DispatchStatus::ALL.into_iter().find(|d| d.as_str() == s.trim()).ok_or_else(|| {
            InvalidInput::new(
                "status",
                format!(
                    "unknown dispatch status {s:?} (expected dispatched, acked, completed, failed or stale)"
                ),
            )
        })
    }
}

/// A direct dispatch as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectDispatch {
    /// The dispatched task's id (one row per task).
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
    /// How it was sent (`pty`, `p2p`, ...).
    pub via: String,
    /// Where it is.
    pub status: DispatchStatus,
    /// It went to a session that was idle at the time.
    pub dispatched_to_idle_session: bool,
    /// When it was sent (ISO).
    pub dispatched_at: String,
    /// Last change (ISO).
    pub updated_at: String,
}

/// What a coordinator records when it sends a direct dispatch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewDirectDispatch {
    /// The dispatched task's id.
    pub task_id: String,
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
    /// How it was sent.
    pub via: String,
    /// It went to an idle session.
    pub dispatched_to_idle_session: bool,
}

impl NewDirectDispatch {
    /// The dispatch as recorded in `mesh_id` at `now`: ids and words trimmed (a
    /// blank optional one left out), status `dispatched`.
    pub fn record(&self, mesh_id: &str, now: Timestamp) -> DirectDispatch {
        let iso = now.iso();
        DirectDispatch {
            task_id: self.task_id.trim().to_owned(),
            mesh_id: mesh_id.to_owned(),
            node_id: crate::ids::trimmed(&self.node_id),
            session_id: crate::ids::trimmed(&self.session_id),
            provider_type: crate::ids::trimmed(&self.provider_type),
            message: self.message.clone(),
            task_mode: crate::ids::trimmed(&self.task_mode),
            via: self.via.trim().to_owned(),
            status: DispatchStatus::Dispatched,
            dispatched_to_idle_session: self.dispatched_to_idle_session,
            dispatched_at: iso.clone(),
            updated_at: iso,
        }
    }

    /// Checks the fields a dispatch cannot do without, and its ids against the id rule.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        crate::ids::validate_id("taskId", &self.task_id)?;
        crate::ids::validate_optional_id("nodeId", self.node_id.as_deref())?;
        crate::ids::validate_optional_id("sessionId", self.session_id.as_deref())?;
        if self.message.trim().is_empty() {
            return Err(InvalidInput::new("message", "must not be empty"));
        }
        if self.via.trim().is_empty() {
            return Err(InvalidInput::new("via", "must not be blank"));
        }
        if let Some(mode) = &self.task_mode {
            mode.parse::<crate::TaskMode>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_is_recorded_trimmed_and_dispatched() {
        let now = Timestamp::from_millis(1_700_000_000_000);
        let d = NewDirectDispatch {
            task_id: " t1 ".into(),
            session_id: Some(" s1 ".into()),
            task_mode: Some(" ".into()),
            message: "go".into(),
            via: " idle ".into(),
            dispatched_to_idle_session: true,
            ..NewDirectDispatch::default()
        };
        let r = d.record("m", now);
        assert_eq!((r.task_id.as_str(), r.mesh_id.as_str(), r.via.as_str()), ("t1", "m", "idle"));
        assert_eq!(
            (r.session_id.as_deref(), r.task_mode.as_deref(), r.node_id.as_deref()),
            (Some("s1"), None, None)
        );
        assert_eq!(r.status, DispatchStatus::Dispatched);
        assert!(r.dispatched_to_idle_session);
        assert_eq!(
            (r.dispatched_at.as_str(), r.updated_at.as_str()),
            (now.iso().as_str(), now.iso().as_str())
        );
    }
}
