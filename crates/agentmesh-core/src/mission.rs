//! Missions: named plans that group tasks. A mission's progress is derived from
//! its tasks' statuses whenever it is read, never stored.

use crate::{InvalidInput, TaskStatus};

/// A mission as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mission {
    /// Mission id.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// Short title.
    pub title: String,
    /// What done looks like.
    pub goal: String,
    /// `active`, `paused`, `completed`, `closed`, ...
    pub status: String,
    /// Where the mission came from (`coordinator`, `import`, ...): written once, by
    /// the upsert that first gives one; `None` when none was ever given (every
    /// mission stored before the column existed).
    pub source: Option<String>,
    /// Creation time (ISO); kept by every update.
    pub created_at: String,
    /// Last change (ISO).
    pub updated_at: String,
}

/// What a coordinator writes to create or update a mission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewMission {
    /// Mission id.
    pub id: String,
    /// Short title.
    pub title: String,
    /// What done looks like. When unset, an update keeps the current goal and a new
    /// mission gets an empty one.
    pub goal: Option<String>,
    /// Status. When unset, an update keeps the current status and a new mission is
    /// `active`.
    pub status: Option<String>,
    /// Where the mission came from. A mission keeps the first source it was
    /// given: a later one is ignored.
    pub source: Option<String>,
}

impl NewMission {
    /// Checks the id (the id rule), title and status (a lowercase word such as `active`).
    pub fn validate(&self) -> Result<(), InvalidInput> {
        crate::ids::validate_id("id", &self.id)?;
        if self.title.trim().is_empty() {
            return Err(InvalidInput::new("title", "must not be blank"));
        }
        if let Some(status) = &self.status {
            validate_status(status)?;
        }
        if let Some(source) = &self.source
            && (source.len() > crate::MAX_ID_BYTES || source.chars().any(char::is_control))
        {
            return Err(InvalidInput::new(
                "source",
                format!("must be at most {} bytes without control characters", crate::MAX_ID_BYTES),
            ));
        }
        Ok(())
    }
}

/// Checks a mission status word: lowercase letters and `_`, such as `active` or
/// `closed`.
pub fn validate_status(status: &str) -> Result<(), InvalidInput> {
    if !status.is_empty() && status.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        Ok(())
    } else {
        Err(InvalidInput::new(
            "status",
            format!("{status:?} is not a status word (lowercase letters and _, such as active or closed)"),
        ))
    }
}

/// A mission's progress, counted from its tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MissionProgress {
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
}

impl MissionProgress {
    /// Progress from `(status, count)` pairs.
    pub fn from_counts(counts: impl IntoIterator<Item = (TaskStatus, u64)>) -> MissionProgress {
        let mut p = MissionProgress::default();
        for (status, n) in counts {
            p.total += n;
            match status {
                TaskStatus::Pending => p.pending += n,
                TaskStatus::Assigned => p.assigned += n,
                TaskStatus::Completed => p.completed += n,
                TaskStatus::Failed => p.failed += n,
                TaskStatus::Cancelled => p.cancelled += n,
            }
        }
        p
    }

    /// Every task has ended (and there is at least one).
    pub fn all_terminal(&self) -> bool {
        self.total > 0 && self.pending == 0 && self.assigned == 0
    }

    /// Completed tasks as a whole percentage of all tasks (0 with no tasks).
    pub fn percent_complete(&self) -> u8 {
        (self.completed * 100).checked_div(self.total).unwrap_or(0) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_counted_from_statuses() {
        let p = MissionProgress::from_counts([(TaskStatus::Completed, 3), (TaskStatus::Pending, 1)]);
        assert_eq!((p.total, p.completed, p.pending), (4, 3, 1));
        assert_eq!(p.percent_complete(), 75);
        assert!(!p.all_terminal());
        assert!(MissionProgress::from_counts([(TaskStatus::Failed, 1)]).all_terminal());
        assert!(!MissionProgress::default().all_terminal());
    }

    #[test]
    fn validation_names_the_field() {
        let m = NewMission { id: "m1".into(), title: " ".into(), ..NewMission::default() };
        assert_eq!(m.validate().unwrap_err().field, "title");
        let m = NewMission {
            id: "m1".into(),
            title: "t".into(),
            status: Some("Done!".into()),
            ..NewMission::default()
        };
        assert_eq!(m.validate().unwrap_err().field, "status");
        let m = NewMission {
            id: "m1".into(),
            title: "t".into(),
            source: Some("x".repeat(crate::MAX_ID_BYTES + 1)),
            ..NewMission::default()
        };
        assert_eq!(m.validate().unwrap_err().field, "source");
        let m = NewMission {
            id: "m1".into(),
            title: "t".into(),
            source: Some("coordinator".into()),
            ..NewMission::default()
        };
        assert!(m.validate().is_ok());
    }
}
