//! The text a coordinator agent reads for an event (`coordinatorMessage`).
//!
//! Texts start with `[System]`, name the node by its label, say what happened, and
//! tell the coordinator what to do next, in particular when *not* to poll. Worker
//! diagnostics ride along as a ` (key=value; ...)` suffix. A completion carries the
//! worker's final summary inline (cut at [`COMPLETION_SUMMARY_MAX_CHARS`]), so the
//! coordinator does not need a transcript round trip to see the result, and a stop
//! carries the worker's reason. Events without a text get `""`.
//!
//! The texts are the original's, except where the original sent the coordinator
//! to tools of its own (reading a worker's chat, answering its prompts, launching
//! sessions): an agentmesh text names only agentmesh tools, or says what agentmesh
//! cannot do. [`coordinator_text`] renders the text of a stored event from its
//! name and metadata; every agentmesh reader shows an event that way, whatever
//! wording its stored `coordinatorMessage` has.

use serde_json::{Map, Value};

use super::js::{read_non_empty, read_record};
use super::metadata::{is_weak_completion_metadata, read_completion_summary, refine_job_id};
use super::names::{
    AGENT_GENERATING_COMPLETED, AGENT_STOPPED, AGENT_WAITING_APPROVAL, AGENT_WAITING_CHOICE,
    MONITOR_NO_PROGRESS, REFINE_ACCEPTED, REFINE_COMPLETED, REFINE_FAILED, WORKTREE_BOOTSTRAP_COMPLETE,
    WORKTREE_BOOTSTRAP_FAILED,
};

/// The longest final summary carried inline, in characters, cut note included.
pub const COMPLETION_SUMMARY_MAX_CHARS: usize = 16_000;

/// Appended to a summary cut at [`COMPLETION_SUMMARY_MAX_CHARS`].
const SUMMARY_CUT_NOTE: &str = "\n…[summary cut here: show_task gives the whole summary]";

/// The longest original task text repeated in a recovery message, in characters.
const RETRY_TASK_MAX_CHARS: usize = 300;

const INSUFFICIENT_NOTE: &str = " Completion evidence is insufficient: verify with git status or the \
    provider's session before treating the task as done.";
const WEAK_NOTE: &str = " Completion evidence is weak — verify with git status or show_task before \
    treating the task as done; the worker may still be waiting on an approval.";

/// What agentmesh says where the original offered its own tools for a worker's
/// prompts: agentmesh has none, so the answer is given where the worker runs.
const NO_PROMPT_TOOLS: &str = "agentmesh cannot answer a prompt inside a worker's session: answer it \
    where the worker runs, or send the worker your answer with send_to_session.";

/// The events the core writes a text for; every other event gets `""`.
pub const EVENTS_WITH_TEXT: &[&str] = &[
    AGENT_GENERATING_COMPLETED,
    AGENT_WAITING_APPROVAL,
    AGENT_WAITING_CHOICE,
    AGENT_STOPPED,
    MONITOR_NO_PROGRESS,
    WORKTREE_BOOTSTRAP_COMPLETE,
    WORKTREE_BOOTSTRAP_FAILED,
    REFINE_ACCEPTED,
    REFINE_COMPLETED,
    REFINE_FAILED,
];

/// What the caller knows beyond the event itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageOptions {
    /// Failure history for `agent:stopped`; with at least one consecutive failure
    /// the text becomes a recovery message.
    pub recovery: Option<RecoveryContext>,
    /// For `worktree_bootstrap_complete`: a queued task targets the node and will
    /// claim it by itself, so the text must not suggest launching a session (that
    /// would start a duplicate).
    pub worktree_has_queued_task: bool,
}

/// A node's recent failure history, as the ledger reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryContext {
    /// Failures in a row on this node.
    pub consecutive_node_failures: u32,
    /// Attempts at the current task so far.
    pub task_attempt_count: u32,
    /// What to do, in words.
    pub advice: String,
    /// Whether retrying on this node is advised.
    pub retry_recommended: bool,
    /// The task's instruction text, to repeat for a retry.
    pub last_task_message: Option<String>,
}

/// The coordinator-facing text for `event` about the node labelled `node_label`,
/// from the event's metadata. `""` for events that carry no text.
pub fn build_coordinator_message(
    event: &str,
    node_label: &str,
    metadata: &Map<String, Value>,
    options: &MessageOptions,
) -> String {
    let meta = completion_metadata_suffix(metadata);
    match event {
        AGENT_GENERATING_COMPLETED => generating_completed(node_label, metadata, &meta),
        AGENT_WAITING_APPROVAL => {
            format!("[System] {node_label} is waiting for approval to proceed{meta}. {NO_PROMPT_TOOLS}")
        }
        AGENT_WAITING_CHOICE => waiting_choice(node_label, metadata, &meta),
        AGENT_STOPPED => stopped(node_label, metadata, &meta, options.recovery.as_ref()),
        MONITOR_NO_PROGRESS => no_progress(node_label, metadata, &meta),
        WORKTREE_BOOTSTRAP_COMPLETE => {
            bootstrap_complete(node_label, metadata, options.worktree_has_queued_task)
        }
        WORKTREE_BOOTSTRAP_FAILED => {
            let error = read_non_empty(metadata.get("error")).map(|e| format!(": {e}")).unwrap_or_default();
            format!(
                "[System] {node_label} worktree bootstrap failed{error}. Tasks pinned to the node wait \
                 until it is bootstrapped again; look at the node, or ask the user to."
            )
        }
        REFINE_ACCEPTED => {
            let job = refine_job_id(metadata).map(|id| format!(" {id}")).unwrap_or_default();
            format!(
                "[System] Refinery accepted async job{job} for {node_label}. Its completion or failure \
                 will arrive as a terminal refine event; do not poll for it."
            )
        }
        REFINE_COMPLETED => refine_completed(node_label, metadata),
        REFINE_FAILED => refine_failed(node_label, metadata),
        _ => String::new(),
    }
}

/// The text an agentmesh coordinator reads for a stored event (its JSON payload),
/// rendered from the event's name, node label (`Remote agent` when it has none)
/// and metadata. The payload's own `coordinatorMessage` is never copied: a payload
/// the original wrote keeps the original's wording, which names tools agentmesh
/// does not have. `""` for an event the core writes no text for.
pub fn coordinator_text(payload: &Map<String, Value>) -> String {
    let event = payload.get("event").and_then(Value::as_str).unwrap_or_default();
    let label = read_non_empty(payload.get("nodeLabel")).unwrap_or("Remote agent");
    let none = Map::new();
    let metadata = read_record(payload.get("metadataEvent")).unwrap_or(&none);
    build_coordinator_message(event, label, metadata, &MessageOptions::default())
}

/// The diagnostics suffix ` (key=value; ...)`, or `""` when there is nothing to
/// say. Keys, in order: `session_id` (the metadata's `targetSessionId`),
/// `provider`, `provider_session_id`, `completion_diagnostic` (its `blockReason`,
/// or `present`), `final_assistant`, `evidence_level` (unless `sufficient`) and
/// `final_summary=may_be_truncated`.
pub fn completion_metadata_suffix(metadata: &Map<String, Value>) -> String {
    let diagnostic = metadata.get("completionDiagnostic").filter(|d| d.is_object() || d.is_array());
    let diagnostic_fields = diagnostic.and_then(Value::as_object);
    let mut parts = Vec::new();
    for (key, field) in [
        ("session_id", "targetSessionId"),
        ("provider", "providerType"),
        ("provider_session_id", "providerSessionId"),
    ] {
        if let Some(value) = read_non_empty(metadata.get(field)) {
            parts.push(format!("{key}={value}"));
        }
    }
    if diagnostic.is_some() {
        let reason =
            diagnostic_fields.and_then(|d| read_non_empty(d.get("blockReason"))).unwrap_or("present");
        parts.push(format!("completion_diagnostic={reason}"));
    }
    if let Some(present) =
        diagnostic_fields.and_then(|d| d.get("finalAssistantPresent")).and_then(Value::as_bool)
    {
        parts.push(format!("final_assistant={present}"));
    }
    if let Some(level) = read_non_empty(metadata.get("evidenceLevel")).filter(|l| *l != "sufficient") {
        parts.push(format!("evidence_level={level}"));
    }
    if diagnostic_fields.and_then(|d| d.get("finalSummaryMayBeTruncated")) == Some(&Value::Bool(true)) {
        parts.push("final_summary=may_be_truncated".to_owned());
    }
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join("; ")) }
}

fn generating_completed(label: &str, metadata: &Map<String, Value>, meta: &str) -> String {
    if metadata.get("source").and_then(Value::as_str) == Some("no_progress_reconciliation") {
        return format!(
            "[System] {label} already has completion evidence{meta}. The no-progress monitor reconciled its \
             handoff and marked the session complete; wait for the queued completion event \
             (wait_for_mesh_events) instead of checking by hand."
        );
    }
    let verify = if metadata.get("reviewRecommended") == Some(&Value::Bool(true)) {
        INSUFFICIENT_NOTE
    } else if is_weak_completion_metadata(metadata) {
        WEAK_NOTE
    } else {
        ""
    };
    match read_completion_summary(metadata) {
        Some(summary) => format!(
            "[System] {label} has completed its task and is now idle{meta}. Its final summary is below; read \
             it here (show_task shows the whole task).{verify}\n\n\
             --- {label} final summary ---\n{}",
            cut_summary(summary)
        ),
        None => format!(
            "[System] {label} has completed its task and is now idle{meta}. The event carried no final \
             summary.{verify} Use show_task once to see what the task recorded, and do not poll repeatedly."
        ),
    }
}

/// The summary, or its first characters plus the cut note, so the whole stays
/// within [`COMPLETION_SUMMARY_MAX_CHARS`].
fn cut_summary(summary: &str) -> String {
    if summary.chars().count() <= COMPLETION_SUMMARY_MAX_CHARS {
        return summary.to_owned();
    }
    let keep = COMPLETION_SUMMARY_MAX_CHARS - SUMMARY_CUT_NOTE.chars().count();
    let mut cut: String = summary.chars().take(keep).collect();
    cut.push_str(SUMMARY_CUT_NOTE);
    cut
}

fn waiting_choice(label: &str, metadata: &Map<String, Value>, meta: &str) -> String {
    let prompt = read_record(metadata.get("interactivePrompt"));
    let prompt_id = read_non_empty(metadata.get("promptId"))
        .or_else(|| prompt.and_then(|p| read_non_empty(p.get("promptId"))));
    let mut lines = vec![format!("[System] {label} is asking a question and waits for your answer{meta}.")];
    let questions =
        prompt.and_then(|p| p.get("questions")).and_then(Value::as_array).filter(|q| !q.is_empty());
    match questions {
        Some(questions) => {
            for question in questions.iter().filter_map(Value::as_object) {
                if let Some(text) = read_non_empty(question.get("question")) {
                    let header =
                        read_non_empty(question.get("header")).map(|h| format!("{h}: ")).unwrap_or_default();
                    let multi = if question.get("multiSelect") == Some(&Value::Bool(true)) {
                        " (select one or more)"
                    } else {
                        ""
                    };
                    lines.push(format!("\n**{header}{text}**{multi}"));
                }
                let options =
                    question.get("options").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                for (index, option) in options.iter().enumerate() {
                    let Some(option_label) = option.as_object().and_then(|o| read_non_empty(o.get("label")))
                    else {
                        continue;
                    };
                    let description = option
                        .get("description")
                        .and_then(|d| read_non_empty(Some(d)))
                        .map(|d| format!(" — {d}"))
                        .unwrap_or_default();
                    lines.push(format!("  {}. {option_label}{description}", index + 1));
                }
            }
        }
        None => {
            if let Some(modal) = read_non_empty(metadata.get("modalMessage")) {
                lines.push(format!("\n{modal}"));
            }
        }
    }
    let prompt = prompt_id.map(|id| format!(" (prompt {id})")).unwrap_or_default();
    lines.push(format!(
        "\nagentmesh cannot answer a question inside a worker's session{prompt}: answer it where the \
         worker runs, or send the worker your choice with send_to_session."
    ));
    lines.join("\n")
}

/// A stop: the task it ended and the worker's reason, then what to do next.
fn stopped(
    label: &str,
    metadata: &Map<String, Value>,
    meta: &str,
    recovery: Option<&RecoveryContext>,
) -> String {
    let reason = read_non_empty(metadata.get("reason"));
    let task = read_non_empty(metadata.get("taskId"));
    let outcome = match (task, reason) {
        (Some(task), Some(reason)) => format!("\nTask {task} failed: {reason}"),
        (Some(task), None) => format!("\nTask {task} failed; the worker gave no reason."),
        (None, Some(reason)) => format!("\nThe worker's reason: {reason}"),
        (None, None) => String::new(),
    };
    let Some(recovery) = recovery.filter(|r| r.consecutive_node_failures > 0) else {
        let next = if task.is_some() {
            "show_task shows the task; requeue_task puts it back in the queue for any worker, and \
             cancel_task drops it."
        } else {
            "ledger_tail shows what happened last."
        };
        return format!("[System] {label} has stopped{meta}.{outcome}\n\n{next}");
    };
    let mut lines = vec![
        format!("[System] {label} has stopped unexpectedly{meta}.{outcome}"),
        "\n**Recovery context:**".to_owned(),
        format!("- Consecutive failures on this node: {}", recovery.consecutive_node_failures),
    ];
    if recovery.task_attempt_count > 0 {
        lines.push(format!("- Attempts at this task so far: {}", recovery.task_attempt_count));
    }
    lines.push(format!("- Recommendation: {}", recovery.advice));
    match (recovery.retry_recommended, recovery.last_task_message.as_deref()) {
        (true, Some(task)) => {
            let quoted = if task.chars().count() > RETRY_TASK_MAX_CHARS {
                format!("{}...", task.chars().take(RETRY_TASK_MAX_CHARS).collect::<String>())
            } else {
                task.to_owned()
            };
            lines.push("\n**Task to retry:**".to_owned());
            lines.push(format!("> {quoted}"));
            lines.push(
                "\nTo retry, put the task back in the queue with requeue_task, or enqueue the text above \
                 again with enqueue_task."
                    .to_owned(),
            );
        }
        (true, None) => {}
        (false, _) => lines.push(
            "\nDo NOT retry on this node. Reassign the task to another node or ask the user how to proceed."
                .to_owned(),
        ),
    }
    lines.join("\n")
}

fn no_progress(label: &str, metadata: &Map<String, Value>, meta: &str) -> String {
    if metadata.get("meshWorkerStall") != Some(&Value::Bool(true)) {
        return format!(
            "[System] {label} is still reported as generating after a long interval{meta}. Keep waiting for \
             pending events or a completion; if the user asks for status, make one bounded check and then \
             wait again."
        );
    }
    let duration =
        metadata.get("stalledMs").and_then(Value::as_f64).map(|ms| format!(" for {}s", rounded_seconds(ms)));
    let status = read_non_empty(metadata.get("observedStatus")).map(|s| format!(" (observed status: {s})"));
    format!(
        "[System] {label}: PTY output unchanged{}{}{meta}. This is an informational stall, NOT a failure and \
         not a restart: the worker's screen has not changed whatever its reported status, so it may be idle, \
         waiting or stuck. Wait for a completion event, or make one bounded show_task check and then \
         wait again.",
        duration.unwrap_or_default(),
        status.unwrap_or_default(),
    )
}

fn bootstrap_complete(label: &str, metadata: &Map<String, Value>, has_queued_task: bool) -> String {
    let path = read_non_empty(metadata.get("worktreePath")).map(|p| format!(" at {p}")).unwrap_or_default();
    let duration = metadata
        .get("durationMs")
        .and_then(Value::as_f64)
        .map(|ms| format!(" in {}s", rounded_seconds(ms)))
        .unwrap_or_default();
    let next = if has_queued_task {
        "The worktree is ready and a queued task targeting this node will claim it by itself; \
         nothing needs to be started by hand."
    } else {
        "The worktree is ready. A task already queued for it will be claimed automatically; launch a session \
         by hand only if you need one and none exists yet."
    };
    format!("[System] {label} worktree bootstrap completed{path}{duration}. {next}")
}

/// Refine result fields both refine texts read.
struct RefineResult<'a> {
    result: Option<&'a Map<String, Value>>,
    convergence: Option<&'a Map<String, Value>>,
    validation: Option<&'a str>,
    patch: Option<&'a str>,
}

impl<'a> RefineResult<'a> {
    fn read(metadata: &'a Map<String, Value>) -> RefineResult<'a> {
        let result = read_record(metadata.get("result"));
        let field = |key: &str| result.and_then(|r| read_record(r.get(key)));
        let patch = field("patchEquivalence");
        RefineResult {
            result,
            convergence: field("finalBranchConvergenceState"),
            validation: field("validationSummary").and_then(|v| read_non_empty(v.get("status"))),
            patch: patch.and_then(|p| read_non_empty(p.get("status"))).or_else(|| {
                (patch.and_then(|p| p.get("equivalent")) == Some(&Value::Bool(true))).then_some("passed")
            }),
        }
    }

    fn result_str(&self, key: &str) -> Option<&'a str> {
        self.result.and_then(|r| read_non_empty(r.get(key)))
    }

    fn convergence_str(&self, key: &str) -> Option<&'a str> {
        self.convergence.and_then(|c| read_non_empty(c.get(key)))
    }

    fn merged(&self) -> bool {
        self.result.and_then(|r| r.get("merged")) == Some(&Value::Bool(true))
    }

    fn next_step(&self) -> Option<&'a str> {
        self.result_str("nextStep").or_else(|| self.convergence_str("nextStep"))
    }
}

fn details(parts: Vec<Option<String>>) -> String {
    let parts: Vec<String> = parts.into_iter().flatten().collect();
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join("; ")) }
}

fn refine_completed(label: &str, metadata: &Map<String, Value>) -> String {
    let r = RefineResult::read(metadata);
    let convergence = r.convergence_str("status");
    let merge = if r.merged() { Some("merged") } else { convergence };
    let branches =
        r.result_str("branch").zip(r.result_str("into")).map(|(branch, into)| format!("{branch}→{into}"));
    let details = details(vec![
        refine_job_id(metadata).map(|id| format!("job_id={id}")),
        branches,
        r.validation.map(|v| format!("validation={v}")),
        r.patch.map(|p| format!("patch_equivalence={p}")),
        merge.map(|m| format!("merge={m}")),
        convergence.map(|c| format!("final_convergence={c}")),
    ]);
    let next = r.next_step().unwrap_or("Continue from the updated mesh state.");
    format!("[System] Refinery async job for {label} completed successfully{details}.\nNext step: {next}")
}

fn refine_failed(label: &str, metadata: &Map<String, Value>) -> String {
    let r = RefineResult::read(metadata);
    let merge = if r.merged() {
        Some("merged")
    } else if r.convergence.and_then(|c| c.get("merged")) == Some(&Value::Bool(false)) {
        Some("not_merged")
    } else {
        None
    };
    let convergence = r.result_str("convergenceStatus").or_else(|| r.convergence_str("status"));
    let details = details(vec![
        refine_job_id(metadata).map(|id| format!("job_id={id}")),
        r.result_str("code").map(|c| format!("code={c}")),
        r.validation.map(|v| format!("validation={v}")),
        r.patch.map(|p| format!("patch_equivalence={p}")),
        merge.map(|m| format!("merge={m}")),
        convergence.map(|c| format!("convergence={c}")),
        r.result_str("blockedReason").map(|b| format!("reason={b}")),
    ]);
    let error = r.result_str("error").map(|e| format!(": {e}")).unwrap_or_else(|| ".".to_owned());
    let next = match r.next_step() {
        Some(step) => format!("Next step: {step}"),
        None => "Review the terminal refine event and the ledger before retrying.".to_owned(),
    };
    format!("[System] Refinery async job for {label} failed{details}{error}\n{next}")
}

/// Milliseconds to whole seconds, rounding halves up as JavaScript's `Math.round`.
fn rounded_seconds(ms: f64) -> i64 {
    (ms / 1000.0 + 0.5).floor() as i64
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn md(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn message(event: &str, metadata: Value) -> String {
        build_coordinator_message(event, "Node 'n1'", &md(metadata), &MessageOptions::default())
    }

    #[test]
    fn completion_with_a_summary_carries_it_inline() {
        let text =
            message(AGENT_GENERATING_COMPLETED, json!({"finalSummary": "Fixed the bug.", "taskId": "t1"}));
        assert!(text.starts_with("[System] Node 'n1' has completed its task and is now idle. "), "{text}");
        assert!(text.ends_with("\n\n--- Node 'n1' final summary ---\nFixed the bug."), "{text}");
        assert!(!text.contains("verify"), "{text}");
    }

    #[test]
    fn completion_notes_weak_and_insufficient_evidence() {
        let weak = message(AGENT_GENERATING_COMPLETED, json!({"finalSummary": "x", "evidenceLevel": "weak"}));
        assert!(weak.contains("(evidence_level=weak)"), "{weak}");
        assert!(weak.contains("weak — verify with git status or show_task"), "{weak}");
        let review =
            message(AGENT_GENERATING_COMPLETED, json!({"finalSummary": "x", "reviewRecommended": true}));
        assert!(review.contains("insufficient"), "{review}");
        assert!(!review.contains("is weak"), "{review}");
        let missing = message(
            AGENT_GENERATING_COMPLETED,
            json!({"completionDiagnostic": {
                "blockReason": "missing_final_assistant",
                "finalAssistantPresent": false,
            }}),
        );
        assert!(
            missing.contains("(completion_diagnostic=missing_final_assistant; final_assistant=false)"),
            "{missing}"
        );
        assert!(missing.contains("weak — verify"), "{missing}");
        assert!(missing.contains("do not poll repeatedly"), "{missing}");
    }

    #[test]
    fn completion_without_a_summary_says_read_once() {
        let text = message(AGENT_GENERATING_COMPLETED, json!({"taskId": "t1"}));
        assert!(text.starts_with("[System] Node 'n1' has completed its task and is now idle."), "{text}");
        assert!(text.contains("show_task once"), "{text}");
        assert!(!text.contains("final summary ---"), "{text}");
    }

    #[test]
    fn reconciled_completion() {
        let text = message(
            AGENT_GENERATING_COMPLETED,
            json!({"source": "no_progress_reconciliation", "finalSummary": "x"}),
        );
        assert!(text.starts_with("[System] Node 'n1' already has completion evidence."), "{text}");
    }

    #[test]
    fn long_summaries_are_cut_with_a_note() {
        let summary = "é".repeat(COMPLETION_SUMMARY_MAX_CHARS + 10);
        let text = message(AGENT_GENERATING_COMPLETED, json!({"finalSummary": summary}));
        let surfaced = text.split("final summary ---\n").nth(1).unwrap();
        assert_eq!(surfaced.chars().count(), COMPLETION_SUMMARY_MAX_CHARS);
        assert!(surfaced.ends_with(SUMMARY_CUT_NOTE));
        let exact = "a".repeat(COMPLETION_SUMMARY_MAX_CHARS);
        let text = message(AGENT_GENERATING_COMPLETED, json!({"finalSummary": exact.clone()}));
        assert!(text.ends_with(&exact));
    }

    #[test]
    fn metadata_suffix() {
        let suffix = completion_metadata_suffix(&md(json!({
            "targetSessionId": "s1",
            "providerType": "claude-cli",
            "providerSessionId": "p1",
            "completionDiagnostic": {"finalSummaryMayBeTruncated": true},
            "evidenceLevel": "sufficient",
        })));
        assert_eq!(
            suffix,
            " (session_id=s1; provider=claude-cli; provider_session_id=p1; completion_diagnostic=present; \
             final_summary=may_be_truncated)"
        );
        assert_eq!(completion_metadata_suffix(&md(json!({"sessionId": "s1"}))), "");
    }

    #[test]
    fn stopped_plain_and_with_recovery() {
        let text = message(AGENT_STOPPED, json!({"providerType": "codex-cli"}));
        assert_eq!(
            text,
            "[System] Node 'n1' has stopped (provider=codex-cli).\n\nledger_tail shows what happened last."
        );
        let text = message(
            AGENT_STOPPED,
            json!({"targetSessionId": "w1", "taskId": "t1", "reason": "tests still red"}),
        );
        assert_eq!(
            text,
            "[System] Node 'n1' has stopped (session_id=w1).\nTask t1 failed: tests still red\n\n\
             show_task shows the task; requeue_task puts it back in the queue for any worker, and \
             cancel_task drops it."
        );
        let text = message(AGENT_STOPPED, json!({"taskId": "t1"}));
        assert!(text.contains("\nTask t1 failed; the worker gave no reason.\n"), "{text}");
        let text = message(AGENT_STOPPED, json!({"reason": "out of disk"}));
        assert!(text.contains("\nThe worker's reason: out of disk\n"), "{text}");
        let recovery = RecoveryContext {
            consecutive_node_failures: 2,
            task_attempt_count: 1,
            advice: "retry once".into(),
            retry_recommended: true,
            last_task_message: Some("x".repeat(400)),
        };
        let options = MessageOptions { recovery: Some(recovery.clone()), ..MessageOptions::default() };
        let failed = md(json!({"taskId": "t1", "reason": "tests still red"}));
        let text = build_coordinator_message(AGENT_STOPPED, "Node 'n1'", &failed, &options);
        assert!(
            text.starts_with(
                "[System] Node 'n1' has stopped unexpectedly.\nTask t1 failed: tests still red\n"
            ),
            "{text}"
        );
        assert!(text.contains("- Consecutive failures on this node: 2"), "{text}");
        assert!(text.contains("put the task back in the queue with requeue_task"), "{text}");
        assert!(text.contains(&format!("> {}...", "x".repeat(300))), "{text}");
        let no_retry = RecoveryContext { retry_recommended: false, ..recovery.clone() };
        let options = MessageOptions { recovery: Some(no_retry), ..MessageOptions::default() };
        let text = build_coordinator_message(AGENT_STOPPED, "Node 'n1'", &Map::new(), &options);
        assert!(text.contains("Do NOT retry on this node"), "{text}");
        let healthy = RecoveryContext { consecutive_node_failures: 0, ..recovery };
        let options = MessageOptions { recovery: Some(healthy), ..MessageOptions::default() };
        let text = build_coordinator_message(AGENT_STOPPED, "Node 'n1'", &Map::new(), &options);
        assert!(text.starts_with("[System] Node 'n1' has stopped.\n"), "{text}");
    }

    #[test]
    fn approval_and_choice() {
        let text = message(AGENT_WAITING_APPROVAL, json!({}));
        assert!(text.starts_with("[System] Node 'n1' is waiting for approval"), "{text}");
        assert!(text.contains("answer it where the worker runs"), "{text}");
        assert!(text.contains("send_to_session"), "{text}");
        let text = message(
            AGENT_WAITING_CHOICE,
            json!({"interactivePrompt": {"promptId": "p9", "questions": [{
                "header": "DB",
                "question": "Which database?",
                "multiSelect": true,
                "options": [
                    {"label": "SQLite", "description": "embedded"},
                    {"label": " "},
                    {"label": "Postgres"},
                ],
            }]}}),
        );
        assert!(text.contains("\n**DB: Which database?** (select one or more)"), "{text}");
        assert!(text.contains("  1. SQLite — embedded\n  3. Postgres"), "{text}");
        assert!(text.contains("a question inside a worker's session (prompt p9): answer it"), "{text}");
        let text = message(AGENT_WAITING_CHOICE, json!({"modalMessage": "Continue?"}));
        assert!(text.contains("\nContinue?"), "{text}");
    }

    #[test]
    fn no_progress_forms() {
        let stall = message(
            MONITOR_NO_PROGRESS,
            json!({"meshWorkerStall": true, "stalledMs": 90_500, "observedStatus": "idle"}),
        );
        assert!(
            stall.starts_with("[System] Node 'n1': PTY output unchanged for 91s (observed status: idle)."),
            "{stall}"
        );
        assert!(stall.contains("NOT a failure"), "{stall}");
        let long = message(MONITOR_NO_PROGRESS, json!({}));
        assert!(
            long.starts_with("[System] Node 'n1' is still reported as generating after a long interval."),
            "{long}"
        );
    }

    #[test]
    fn bootstrap_texts() {
        let text =
            message(WORKTREE_BOOTSTRAP_COMPLETE, json!({"worktreePath": "/wt/a", "durationMs": 1_499}));
        assert!(
            text.starts_with("[System] Node 'n1' worktree bootstrap completed at /wt/a in 1s. "),
            "{text}"
        );
        assert!(text.contains("launch a session by hand only if"), "{text}");
        let options = MessageOptions { worktree_has_queued_task: true, ..MessageOptions::default() };
        let text = build_coordinator_message(WORKTREE_BOOTSTRAP_COMPLETE, "Node 'n1'", &Map::new(), &options);
        assert!(text.starts_with("[System] Node 'n1' worktree bootstrap completed. "), "{text}");
        assert!(text.contains("nothing needs to be started by hand"), "{text}");
        let failed = message(WORKTREE_BOOTSTRAP_FAILED, json!({"error": "git clone failed"}));
        assert!(failed.starts_with(
            "[System] Node 'n1' worktree bootstrap failed: git clone failed. Tasks pinned to the node wait"
        ));
        let failed = message(WORKTREE_BOOTSTRAP_FAILED, json!({}));
        assert!(failed.starts_with("[System] Node 'n1' worktree bootstrap failed. Tasks"), "{failed}");
    }

    #[test]
    fn refine_texts() {
        let accepted = message(REFINE_ACCEPTED, json!({"jobId": "j1"}));
        assert!(accepted.starts_with("[System] Refinery accepted async job j1 for Node 'n1'."), "{accepted}");
        let completed = message(
            REFINE_COMPLETED,
            json!({"jobId": "j1", "result": {
                "branch": "wt/a", "into": "main", "merged": true,
                "validationSummary": {"status": "passed"},
                "patchEquivalence": {"equivalent": true},
                "finalBranchConvergenceState": {"status": "converged"},
            }}),
        );
        assert_eq!(
            completed,
            "[System] Refinery async job for Node 'n1' completed successfully (job_id=j1; wt/a→main; \
             validation=passed; patch_equivalence=passed; merge=merged; final_convergence=converged).\n\
             Next step: Continue from the updated mesh state."
        );
        let failed = message(
            REFINE_FAILED,
            json!({"result": {
                "refineJob": {"jobId": "j2"}, "code": "conflict", "error": "merge conflict in a.rs",
                "finalBranchConvergenceState": {"merged": false, "nextStep": "Rebase wt/a."},
            }}),
        );
        assert_eq!(
            failed,
            "[System] Refinery async job for Node 'n1' failed (job_id=j2; code=conflict; merge=not_merged): \
             merge conflict in a.rs\nNext step: Rebase wt/a."
        );
        let bare = message(REFINE_FAILED, json!({}));
        assert_eq!(
            bare,
            "[System] Refinery async job for Node 'n1' failed.\n\
             Review the terminal refine event and the ledger before retrying."
        );
    }

    #[test]
    fn other_events_have_no_text() {
        for event in ["agent:ready", "agent:generating_started", "mesh:dispatch_blocked", "whatever"] {
            assert_eq!(message(event, json!({"finalSummary": "x"})), "", "{event}");
        }
        for event in EVENTS_WITH_TEXT {
            assert_ne!(message(event, json!({})), "", "{event}");
        }
    }

    #[test]
    fn a_stored_event_is_rendered_from_its_metadata_not_its_stored_text() {
        let payload = md(json!({
            "event": "agent:stopped",
            "nodeLabel": "Node 'n1'",
            "metadataEvent": {"taskId": "t1", "reason": "tests still red"},
            "coordinatorMessage": "[System] Node 'n1' has stopped. Use mesh_read_chat once.",
        }));
        let text = coordinator_text(&payload);
        assert!(text.contains("Task t1 failed: tests still red"), "{text}");
        assert!(!text.contains("mesh_read_chat"), "{text}");
        let bare = coordinator_text(&md(json!({"event": "agent:waiting_approval"})));
        assert!(bare.starts_with("[System] Remote agent is waiting for approval"), "{bare}");
        assert_eq!(coordinator_text(&md(json!({"event": "agent:ready", "coordinatorMessage": "x"}))), "");
    }

    #[test]
    fn rounding_matches_javascript() {
        assert_eq!(rounded_seconds(1_499.0), 1);
        assert_eq!(rounded_seconds(1_500.0), 2);
        assert_eq!(rounded_seconds(-2_500.0), -2);
    }
}
