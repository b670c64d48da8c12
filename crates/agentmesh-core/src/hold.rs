//! In-flight holds: a task whose delivery the worker acknowledged is held while
//! the coordinator watches it (the original's `mesh_inflight_hold`). A hold
//! names why it is held, when it was first held, when its session was first seen
//! idle since the acknowledgement, and how many reads of the session failed.

use crate::{InvalidInput, Timestamp};

/// An in-flight hold as stored: one per task. Its JSON form (camelCase) is what
/// the API answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InflightHold {
    /// The held task.
    pub task_id: String,
    /// The mesh.
    pub mesh_id: String,
    /// Why the task is held (`acked`, `awaiting_completion`, ...).
    pub hold_reason: String,
    /// When the task was first held (ISO). Kept by every later upsert.
    pub held_at: String,
    /// When the session was first seen idle since it acknowledged the task (ISO),
    /// if it was.
    pub first_idle_since_ack: Option<String>,
    /// How many reads of the session failed while the task was held.
    pub read_failure_count: u32,
    /// Last change (ISO).
    pub updated_at: String,
}

/// What a coordinator writes to hold a task, or to update its hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewInflightHold {
    /// The held task.
    pub task_id: String,
    /// Why it is held.
    pub hold_reason: String,
    /// When its session was first seen idle since the acknowledgement; `None`
    /// records none (an update clears one recorded before).
    pub first_idle_since_ack: Option<Timestamp>,
    /// How many reads of the session failed so far.
    pub read_failure_count: u32,
}

impl NewInflightHold {
    /// Checks the task id (the id rule) and that a reason is given.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        crate::ids::validate_id("taskId", &self.task_id)?;
        InvalidInput::non_blank("holdReason", &self.hold_reason)
    }

    /// The hold as an upsert at `now` leaves it: an existing hold of the task keeps
    /// the instant it was first held; everything else comes from this request.
    pub fn record(&self, mesh_id: &str, existing: Option<&InflightHold>, now: Timestamp) -> InflightHold {
        let iso = now.iso();
        InflightHold {
            task_id: self.task_id.trim().to_owned(),
            mesh_id: mesh_id.to_owned(),
            hold_reason: self.hold_reason.trim().to_owned(),
            held_at: existing.map_or_else(|| iso.clone(), |h| h.held_at.clone()),
            first_idle_since_ack: self.first_idle_since_ack.map(Timestamp::iso),
            read_failure_count: self.read_failure_count,
            updated_at: iso,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> NewInflightHold {
        NewInflightHold {
            task_id: " t1 ".into(),
            hold_reason: " acked ".into(),
            first_idle_since_ack: None,
            read_failure_count: 0,
        }
    }

    #[test]
    fn a_new_hold_is_held_now_and_an_existing_one_keeps_its_first_instant() {
        let t0 = Timestamp::from_millis(1_700_000_000_000);
        let first = request().record("m1", None, t0);
        assert_eq!((first.task_id.as_str(), first.hold_reason.as_str()), ("t1", "acked"));
        assert_eq!((first.held_at.clone(), first.updated_at.clone()), (t0.iso(), t0.iso()));
        assert_eq!(first.first_idle_since_ack, None);

        let t1 = t0.plus_millis(5_000);
        let again = NewInflightHold {
            hold_reason: "idle_after_ack".into(),
            first_idle_since_ack: Some(t0.plus_millis(1_000)),
            read_failure_count: 2,
            ..request()
        }
        .record("m1", Some(&first), t1);
        assert_eq!(again.held_at, t0.iso(), "the first instant is kept");
        assert_eq!(again.updated_at, t1.iso());
        assert_eq!(again.hold_reason, "idle_after_ack");
        assert_eq!(again.first_idle_since_ack, Some(t0.plus_millis(1_000).iso()));
        assert_eq!(again.read_failure_count, 2);
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(
            NewInflightHold { task_id: " ".into(), ..request() }.validate().unwrap_err().field,
            "taskId"
        );
        assert_eq!(
            NewInflightHold { hold_reason: "\t".into(), ..request() }.validate().unwrap_err().field,
            "holdReason"
        );
        assert!(request().validate().is_ok());
    }
}
