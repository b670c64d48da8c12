//! `agentmesh mcp` over stdio, driven by rmcp's client: every tool, bad
//! arguments, the rate guard, a coordinator and workers in separate processes,
//! the texts a coordinator reads, and the documented values of every schema.

use crate::mcp_support;

use std::collections::BTreeSet;
use std::time::Duration;

use mcp_support::{
    call, exercise_every_tool, ok, polling_gets_the_advisory, spawn_stdio, text, wait_for_events,
};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_answers_over_stdio_and_bad_arguments_are_tool_errors() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn_stdio(dir.path(), None).await;
    exercise_every_tool(&client).await;
    polling_gets_the_advisory(&client).await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_completes_what_a_coordinator_process_enqueued() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = spawn_stdio(dir.path(), None).await;
    let worker = spawn_stdio(dir.path(), Some("worker-1")).await;

    let enqueued =
        ok(&coordinator, "enqueue_task", json!({ "message": "write the parser", "difficulty": "medium" }))
            .await;
    let task_id = enqueued["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(enqueued["task"]["difficulty"], "medium", "{enqueued}");

    let profile = json!({ "class": "pty", "timing": "live", "emitsPtyTurnEvents": false });
    let claimed = ok(&worker, "claim_task", json!({ "assignedTranscriptProfile": profile })).await;
    assert_eq!(claimed["task"]["id"], task_id.as_str());
    assert_eq!(claimed["task"]["assignedTranscriptProfile"], profile, "{claimed}");
    let epoch = claimed["epoch"].as_u64().unwrap();
    ok(&worker, "complete_task", json!({ "summary": "parser written, 12 tests pass", "epoch": epoch })).await;

    let events = wait_for_events(&coordinator, 1, Duration::from_secs(20)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["taskId"], task_id.as_str());
    assert_eq!(events[0]["event"], "agent:generating_completed");
    assert_eq!(events[0]["summary"], "parser written, 12 tests pass");
    assert!(events[0]["text"].as_str().unwrap().contains("parser written, 12 tests pass"));

    // Once: neither a second wait nor a drain sees it again.
    let again = call(&coordinator, "wait_for_mesh_events", json!({ "seconds": 1 })).await;
    assert!(text(&again).starts_with("No events yet"), "{}", text(&again));
    assert_eq!(ok(&coordinator, "get_pending_mesh_events", json!({})).await["events"], json!([]));

    coordinator.cancel().await.unwrap();
    worker.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_id_is_kept_in_the_data_dir_and_each_process_is_a_new_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let client = spawn_stdio(dir.path(), None).await;
        let status = ok(&client, "mesh_status", json!({})).await;
        client.cancel().await.unwrap();
        seen.push((status["you"]["daemonId"].clone(), status["you"]["runId"].clone()));
    }
    let stored = std::fs::read_to_string(dir.path().join("daemon-id")).unwrap();
    assert_eq!(seen[0].0, stored.trim());
    assert_eq!(seen[0].0, seen[1].0);
    assert_ne!(seen[0].1, seen[1].1);
}

/// `value` with every string `"BAD"` in it replaced by `bad`.
fn with_placeholder_as(value: serde_json::Value, bad: &str) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) if s == "BAD" => Value::from(bad),
        Value::Array(items) => Value::Array(items.into_iter().map(|v| with_placeholder_as(v, bad)).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, with_placeholder_as(v, bad))).collect())
        }
        other => other,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_id_argument_follows_the_one_id_rule_and_a_refused_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn_stdio(dir.path(), None).await;
    ok(&client, "enqueue_task", json!({ "message": "kept", "id": "t-f" })).await;
    let ledger = ok(&client, "ledger_tail", json!({ "tail": 100 })).await;
    let history = ok(&client, "ledger_tail", json!({ "taskId": "t-f" })).await;
    let kinds: Vec<&Value> = history["entries"].as_array().unwrap().iter().map(|e| &e["kind"]).collect();
    assert_eq!(kinds, [&json!("task_dispatched")], "{history}");
    let unknown = call(&client, "ledger_tail", json!({ "taskId": "t-none" })).await;
    assert_eq!(unknown.is_error, Some(true), "{}", text(&unknown));
    assert!(text(&unknown).contains("task_not_found"), "{}", text(&unknown));
    let cases = [
        ("enqueue_task", json!({ "message": "x", "id": "BAD" }), "id"),
        ("enqueue_task", json!({ "message": "x", "dependsOn": ["BAD"] }), "dependsOn[0]"),
        ("enqueue_task", json!({ "message": "x", "targetNodeId": "BAD" }), "targetNodeId"),
        ("enqueue_task", json!({ "message": "x", "missionId": "BAD" }), "missionId"),
        ("enqueue_task", json!({ "message": "x", "difficulty": "BAD" }), "difficulty"),
        ("enqueue_tasks", json!({ "tasks": [{ "message": "a", "ref": "BAD" }] }), "tasks[0].ref"),
        (
            "enqueue_tasks",
            json!({ "tasks": [{ "message": "a" }, { "message": "b", "id": "BAD" }] }),
            "tasks[1].id",
        ),
        ("show_task", json!({ "taskId": "BAD" }), "taskId"),
        ("ledger_tail", json!({ "taskId": "BAD" }), "taskId"),
        ("cancel_task", json!({ "taskId": "BAD" }), "taskId"),
        ("requeue_task", json!({ "taskId": "BAD", "force": true }), "taskId"),
        ("set_task_priority", json!({ "taskId": "BAD", "priority": "high" }), "taskId"),
        ("set_task_priority", json!({ "taskId": "t-f", "priority": "urgent" }), "priority"),
        ("claim_task", json!({ "sessionId": "w1", "nodeId": "BAD" }), "nodeId"),
        ("claim_task", json!({ "sessionId": "BAD" }), "sessionId"),
        (
            "claim_task",
            json!({ "sessionId": "w1", "assignedTranscriptProfile": { "class": "BAD", "timing": "live" } }),
            "assignedTranscriptProfile.class",
        ),
        (
            "claim_task",
            json!({ "sessionId": "w1", "allowedTaskDifficulties": ["easy", "BAD"] }),
            "allowedTaskDifficulties[1]",
        ),
        ("heartbeat_task", json!({ "taskId": "BAD", "epoch": 1, "sessionId": "w1" }), "taskId"),
        ("complete_task", json!({ "summary": "done", "sessionId": "BAD" }), "sessionId"),
        ("complete_task", json!({ "summary": "done", "occurredAt": "BAD" }), "occurredAt"),
        ("fail_task", json!({ "reason": "no", "taskId": "BAD", "sessionId": "w1" }), "taskId"),
        ("upsert_mission", json!({ "missionId": "BAD", "title": "T" }), "missionId"),
        ("show_mission", json!({ "missionId": "BAD" }), "missionId"),
        ("suggest_node", json!({ "taskId": "t-f", "nodes": [{ "nodeId": "BAD" }] }), "nodes[0].nodeId"),
        ("send_to_session", json!({ "sessionId": "BAD", "message": "hello" }), "sessionId"),
        ("read_deliveries", json!({ "sessionId": "BAD" }), "sessionId"),
        ("report_idle", json!({ "sessionId": "BAD" }), "sessionId"),
    ];
    for bad in ["x\u{0}y\nz", &"a".repeat(201)] {
        for (tool, arguments, field) in &cases {
            let arguments = with_placeholder_as(arguments.clone(), bad);
            let result = call(&client, tool, arguments.clone()).await;
            assert_eq!(result.is_error, Some(true), "{tool} {arguments}: {}", text(&result));
            let error: serde_json::Value = serde_json::from_str(&text(&result)).unwrap();
            assert_eq!(error["code"], "invalid_input", "{tool} {arguments}: {error}");
            assert_eq!(error["field"], *field, "{tool} {arguments}: {error}");
            assert!(error["message"].as_str().unwrap().starts_with(&format!("invalid {field}: ")), "{error}");
        }
    }
    let tasks = ok(&client, "list_tasks", json!({})).await;
    let ids: Vec<&str> = tasks["tasks"].as_array().unwrap().iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, ["t-f"], "a refused id enqueued something");
    assert_eq!(
        ok(&client, "ledger_tail", json!({ "tail": 100 })).await,
        ledger,
        "a refused id wrote to the ledger"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_reaches_the_coordinator_with_its_reason_in_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = spawn_stdio(dir.path(), None).await;
    let worker = spawn_stdio(dir.path(), None).await;

    let enqueued = ok(&coordinator, "enqueue_task", json!({ "message": "make the tests pass" })).await;
    let task_id = enqueued["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(ok(&worker, "claim_task", json!({})).await["task"]["id"], task_id.as_str());
    ok(&worker, "fail_task", json!({ "reason": "tests still red" })).await;

    let waited = call(&coordinator, "wait_for_mesh_events", json!({ "seconds": 20 })).await;
    let events = waited.structured_content.as_ref().unwrap()["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "agent:stopped");
    assert_eq!(events[0]["reason"], "tests still red");
    let said = events[0]["text"].as_str().unwrap();
    assert!(said.contains(&format!("Task {task_id} failed: tests still red")), "{said}");
    assert!(said.contains("requeue_task"), "{said}");
    // The text block the agent reads says it too.
    assert!(text(&waited).contains("tests still red"), "{}", text(&waited));

    coordinator.cancel().await.unwrap();
    worker.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_under_one_configuration_are_sessions_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = spawn_stdio(dir.path(), None).await;
    // Two workers started alike, as a shared `.mcp.json` starts them.
    let first = spawn_stdio(dir.path(), None).await;
    let second = spawn_stdio(dir.path(), None).await;
    // Read-only work: the workers run on one node (this machine), which takes one
    // task that writes at a time.
    for id in ["t-1", "t-2"] {
        let task = json!({ "message": format!("review {id}"), "id": id, "readonly": true });
        ok(&coordinator, "enqueue_task", task).await;
    }

    let mut sessions = Vec::new();
    for worker in [&first, &second] {
        let you = ok(worker, "mesh_status", json!({})).await["you"].clone();
        assert_eq!(you["sessionPinned"], false, "{you}");
        sessions.push(you["sessionId"].as_str().unwrap().to_owned());
    }
    assert!(sessions.iter().all(|s| s.starts_with("ses_")), "{sessions:?}");
    assert_ne!(sessions[0], sessions[1]);

    let claimed_first = ok(&first, "claim_task", json!({})).await;
    let claimed_second = ok(&second, "claim_task", json!({})).await;
    assert_eq!(claimed_first["sessionId"], sessions[0].as_str());
    assert_eq!(claimed_second["sessionId"], sessions[1].as_str());
    assert_eq!(claimed_second["refusal"], Value::Null, "{claimed_second}");
    let (a, b) = (claimed_first["task"]["id"].clone(), claimed_second["task"]["id"].clone());
    assert!(a.is_string() && b.is_string() && a != b, "{a} {b}");

    // Without a task id, each completes its own task, even by a clock far behind
    // its dispatch.
    let behind = json!({ "summary": "second done", "occurredAt": "2000-01-01T00:00:00.000Z" });
    let done = ok(&second, "complete_task", behind).await;
    assert_eq!(done["task"]["id"], b);
    assert_eq!(done["task"]["status"], "completed");
    let done = ok(&first, "complete_task", json!({ "summary": "first done" })).await;
    assert_eq!(done["task"]["id"], a);
    assert_eq!(done["task"]["assignedSessionId"], sessions[0].as_str());

    // `--session` pins the session.
    let pinned = spawn_stdio(dir.path(), Some("worker-9")).await;
    let you = ok(&pinned, "mesh_status", json!({})).await["you"].clone();
    assert_eq!((you["sessionId"].as_str(), you["sessionPinned"].as_bool()), (Some("worker-9"), Some(true)));
    ok(&coordinator, "enqueue_task", json!({ "message": "do t-3", "id": "t-3" })).await;
    let claimed = ok(&pinned, "claim_task", json!({})).await;
    assert_eq!(claimed["task"]["assignedSessionId"], "worker-9");
    assert_eq!(claimed["sessionId"], "worker-9");

    for client in [coordinator, first, second, pinned] {
        client.cancel().await.unwrap();
    }
}

/// Names the original's texts sent a coordinator to; agentmesh has none of them.
const FOREIGN_NAMES: &[&str] = &[
    "mesh_read_chat",
    "mesh_approve",
    "mesh_answer_question",
    "mesh_launch_session",
    "mesh_send_task",
    "mesh_retry_node_bootstrap",
    "pendingCoordinatorEvents",
];

/// The words of `text` that look like a tool or an argument name: `snake_case`
/// and `camelCase` identifiers, leaving out the `key=value` diagnostics.
fn names_in(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut names = Vec::new();
    let mut start = None;
    for i in 0..=bytes.len() {
        match (start, bytes.get(i).copied().filter(|b| is_word(*b))) {
            (None, Some(_)) => start = Some(i),
            (Some(from), None) => {
                start = None;
                let word = &text[from..i];
                let in_diagnostic = (from > 0 && bytes[from - 1] == b'=') || bytes.get(i) == Some(&b'=');
                let snake = word.trim_matches('_').contains('_');
                let camel = word
                    .as_bytes()
                    .windows(2)
                    .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
                if (snake || camel) && !in_diagnostic {
                    names.push(word.to_owned());
                }
            }
            _ => {}
        }
    }
    names
}

/// Every text the core renders for a coordinator: each event it writes a text for,
/// under metadata and options that take every branch, and the rate guard's advice.
fn core_texts() -> Vec<String> {
    use agentmesh_core::events::{
        EVENTS_WITH_TEXT, MessageOptions, RecoveryContext, build_coordinator_message,
    };
    let metadata = [
        json!({}),
        json!({ "taskId": "t1", "reason": "tests still red", "targetSessionId": "w1", "providerType": "claude-cli",
                "providerSessionId": "p1", "evidenceLevel": "weak", "finalSummary": "done",
                "completionDiagnostic": { "blockReason": "missing_final_assistant", "finalAssistantPresent": false,
                                          "finalSummaryMayBeTruncated": true } }),
        json!({ "finalSummary": "x".repeat(20_000), "reviewRecommended": true }),
        json!({ "source": "no_progress_reconciliation", "finalSummary": "done" }),
        json!({ "reason": "out of disk" }),
        json!({ "promptId": "p9", "interactivePrompt": { "questions": [{ "header": "DB", "question": "Which one?",
                "multiSelect": true, "options": [{ "label": "SQLite", "description": "embedded" }] }] } }),
        json!({ "modalMessage": "Continue?" }),
        json!({ "meshWorkerStall": true, "stalledMs": 90_000, "observedStatus": "idle" }),
        json!({ "worktreePath": "/wt/a", "durationMs": 1_500, "error": "clone failed" }),
        json!({ "jobId": "j1", "result": { "branch": "wt/a", "into": "main", "merged": true, "code": "conflict",
                "error": "merge conflict", "blockedReason": "dirty", "validationSummary": { "status": "passed" },
                "patchEquivalence": { "equivalent": true },
                "finalBranchConvergenceState": { "status": "converged", "merged": false, "nextStep": "Rebase." } } }),
    ];
    let recovery = |retry: bool, message: Option<&str>| RecoveryContext {
        consecutive_node_failures: 2,
        task_attempt_count: 1,
        advice: "retry once".into(),
        retry_recommended: retry,
        last_task_message: message.map(str::to_owned),
    };
    let options = [
        MessageOptions::default(),
        MessageOptions { worktree_has_queued_task: true, ..MessageOptions::default() },
        MessageOptions {
            recovery: Some(recovery(true, Some("write the parser"))),
            ..MessageOptions::default()
        },
        MessageOptions { recovery: Some(recovery(true, None)), ..MessageOptions::default() },
        MessageOptions { recovery: Some(recovery(false, None)), ..MessageOptions::default() },
    ];
    let mut texts = Vec::new();
    for event in EVENTS_WITH_TEXT {
        for metadata in &metadata {
            for options in &options {
                let text =
                    build_coordinator_message(event, "Node 'n1'", metadata.as_object().unwrap(), options);
                assert!(!text.is_empty(), "{event} has a text");
                texts.push(text);
            }
        }
    }
    let guard = agentmesh_core::RateGuard::default();
    texts.push(guard.verdict("m", "mesh_status", 99).advisory.expect("a tripped guard advises"));
    texts
}

/// The values a schema documents: its `enum`, `const` and `examples`, also inside
/// `oneOf`/`anyOf`.
fn documented_values(schema: &Value) -> Vec<Value> {
    let mut values = Vec::new();
    for key in ["enum", "examples"] {
        values.extend(schema.get(key).and_then(Value::as_array).into_iter().flatten().cloned());
    }
    values.extend(schema.get("const").cloned());
    for key in ["oneOf", "anyOf"] {
        for branch in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
            values.extend(documented_values(branch));
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_text_a_coordinator_reads_names_only_real_tools() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn_stdio(dir.path(), None).await;
    let tools = client.list_all_tools().await.unwrap();
    let instructions = client.peer_info().and_then(|info| info.instructions.clone()).unwrap_or_default();
    client.cancel().await.unwrap();

    let tool_names: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
    let mut argument_names = BTreeSet::new();
    let mut schema_words = BTreeSet::new();
    let mut descriptions = vec![instructions.clone()];
    for tool in &tools {
        descriptions.extend(tool.description.as_deref().map(str::to_owned));
        let mut stack = vec![Value::Object(tool.input_schema.as_ref().clone())];
        while let Some(schema) = stack.pop() {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                argument_names.extend(properties.keys().cloned());
                stack.extend(properties.values().cloned());
            }
            stack.extend(schema.get("items").cloned());
            descriptions.extend(schema.get("description").and_then(Value::as_str).map(str::to_owned));
            for value in documented_values(&schema) {
                let words =
                    value.as_str().map(|s| s.split(',').map(str::to_owned).collect()).unwrap_or_default();
                schema_words.extend::<Vec<String>>(words);
            }
        }
    }
    assert!(!instructions.is_empty(), "the server has instructions");

    for text in core_texts() {
        for foreign in FOREIGN_NAMES {
            assert!(!text.contains(foreign), "a core text names {foreign}:\n{text}");
        }
        for name in names_in(&text) {
            let known = tool_names.contains(&name) || argument_names.contains(&name);
            assert!(known, "a core text names {name}, which is no agentmesh tool or argument:\n{text}");
        }
    }
    // The server's own texts may also name the documented values of an argument,
    // and the one answer word requeue_task documents.
    for text in descriptions {
        for foreign in FOREIGN_NAMES {
            assert!(!text.contains(foreign), "a tool text names {foreign}:\n{text}");
        }
        for name in names_in(&text) {
            let known = tool_names.contains(&name)
                || argument_names.contains(&name)
                || schema_words.contains(&name)
                || name == "retries_exhausted";
            assert!(known, "a tool text names {name}, which is no agentmesh tool or argument:\n{text}");
        }
    }
}

/// What each tool is called with before a documented value is set in it.
fn base_arguments(tool: &str) -> Value {
    match tool {
        "enqueue_task" => json!({ "message": "documented values" }),
        "enqueue_tasks" => json!({ "tasks": [{ "message": "documented values" }] }),
        "show_task" | "cancel_task" => json!({ "taskId": "t-doc" }),
        "requeue_task" => json!({ "taskId": "t-doc", "force": true }),
        "set_task_priority" => json!({ "taskId": "t-doc", "priority": "low" }),
        "upsert_mission" => json!({ "missionId": "m-doc", "title": "Documented" }),
        "show_mission" => json!({ "missionId": "m-doc" }),
        "suggest_node" => json!({ "taskId": "t-doc", "nodes": [{ "nodeId": "n1" }] }),
        "send_to_session" => json!({ "sessionId": "w-doc", "message": "hello", "taskId": "t-doc" }),
        "heartbeat_task" => json!({ "taskId": "t-doc", "epoch": 1 }),
        "complete_task" => json!({ "summary": "done" }),
        "fail_task" => json!({ "reason": "no disk" }),
        "hold_task" => json!({ "taskId": "t-doc", "holdReason": "acked" }),
        "reserve_paths" => json!({ "scope": "/repo", "patterns": ["docs"] }),
        "check_paths" => json!({ "scope": "/repo", "paths": ["docs/a.md"] }),
        "release_reservation" | "renew_reservation" => json!({ "reservationId": "r-doc", "epoch": 1 }),
        "wait_for_mesh_events" => json!({ "seconds": 1 }),
        _ => json!({}),
    }
}

/// Sets `value` at `path` (object keys, and `0` for an array's first item) in
/// `arguments`.
fn set_at(arguments: &mut Value, path: &[String], value: Value) {
    let mut at = arguments;
    for step in path {
        at = if step == "0" {
            if at.as_array().is_none_or(Vec::is_empty) {
                *at = json!([{}]);
            }
            &mut at[0]
        } else {
            &mut at[step.as_str()]
        };
    }
    *at = value;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_value_in_the_tool_schemas_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn_stdio(dir.path(), None).await;
    ok(&client, "enqueue_task", json!({ "message": "target", "id": "t-doc" })).await;
    ok(&client, "upsert_mission", json!({ "missionId": "m-doc", "title": "Documented" })).await;

    let tools = client.list_all_tools().await.unwrap();
    let mut tried = Vec::new();
    for tool in &tools {
        let schema = Value::Object(tool.input_schema.as_ref().clone());
        let written = schema.to_string();
        assert!(!written.contains("\"format\""), "{}: a schema names a format: {written}", tool.name);
        let mut stack = vec![(Vec::<String>::new(), schema)];
        while let Some((path, schema)) = stack.pop() {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    let mut inner = path.clone();
                    inner.push(name.clone());
                    let described = property.get("description").and_then(Value::as_str).unwrap_or_default();
                    if described.contains("e.g.") {
                        assert!(
                            !documented_values(property).is_empty(),
                            "{} {inner:?} gives examples in words only: {described}",
                            tool.name
                        );
                    }
                    stack.push((inner, property.clone()));
                }
            }
            if let Some(items) = schema.get("items") {
                let mut inner = path.clone();
                inner.push("0".to_owned());
                stack.push((inner, items.clone()));
            }
            if path.is_empty() {
                continue;
            }
            for value in documented_values(&schema) {
                let mut arguments = base_arguments(&tool.name);
                set_at(&mut arguments, &path, value.clone());
                let result = call(&client, &tool.name, arguments.clone()).await;
                if result.is_error == Some(true) {
                    let error: Value = serde_json::from_str(&text(&result)).unwrap();
                    assert_ne!(error["code"], "invalid_argument", "{} {arguments}: {error}", tool.name);
                }
                tried.push(format!("{} {path:?} = {value}", tool.name));
            }
        }
    }
    // taskMode's documented values among them.
    assert!(tried.iter().any(|t| t.contains("taskMode") && t.contains("code_change")), "{tried:#?}");
    assert!(tried.len() >= 30, "{tried:#?}");
    client.cancel().await.unwrap();
}

/// Each tool (but the wait, which valid arguments keep waiting) with arguments it
/// takes.
fn tool_calls() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("cancel_task", json!({ "taskId": "t-f" })),
        ("claim_task", json!({ "sessionId": "w1" })),
        ("complete_task", json!({ "summary": "done", "sessionId": "w1" })),
        ("enqueue_task", json!({ "message": "fuzz", "priority": "high" })),
        (
            "enqueue_tasks",
            json!({ "tasks": [{ "ref": "a", "message": "one" }, { "message": "two", "dependsOn": ["a"] }] }),
        ),
        ("fail_task", json!({ "reason": "no disk", "sessionId": "w1" })),
        ("get_pending_mesh_events", json!({ "maxChars": 100 })),
        ("heartbeat_task", json!({ "taskId": "t-f", "epoch": 1, "sessionId": "w1" })),
        ("hold_task", json!({ "taskId": "t-f", "holdReason": "acked", "readFailureCount": 2 })),
        (
            "record_dispatched_task",
            json!({ "taskId": "t-r", "message": "m", "nodeId": "n1", "sessionId": "w1", "missionId": "m1" }),
        ),
        ("list_holds", json!({ "taskId": "t-f" })),
        ("release_hold", json!({ "taskId": "t-f" })),
        ("reserve_paths", json!({ "scope": "/repo", "patterns": ["src/**"], "ttlMs": 60000 })),
        ("check_paths", json!({ "scope": "/repo", "paths": ["src/a.rs"], "sessionId": "w1" })),
        ("list_reservations", json!({ "scope": "/repo" })),
        ("renew_reservation", json!({ "reservationId": "r-f", "epoch": 1, "ttlMs": 1000 })),
        ("release_reservation", json!({ "reservationId": "r-f", "epoch": 1 })),
        ("ledger_tail", json!({ "tail": 5, "taskId": "t-f" })),
        ("list_held_events", json!({ "reason": "pending_retention_expired", "olderThanSecs": 60 })),
        ("requeue_held_events", json!({ "taskId": "t-f" })),
        ("update_delivery", json!({ "deliveryId": "d-f", "status": "delivered" })),
        ("list_missions", json!({})),
        ("list_tasks", json!({ "status": "pending" })),
        ("mesh_status", json!({})),
        ("read_deliveries", json!({ "sessionId": "w1" })),
        ("report_idle", json!({ "sessionId": "w1" })),
        ("requeue_task", json!({ "taskId": "t-f", "force": true })),
        ("send_to_session", json!({ "sessionId": "w1", "message": "hello" })),
        ("set_task_priority", json!({ "taskId": "t-f", "priority": "low", "reason": "later" })),
        ("show_mission", json!({ "missionId": "m1" })),
        ("show_task", json!({ "taskId": "t-f" })),
        ("suggest_node", json!({ "taskId": "t-f", "nodes": [{ "nodeId": "n1" }] })),
        ("upsert_mission", json!({ "missionId": "m1", "title": "Mission one" })),
    ]
}

/// Argument names the tools use.
const ARGUMENT_KEYS: &[&str] = &[
    "taskId",
    "sessionId",
    "message",
    "summary",
    "reason",
    "epoch",
    "tasks",
    "ref",
    "dependsOn",
    "priority",
    "status",
    "tail",
    "maxChars",
    "missionId",
    "title",
    "goal",
    "nodes",
    "nodeId",
    "force",
    "mode",
    "id",
    "seconds",
    "providerType",
    "requiredTags",
    "deliveryId",
    "olderThanSecs",
    "all",
    "ids",
    "error",
    "holdReason",
    "firstIdleSinceAck",
    "readFailureCount",
    "scope",
    "patterns",
    "paths",
    "reservationId",
    "exclusive",
    "ttlMs",
    "ignoreCase",
];

fn argument_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    let scalar = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-1e9..1e9f64).prop_map(serde_json::Value::from),
        prop::sample::select(vec!["", " ", "t-f", "w1", "m1", "pending", "high", "shout"])
            .prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::from),
    ];
    scalar.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::Array),
            prop::collection::vec((prop::sample::select(ARGUMENT_KEYS).prop_map(str::to_owned), inner), 0..4)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Fuzzes every tool over stdio with its own arguments edited (keys set to
/// anything, removed, or added): each call is answered, as a result or as a tool
/// error carrying a code and a message, never a protocol failure, and the server
/// process lives on.
#[test]
fn fuzzed_tool_arguments_get_results_or_typed_tool_errors() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = runtime.block_on(async {
        let client = spawn_stdio(dir.path(), None).await;
        ok(&client, "enqueue_task", json!({ "message": "fuzz target", "id": "t-f" })).await;
        client
    });
    let edit = (prop::sample::select(ARGUMENT_KEYS), prop::option::of(argument_value()));
    let case = (prop::sample::select(tool_calls()), prop::collection::vec(edit, 0..4));
    // proptest's default number of cases (256), `PROPTEST_CASES` for longer runs.
    let mut runner = TestRunner::new(Config { failure_persistence: None, ..Config::default() });
    let cases = runner.config().cases;
    let outcomes = std::cell::Cell::new((0usize, 0usize));
    runner
        .run(&case, |((tool, mut arguments), edits)| {
            let map = arguments.as_object_mut().expect("arguments are an object");
            for (key, value) in edits {
                match value {
                    Some(value) => map.insert(key.to_owned(), value),
                    None => map.remove(key),
                };
            }
            let result = runtime.block_on(call(&client, tool, arguments.clone()));
            let (taken, refused) = outcomes.get();
            if result.is_error == Some(true) {
                let error: serde_json::Value = serde_json::from_str(&text(&result)).map_err(|e| {
                    TestCaseError::fail(format!("{tool} {arguments}: a tool error that is not JSON: {e}"))
                })?;
                prop_assert!(
                    error["code"].is_string() && error["message"].is_string(),
                    "{tool} {arguments}: {error}"
                );
                outcomes.set((taken, refused + 1));
            } else {
                prop_assert!(
                    result.structured_content.is_some(),
                    "{tool} {arguments}: no structured content"
                );
                outcomes.set((taken + 1, refused));
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let (taken, refused) = outcomes.get();
    let enough = cases as usize / 20;
    assert!(taken > enough && refused > enough, "{taken} calls taken, {refused} refused");
    runtime.block_on(async {
        ok(&client, "mesh_status", json!({})).await;
        client.cancel().await.unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readonly_task_asking_for_a_forbidden_operation_is_a_tool_error_with_the_originals_reason() {
    let dir = tempfile::tempdir().unwrap();
    let client = spawn_stdio(dir.path(), None).await;
    let reason = "live_debug_readonly_guardrail_violation: forbidden operations";
    let refused = mcp_support::tool_error(
        &client,
        "enqueue_task",
        json!({ "message": "read the logs, then git commit -am wip", "taskMode": "live_debug_readonly" }),
    )
    .await;
    let message = refused.to_string();
    assert!(message.contains(&format!("{reason} (git_mutation)")), "{message}");
    let refused = mcp_support::tool_error(
        &client,
        "enqueue_tasks",
        json!({ "tasks": [
            { "message": "summarize the logs" },
            { "message": "rm -rf build && npm publish", "readonly": true }
        ] }),
    )
    .await;
    let message = refused.to_string();
    assert!(message.contains(&format!("{reason} (deploy_or_version_bump, destructive_shell)")), "{message}");
    assert!(message.contains("tasks[1].message"), "the field is named: {message}");
    assert_eq!(ok(&client, "list_tasks", json!({})).await["tasks"], json!([]), "nothing was enqueued");
    client.cancel().await.unwrap();
}

/// Runs the binary on `dir` (a read of what the MCP processes wrote), as JSON.
fn cli_json(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agentmesh"))
        .env_remove("AGENTMESH_MESH")
        .env_remove("AGENTMESH_SERVER")
        .arg("--data-dir")
        .arg(dir)
        .arg("--json")
        .args(args)
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_session_that_ends_removes_the_idle_report_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let worker = spawn_stdio(dir.path(), Some("worker-1")).await;
    let idle = ok(&worker, "report_idle", json!({ "nodeId": "laptop", "ttlSecs": 600 })).await;
    assert_eq!(idle["sessionId"], "worker-1");
    let listed = cli_json(dir.path(), &["sessions"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");

    worker.cancel().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cli_json(dir.path(), &["sessions"]).as_array().is_some_and(Vec::is_empty) {
        assert!(std::time::Instant::now() < deadline, "the ended session's idle report is still listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_events_are_listed_and_requeued_and_tool_calls_carry_their_caller_role() {
    let dir = tempfile::tempdir().unwrap();
    // An unversioned event, held back by an enforce-mode drain.
    cli_json(dir.path(), &["events", "push", "--event", "agent:stopped", "--task", "t1", "--node", "n1"]);
    let drained = cli_json(dir.path(), &["events", "drain", "--daemon", "mach_A", "--run", "r", "--enforce"]);
    assert_eq!(drained["quarantined"].as_array().map(Vec::len), Some(1), "{drained}");

    let client = spawn_stdio(dir.path(), None).await;
    let held = ok(&client, "list_held_events", json!({ "taskId": "t1" })).await;
    assert_eq!(held["held"][0]["reason"], "v2_enforce_unversioned_quarantined", "{held}");
    let id = held["held"][0]["heldEntryId"].clone();
    let requeued = ok(&client, "requeue_held_events", json!({ "ids": [id] })).await;
    assert_eq!(requeued["requeued"], 1, "{requeued}");
    assert_eq!(ok(&client, "list_held_events", json!({})).await["held"], json!([]));
    // The requeued broadcast reaches this coordinator's drain.
    let events = ok(&client, "get_pending_mesh_events", json!({})).await;
    assert_eq!(events["events"][0]["taskId"], "t1", "{events}");
    ok(&client, "read_deliveries", json!({ "sessionId": "w1" })).await;

    let log = cli_json(dir.path(), &["tool-calls"]);
    let roles: Vec<&str> =
        log["byRole"].as_array().unwrap().iter().map(|r| r["callerRole"].as_str().unwrap()).collect();
    assert_eq!(roles, ["coordinator", "worker"], "{log}");
    assert_eq!(log["byRole"][0]["calls"], 4, "{log}");
    client.cancel().await.unwrap();
}
