//! Recording a task a coordinator already dispatched straight to a session (the
//! original's `recordDirectDispatchTask`): the task is created assigned to that
//! node and session, with its dispatch time, its `task_dispatched` entry, and a
//! session delivery already `delivered`, so the task counts as confirmed.

use serde_json::json;

use crate::effects::task::dispatched;
use crate::{
    DeliveryStatus, InvalidInput, LedgerEntry, NewSessionDelivery, Task, TaskMode, TaskStatus, Timestamp,
};

/// The delivery kind of the record a direct dispatch leaves.
pub const DIRECT_DELIVERY_KIND: &str = "task";

/// A task a coordinator dispatched directly, to be recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewDispatchedTask {
    /// The task's id. Recording an id the mesh holds changes nothing.
    pub id: String,
    /// The instruction text that was sent.
    pub message: String,
    /// The node it was sent to.
    pub node_id: String,
    /// The session it was sent to.
    pub session_id: String,
    /// The session's provider type.
    pub provider_type: Option<String>,
    /// The mission the task belongs to.
    pub mission_id: Option<String>,
    /// Kind of work, by name.
    pub task_mode: Option<String>,
}

/// What recording a direct dispatch writes: the task, its entry and its delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchedTask {
    /// The task, assigned to the node and session, dispatched at `now`.
    pub task: Task,
    /// Its `task_dispatched` entry, naming the node and session.
    pub ledger: LedgerEntry,
    /// The delivery record, `delivered`.
    pub delivery: NewSessionDelivery,
}

impl NewDispatchedTask {
    /// Checks the ids (the id rule), the message, and the task mode when given.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        crate::ids::validate_id("id", &self.id)?;
        if self.message.trim().is_empty() {
            return Err(InvalidInput::new("message", "must not be empty"));
        }
        crate::ids::validate_id("nodeId", &self.node_id)?;
        crate::ids::validate_id("sessionId", &self.session_id)?;
        crate::ids::validate_optional_id("missionId", self.mission_id.as_deref())?;
        if let Some(mode) = &self.task_mode {
            mode.parse::<TaskMode>()?;
        }
        Ok(())
    }

    /// The records of this dispatch in `mesh_id` at `now`, the entry under
    /// `ledger_id`. The task is assigned (epoch 1) to the node and session it went
    /// to, targeted at them, and carries no lease: a direct dispatch is not
    /// reclaimed by the lease reaper.
    pub fn record(
        &self,
        mesh_id: &str,
        now: Timestamp,
        ledger_id: String,
    ) -> Result<DispatchedTask, InvalidInput> {
        self.validate()?;
        let iso = now.iso();
        let node = self.node_id.trim().to_owned();
        let session = self.session_id.trim().to_owned();
        let provider = crate::ids::trimmed(&self.provider_type);
        let mut task = Task::new(self.id.trim(), mesh_id, self.message.clone(), &iso);
        task.status = TaskStatus::Assigned;
        task.task_mode = self.task_mode.as_deref().map(str::parse).transpose()?;
        task.mission_id = crate::ids::trimmed(&self.mission_id);
        task.target_node_id = Some(node.clone());
        task.target_session_id = Some(session.clone());
        task.assigned_node_id = Some(node.clone());
        task.assigned_session_id = Some(session.clone());
        task.assigned_provider_type = provider.clone();
        task.dispatch_timestamp = Some(iso);
        task.dispatch_nonce = Some(1);
        let mut ledger = dispatched(&task, ledger_id, now);
        ledger.node_id = Some(node.clone());
        ledger.session_id = Some(session.clone());
        ledger.provider_type = provider.clone();
        ledger.payload["direct"] = json!(true);
        let delivery = NewSessionDelivery {
            id: format!("{}:direct", task.id),
            node_id: Some(node),
            session_id: Some(session),
            provider_type: provider,
            task_id: Some(task.id.clone()),
            kind: DIRECT_DELIVERY_KIND.to_owned(),
            priority: 0,
            message: task.message.clone(),
            status: Some(DeliveryStatus::Delivered),
            ..NewSessionDelivery::default()
        };
        Ok(DispatchedTask { task, ledger, delivery })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> NewDispatchedTask {
        NewDispatchedTask {
            id: " t1 ".into(),
            message: "fix the parser".into(),
            node_id: " laptop ".into(),
            session_id: "s1".into(),
            provider_type: Some("claude".into()),
            mission_id: Some("m1".into()),
            task_mode: None,
        }
    }

    #[test]
    fn a_direct_dispatch_is_an_assigned_task_with_a_delivered_record() {
        let now = Timestamp::from_millis(1_700_000_000_000);
        let d = request().record("mesh", now, "e1".into()).unwrap();
        assert_eq!((d.task.id.as_str(), d.task.status), ("t1", TaskStatus::Assigned));
        assert_eq!(
            (d.task.assigned_node_id.as_deref(), d.task.assigned_session_id.as_deref()),
            (Some("laptop"), Some("s1"))
        );
        assert_eq!(d.task.dispatch_timestamp, Some(now.iso()));
        assert_eq!((d.task.epoch(), d.task.lease_expires_at.as_deref()), (1, None));
        assert_eq!(d.task.mission_id.as_deref(), Some("m1"));
        assert_eq!((d.ledger.kind.as_str(), d.ledger.id.as_str()), ("task_dispatched", "e1"));
        assert_eq!(
            (d.ledger.node_id.as_deref(), d.ledger.session_id.as_deref()),
            (Some("laptop"), Some("s1"))
        );
        assert_eq!(d.ledger.payload["direct"], true);
        assert_eq!(d.ledger.payload["missionId"], "m1");
        assert_eq!(d.delivery.status, Some(DeliveryStatus::Delivered));
        assert!(DeliveryStatus::Delivered.is_confirmed());
        assert_eq!((d.delivery.id.as_str(), d.delivery.task_id.as_deref()), ("t1:direct", Some("t1")));
    }

    #[test]
    fn validation_names_the_field() {
        let field = |r: NewDispatchedTask| r.validate().unwrap_err().field;
        assert_eq!(field(NewDispatchedTask { id: " ".into(), ..request() }), "id");
        assert_eq!(field(NewDispatchedTask { message: "\n".into(), ..request() }), "message");
        assert_eq!(field(NewDispatchedTask { node_id: String::new(), ..request() }), "nodeId");
        assert_eq!(field(NewDispatchedTask { session_id: "a\nb".into(), ..request() }), "sessionId");
        assert_eq!(field(NewDispatchedTask { mission_id: Some("a\u{7}".into()), ..request() }), "missionId");
        assert!(NewDispatchedTask { task_mode: Some("sideways".into()), ..request() }.validate().is_err());
    }
}
