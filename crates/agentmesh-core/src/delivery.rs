//! The session delivery queue: messages waiting to be handed to a worker session,
//! and the rule that a delivery's status never moves backwards.

use std::fmt;
use std::str::FromStr;

use crate::{InvalidInput, Timestamp};

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

    /// Whether a status change of a delivery in this status to `target` is
    /// written: a retry (`increment_attempt`) as long as the delivery is not
    /// final, any other change as [`DeliveryStatus::may_move_to`] says.
    pub const fn may_update(self, target: DeliveryStatus, increment_attempt: bool) -> bool {
        if increment_attempt { !self.is_final() } else { self.may_move_to(target) }
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
    /// The delivery as recorded in `mesh_id` at `now`: ids and words trimmed (a
    /// blank optional one left out), `queued` unless the request says otherwise,
    /// no attempt yet, and its instants in the millisecond ISO form, so stored
    /// instants compare as strings (one that does not parse is left out).
    pub fn record(&self, mesh_id: &str, now: Timestamp) -> SessionDelivery {
        let trimmed = crate::ids::trimmed;
        let instant = |v: &Option<String>| v.as_deref().and_then(Timestamp::parse_iso).map(Timestamp::iso);
        let iso = now.iso();
        SessionDelivery {
            id: self.id.trim().to_owned(),
            mesh_id: mesh_id.to_owned(),
            node_id: trimmed(&self.node_id),
            session_id: trimmed(&self.session_id),
            provider_type: trimmed(&self.provider_type),
            task_id: trimmed(&self.task_id),
            kind: self.kind.trim().to_owned(),
            priority: self.priority,
            message: self.message.clone(),
            status: self.status.unwrap_or(DeliveryStatus::Queued),
            deliver_after: instant(&self.deliver_after),
            expires_at: instant(&self.expires_at),
            attempt_count: 0,
            source_coordinator_session_id: trimmed(&self.source_coordinator_session_id),
            source_coordinator_daemon_id: trimmed(&self.source_coordinator_daemon_id),
            last_error: None,
            created_at: iso.clone(),
            updated_at: iso,
        }
    }

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

    #[test]
    fn retries_are_written_until_final_and_other_changes_by_rank() {
        use DeliveryStatus::*;
        assert!(Delivered.may_update(Queued, true), "a retry is written as the original writes it");
        assert!(!Expired.may_update(Queued, true));
        assert!(!Acked.may_update(Queued, false));
        assert!(Queued.may_update(Acked, false));
    }

    #[test]
    fn a_new_delivery_is_recorded_trimmed_and_queued() {
        use DeliveryStatus::*;
        let now = Timestamp::from_millis(1_700_000_000_000);
        let d = NewSessionDelivery {
            id: " d1 ".into(),
            node_id: Some(" n1 ".into()),
            session_id: Some("  ".into()),
            kind: " nudge ".into(),
            priority: 2,
            message: " hi ".into(),
            deliver_after: Some("2026-01-01T00:00:00Z".into()),
            expires_at: Some("not a time".into()),
            ..NewSessionDelivery::default()
        };
        let r = d.record("m", now);
        assert_eq!((r.id.as_str(), r.mesh_id.as_str(), r.kind.as_str()), ("d1", "m", "nudge"));
        assert_eq!((r.node_id.as_deref(), r.session_id.as_deref()), (Some("n1"), None));
        assert_eq!((r.message.as_str(), r.priority, r.attempt_count), (" hi ", 2, 0));
        assert_eq!(r.status, Queued);
        assert_eq!(r.deliver_after.as_deref(), Some("2026-01-01T00:00:00.000Z"));
        assert_eq!(r.expires_at, None);
        assert_eq!((r.created_at.as_str(), r.updated_at.as_str()), (now.iso().as_str(), now.iso().as_str()));
        let acked = NewSessionDelivery { status: Some(Acked), ..d }.record("m", now);
        assert_eq!(acked.status, Acked);
    }
}
