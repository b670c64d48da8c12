//! Coordinator events as the agent reads them: a sentence first, then the fields.
//!
//! Each inbox event becomes its coordinator-facing text, rendered here by the core
//! from the event's name and metadata (`events::coordinator_text`) rather than
//! copied from the stored `coordinatorMessage`, which keeps the original's wording
//! in an event the original wrote; an event the core has no text for gets one line
//! naming the event, the node and what the worker said. Next to the text go the
//! structured fields an agent acts on: the row id, the event name, the task and
//! the worker's summary or failure reason.
//!
//! [`fit_budget`] decides how many of the oldest events fit a character budget;
//! the drain tool takes exactly those, so what does not fit stays queued.

use agentmesh_api::views::InboxEventView;
use agentmesh_core::events::{coordinator_text, read_completion_summary};
use serde::Serialize;
use serde_json::Value;

/// One event as a tool returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventForAgent {
    /// The inbox row id.
    pub id: String,
    /// The event name (`agent:generating_completed`, `agent:stopped`, ...).
    pub event: String,
    /// The task the event is about, when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The worker's summary, when the event carries one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The failure reason, when the event carries one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The text written for the coordinator.
    pub text: String,
}

impl EventForAgent {
    /// The agent's view of an inbox event.
    pub fn from_view(view: &InboxEventView) -> EventForAgent {
        let payload = view.payload.parse();
        let metadata = payload.get("metadataEvent").and_then(Value::as_object);
        let text_of = |key: &str| {
            metadata
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let task_id = text_of("taskId").or_else(|| {
            payload.get("taskId").and_then(Value::as_str).map(str::to_owned).filter(|s| !s.is_empty())
        });
        let summary = metadata.and_then(read_completion_summary).map(str::to_owned);
        let reason = text_of("reason");
        let rendered = payload.as_object().map(coordinator_text).unwrap_or_default();
        let text = match rendered.trim() {
            "" => one_line(view, &payload, task_id.as_deref(), summary.as_deref().or(reason.as_deref())),
            rendered => rendered.to_owned(),
        };
        EventForAgent { id: view.id.clone(), event: view.name().to_owned(), task_id, summary, reason, text }
    }

    /// How many characters of the budget this event takes: its text, and the
    /// structured copies of the summary and the reason.
    pub fn cost(&self) -> u64 {
        let chars = |s: &Option<String>| s.as_deref().map_or(0, |s| s.chars().count());
        (self.text.chars().count() + chars(&self.summary) + chars(&self.reason)) as u64
    }
}

/// `<event> from <node>: task <id>: <what the worker said>`.
fn one_line(view: &InboxEventView, payload: &Value, task_id: Option<&str>, said: Option<&str>) -> String {
    let mut line = view.name().to_owned();
    if let Some(label) = payload.get("nodeLabel").and_then(Value::as_str).filter(|l| !l.trim().is_empty()) {
        line.push_str(&format!(" from {}", label.trim()));
    }
    if let Some(task) = task_id {
        line.push_str(&format!(": task {task}"));
    }
    if let Some(said) = said {
        line.push_str(&format!(": {}", said.trim()));
    }
    line
}

/// How many of `events` (oldest first) to return under `max_chars`: the longest
/// prefix whose cost fits, but at least one when there is any, so a single large
/// event can never block the inbox.
pub fn fit_budget(events: &[EventForAgent], max_chars: Option<u64>) -> usize {
    let Some(budget) = max_chars else { return events.len() };
    let mut used = 0u64;
    let mut taken = 0;
    for event in events {
        used += event.cost();
        if used > budget && taken > 0 {
            break;
        }
        taken += 1;
    }
    taken
}

/// The text block of a list of events: each event's text, separated by blank
/// lines, with its id, name and task on a header line.
pub fn events_text(events: &[EventForAgent]) -> String {
    events
        .iter()
        .map(|e| {
            let task = e.task_id.as_deref().map(|t| format!(" task {t}")).unwrap_or_default();
            format!("[{}{task} | id {}]\n{}", e.event, e.id, e.text)
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(id: &str, payload: Value) -> InboxEventView {
        InboxEventView {
            id: id.into(),
            event: payload["event"].clone(),
            queued_at: 0,
            fingerprint: None,
            payload: agentmesh_store::RawJson::from_value(&payload),
        }
    }

    #[test]
    fn the_text_is_rendered_from_the_event_and_the_fields_come_along() {
        let e = EventForAgent::from_view(&view(
            "r1",
            json!({"event": "agent:generating_completed", "nodeLabel": "Node 'n'",
                   "coordinatorMessage": "[System] done. Call mesh_read_chat for the transcript.",
                   "metadataEvent": {"taskId": "t1", "finalSummary": "wrote it"}}),
        ));
        assert!(e.text.starts_with("[System] Node 'n' has completed its task"), "{}", e.text);
        assert!(e.text.ends_with("--- Node 'n' final summary ---\nwrote it"), "{}", e.text);
        assert_eq!(e.task_id.as_deref(), Some("t1"));
        assert_eq!(e.summary.as_deref(), Some("wrote it"));
        let stopped = EventForAgent::from_view(&view(
            "r2",
            json!({"event": "agent:stopped", "nodeLabel": "Node 'n'", "metadataEvent": {"taskId": "t2", "reason": "no disk"}}),
        ));
        assert!(stopped.text.contains("Task t2 failed: no disk"), "{}", stopped.text);
        assert_eq!(stopped.reason.as_deref(), Some("no disk"));
        let bare = EventForAgent::from_view(&view(
            "r3",
            json!({"event": "mesh:dispatch_blocked", "nodeLabel": "Node 'n'", "coordinatorMessage": "stored",
                   "metadataEvent": {"taskId": "t3", "reason": "no node has the tags"}}),
        ));
        assert_eq!(bare.text, "mesh:dispatch_blocked from Node 'n': task t3: no node has the tags");
    }

    #[test]
    fn the_budget_takes_the_oldest_that_fit_and_at_least_one() {
        let events: Vec<EventForAgent> = (0..3)
            .map(|i| {
                EventForAgent::from_view(&view(
                    &format!("r{i}"),
                    json!({"event": "x", "metadataEvent": {"reason": "012345"}}),
                ))
            })
            .collect();
        // Each costs 15: its text `x: 012345` and the reason again.
        assert_eq!(fit_budget(&events, None), 3);
        assert_eq!(fit_budget(&events, Some(35)), 2);
        assert_eq!(fit_budget(&events, Some(3)), 1);
        assert_eq!(fit_budget(&[], Some(3)), 0);
    }
}
