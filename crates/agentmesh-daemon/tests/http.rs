//! The HTTP API end to end: a real listener on `127.0.0.1:0`, a temp-dir SQLite
//! store and an HTTP client, one daemon per test.

use std::net::SocketAddr;
use std::sync::Arc;

use agentmesh_daemon::{ApiToken, AppState, MAX_BODY_BYTES};
use agentmesh_sqlite::SqliteStore;
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The token every test daemon accepts.
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A daemon serving a fresh store, and a client for it.
struct TestDaemon {
    addr: SocketAddr,
    client: Client,
    shutdown: CancellationToken,
    server: JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl TestDaemon {
    /// Opens a store in a temp dir, binds `127.0.0.1:0` and serves in a task. The
    /// listener is bound before the task starts, so requests can follow at once.
    async fn start() -> TestDaemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open_data_dir(dir.path()).expect("open the store");
        let state = AppState::new(Arc::new(store), ApiToken::new(TOKEN).expect("token"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(agentmesh_daemon::serve(listener, state, shutdown.clone()));
        TestDaemon { addr, client: Client::new(), shutdown, server, _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends a request with the token and an optional JSON body; returns the status
    /// and the JSON body (`null` when empty).
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.client.request(method, self.url(path)).bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        read(request.send().await.expect("request sent")).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(Method::POST, path, Some(body)).await
    }

    /// Posts raw bytes as a JSON body.
    async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
        let request = self
            .client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        read(request.send().await.expect("request sent")).await
    }
}

async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = response.bytes().await.expect("response body");
    let body =
        if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("a JSON body") };
    (status, body)
}

/// Asserts an error response: its status, its code, and a message containing `needle`.
#[track_caller]
fn assert_error(response: &(StatusCode, Value), status: StatusCode, code: &str, needle: &str) {
    let (got, body) = response;
    assert_eq!(*got, status, "unexpected status; body {body}");
    assert_eq!(body["error"]["code"], code, "unexpected code in {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "expected {needle:?} in the message {message:?}");
}

#[tokio::test]
async fn healthz_needs_no_token() {
    let daemon = TestDaemon::start().await;
    let response = daemon.client.get(daemon.url("/healthz")).send().await.unwrap();
    assert_eq!(read(response).await, (StatusCode::OK, json!({ "status": "ok" })));
}

#[tokio::test]
async fn v1_refuses_a_missing_or_wrong_token_and_says_nothing_else() {
    let daemon = TestDaemon::start().await;
    let expected =
        json!({ "error": { "code": "unauthorized", "message": "missing or invalid bearer token" } });
    let url = daemon.url("/v1/meshes/m/tasks");
    let missing = daemon.client.get(&url).send().await.unwrap();
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    assert_eq!(read(missing).await, (StatusCode::UNAUTHORIZED, expected.clone()));
    let wrong = daemon.client.get(&url).bearer_auth(format!("{}0", &TOKEN[1..])).send().await.unwrap();
    assert_eq!(read(wrong).await, (StatusCode::UNAUTHORIZED, expected.clone()));
    let basic = daemon.client.get(&url).basic_auth("user", Some(TOKEN)).send().await.unwrap();
    assert_eq!(read(basic).await, (StatusCode::UNAUTHORIZED, expected.clone()));
    let body = json!({ "message": "never stored" });
    let post = daemon.client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(read(post).await, (StatusCode::UNAUTHORIZED, expected));
    assert_eq!(daemon.get("/v1/meshes/m/tasks").await, (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn a_task_goes_from_enqueue_to_the_coordinators_drain() {
    let daemon = TestDaemon::start().await;
    let (status, task) = daemon
        .post(
            "/v1/meshes/m/tasks",
            json!({
                "message": "fix the flaky test",
                "id": "t1",
                "priority": "high",
                "requiredTags": ["os=linux"],
                "coordinator": { "daemonId": "daemon_mach_abc", "runId": "run-1", "sessionId": "coord-1" }
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{task}");
    assert_eq!((task["id"].as_str(), task["status"].as_str()), (Some("t1"), Some("pending")));
    assert_eq!(task["meshId"], "m");

    let (status, listed) = daemon.get("/v1/meshes/m/tasks?status=pending").await;
    assert_eq!((status, listed.as_array().map(Vec::len)), (StatusCode::OK, Some(1)));
    assert_eq!(daemon.get("/v1/meshes/other/tasks").await, (StatusCode::OK, json!([])));

    let refused = daemon.post("/v1/meshes/m/claims", json!({ "nodeId": "n1", "sessionId": "s1" })).await;
    assert_eq!(refused, (StatusCode::OK, json!({ "task": null, "refusal": "required_tags_unsatisfied" })));

    let claim =
        json!({ "nodeId": "n1", "sessionId": "s1", "capabilityTags": ["os=linux"], "leaseMs": 60000 });
    let (status, claimed) = daemon.post("/v1/meshes/m/claims", claim).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["task"]["id"], "t1");
    assert_eq!(claimed["task"]["status"], "assigned");
    assert!(claimed.get("refusal").is_none(), "{claimed}");
    // The fencing epoch travels under the original's name.
    let epoch = claimed["task"]["dispatchNonce"].as_u64().expect("an epoch");

    let stale = json!({ "sessionId": "s1", "taskId": "t1", "epoch": epoch + 1, "summary": "done" });
    assert_error(
        &daemon.post("/v1/meshes/m/completions", stale).await,
        StatusCode::CONFLICT,
        "stale_epoch",
        "t1",
    );

    let report = json!({ "sessionId": "s1", "taskId": "t1", "epoch": epoch, "summary": "fixed it" });
    let (status, completed) = daemon.post("/v1/meshes/m/completions", report).await;
    assert_eq!(status, StatusCode::OK, "{completed}");
    assert_eq!(completed["status"], "completed");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, completed));

    let someone_else = json!({ "daemonId": "daemon_mach_xyz", "runId": "run-9" });
    let (status, nothing) = daemon.post("/v1/meshes/m/events/drain", someone_else).await;
    assert_eq!((status, &nothing["events"]), (StatusCode::OK, &json!([])), "{nothing}");

    let coordinator = json!({ "daemonId": "daemon_mach_abc", "runId": "run-1", "sessionId": "coord-1" });
    let (status, drained) = daemon.post("/v1/meshes/m/events/drain", coordinator.clone()).await;
    assert_eq!(status, StatusCode::OK, "{drained}");
    let events = drained["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{drained}");
    assert_eq!(events[0]["payload"]["metadataEvent"]["taskId"], "t1", "{drained}");
    assert!(drained["counters"].is_object() && drained["quarantined"] == json!([]), "{drained}");
    let (_, again) = daemon.post("/v1/meshes/m/events/drain", coordinator).await;
    assert_eq!(again["events"], json!([]), "a drained event is handed out once");

    let (status, ledger) = daemon.get("/v1/meshes/m/ledger?tail=2").await;
    assert_eq!(status, StatusCode::OK, "{ledger}");
    assert_eq!(ledger.as_array().map(Vec::len), Some(2), "{ledger}");
}

#[tokio::test]
async fn malformed_json_is_refused_naming_the_problem() {
    let daemon = TestDaemon::start().await;
    let response = daemon.post_raw("/v1/meshes/m/tasks", r#"{"message": "x""#).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid JSON body: EOF while parsing");
    let response = daemon.post_raw("/v1/meshes/m/tasks", "").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid JSON body");
    let response = daemon.post("/v1/meshes/m/tasks", json!({ "id": "t1" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "missing field `message`");
    assert_eq!(daemon.get("/v1/meshes/m/tasks").await, (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn a_wrong_type_is_refused_naming_the_field() {
    let daemon = TestDaemon::start().await;
    let response = daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "priority": 5 })).await;
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "invalid_input",
        "invalid priority: invalid type: integer `5`",
    );
    let response =
        daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "coordinator": { "runId": 7 } })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid coordinator.runId");
    let response = daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "priority": "urgent" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "priority");
    let response = daemon.get("/v1/meshes/m/ledger?tail=many").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "tail");
    let response = daemon.get("/v1/meshes/m/tasks?status=sleeping").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "sleeping");
}

#[tokio::test]
async fn an_unknown_field_in_a_claim_is_refused() {
    let daemon = TestDaemon::start().await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "t1" })).await;
    let claim = json!({ "nodeId": "n1", "sessionId": "s1", "capabilityTag": ["os=linux"] });
    let response = daemon.post("/v1/meshes/m/claims", claim).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `capabilityTag`");
    let response = daemon.post("/v1/meshes/m/claims", json!({ "nodeId": " ", "sessionId": "s1" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "nodeId");
    let (_, task) = daemon.get("/v1/meshes/m/tasks/t1").await;
    assert_eq!(task["status"], "pending", "a refused claim assigns nothing");
}

#[tokio::test]
async fn an_unknown_task_or_route_is_404() {
    let daemon = TestDaemon::start().await;
    let response = daemon.get("/v1/meshes/m/tasks/nope").await;
    assert_error(&response, StatusCode::NOT_FOUND, "task_not_found", "nope");
    let report = json!({ "sessionId": "s1", "taskId": "nope" });
    let response = daemon.post("/v1/meshes/m/completions", report).await;
    assert_eq!(response.0, StatusCode::NOT_FOUND, "{}", response.1);
    let response = daemon.get("/v1/nothing-here").await;
    assert_error(&response, StatusCode::NOT_FOUND, "not_found", "no such route");
    let response = daemon.send(Method::DELETE, "/v1/meshes/m/tasks", None).await;
    assert_error(&response, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "not allowed");
}

#[tokio::test]
async fn an_oversized_body_is_413_and_stores_nothing() {
    let daemon = TestDaemon::start().await;
    let body = serde_json::to_vec(&json!({ "message": "x".repeat(MAX_BODY_BYTES + 1) })).unwrap();
    let response = daemon.post_raw("/v1/meshes/m/tasks", body).await;
    assert_error(&response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "larger than");
    assert_eq!(daemon.get("/v1/meshes/m/tasks").await, (StatusCode::OK, json!([])));
    assert_eq!(daemon.get("/v1/meshes/m/ledger").await, (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn a_duplicate_task_id_is_409() {
    let daemon = TestDaemon::start().await;
    let (status, _) = daemon.post("/v1/meshes/m/tasks", json!({ "message": "first", "id": "t1" })).await;
    assert_eq!(status, StatusCode::CREATED);
    let response = daemon.post("/v1/meshes/m/tasks", json!({ "message": "second", "id": "t1" })).await;
    assert_error(&response, StatusCode::CONFLICT, "duplicate_task_id", "t1");
    let (_, task) = daemon.get("/v1/meshes/m/tasks/t1").await;
    assert_eq!(task["message"], "first");
}

#[tokio::test]
async fn cancelling_the_token_stops_the_server() {
    let daemon = TestDaemon::start().await;
    assert_eq!(daemon.get("/healthz").await.0, StatusCode::OK);
    daemon.shutdown.cancel();
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), daemon.server).await;
    stopped.expect("the server stops after cancellation").expect("the task ran").expect("serve returned Ok");
}
