//! MCP over streamable HTTP at `/mcp` on a real daemon, behind its token.

use crate::mcp_support;

use std::sync::Arc;

use agentmesh_daemon::{ApiToken, AppState};
use agentmesh_sqlite::SqliteStore;
use std::time::Duration;

use mcp_support::{
    Client, exercise_every_tool, ok, polling_gets_the_advisory, spawn_stdio_with, wait_for_events,
};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A daemon on a free loopback port; its `/mcp` URL.
struct Daemon {
    base: String,
    url: String,
    token: String,
    shutdown: CancellationToken,
    dir: tempfile::TempDir,
}

impl Daemon {
    async fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open_data_dir(dir.path()).unwrap());
        let token = ApiToken::generate().unwrap();
        let secret = token.secret().to_owned();
        let state = AppState::new(store, token).with_daemon_id("mach_testdaemon");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let url = format!("{base}/mcp");
        let shutdown = CancellationToken::new();
        tokio::spawn(agentmesh_daemon::serve(listener, state, shutdown.clone()));
        Daemon { base, url, token: secret, shutdown, dir }
    }

    /// The presence records of this daemon's coordinator runs: (run id, ended).
    fn presences(&self) -> Vec<(String, bool)> {
        let conn = rusqlite::Connection::open(self.dir.path().join(agentmesh_sqlite::DB_FILE_NAME)).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT run_id, ended_at_ms IS NOT NULL FROM mesh_coordinator_presence
                  WHERE daemon_id = 'mach_testdaemon' ORDER BY run_id",
            )
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
    }

    /// Waits up to 10 s for the presence records to satisfy `done`.
    async fn presences_until(&self, done: impl Fn(&[(String, bool)]) -> bool) -> Vec<(String, bool)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.presences();
            if done(&now) || tokio::time::Instant::now() > deadline {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn connect(&self, token: &str) -> Result<Client, String> {
        self.connect_to(&self.url, token).await
    }

    async fn connect_to(&self, url: &str, token: &str) -> Result<Client, String> {
        let config =
            StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned());
        ().serve(StreamableHttpClientTransport::from_config(config)).await.map_err(|err| err.to_string())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_answers_over_http_behind_the_token() {
    let daemon = Daemon::start().await;
    let client = daemon.connect(&daemon.token).await.expect("the MCP session initializes");
    exercise_every_tool(&client).await;
    polling_gets_the_advisory(&client).await;
    let status = ok(&client, "mesh_status", json!({})).await;
    assert_eq!(status["you"]["daemonId"], "mach_testdaemon");
    client.cancel().await.unwrap();
    daemon.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_http_session_is_its_own_coordinator_run() {
    let daemon = Daemon::start().await;
    let first = daemon.connect(&daemon.token).await.unwrap();
    let second = daemon.connect(&daemon.token).await.unwrap();
    let run = |v: serde_json::Value| v["you"]["runId"].as_str().unwrap().to_owned();
    assert_ne!(
        run(ok(&first, "mesh_status", json!({})).await),
        run(ok(&second, "mesh_status", json!({})).await)
    );
    first.cancel().await.unwrap();
    second.cancel().await.unwrap();
    daemon.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_session_is_present_while_it_lives_even_without_tool_calls_and_ends_with_it() {
    let daemon = Daemon::start().await;
    let client = daemon.connect(&daemon.token).await.unwrap();
    let live = daemon.presences_until(|p| !p.is_empty()).await;
    assert_eq!(live.len(), 1, "the session reported its presence before any tool call: {live:?}");
    assert!(!live[0].1, "and it is live: {live:?}");
    client.cancel().await.unwrap();
    let ended = daemon.presences_until(|p| p.iter().all(|(_, ended)| *ended)).await;
    assert_eq!(ended, [(live[0].0.clone(), true)], "closing the session ended its presence");
    daemon.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_slash_mesh_serves_that_mesh_and_a_bad_mesh_gets_400() {
    let daemon = Daemon::start().await;
    let other = daemon.connect_to(&format!("{}/other", daemon.url), &daemon.token).await.unwrap();
    ok(&other, "enqueue_task", json!({ "message": "for the other mesh", "id": "t-other" })).await;
    let own = daemon.connect(&daemon.token).await.unwrap();
    ok(&own, "enqueue_task", json!({ "message": "for the daemon's mesh", "id": "t-own" })).await;

    let http = reqwest::Client::new();
    let ids = |mesh: &'static str| {
        let (http, base, token) = (http.clone(), daemon.base.clone(), daemon.token.clone());
        async move {
            let tasks: serde_json::Value = http
                .get(format!("{base}/v1/meshes/{mesh}/tasks"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            tasks.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }
    };
    assert_eq!(ids("other").await, ["t-other"], "/mcp/other works in mesh other");
    assert_eq!(ids("default").await, ["t-own"], "/mcp works in the daemon's mesh");

    let bad = http
        .post(format!("{}/%01", daemon.url))
        .bearer_auth(&daemon.token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("mesh"), "{body}");
    let unauthorized = http.post(format!("{}/other", daemon.url)).body("{}").send().await.unwrap();
    assert_eq!(unauthorized.status(), reqwest::StatusCode::UNAUTHORIZED, "/mcp/{{mesh}} is behind the token");
    other.cancel().await.unwrap();
    own.cancel().await.unwrap();
    daemon.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_gets_401() {
    let daemon = Daemon::start().await;
    assert!(daemon.connect(&"x".repeat(64)).await.is_err());
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } }
    });
    let http = reqwest::Client::new();
    let send = |token: Option<&str>| {
        let mut request =
            http.post(&daemon.url).header("Accept", "application/json, text/event-stream").json(&init);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    assert_eq!(send(None).await.unwrap().status(), 401);
    assert_eq!(send(Some("wrong")).await.unwrap().status(), 401);
    assert_eq!(send(Some(&daemon.token)).await.unwrap().status(), 200);
    daemon.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentmesh_mcp_with_server_works_through_the_daemon() {
    let daemon = Daemon::start().await;
    let local = tempfile::tempdir().unwrap();
    let server = ["--server", daemon.base.as_str()];
    let token = [("AGENTMESH_TOKEN", daemon.token.as_str())];
    let coordinator = spawn_stdio_with(local.path(), &server, &[], &token).await;
    let worker = spawn_stdio_with(local.path(), &server, &["--session", "w1"], &token).await;
    let enqueued = ok(&coordinator, "enqueue_task", json!({ "message": "remote work" })).await;
    let claimed = ok(&worker, "claim_task", json!({})).await;
    assert_eq!(claimed["task"]["id"], enqueued["task"]["id"]);
    ok(&worker, "complete_task", json!({ "summary": "done remotely" })).await;
    let events = wait_for_events(&coordinator, 1, Duration::from_secs(20)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["summary"], "done remotely");
    // The rate guard records through the daemon's tool-calls route.
    polling_gets_the_advisory(&coordinator).await;
    coordinator.cancel().await.unwrap();
    worker.cancel().await.unwrap();
    daemon.shutdown.cancel();
}
