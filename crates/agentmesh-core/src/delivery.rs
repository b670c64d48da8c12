//! The session delivery queue: messages waiting to be handed to a worker session,
//! and the rule that a delivery's status never moves backwards.

use std::fmt;
use std::str::FromStr;

use crate::InvalidInput;

/// Where a delivery is. Statuses have ranks; a change to a lower rank is refused,
/// and failed, expired and cancelled are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryStatus {
    /// Being handed over right now.
    Delivering,
    /// Waiting for its session.
    Queued,
    /// Handed to the session.
    Delivered,
    /// The session acknowledged it.
    Acked,
    /// The session finished the work it carried.
    Completed,
    /// It could not be delivered. Final.
    Failed,
    /// Its time ran out. Final.
    Expired,
    /// Withdrawn. Final.
    Cancelled,
}

impl DeliveryStatus {
    /// Every status.
    pub const ALL: [DeliveryStatus; 8] = [
        DeliveryStatus::Delivering,
        DeliveryStatus::Queued,
        DeliveryStatus::Delivered,
        DeliveryStatus::Acked,
        DeliveryStatus::Completed,
        DeliveryStatus::Failed,
        DeliveryStatus::Expired,
        DeliveryStatus::Cancelled,
    ];

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Delivering => "delivering",
            DeliveryStatus::Queued => "queued",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Acked => "acked",
            DeliveryStatus::Completed => "completed",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Expired => "expired",
            DeliveryStatus::Cancelled => "cancelled",
        }
    }

    /// The original's ranks: delivering 1, queued 2, delivered 3, acked 4,
    /// completed 5, and 99 for the final failed, expired and cancelled.
    pub const fn rank(self) -> u8 {
        match self {
            DeliveryStatus::Delivering => 1,
            DeliveryStatus::Queued => 2,
            DeliveryStatus::Delivered => 3,
            DeliveryStatus::Acked => 4,
            DeliveryStatus::Completed => 5,
            DeliveryStatus::Failed | DeliveryStatus::Expired | DeliveryStatus::Cancelled => 99,
        }
    }

    /// Failed, expired and cancelled deliveries never change again.
    pub const fn is_final(self) -> bool {
        self.rank() == 99
    }

    /// Active deliveries still wait for their session: not delivered and not at or
    /// past completion.
    pub const fn is_active(self) -> bool {
        matches!(self, DeliveryStatus::Delivering | DeliveryStatus::Queued | DeliveryStatus::Acked)
    }

    /// The session has provably received it: delivered, acked or completed.
    pub const fn is_confirmed(self) -> bool {
        matches!(self, DeliveryStatus::Delivered | DeliveryStatus::Acked | DeliveryStatus::Completed)
    }

    /// Whether a delivery in this status may move to `target`: never out of a final
    /// status, always into one, otherwise only to an equal or higher rank.
    pub const fn may_move_to(self, target: DeliveryStatus) -> bool {
        if self.is_final() {
            return false;
        }
        target.is_final() || target.rank() >= self.rank()
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeliveryStatus {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeliveryStatus::ALL.into_iter().find(|d| d.as_str() == s.trim()).ok_or_else(|| {
            InvalidInput::new(
                "status",
                format!(
                    "unknown delivery status {s:?} (expected delivering, queued, delivered, acked, completed, failed, expired or cancelled)"
                ),
            )
        })
    }
}

/// A delivery as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDelivery {
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
    /// The task it carries, if any.
    pub task_id: Option<String>,
    /// What it is (`task`, `nudge`, `answer`, ...).
    pub kind: String,
    /// Higher goes first.
    pub priority: i64,
    /// The text to hand over.
    pub message: String,
    /// Where it is.
    pub status: DeliveryStatus,
    /// Not to be delivered before this instant (ISO).
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

/// What a sender records for a new delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSessionDelivery {
    /// Delivery id.
    pub id: String,
    /// Target node.
    pub node_id: Option<String>,
    /// Target session.
    pub session_id: Option<String>,
    /// Provider type of the target session.
    pub provider_type: Option<String>,
    /// The task it carries.
    pub task_id: Option<String>,
    /// What it is.
    pub kind: String,
    /// Higher goes first.
    pub priority: i64,
    /// The text to hand over.
    pub message: String,
    /// Initial status (queued when unset).
    pub status: Option<DeliveryStatus>,
    /// Not before this instant (ISO).
    pub deliver_after: Option<String>,
    /// Expires at this instant (ISO).
    pub expires_at: Option<String>,
    /// The coordinator session that sends it.
    pub source_coordinator_session_id: Option<String>,
    /// The coordinator daemon that sends it.
    pub source_coordinator_daemon_id: Option<String>,
}

impl NewSessionDelivery {
    /// Checks ids (the id rule), kind and instants.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        crate::ids::validate_id("id", &self.id)?;
        for (field, value) in [
            ("nodeId", &self.node_id),
            ("sessionId", &self.session_id),
            ("taskId", &self.task_id),
            ("coordinator.sessionId", &self.source_coordinator_session_id),
            ("coordinator.daemonId", &self.source_coordinator_daemon_id),
        ] {
            crate::ids::validate_optional_id(field, value.as_deref())?;
        }
        if self.kind.trim().is_empty() {
            return Err(InvalidInput::new("kind", "must not be blank"));
        }
        for (field, value) in [("deliverAfter", &self.deliver_after), ("expiresAt", &self.expires_at)] {
            if let Some(v) = value
                && crate::Timestamp::parse_iso(v).is_none()
            {
                return Err(InvalidInput::new(field, format!("{v:?} is not an ISO-8601 instant")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_never_move_backwards() {
        use DeliveryStatus::*;
        assert!(Queued.may_move_to(Delivered));
        assert!(Acked.may_move_to(Acked));
        assert!(!Acked.may_move_to(Queued));
        assert!(Delivering.may_move_to(Failed));
        assert!(Completed.may_move_to(Cancelled), "a final status is always written");
        assert!(!Expired.may_move_to(Completed), "nothing leaves a final status");
        assert!(!Failed.may_move_to(Failed));
    }
}
