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

/// Enqueues `id` in mesh `m` and has session `s1` on node `n1` claim it; returns
/// the claimed task's epoch.
async fn enqueue_and_claim(daemon: &TestDaemon, id: &str) -> u64 {
    let (status, task) = daemon.post("/v1/meshes/m/tasks", json!({ "message": "work", "id": id })).await;
    assert_eq!(status, StatusCode::CREATED, "{task}");
    let claim = json!({ "nodeId": "n1", "sessionId": "s1", "leaseMs": 60000 });
    let (status, claimed) = daemon.post("/v1/meshes/m/claims", claim).await;
    assert_eq!((status, &claimed["task"]["id"]), (StatusCode::OK, &json!(id)), "{claimed}");
    claimed["task"]["dispatchNonce"].as_u64().expect("an epoch")
}

#[tokio::test]
async fn a_task_is_requeued_until_its_retries_run_out_and_cancelled() {
    let daemon = TestDaemon::start().await;
    enqueue_and_claim(&daemon, "t1").await;

    let response = daemon.post("/v1/meshes/m/tasks/t1/requeue", json!({})).await;
    assert_error(&response, StatusCode::CONFLICT, "invalid_transition", "t1");
    let (_, task) = daemon.get("/v1/meshes/m/tasks/t1").await;
    assert_eq!(task["status"], "assigned", "a refused requeue changes nothing");

    let forced = json!({ "force": true, "reason": "worker died" });
    let (status, requeued) = daemon.post("/v1/meshes/m/tasks/t1/requeue", forced).await;
    assert_eq!(status, StatusCode::OK, "{requeued}");
    assert_eq!(requeued["outcome"], "pending", "{requeued}");
    assert_eq!(requeued["task"]["status"], "pending", "{requeued}");
    assert_eq!(requeued["task"]["requeueReason"], "worker died", "{requeued}");

    let (status, exhausted) =
        daemon.post("/v1/meshes/m/tasks/t1/requeue", json!({ "reason": "again" })).await;
    assert_eq!(status, StatusCode::OK, "{exhausted}");
    assert_eq!(exhausted["outcome"], "retries_exhausted", "{exhausted}");
    assert_eq!(exhausted["task"]["status"], "failed", "{exhausted}");

    let budget = json!({ "maxRetries": 5, "keepSessionPin": true });
    let (status, again) = daemon.post("/v1/meshes/m/tasks/t1/requeue", budget).await;
    assert_eq!((status, &again["outcome"]), (StatusCode::OK, &json!("pending")), "{again}");

    let (status, cancelled) =
        daemon.post("/v1/meshes/m/tasks/t1/cancel", json!({ "reason": "no longer needed" })).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, cancelled));
    let response = daemon.post("/v1/meshes/m/tasks/t1/cancel", json!({})).await;
    assert_error(&response, StatusCode::CONFLICT, "invalid_transition", "t1");
}

#[tokio::test]
async fn bad_cancel_and_requeue_requests_are_refused_and_change_nothing() {
    let daemon = TestDaemon::start().await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "t1" })).await;
    let response = daemon.post("/v1/meshes/m/tasks/t1/cancel", json!({ "reason": 5 })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid reason");
    let response = daemon.post("/v1/meshes/m/tasks/t1/cancel", json!({ "reson": "typo" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `reson`");
    let response = daemon.post("/v1/meshes/m/tasks/t1/requeue", json!({ "maxRetries": -1 })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid maxRetries");
    let response = daemon.post("/v1/meshes/m/tasks/t1/requeue", json!({ "force": "yes" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid force");
    let response = daemon.post("/v1/meshes/m/tasks/nope/cancel", json!({})).await;
    assert_error(&response, StatusCode::NOT_FOUND, "task_not_found", "nope");
    let response = daemon.post("/v1/meshes/other/tasks/t1/requeue", json!({})).await;
    assert_error(&response, StatusCode::NOT_FOUND, "task_not_found", "t1");
    let (_, task) = daemon.get("/v1/meshes/m/tasks/t1").await;
    assert_eq!(task["status"], "pending");
    assert!(task.get("requeueCount").is_none_or(Value::is_null), "{task}");
    let (_, ledger) = daemon.get("/v1/meshes/m/ledger").await;
    assert_eq!(ledger.as_array().map(Vec::len), Some(1), "only the enqueue is recorded: {ledger}");
}

#[tokio::test]
async fn a_heartbeat_extends_the_lease_and_a_stale_one_is_409() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    let (_, before) = daemon.get("/v1/meshes/m/tasks/t1").await;

    let beat = json!({ "taskId": "t1", "sessionId": "s1", "epoch": epoch, "leaseMs": 600_000 });
    let (status, task) = daemon.post("/v1/meshes/m/heartbeats", beat).await;
    assert_eq!(status, StatusCode::OK, "{task}");
    assert_eq!(task["status"], "assigned");
    let lease = |t: &Value| t["leaseExpiresAt"].as_str().map(str::to_owned).expect("a lease");
    assert!(lease(&task) > lease(&before), "the lease moved on: {task}");

    let stale = json!({ "taskId": "t1", "sessionId": "s1", "epoch": epoch + 1, "leaseMs": 1000 });
    let response = daemon.post("/v1/meshes/m/heartbeats", stale).await;
    assert_error(&response, StatusCode::CONFLICT, "stale_epoch", "t1");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, task));
}

#[tokio::test]
async fn a_bad_heartbeat_is_refused_naming_the_field() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    let (_, before) = daemon.get("/v1/meshes/m/tasks/t1").await;
    let zero = json!({ "taskId": "t1", "sessionId": "s1", "epoch": epoch, "leaseMs": 0 });
    let response = daemon.post("/v1/meshes/m/heartbeats", zero).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid leaseMs");
    let missing = json!({ "sessionId": "s1", "epoch": epoch, "leaseMs": 1000 });
    let response = daemon.post("/v1/meshes/m/heartbeats", missing).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "missing field `taskId`");
    let blank = json!({ "taskId": " ", "sessionId": "s1", "epoch": epoch, "leaseMs": 1000 });
    let response = daemon.post("/v1/meshes/m/heartbeats", blank).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "taskId");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, before));
}

/// A `mesh:dispatch_blocked` event about `task_id` for coordinator
/// `daemon_mach_abc`, in the original's shape, without a mesh id.
fn blocked_event(task_id: &str) -> Value {
    json!({
        "event": "mesh:dispatch_blocked",
        "nodeLabel": "Node 'n1'",
        "metadataEvent": { "taskId": task_id },
        "queuedAt": 1_700_000_000_000_i64,
        "targetCoordinatorDaemonId": "daemon_mach_abc",
        "targetCoordinatorSessionId": "coord-1"
    })
}

#[tokio::test]
async fn pushed_events_are_peeked_acked_and_retracted() {
    let daemon = TestDaemon::start().await;
    let hint = json!({ "coordinatorRunId": "run-1" });
    let push = json!({ "event": blocked_event("t1"), "hint": hint });
    let (status, pushed) = daemon.post("/v1/meshes/m/events", push.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{pushed}");
    assert!(pushed["id"].as_str().is_some_and(|id| !id.is_empty()), "{pushed}");
    assert_eq!(pushed["payload"]["meshId"], "m", "the mesh defaults to the path's: {pushed}");
    assert_eq!(pushed["payload"]["metadataEvent"]["taskId"], "t1", "{pushed}");
    assert_eq!(
        daemon.post("/v1/meshes/m/events", push).await,
        (StatusCode::OK, json!({ "duplicate": "fingerprint" }))
    );

    let second = json!({ "event": blocked_event("t2"), "hint": hint, "selfMachineId": "mach_abc" });
    let (status, second) = daemon.post("/v1/meshes/m/events", second).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");

    let coordinator = json!({ "daemonId": "daemon_mach_abc", "runId": "run-1", "sessionId": "coord-1" });
    let (status, peeked) = daemon.post("/v1/meshes/m/events/peek", coordinator.clone()).await;
    assert_eq!(status, StatusCode::OK, "{peeked}");
    let ids = |view: &Value| -> Vec<Value> {
        view["events"].as_array().expect("events").iter().map(|e| e["id"].clone()).collect()
    };
    assert_eq!(ids(&peeked), vec![pushed["id"].clone(), second["id"].clone()], "{peeked}");
    let (_, again) = daemon.post("/v1/meshes/m/events/peek", coordinator.clone()).await;
    assert_eq!(ids(&again), ids(&peeked), "a peek marks nothing");

    let ack = json!({ "ids": [second["id"], "no-such-row"] });
    assert_eq!(daemon.post("/v1/meshes/m/events/ack", ack).await, (StatusCode::OK, json!({ "acked": 1 })));
    let retract = json!({ "taskId": "t1" });
    assert_eq!(
        daemon.post("/v1/meshes/m/events/retract", retract.clone()).await,
        (StatusCode::OK, json!({ "retracted": 1 }))
    );
    assert_eq!(
        daemon.post("/v1/meshes/m/events/retract", retract).await,
        (StatusCode::OK, json!({ "retracted": 0 }))
    );
    let (_, empty) = daemon.post("/v1/meshes/m/events/peek", coordinator).await;
    assert_eq!(empty["events"], json!([]), "{empty}");
}

#[tokio::test]
async fn bad_event_requests_are_refused_and_queue_nothing() {
    let daemon = TestDaemon::start().await;
    let mut other_mesh = blocked_event("t1");
    other_mesh["meshId"] = json!("other");
    let response = daemon.post("/v1/meshes/m/events", json!({ "event": other_mesh })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "meshId");
    let mut no_metadata = blocked_event("t1");
    no_metadata.as_object_mut().unwrap().remove("metadataEvent");
    let response = daemon.post("/v1/meshes/m/events", json!({ "event": no_metadata })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "event.metadataEvent");
    let bad_scope = json!({ "event": blocked_event("t1"), "hint": { "scope": "everyone" } });
    let response = daemon.post("/v1/meshes/m/events", bad_scope).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid hint.scope");
    let bare = daemon.post("/v1/meshes/m/events", blocked_event("t1")).await;
    // A bare event is read as the wrapper, whose `event` is an object.
    assert_error(&bare, StatusCode::BAD_REQUEST, "invalid_input", "invalid event: invalid type: string");

    let response = daemon.post("/v1/meshes/m/events/peek", json!({ "daemonId": "d", "runId": " " })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "runId");
    let response = daemon.post("/v1/meshes/m/events/ack", json!({ "ids": "all" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid ids");
    let response = daemon.post("/v1/meshes/m/events/ack", json!({ "ids": ["x", ""] })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "ids[1]");
    let response = daemon.post("/v1/meshes/m/events/retract", json!({ "taskId": "" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "taskId");

    let (_, status) = daemon.get("/v1/meshes/m/status").await;
    assert_eq!(status["pendingEvents"], 0, "{status}");
}

/// A ledger entry of mesh `mesh`, as another daemon would export it.
fn foreign_entry(id: &str, mesh: &str) -> Value {
    json!({
        "id": id,
        "meshId": mesh,
        "timestamp": "2020-01-01T00:00:00.000Z",
        "kind": "task_dispatched",
        "payload": { "taskId": "remote-1" }
    })
}

#[tokio::test]
async fn the_ledger_is_sliced_and_imported() {
    let daemon = TestDaemon::start().await;
    enqueue_and_claim(&daemon, "t1").await;
    let entries = json!({ "entries": [foreign_entry("e1", "m")] });
    assert_eq!(
        daemon.post("/v1/meshes/m/ledger/import", entries.clone()).await,
        (StatusCode::OK, json!({ "imported": 1 }))
    );
    assert_eq!(
        daemon.post("/v1/meshes/m/ledger/import", entries).await,
        (StatusCode::OK, json!({ "imported": 0 }))
    );

    let (status, first) = daemon.get("/v1/meshes/m/ledger/slice?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["protocol"], "adhdev.mesh.ledger.slice.v1");
    assert_eq!(first["meshId"], "m");
    let kinds = |slice: &Value| -> Vec<Value> {
        slice["entries"].as_array().expect("entries").iter().map(|e| e["kind"].clone()).collect()
    };
    assert_eq!(kinds(&first), vec![json!("task_dispatched"), json!("task_dispatched")], "{first}");
    assert_eq!(first["entries"][0]["id"], "e1", "the imported entry is the oldest");
    assert_eq!(first["cursor"]["hasMore"], true, "{first}");
    let next = first["cursor"]["nextAfterId"].as_str().expect("a cursor");

    let (status, rest) = daemon.get(&format!("/v1/meshes/m/ledger/slice?afterId={next}&limit=10")).await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    assert_eq!(kinds(&rest), vec![json!("task_claimed")], "{rest}");
    assert_eq!(rest["cursor"]["hasMore"], false, "{rest}");

    let (_, claimed) = daemon.get("/v1/meshes/m/ledger/slice?kind=task_claimed").await;
    assert_eq!(kinds(&claimed), vec![json!("task_claimed")], "{claimed}");
    let (_, recent) = daemon.get("/v1/meshes/m/ledger/slice?since=2021-01-01T00:00:00Z").await;
    assert_eq!(recent["entries"].as_array().map(Vec::len), Some(2), "{recent}");
}

#[tokio::test]
async fn bad_ledger_requests_are_refused_and_import_nothing() {
    let daemon = TestDaemon::start().await;
    let response = daemon.get("/v1/meshes/m/ledger/slice?limit=lots").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "limit");
    let response = daemon.get("/v1/meshes/m/ledger/slice?since=yesterday").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "since");
    let response = daemon.get("/v1/meshes/m/ledger/slice?after=e1").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `after`");

    let mixed = json!({ "entries": [foreign_entry("e1", "m"), foreign_entry("e2", "other")] });
    let response = daemon.post("/v1/meshes/m/ledger/import", mixed).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "entries[1].meshId");
    let mut bad_time = foreign_entry("e3", "m");
    bad_time["timestamp"] = json!("last tuesday");
    let response = daemon.post("/v1/meshes/m/ledger/import", json!({ "entries": [bad_time] })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "entries[0].timestamp");
    let response = daemon.post("/v1/meshes/m/ledger/import", json!({ "entries": [{ "id": "e4" }] })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "invalid entries[0]");
    assert_eq!(daemon.get("/v1/meshes/m/ledger").await, (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn the_status_sums_up_the_mesh() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "later", "id": "t2" })).await;
    daemon.post("/v1/meshes/m/events", json!({ "event": blocked_event("t2") })).await;

    let (status, view) = daemon.get("/v1/meshes/m/status").await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["meshId"], "m");
    assert_eq!(
        view["tasks"],
        json!({ "pending": 1, "assigned": 1, "completed": 0, "failed": 0, "cancelled": 0 }),
        "{view}"
    );
    let active = view["activeAssignments"].as_array().expect("assignments");
    assert_eq!(active.len(), 1, "{view}");
    assert_eq!((&active[0]["id"], &active[0]["sessionId"]), (&json!("t1"), &json!("s1")), "{view}");
    assert_eq!(active[0]["epoch"], epoch, "{view}");
    assert_eq!(view["pendingEvents"], 1, "{view}");
    assert_eq!(view["idleSessions"], json!([]), "{view}");
    let (_, ledger) = daemon.get("/v1/meshes/m/ledger").await;
    assert_eq!(view["recentLedger"], ledger, "{view}");

    for i in 0..12 {
        daemon.post("/v1/meshes/m/tasks", json!({ "message": "more", "id": format!("x{i}") })).await;
    }
    let (_, view) = daemon.get("/v1/meshes/m/status").await;
    let (_, newest) = daemon.get("/v1/meshes/m/ledger?tail=10").await;
    assert_eq!(view["recentLedger"], newest, "only the last 10 entries, oldest first");
    assert_eq!(daemon.get("/v1/meshes/empty/status").await.1["tasks"]["pending"], 0);
}

#[tokio::test]
async fn the_status_refuses_a_query_parameter() {
    let daemon = TestDaemon::start().await;
    let response = daemon.get("/v1/meshes/m/status?verbose=1").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `verbose`");
}
