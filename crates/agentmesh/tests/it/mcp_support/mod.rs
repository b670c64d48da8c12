//! What the MCP tests share: spawning `agentmesh mcp`, calling tools with rmcp's
//! client, and the walk through every tool that both transports must pass.
#![allow(dead_code)] // Not every test module uses every helper.

use std::path::Path;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

/// A connected MCP client.
pub(crate) type Client = RunningService<RoleClient, ()>;

/// Every tool, by name.
pub(crate) const TOOLS: [&str; 34] = [
    "cancel_task",
    "check_paths",
    "claim_task",
    "complete_task",
    "enqueue_task",
    "enqueue_tasks",
    "fail_task",
    "get_pending_mesh_events",
    "heartbeat_task",
    "hold_task",
    "ledger_tail",
    "list_held_events",
    "list_holds",
    "list_missions",
    "list_reservations",
    "list_tasks",
    "mesh_status",
    "read_deliveries",
    "record_dispatched_task",
    "release_hold",
    "release_reservation",
    "renew_reservation",
    "report_idle",
    "requeue_held_events",
    "requeue_task",
    "reserve_paths",
    "send_to_session",
    "set_task_priority",
    "show_mission",
    "show_task",
    "suggest_node",
    "update_delivery",
    "upsert_mission",
    "wait_for_mesh_events",
];

/// Starts `agentmesh mcp` on `data_dir` (and `--session` when given) and connects.
pub(crate) async fn spawn_stdio(data_dir: &Path, session: Option<&str>) -> Client {
    let session: Vec<&str> = session.map(|s| vec!["--session", s]).unwrap_or_default();
    spawn_stdio_with(data_dir, &[], &session, &[]).await
}

/// Starts `agentmesh [global...] mcp [args...]` on `data_dir` with `env` and connects.
pub(crate) async fn spawn_stdio_with(
    data_dir: &Path,
    global: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> Client {
    let cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmesh")).configure(|cmd| {
        // As the README's `.mcp.json` runs it: the data dir from the environment.
        cmd.args(global).arg("mcp").args(args).env("AGENTMESH_HOME", data_dir);
        cmd.env_remove("AGENTMESH_MESH").env_remove("AGENTMESH_TOKEN").env_remove("AGENTMESH_SERVER");
        cmd.env("RUST_LOG", "warn");
        cmd.envs(env.iter().copied());
    });
    let transport = TokioChildProcess::new(cmd).expect("agentmesh mcp starts");
    ().serve(transport).await.expect("the MCP session initializes")
}

/// Calls `tool` with `arguments`; a protocol error fails the test.
pub(crate) async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let arguments: JsonObject = arguments.as_object().expect("arguments are an object").clone();
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|err| panic!("{tool} failed at the protocol level: {err}"))
}

/// The text blocks of a result, joined.
pub(crate) fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|b| b.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

/// Calls a tool that must succeed; its structured content.
pub(crate) async fn ok(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool} failed: {}", text(&result));
    result.structured_content.clone().unwrap_or_else(|| panic!("{tool} answered no structured content"))
}

/// Calls a tool that must fail; the tool error (code, message, field).
pub(crate) async fn tool_error(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    assert_eq!(result.is_error, Some(true), "{tool} should have failed: {}", text(&result));
    assert!(result.structured_content.is_none(), "errors carry no structured content");
    serde_json::from_str(&text(&result)).expect("a tool error is JSON text")
}

/// Waits (with the wait tool) until `count` events arrived or `within` passed;
/// every event taken.
pub(crate) async fn wait_for_events(client: &Client, count: usize, within: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + within;
    let mut events = Vec::new();
    while events.len() < count && tokio::time::Instant::now() < deadline {
        let got = ok(client, "wait_for_mesh_events", json!({ "seconds": 2 })).await;
        events.extend(got["events"].as_array().unwrap().iter().cloned());
    }
    events
}

/// The task ids of some events.
pub(crate) fn task_ids(events: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> =
        events.iter().filter_map(|e| e["taskId"].as_str().map(str::to_owned)).collect();
    ids.sort();
    ids
}

/// Lists the tools and calls every one with valid arguments, then bad ones; the
/// session stays usable throughout. The client is both coordinator and worker
/// (session `w1`).
pub(crate) async fn exercise_every_tool(client: &Client) {
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, TOOLS);
    for tool in &tools {
        assert!(tool.description.as_deref().is_some_and(|d| d.len() > 40), "{} is described", tool.name);
    }
    let enqueue = tools.iter().find(|t| t.name == "enqueue_task").unwrap();
    assert!(
        enqueue.input_schema["properties"]["message"]["description"]
            .as_str()
            .unwrap()
            .contains("instruction")
    );

    let status = ok(client, "mesh_status", json!({})).await;
    assert!(status["you"]["daemonId"].as_str().unwrap().starts_with("mach_"));
    ok(client, "upsert_mission", json!({ "missionId": "m1", "title": "Mission one" })).await;
    let a = ok(client, "enqueue_task", json!({ "message": "task a", "id": "t-a", "missionId": "m1" })).await;
    assert_eq!(a["task"]["id"], "t-a");
    let batch = ok(
        client,
        "enqueue_tasks",
        json!({ "tasks": [
            { "ref": "b", "message": "task b", "id": "t-b" },
            { "message": "task c", "id": "t-c", "dependsOn": ["b"] }
        ] }),
    )
    .await;
    assert_eq!(batch["tasks"][1]["dependsOn"], json!(["t-b"]));
    assert_eq!(
        ok(client, "list_tasks", json!({ "status": "pending" })).await["tasks"].as_array().unwrap().len(),
        3
    );
    assert_eq!(ok(client, "show_task", json!({ "taskId": "t-a" })).await["task"]["message"], "task a");
    assert_eq!(ok(client, "list_missions", json!({})).await["missions"][0]["id"], "m1");
    assert_eq!(ok(client, "show_mission", json!({ "missionId": "m1" })).await["tasks"][0]["id"], "t-a");
    let ranked = ok(client, "suggest_node", json!({ "taskId": "t-a", "nodes": [{ "nodeId": "n1" }] })).await;
    assert_eq!(ranked["nodes"][0]["nodeId"], "n1");
    ok(client, "send_to_session", json!({ "sessionId": "w1", "message": "hello worker" })).await;
    let deliveries = ok(client, "read_deliveries", json!({ "sessionId": "w1" })).await;
    assert_eq!(deliveries["deliveries"][0]["message"], "hello worker");
    let id = deliveries["deliveries"][0]["id"].clone();
    let acked = ok(client, "update_delivery", json!({ "deliveryId": id, "status": "acked" })).await;
    assert_eq!((&acked["changed"], &acked["delivery"]["status"]), (&json!(true), &json!("acked")));
    let back = ok(client, "update_delivery", json!({ "deliveryId": id, "status": "queued" })).await;
    assert_eq!(back["changed"], false, "a delivery never moves backwards");
    ok(client, "report_idle", json!({ "sessionId": "w1" })).await;
    assert_eq!(ok(client, "list_held_events", json!({})).await["held"], json!([]));
    let held = ok(client, "hold_task", json!({ "taskId": "t-c", "holdReason": "acked" })).await;
    assert_eq!((&held["hold"]["taskId"], &held["hold"]["firstIdleSinceAck"]), (&json!("t-c"), &Value::Null));
    let again = json!({ "taskId": "t-c", "holdReason": "idle_after_ack", "readFailureCount": 1 });
    let again = ok(client, "hold_task", again).await;
    assert_eq!(again["hold"]["heldAt"], held["hold"]["heldAt"], "the first heldAt is kept");
    let holds = ok(client, "list_holds", json!({})).await;
    assert_eq!(holds["holds"][0]["holdReason"], "idle_after_ack");
    assert_eq!(ok(client, "list_holds", json!({ "taskId": "t-c" })).await["holds"][0]["readFailureCount"], 1);
    assert_eq!(ok(client, "release_hold", json!({ "taskId": "t-c" })).await["released"], true);
    assert_eq!(ok(client, "list_holds", json!({})).await["holds"], json!([]));
    // Path reservations: a grant, a denial naming its holder, a check, a
    // renewal and a release.
    let mine =
        json!({ "scope": "/repo", "patterns": ["src/parser"], "reason": "rewrite", "sessionId": "w1" });
    let granted = ok(client, "reserve_paths", mine).await;
    assert_eq!(granted["granted"], true, "{granted}");
    let (reservation, epoch) =
        (granted["reservation"]["id"].clone(), granted["reservation"]["epoch"].clone());
    let theirs = json!({ "scope": "/repo", "patterns": ["src/parser/mod.rs"], "sessionId": "w2" });
    let denied = ok(client, "reserve_paths", theirs).await;
    assert_eq!((&denied["granted"], &denied["conflicts"][0]["sessionId"]), (&json!(false), &json!("w1")));
    let check = json!({ "scope": "/repo", "paths": ["src/parser/lex.rs", "docs/a.md"], "sessionId": "w2" });
    let checked = ok(client, "check_paths", check).await;
    assert_eq!(
        (&checked["clear"], &checked["blocked"][0]["path"]),
        (&json!(false), &json!("src/parser/lex.rs"))
    );
    assert_eq!(
        ok(client, "list_reservations", json!({ "scope": "/repo" })).await["reservations"][0]["id"],
        reservation
    );
    let fence = json!({ "reservationId": reservation, "epoch": epoch, "sessionId": "w1", "ttlMs": 60000 });
    assert_eq!(ok(client, "renew_reservation", fence).await["reservation"]["id"], reservation);
    let fence = json!({ "reservationId": reservation, "epoch": epoch, "sessionId": "w1" });
    assert_eq!(ok(client, "release_reservation", fence).await["released"]["id"], reservation);
    assert_eq!(ok(client, "list_reservations", json!({})).await["reservations"], json!([]));
    let direct = json!({ "taskId": "t-d", "message": "sent by hand", "nodeId": "n-d", "sessionId": "w-d" });
    let recorded = ok(client, "record_dispatched_task", direct.clone()).await;
    assert_eq!((&recorded["created"], &recorded["task"]["status"]), (&json!(true), &json!("assigned")));
    assert_eq!(ok(client, "record_dispatched_task", direct).await["created"], false);
    let shown = ok(client, "show_task", json!({ "taskId": "t-d" })).await;
    assert_eq!((&shown["task"]["id"], &shown["deliveryConfirmed"]), (&json!("t-d"), &json!(true)));
    let queued = ok(client, "show_task", json!({ "taskId": "t-a" })).await;
    assert_eq!(queued["deliveryConfirmed"], false, "{queued}");
    assert_eq!(ok(client, "requeue_held_events", json!({ "all": true })).await["requeued"], 0);

    // Work: complete t-a, fail t-b.
    let claimed = ok(client, "claim_task", json!({ "sessionId": "w1" })).await;
    assert_eq!(claimed["task"]["id"], "t-a");
    let epoch = claimed["epoch"].as_u64().expect("the claim carries an epoch");
    ok(client, "heartbeat_task", json!({ "taskId": "t-a", "epoch": epoch, "sessionId": "w1" })).await;
    let done = ok(
        client,
        "complete_task",
        json!({ "summary": "did a", "taskId": "t-a", "epoch": epoch, "sessionId": "w1" }),
    )
    .await;
    assert_eq!(done["task"]["status"], "completed");
    let claimed = ok(client, "claim_task", json!({ "sessionId": "w1" })).await;
    assert_eq!(claimed["task"]["id"], "t-b");
    let failed = ok(client, "fail_task", json!({ "reason": "no disk", "sessionId": "w1" })).await;
    assert_eq!(failed["task"]["status"], "failed");

    // Events: a budget returns the oldest, the rest stays queued.
    let first = ok(client, "get_pending_mesh_events", json!({ "maxChars": 1 })).await;
    assert_eq!(first["events"].as_array().unwrap().len(), 1);
    assert_eq!(first["events"][0]["taskId"], "t-a");
    assert_eq!(first["events"][0]["summary"], "did a");
    assert!(first["remaining"].as_u64().unwrap() >= 1);
    let rest = ok(client, "get_pending_mesh_events", json!({})).await;
    let rest = rest["events"].as_array().unwrap();
    assert!(rest.iter().any(|e| e["taskId"] == "t-b" && e["reason"] == "no disk"), "{rest:?}");
    assert!(rest.iter().all(|e| e["taskId"] != "t-a"));
    assert_eq!(ok(client, "get_pending_mesh_events", json!({})).await["events"], json!([]));
    let waited = call(client, "wait_for_mesh_events", json!({ "seconds": 1 })).await;
    assert!(text(&waited).starts_with("No events yet"), "{}", text(&waited));

    ok(client, "requeue_task", json!({ "taskId": "t-b", "force": true, "reason": "retry" })).await;
    ok(
        client,
        "send_to_session",
        json!({ "sessionId": "w2", "message": "take b", "taskId": "t-b", "mode": "dispatch" }),
    )
    .await;
    let raised = ok(client, "set_task_priority", json!({ "taskId": "t-c", "priority": "high" })).await;
    assert_eq!(raised["task"]["priority"], "high");
    assert_eq!(ok(client, "cancel_task", json!({ "taskId": "t-c" })).await["task"]["status"], "cancelled");
    assert!(!ok(client, "ledger_tail", json!({ "tail": 5 })).await["entries"].as_array().unwrap().is_empty());

    // Bad arguments are tool errors naming the argument; nothing changes, and the
    // session goes on.
    let tasks_before = ok(client, "list_tasks", json!({})).await;
    let ledger_before = ok(client, "ledger_tail", json!({ "tail": 500 })).await;
    let err = tool_error(client, "enqueue_tasks", json!({ "tasks": [{ "message": 5 }] })).await;
    assert_eq!(err["field"], "tasks[0].message");
    assert_eq!(tool_error(client, "show_task", json!({})).await["field"], "taskId");
    assert_eq!(tool_error(client, "show_task", json!({ "taskId": "nope" })).await["code"], "task_not_found");
    assert_eq!(
        tool_error(client, "wait_for_mesh_events", json!({ "seconds": 99 })).await["field"],
        "seconds"
    );
    assert_eq!(tool_error(client, "list_tasks", json!({ "colour": "red" })).await["field"], "colour");
    assert_eq!(tool_error(client, "enqueue_task", json!({ "message": " " })).await["field"], "message");
    assert_eq!(tool_error(client, "claim_task", json!({ "sessionId": 5 })).await["field"], "sessionId");
    assert_eq!(tool_error(client, "requeue_held_events", json!({})).await["field"], "all");
    assert_eq!(tool_error(client, "list_held_events", json!({ "reason": "bored" })).await["field"], "reason");
    assert_eq!(
        tool_error(client, "update_delivery", json!({ "deliveryId": "nope", "status": "acked" })).await["code"],
        "not_found"
    );
    assert_eq!(
        tool_error(client, "send_to_session", json!({ "sessionId": "w1", "message": "x", "mode": "shout" }))
            .await["field"],
        "mode"
    );
    assert_eq!(ok(client, "list_tasks", json!({})).await, tasks_before, "a refused call changed a task");
    assert_eq!(
        ok(client, "ledger_tail", json!({ "tail": 500 })).await,
        ledger_before,
        "a refused call wrote to the ledger"
    );
    ok(client, "mesh_status", json!({})).await;
}

/// Polling one tool trips the rate guard: the advisory comes with the result and
/// points at the wait tool.
pub(crate) async fn polling_gets_the_advisory(client: &Client) {
    let mut last = None;
    for _ in 0..7 {
        last = Some(call(client, "list_missions", json!({})).await);
    }
    let last = last.unwrap();
    assert_ne!(last.is_error, Some(true));
    let said = text(&last);
    assert!(said.contains("Rate limit: list_missions called"), "{said}");
    assert!(said.contains("wait_for_mesh_events"), "{said}");
}
