//! `agentmesh mcp` over stdio, driven by rmcp's client: every tool, bad
//! arguments, the rate guard, and a coordinator and a worker in two processes.

mod mcp_support;

use std::time::Duration;

use mcp_support::{
    call, exercise_every_tool, ok, polling_gets_the_advisory, spawn_stdio, text, wait_for_events,
};
use serde_json::json;

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

    let enqueued = ok(&coordinator, "enqueue_task", json!({ "message": "write the parser" })).await;
    let task_id = enqueued["task"]["id"].as_str().unwrap().to_owned();

    let claimed = ok(&worker, "claim_task", json!({})).await;
    assert_eq!(claimed["task"]["id"], task_id.as_str());
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
    let cases = [
        ("enqueue_task", json!({ "message": "x", "id": "BAD" }), "id"),
        ("enqueue_task", json!({ "message": "x", "dependsOn": ["BAD"] }), "dependsOn[0]"),
        ("enqueue_task", json!({ "message": "x", "targetNodeId": "BAD" }), "targetNodeId"),
        ("enqueue_task", json!({ "message": "x", "missionId": "BAD" }), "missionId"),
        ("enqueue_tasks", json!({ "tasks": [{ "message": "a", "ref": "BAD" }] }), "tasks[0].ref"),
        (
            "enqueue_tasks",
            json!({ "tasks": [{ "message": "a" }, { "message": "b", "id": "BAD" }] }),
            "tasks[1].id",
        ),
        ("show_task", json!({ "taskId": "BAD" }), "taskId"),
        ("cancel_task", json!({ "taskId": "BAD" }), "taskId"),
        ("requeue_task", json!({ "taskId": "BAD", "force": true }), "taskId"),
        ("claim_task", json!({ "sessionId": "w1", "nodeId": "BAD" }), "nodeId"),
        ("claim_task", json!({ "sessionId": "BAD" }), "sessionId"),
        ("heartbeat_task", json!({ "taskId": "BAD", "epoch": 1, "sessionId": "w1" }), "taskId"),
        ("complete_task", json!({ "summary": "done", "sessionId": "BAD" }), "sessionId"),
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
        ("ledger_tail", json!({ "tail": 5 })),
        ("list_missions", json!({})),
        ("list_tasks", json!({ "status": "pending" })),
        ("mesh_status", json!({})),
        ("read_deliveries", json!({ "sessionId": "w1" })),
        ("report_idle", json!({ "sessionId": "w1" })),
        ("requeue_task", json!({ "taskId": "t-f", "force": true })),
        ("send_to_session", json!({ "sessionId": "w1", "message": "hello" })),
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
