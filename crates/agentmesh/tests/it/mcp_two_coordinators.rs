//! Two coordinator runs on one machine (two `agentmesh mcp` processes on one data
//! dir): each receives only the completions of the tasks it enqueued.
//!
//! Each process reports its presence when it starts and while it runs, so a drain
//! by one leaves the other's unicast completion queued for it: the restart rule
//! (a unicast for another run on the drainer's machine is handed to the drainer)
//! applies only once the addressed run has ended or gone quiet.

use crate::mcp_support;

use std::time::Duration;

use mcp_support::{ok, spawn_stdio, task_ids, wait_for_events};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_coordinator_receives_only_its_own_completions() {
    let dir = tempfile::tempdir().unwrap();
    let first = spawn_stdio(dir.path(), None).await;
    let second = spawn_stdio(dir.path(), None).await;
    let worker = spawn_stdio(dir.path(), Some("worker-1")).await;

    ok(&first, "enqueue_task", json!({ "message": "first's task", "id": "t-first" })).await;
    ok(&second, "enqueue_task", json!({ "message": "second's task", "id": "t-second" })).await;
    for _ in 0..2 {
        let claimed = ok(&worker, "claim_task", json!({})).await;
        let id = claimed["task"]["id"].as_str().expect("a task to claim").to_owned();
        ok(&worker, "complete_task", json!({ "summary": format!("done {id}"), "taskId": id })).await;
    }

    // The first drains while the second's completion is queued too.
    let got_first = wait_for_events(&first, 2, Duration::from_secs(6)).await;
    let got_second = wait_for_events(&second, 2, Duration::from_secs(6)).await;
    assert_eq!(task_ids(&got_first), ["t-first"], "{got_first:?}");
    assert_eq!(task_ids(&got_second), ["t-second"], "{got_second:?}");

    first.cancel().await.unwrap();
    second.cancel().await.unwrap();
    worker.cancel().await.unwrap();
}
