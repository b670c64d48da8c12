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
