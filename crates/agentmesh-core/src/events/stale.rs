//! Alerts about finished tasks: a `mesh:dispatch_blocked` ("this task will not
//! dispatch") or `monitor:no_progress` ("no progress observed") about a task that
//! is already completed, failed or cancelled would tell the coordinator something
//! false, so a drain drops it instead of delivering it.
//!
//! The rule is a deny-list ([`STALE_TASK_DROPPABLE_EVENTS`]) judged on the task's
//! current status alone: a finished task never becomes active again, so the alert
//! is stale whenever it was queued. Every other event passes, and so does an alert
//! that names no task or whose task cannot be found: when in doubt, deliver.
//!
//! [`STALE_TASK_DROPPABLE_EVENTS`]: super::names::STALE_TASK_DROPPABLE_EVENTS

use serde_json::Value;

use super::js::{read_non_empty, read_record};
use super::names::is_stale_task_droppable_event;
use crate::TaskStatus;

/// The task an event named `name` is a droppable alert about: its
/// `metadataEvent.taskId` (trimmed, non-blank), for the names of
/// [`STALE_TASK_DROPPABLE_EVENTS`](super::names::STALE_TASK_DROPPABLE_EVENTS).
/// `None` for every other event.
pub fn droppable_alert_task_id<'a>(name: &str, event: &'a Value) -> Option<&'a str> {
    if !is_stale_task_droppable_event(name) {
        return None;
    }
    read_non_empty(read_record(event.get("metadataEvent"))?.get("taskId"))
}

/// Whether a droppable alert about a task whose status is `status` (`None`: no
/// such task) is dropped: only when the task is finished.
pub fn alert_is_stale(status: Option<TaskStatus>) -> bool {
    status.is_some_and(TaskStatus::is_terminal)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_the_alerts_of_the_deny_list_name_a_task() {
        let event = json!({"metadataEvent": {"taskId": " t1 "}});
        assert_eq!(droppable_alert_task_id("mesh:dispatch_blocked", &event), Some("t1"));
        assert_eq!(droppable_alert_task_id("monitor:no_progress", &event), Some("t1"));
        assert_eq!(droppable_alert_task_id("agent:generating_completed", &event), None);
        assert_eq!(droppable_alert_task_id("mesh:dispatch_blocked", &json!({"metadataEvent": {}})), None);
        assert_eq!(droppable_alert_task_id("mesh:dispatch_blocked", &json!({"taskId": "t1"})), None);
    }

    #[test]
    fn only_a_finished_task_makes_an_alert_stale() {
        for status in [TaskStatus::Completed, TaskStatus::Failed, TaskStatus::Cancelled] {
            assert!(alert_is_stale(Some(status)), "{status}");
        }
        assert!(!alert_is_stale(Some(TaskStatus::Pending)));
        assert!(!alert_is_stale(Some(TaskStatus::Assigned)));
        assert!(!alert_is_stale(None), "an unknown task is treated as live");
    }
}
