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
