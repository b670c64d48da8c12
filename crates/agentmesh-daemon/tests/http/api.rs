//! The HTTP API end to end: a real listener on `127.0.0.1:0`, a temp-dir SQLite
//! store and an HTTP client, one daemon per test.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_core::{NewTask, Timestamp};
use agentmesh_daemon::{ApiToken, AppState, MAX_BODY_BYTES, UpkeepConfig};
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::prelude::*;
use agentmesh_store::transfer::{Records, TransferStore};
use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricFamily, PrometheusType, PrometheusValue};
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
    dir: tempfile::TempDir,
}

impl TestDaemon {
    /// Opens a store in a temp dir, binds `127.0.0.1:0` and serves in a task. The
    /// listener is bound before the task starts, so requests can follow at once.
    ///
    /// The upkeep loops are off: the route tests use fixed, old timestamps that a
    /// retention pass would sweep away under them. The upkeep tests turn on the
    /// jobs they test with [`TestDaemon::start_with`].
    async fn start() -> TestDaemon {
        TestDaemon::start_with(|state| state.with_upkeep(upkeep_with(|_| {}))).await
    }

    /// Opens a store and serves like [`TestDaemon::start`], with the state
    /// adjusted by `configure` (upkeep, the watch's fallback poll) instead.
    async fn start_with(configure: impl FnOnce(AppState) -> AppState) -> TestDaemon {
        TestDaemon::start_on(|_| {}, configure).await
    }

    /// Like [`TestDaemon::start_with`], on a store `prepare` wrote to before the
    /// daemon starts.
    async fn start_on(
        prepare: impl FnOnce(&SqliteStore),
        configure: impl FnOnce(AppState) -> AppState,
    ) -> TestDaemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open_data_dir(dir.path()).expect("open the store");
        prepare(&store);
        let state = configure(AppState::new(Arc::new(store), ApiToken::new(TOKEN).expect("token")));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(agentmesh_daemon::serve(listener, state, shutdown.clone()));
        TestDaemon { addr, client: Client::new(), shutdown, server, dir }
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

    /// The `/metrics` exposition.
    async fn metrics(&self) -> String {
        let response = self.client.get(self.url("/metrics")).bearer_auth(TOKEN).send().await.expect("sent");
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.expect("a text body")
    }

    /// Polls `/metrics` until `line` is one of its lines, for at most 20 s.
    async fn wait_for_metric(&self, what: &str, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.metrics().await.lines().any(|l| l == line) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what} ({line})");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The value of the `/metrics` sample `series` (name and labels), 0 when absent.
    async fn metric_value(&self, series: &str) -> u64 {
        let prefix = format!("{series} ");
        let text = self.metrics().await;
        text.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.parse().expect("a count"))
    }

    /// Polls `/metrics` until the sample `series` is at least `at_least`, for at most 20 s.
    async fn wait_for_count(&self, what: &str, series: &str, at_least: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.metric_value(series).await < at_least {
            assert!(Instant::now() < deadline, "timed out waiting for {what} ({series} >= {at_least})");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls task `id` of mesh `m` until `cond` holds, for at most 20 s; returns it.
    async fn wait_for_task(&self, what: &str, id: &str, cond: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, task) = self.get(&format!("/v1/meshes/m/tasks/{id}")).await;
            if cond(&task) {
                return task;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {task}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
async fn readyz_needs_no_token_and_is_503_lock_wait_while_another_process_holds_the_write_lock() {
    let wait = Duration::from_millis(300);
    let daemon =
        TestDaemon::start_with(|state| state.with_upkeep(upkeep_with(|_| {})).with_ready_lock_wait(wait))
            .await;
    // Another connection to the file, as another process's would be, takes the
    // write lock and keeps it.
    let holder = rusqlite::Connection::open(daemon.dir.path().join(agentmesh_sqlite::DB_FILE_NAME)).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let readyz = || async { read(daemon.client.get(daemon.url("/readyz")).send().await.unwrap()).await };
    let (status, body) = readyz().await;
    assert_eq!(
        (status, &body["status"], &body["reason"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("not_ready"), &json!("lock_wait")),
        "{body}"
    );
    assert!(body["message"].as_str().is_some_and(|m| m.contains("300 ms")), "{body}");
    assert_eq!(daemon.client.get(daemon.url("/healthz")).send().await.unwrap().status(), StatusCode::OK);
    holder.execute_batch("COMMIT").unwrap();
    // The probe still waiting gets the lock now; its success makes the daemon ready.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = readyz().await;
        if answer == (StatusCode::OK, json!({ "status": "ready" })) {
            break;
        }
        assert!(Instant::now() < deadline, "still not ready after the lock was let go: {answer:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
async fn a_claim_takes_only_the_difficulties_it_names() {
    let daemon = TestDaemon::start().await;
    let task = json!({ "id": "t1", "message": "port the parser", "difficulty": "difficult" });
    assert_eq!(daemon.post("/v1/meshes/m/tasks", task).await.0, StatusCode::CREATED);
    let claim =
        |allowed: Value| json!({ "nodeId": "n1", "sessionId": "s1", "allowedTaskDifficulties": allowed });
    let response = daemon.post("/v1/meshes/m/claims", claim(json!(["easy", "hard"]))).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "allowedTaskDifficulties[1]");
    let refused = daemon.post("/v1/meshes/m/claims", claim(json!(["easy", "medium"]))).await;
    assert_eq!(refused, (StatusCode::OK, json!({ "task": null, "refusal": "difficulty_floor_unmet" })));
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await.1["status"], "pending");
    let (status, claimed) = daemon.post("/v1/meshes/m/claims", claim(json!(["difficult"]))).await;
    assert_eq!((status, &claimed["task"]["id"]), (StatusCode::OK, &json!("t1")), "{claimed}");
}

#[tokio::test]
async fn a_claim_stamps_the_transcript_profile_it_carries_and_a_bad_one_is_refused() {
    let daemon = TestDaemon::start().await;
    let (status, _) = daemon.post("/v1/meshes/m/tasks", json!({ "id": "t1", "message": "fix it" })).await;
    assert_eq!(status, StatusCode::CREATED);
    let claim =
        |profile: Value| json!({ "nodeId": "n1", "sessionId": "s1", "assignedTranscriptProfile": profile });
    let bad = claim(json!({ "class": " ", "timing": "live" }));
    let response = daemon.post("/v1/meshes/m/claims", bad).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "assignedTranscriptProfile.class");
    let unknown = claim(json!({ "class": "pty", "timing": "live", "colour": "red" }));
    let response = daemon.post("/v1/meshes/m/claims", unknown).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "colour");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await.1["status"], "pending", "nothing was claimed");

    let profile = json!({ "class": "pty", "timing": "live", "emitsPtyTurnEvents": true });
    let (status, claimed) = daemon.post("/v1/meshes/m/claims", claim(profile.clone())).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["task"]["assignedTranscriptProfile"], profile, "{claimed}");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await.1["assignedTranscriptProfile"], profile);
}

#[tokio::test]
async fn a_completion_carries_the_workers_time_and_a_clock_far_behind_still_completes() {
    let daemon = TestDaemon::start().await;
    let (status, _) = daemon.post("/v1/meshes/m/tasks", json!({ "id": "t1", "message": "fix it" })).await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, claimed) = daemon.post("/v1/meshes/m/claims", json!({ "nodeId": "n1", "sessionId": "s1" })).await;
    assert_eq!(claimed["task"]["id"], "t1", "{claimed}");
    let (_, before) = daemon.get("/v1/meshes/m/tasks/t1").await;

    let bad = json!({ "sessionId": "s1", "summary": "done", "occurredAt": "yesterday" });
    let response = daemon.post("/v1/meshes/m/completions", bad).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "occurredAt");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, before), "nothing changed");

    // The worker's clock is years behind the dispatch: its task is still the one completed.
    let behind = json!({ "sessionId": "s1", "summary": "done", "occurredAt": "2000-01-01T00:00:00.000Z" });
    let (status, completed) = daemon.post("/v1/meshes/m/completions", behind).await;
    assert_eq!(status, StatusCode::OK, "{completed}");
    assert_eq!((&completed["id"], &completed["status"]), (&json!("t1"), &json!("completed")));
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
    let response = daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "difficulty": "hard" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "difficulty");
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
    let stopped = tokio::time::timeout(Duration::from_secs(10), daemon.server).await;
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

#[tokio::test]
async fn a_heartbeat_carries_progress_onto_the_task_and_into_the_ledger() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    let beat = |percent: u32, note: &str| {
        json!({ "taskId": "t1", "sessionId": "s1", "epoch": epoch, "leaseMs": 600_000,
                "progress": { "percent": percent, "note": note } })
    };
    let (status, task) = daemon.post("/v1/meshes/m/heartbeats", beat(50, "running the tests")).await;
    assert_eq!(status, StatusCode::OK, "{task}");
    assert_eq!(
        (&task["progress"]["percent"], &task["progress"]["note"]),
        (&json!(50), &json!("running the tests"))
    );
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, task.clone()));
    // The same report again changes the lease only; a new one is kept as well.
    daemon.post("/v1/meshes/m/heartbeats", beat(50, "running the tests")).await;
    daemon.post("/v1/meshes/m/heartbeats", beat(80, "writing the report")).await;
    let (_, ledger) = daemon.get("/v1/meshes/m/ledger").await;
    let notes: Vec<&Value> = ledger
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["kind"] == "task_progress")
        .map(|e| &e["payload"]["note"])
        .collect();
    assert_eq!(notes, [&json!("running the tests"), &json!("writing the report")], "{ledger}");
}

#[tokio::test]
async fn bad_progress_is_refused_naming_the_field_and_changes_nothing() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    let (_, before) = daemon.get("/v1/meshes/m/tasks/t1").await;
    let (_, ledger_before) = daemon.get("/v1/meshes/m/ledger").await;
    let with = |progress: Value| json!({ "taskId": "t1", "sessionId": "s1", "epoch": epoch, "leaseMs": 600_000, "progress": progress });
    let cases = [
        (json!({ "percent": 101 }), "progress.percent"),
        (json!({ "percent": -1 }), "percent"),
        (json!({ "note": "two\nlines" }), "progress.note"),
        (json!({ "note": "x".repeat(201) }), "progress.note"),
        (json!({}), "progress"),
        (json!({ "percent": 5, "colour": "red" }), "colour"),
    ];
    for (progress, field) in cases {
        let response = daemon.post("/v1/meshes/m/heartbeats", with(progress.clone())).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", field);
    }
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, before));
    assert_eq!(daemon.get("/v1/meshes/m/ledger").await.1, ledger_before);
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
async fn a_pushed_event_keeps_only_the_envelope_fields_that_are_well_formed() {
    let daemon = TestDaemon::start().await;
    let mut event = blocked_event("t1");
    let fields = json!({
        "protocolVersion": "2.0",
        "eventId": " ev-posted ",
        "scope": "multicast",
        "dispatchedBy": { "daemonId": "daemon_mach_abc", "coordinatorRunId": "" },
        "intendedFor": { "daemonId": "daemon_mach_abc", "coordinatorRunId": "run-1", "sessionId": " " },
        "note": "kept"
    });
    for (key, value) in fields.as_object().unwrap() {
        event[key] = value.clone();
    }
    let (status, pushed) = daemon.post("/v1/meshes/m/events", json!({ "event": event })).await;
    assert_eq!(status, StatusCode::CREATED, "{pushed}");
    let coordinator = json!({ "daemonId": "daemon_mach_abc", "runId": "run-1", "sessionId": "coord-1" });
    let (_, peeked) = daemon.post("/v1/meshes/m/events/peek", coordinator).await;
    let stored = &peeked["events"][0]["payload"];
    // Stamped already (version 2.0 and an event id), so not stamped again: what
    // was malformed is gone, what was well formed is kept.
    for dropped in ["scope", "dispatchedBy"] {
        assert!(stored.get(dropped).is_none(), "{dropped} is not stored as it came: {stored}");
    }
    assert_eq!(stored["protocolVersion"], "2.0", "{stored}");
    assert_eq!(stored["eventId"], "ev-posted", "{stored}");
    assert_eq!(stored["intendedFor"], json!({ "daemonId": "daemon_mach_abc", "coordinatorRunId": "run-1" }));
    assert_eq!(stored["note"], "kept", "the rest of the event is kept: {stored}");
    assert_eq!(stored["metadataEvent"]["taskId"], "t1");
}

#[tokio::test]
async fn events_are_deleted_by_id_drained_or_not_and_their_fingerprints_freed() {
    let daemon = TestDaemon::start().await;
    let push = |task: &str| json!({ "event": blocked_event(task), "selfMachineId": "mach_abc" });
    let (status, first) = daemon.post("/v1/meshes/m/events", push("t1")).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (_, second) = daemon.post("/v1/meshes/m/events", push("t2")).await;
    let ack = json!({ "ids": [second["id"]] });
    assert_eq!(daemon.post("/v1/meshes/m/events/ack", ack).await, (StatusCode::OK, json!({ "acked": 1 })));

    for (body, needle) in [
        (json!({ "ids": "all" }), "invalid ids"),
        (json!({ "ids": [first["id"], ""] }), "ids[1]"),
        (json!({ "ids": [first["id"]], "all": true }), "unknown field `all`"),
    ] {
        let response = daemon.post("/v1/meshes/m/events/delete", body).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", needle);
    }
    let (_, status_view) = daemon.get("/v1/meshes/m/status").await;
    assert_eq!(status_view["pendingEvents"], 1, "a refused delete deletes nothing: {status_view}");

    let delete = json!({ "ids": [first["id"], second["id"], "no-such-row"] });
    assert_eq!(
        daemon.post("/v1/meshes/m/events/delete", delete.clone()).await,
        (StatusCode::OK, json!({ "deleted": 2 }))
    );
    assert_eq!(
        daemon.post("/v1/meshes/m/events/delete", delete).await,
        (StatusCode::OK, json!({ "deleted": 0 }))
    );
    let coordinator = json!({ "daemonId": "daemon_mach_abc", "runId": "run-1" });
    let (_, peeked) = daemon.post("/v1/meshes/m/events/peek", coordinator).await;
    assert_eq!(peeked["events"], json!([]), "{peeked}");
    let (status, again) = daemon.post("/v1/meshes/m/events", push("t1")).await;
    assert_eq!(status, StatusCode::CREATED, "a deleted event's fingerprint takes a new one: {again}");
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

/// A peer paging by `afterSeq` sees an entry imported after it read a page,
/// though the entry's timestamp is older than everything on that page.
#[tokio::test]
async fn the_ledger_slice_pages_by_sequence_and_sees_a_late_import() {
    let daemon = TestDaemon::start().await;
    enqueue_and_claim(&daemon, "t1").await;
    let (status, first) = daemon.get("/v1/meshes/m/ledger/slice?afterSeq=0&limit=10").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let ids = |slice: &Value| -> Vec<String> {
        slice["entries"].as_array().expect("entries").iter().map(|e| e["id"].to_string()).collect()
    };
    assert_eq!(ids(&first).len(), 2, "{first}");
    assert_eq!(first["cursor"]["afterSeq"], 0, "{first}");
    assert_eq!(first["cursor"]["nextAfterSeq"], 2, "{first}");
    assert_eq!(first["cursor"]["hasMore"], false, "{first}");
    let origin = first["origin"].as_str().expect("the page names its database").to_owned();

    let entries = json!({ "entries": [foreign_entry("e-late", "m")] });
    assert_eq!(
        daemon.post("/v1/meshes/m/ledger/import", entries).await,
        (StatusCode::OK, json!({ "imported": 1 }))
    );
    let (status, next) = daemon.get("/v1/meshes/m/ledger/slice?afterSeq=2").await;
    assert_eq!(status, StatusCode::OK, "{next}");
    assert_eq!(ids(&next), ["\"e-late\""], "{next}");
    assert_eq!(next["cursor"]["nextAfterSeq"], 3, "{next}");
    assert_eq!(next["origin"], origin.as_str(), "{next}");
    // The original's cursor pages by time: the late entry sorts before its cursor.
    let last = first["entries"][1]["id"].as_str().expect("an id");
    let (_, by_time) = daemon.get(&format!("/v1/meshes/m/ledger/slice?afterId={last}")).await;
    assert_eq!(by_time["entries"], json!([]), "{by_time}");
    assert!(by_time["cursor"].get("nextAfterSeq").is_none(), "{by_time}");

    let response = daemon.get(&format!("/v1/meshes/m/ledger/slice?afterId={last}&afterSeq=1")).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "afterSeq");
    let response = daemon.get("/v1/meshes/m/ledger/slice?afterSeq=-1").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "afterSeq");
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

// ── Fencing and leases ───────────────────────────────────────────────────────

/// The ledger entries of mesh `m` of `kind`.
async fn ledger_of_kind(daemon: &TestDaemon, kind: &str) -> Vec<Value> {
    let (status, slice) = daemon.get(&format!("/v1/meshes/m/ledger/slice?kind={kind}&limit=100")).await;
    assert_eq!(status, StatusCode::OK, "{slice}");
    slice["entries"].as_array().expect("entries").clone()
}

#[tokio::test]
async fn stale_completions_and_heartbeats_are_409_and_recorded() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    let (_, before) = daemon.get("/v1/meshes/m/tasks/t1").await;

    let stale = json!({ "sessionId": "s1", "taskId": "t1", "epoch": epoch + 1, "summary": "done" });
    let response = daemon.post("/v1/meshes/m/completions", stale).await;
    assert_error(&response, StatusCode::CONFLICT, "stale_epoch", "t1");
    let beat = json!({ "taskId": "t1", "sessionId": "s1", "epoch": epoch + 1, "leaseMs": 1000 });
    let response = daemon.post("/v1/meshes/m/heartbeats", beat).await;
    assert_error(&response, StatusCode::CONFLICT, "stale_epoch", "t1");

    let refused = ledger_of_kind(&daemon, "completion_refused").await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["payload"]["reason"], "stale_epoch", "{refused:?}");
    assert_eq!(refused[0]["sessionId"], "s1", "{refused:?}");
    let refused = ledger_of_kind(&daemon, "heartbeat_refused").await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["payload"]["reason"], "stale_epoch", "{refused:?}");
    assert_eq!(
        daemon.get("/v1/meshes/m/tasks/t1").await,
        (StatusCode::OK, before),
        "a refusal changes no task"
    );

    let metrics = daemon.metrics().await;
    for operation in ["completion", "heartbeat"] {
        let line =
            format!("agentmesh_fencing_refusals_total{{operation=\"{operation}\",code=\"stale_epoch\"}} 1");
        assert!(metrics.lines().any(|l| l == line), "no {line} in\n{metrics}");
    }
}

#[tokio::test]
async fn complete_and_claim_reports_a_task_and_hands_out_the_next_in_one_request() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    let (status, next) = daemon
        .post("/v1/meshes/m/tasks", json!({ "message": "after t1", "id": "t2", "dependsOn": ["t1"] }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{next}");
    let claim = json!({ "nodeId": "n1", "sessionId": "s1", "leaseMs": 60000 });

    let body = json!({
        "completion": { "sessionId": "s1", "taskId": "t1", "epoch": epoch, "summary": "built it" },
        "claim": claim,
    });
    let (status, answer) = daemon.post("/v1/meshes/m/complete-and-claim", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["completed"]["id"], "t1", "{answer}");
    assert_eq!(answer["completed"]["status"], "completed", "{answer}");
    assert_eq!(answer["completed"]["finalSummary"], "built it", "{answer}");
    // t2 waited on t1: the claim sees the completion of the same transaction.
    assert_eq!(answer["next"]["task"]["id"], "t2", "{answer}");
    assert_eq!(answer["next"]["task"]["assignedSessionId"], "s1", "{answer}");
    assert!(answer["next"]["task"]["leaseExpiresAt"].is_string(), "the claim has a lease: {answer}");
    assert_eq!(ledger_of_kind(&daemon, "task_completed").await.len(), 1);
    assert_eq!(ledger_of_kind(&daemon, "task_claimed").await.len(), 2);

    // The last task: completed, and nothing left to claim.
    let epoch = answer["next"]["task"]["dispatchNonce"].clone();
    let body = json!({
        "completion": { "sessionId": "s1", "taskId": "t2", "epoch": epoch },
        "claim": { "nodeId": "n1", "sessionId": "s1" },
    });
    let (status, answer) = daemon.post("/v1/meshes/m/complete-and-claim", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["completed"]["status"], "completed", "{answer}");
    assert_eq!(answer["next"], json!({ "task": null, "refusal": "no_pending_candidates" }), "{answer}");

    let metrics = daemon.metrics().await;
    for line in [
        "agentmesh_completions_total{status=\"completed\"} 2",
        "agentmesh_claims_total{outcome=\"claimed\"} 2",
    ] {
        assert!(metrics.lines().any(|l| l == line), "no {line} in\n{metrics}");
    }
}

#[tokio::test]
async fn a_refused_or_malformed_complete_and_claim_claims_nothing() {
    let daemon = TestDaemon::start().await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "next", "id": "t2" })).await;
    let (_, t1_before) = daemon.get("/v1/meshes/m/tasks/t1").await;
    let (_, t2_before) = daemon.get("/v1/meshes/m/tasks/t2").await;
    let claim = json!({ "nodeId": "n1", "sessionId": "s1" });

    let stale = json!({
        "completion": { "sessionId": "s1", "taskId": "t1", "epoch": epoch + 1 },
        "claim": claim,
    });
    let response = daemon.post("/v1/meshes/m/complete-and-claim", stale).await;
    assert_error(&response, StatusCode::CONFLICT, "stale_epoch", "t1");
    assert_eq!(ledger_of_kind(&daemon, "completion_refused").await.len(), 1, "the refusal is recorded");

    for (body, field) in [
        (
            json!({ "completion": { "sessionId": "s1", "taskId": "t1", "epoch": epoch }, "claim": { "nodeId": " ", "sessionId": "s1" } }),
            "claim.nodeId",
        ),
        (
            json!({ "completion": { "sessionId": "", "taskId": "t1" }, "claim": claim }),
            "completion.sessionId",
        ),
        (json!({ "completion": { "sessionId": "s1", "taskId": "t1", "epoch": epoch } }), "claim"),
        (
            json!({ "completion": { "sessionId": "s1", "taskId": "t1", "epoch": epoch, "extra": 1 }, "claim": claim }),
            "extra",
        ),
    ] {
        let response = daemon.post("/v1/meshes/m/complete-and-claim", body.clone()).await;
        assert_eq!(response.0, StatusCode::BAD_REQUEST, "{body} gave {response:?}");
        let message = response.1["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(field), "{field} not named in {response:?}");
    }
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t1").await, (StatusCode::OK, t1_before), "t1 unchanged");
    assert_eq!(daemon.get("/v1/meshes/m/tasks/t2").await, (StatusCode::OK, t2_before), "t2 unclaimed");
}

#[tokio::test]
async fn a_claim_without_a_lease_gets_the_default_ten_minutes() {
    let daemon = TestDaemon::start().await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "t1" })).await;
    let (status, claimed) =
        daemon.post("/v1/meshes/m/claims", json!({ "nodeId": "n1", "sessionId": "s1" })).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let at = |field: &str| {
        claimed["task"][field]
            .as_str()
            .and_then(Timestamp::parse_iso)
            .unwrap_or_else(|| panic!("{field}: {claimed}"))
    };
    let lease_ms = at("leaseExpiresAt").millis() - at("dispatchTimestamp").millis();
    assert_eq!(lease_ms, 10 * 60 * 1000, "{claimed}");
}

/// Upkeep with every job off, then adjusted by `enable`.
fn upkeep_with(enable: impl FnOnce(&mut UpkeepConfig)) -> UpkeepConfig {
    let mut config = UpkeepConfig {
        lease_reaper_every: Duration::ZERO,
        fingerprints_every: Duration::ZERO,
        idle_sessions_every: Duration::ZERO,
        deliveries_every: Duration::ZERO,
        tool_log_every: Duration::ZERO,
        dispatches_every: Duration::ZERO,
        inbox_retention_every: Duration::ZERO,
        retention_every: Duration::ZERO,
        reservations_every: Duration::ZERO,
        checkpoint_every: Duration::ZERO,
        ..UpkeepConfig::default()
    };
    enable(&mut config);
    config
}

/// Upkeep with a fast lease reaper and every other job off.
fn fast_reaper() -> UpkeepConfig {
    upkeep_with(|c| c.lease_reaper_every = Duration::from_millis(25))
}

#[tokio::test]
async fn an_expired_lease_is_reclaimed_and_the_old_holder_is_fenced_off() {
    let daemon = TestDaemon::start_with(|state| state.with_upkeep(fast_reaper())).await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "t1" })).await;
    let claim = json!({ "nodeId": "n1", "sessionId": "s1", "leaseMs": 1 });
    let (_, claimed) = daemon.post("/v1/meshes/m/claims", claim).await;
    let epoch = claimed["task"]["dispatchNonce"].as_u64().expect("an epoch");

    // The holder never heartbeats: the reaper puts the task back.
    let task = daemon.wait_for_task("the reaper to reclaim t1", "t1", |t| t["status"] == "pending").await;
    assert!(task["assignedSessionId"].is_null(), "{task}");
    assert!(task["dispatchNonce"].as_u64().expect("an epoch") > epoch, "the reclaim bumps the epoch: {task}");
    let reclaimed = ledger_of_kind(&daemon, "task_reclaimed").await;
    assert_eq!(reclaimed.len(), 1, "{reclaimed:?}");
    assert_eq!(
        reclaimed[0]["payload"]["reason"],
        agentmesh_core::lifecycle::LEASE_EXPIRED_REASON,
        "{reclaimed:?}"
    );
    assert_eq!(reclaimed[0]["payload"]["outcome"], "requeued", "{reclaimed:?}");

    let late = json!({ "sessionId": "s1", "taskId": "t1", "epoch": epoch, "summary": "done after all" });
    let response = daemon.post("/v1/meshes/m/completions", late).await;
    assert_error(&response, StatusCode::CONFLICT, "stale_epoch", "t1");
    let beat = json!({ "taskId": "t1", "sessionId": "s1", "epoch": epoch, "leaseMs": 60000 });
    assert_error(
        &daemon.post("/v1/meshes/m/heartbeats", beat).await,
        StatusCode::CONFLICT,
        "stale_epoch",
        "t1",
    );
    assert_eq!(
        daemon.get("/v1/meshes/m/tasks/t1").await,
        (StatusCode::OK, task),
        "the late report changes nothing"
    );

    // Another session claims it again, under a fresh epoch.
    let (_, again) = daemon.post("/v1/meshes/m/claims", json!({ "nodeId": "n2", "sessionId": "s2" })).await;
    assert_eq!(again["task"]["id"], "t1", "{again}");
    let metrics = daemon.metrics().await;
    assert!(
        metrics.lines().any(|l| l == "agentmesh_lease_reclaims_total{outcome=\"requeued\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_live_lease_is_left_alone_by_the_reaper() {
    let daemon = TestDaemon::start_with(|state| state.with_upkeep(fast_reaper())).await;
    enqueue_and_claim(&daemon, "t1").await;
    // Wait for a pass that started after the claim (passes are counted as they end).
    let series = "agentmesh_upkeep_passes_total{job=\"lease_reaper\",result=\"ok\"}";
    let after_claim = daemon.metric_value(series).await;
    daemon.wait_for_count("two more reaper passes", series, after_claim + 2).await;
    let (_, task) = daemon.get("/v1/meshes/m/tasks/t1").await;
    assert_eq!(task["status"], "assigned", "{task}");
    assert!(ledger_of_kind(&daemon, "task_reclaimed").await.is_empty());
}

// ── Watch ────────────────────────────────────────────────────────────────────

/// The coordinator `blocked_event` addresses, as a drain body.
fn coordinator() -> Value {
    json!({ "daemonId": "daemon_mach_abc", "runId": "run-1", "sessionId": "coord-1" })
}

#[tokio::test]
async fn a_waiting_watch_returns_a_pushed_event_once() {
    // No fallback look within the test: only the push itself can wake the watch.
    // (Upkeep off, as in `start`: retention would sweep the old fixture event.)
    let daemon = TestDaemon::start_with(|state| {
        state.with_upkeep(upkeep_with(|_| {})).with_fallback_watch_poll(Duration::from_secs(600))
    })
    .await;
    let watch = {
        let request = daemon
            .client
            .post(daemon.url("/v1/meshes/m/events/watch?timeoutSecs=20"))
            .bearer_auth(TOKEN)
            .json(&coordinator());
        tokio::spawn(async move { read(request.send().await.expect("watch sent")).await })
    };
    daemon.wait_for_metric("the watch to wait", "agentmesh_watches_waiting 1").await;

    let push = json!({ "event": blocked_event("t1"), "hint": { "coordinatorRunId": "run-1" } });
    let (status, pushed) = daemon.post("/v1/meshes/m/events", push).await;
    assert_eq!(status, StatusCode::CREATED, "{pushed}");

    let (status, woke) = tokio::time::timeout(Duration::from_secs(30), watch)
        .await
        .expect("the watch answers")
        .expect("the watch task ran");
    assert_eq!(status, StatusCode::OK, "{woke}");
    let events = woke["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "the watch returned with the event, before its timeout: {woke}");
    assert_eq!(events[0]["id"], pushed["id"], "{woke}");
    let (_, after) = daemon.post("/v1/meshes/m/events/drain", coordinator()).await;
    assert_eq!(after["events"], json!([]), "the watched event was handed out once: {after}");
    let metrics = daemon.metrics().await;
    assert!(metrics.lines().any(|l| l == "agentmesh_watches_waiting 0"), "{metrics}");
    assert!(metrics.lines().any(|l| l == "agentmesh_drains_total{kind=\"watch\"} 1"), "{metrics}");
    assert!(metrics.lines().any(|l| l == "agentmesh_delivered_events_total 1"), "{metrics}");
}

#[tokio::test]
async fn a_watch_with_nothing_returns_empty_and_a_long_timeout_is_refused() {
    let daemon = TestDaemon::start().await;
    let (status, view) = daemon.post("/v1/meshes/m/events/watch?timeoutSecs=1", coordinator()).await;
    assert_eq!((status, &view["events"]), (StatusCode::OK, &json!([])), "{view}");
    let response = daemon.post("/v1/meshes/m/events/watch?timeoutSecs=601", coordinator()).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "timeoutSecs");
    let response = daemon.post("/v1/meshes/m/events/watch?timeout=5", coordinator()).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "timeout");
    let response = daemon.post("/v1/meshes/m/events/watch?timeoutSecs=1", json!({ "daemonId": "d" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "runId");
}

/// A wake-up a backend could supply: the write signal, counting the writes it
/// is told of.
struct CountingWakeUp {
    signal: agentmesh_api::WriteSignal,
    notified: std::sync::atomic::AtomicUsize,
}

impl agentmesh_api::WakeUp for CountingWakeUp {
    fn mark(&self, mesh: &str) -> u64 {
        self.signal.mark(mesh)
    }
    fn wait_past(&self, mesh: &str, seen: u64, timeout: Duration) -> bool {
        agentmesh_api::WakeUp::wait_past(&self.signal, mesh, seen, timeout)
    }
    fn on_wake(&self, mesh: &str, seen: u64, wake: Box<dyn FnOnce() + Send>) {
        self.signal.on_wake(mesh, seen, wake);
    }
    fn notify(&self) {
        self.notified.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.signal.notify();
    }
}

/// The HTTP watch, the local one and the remote client refuse a timeout past
/// 600 s alike, naming their field; a local watch is woken by a write through
/// the wake-up its mesh was given, not by its poll.
#[tokio::test]
async fn every_watch_follows_one_timeout_rule_and_a_supplied_wake_up_wakes_it() {
    use agentmesh_api::{LocalMesh, MeshApi, MeshError, RemoteMesh};
    use agentmesh_store::StoreError;

    let daemon = TestDaemon::start().await;
    let response = daemon.post("/v1/meshes/m/events/watch?timeoutSecs=601", coordinator()).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "at most 600 seconds");
    let (status, _) = daemon.post("/v1/meshes/m/events/watch?timeoutSecs=600", json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "600 s passes the rule; the empty body is what is refused");
    let base = daemon.url("");
    let base = base.trim_end_matches('/').to_owned();
    let field = |err: MeshError| match err {
        MeshError::Store(StoreError::InvalidInput(invalid)) => (invalid.field, invalid.problem),
        other => panic!("not refused as bad input: {other:?}"),
    };
    tokio::task::spawn_blocking(move || {
        let body: agentmesh_api::wire::DrainBody =
            serde_json::from_value(coordinator()).expect("a drain body");
        let too_long = Duration::from_secs(601);
        let remote = RemoteMesh::new(&base, TOKEN).expect("a client");
        let (name, problem) = field(remote.watch("m", body.clone(), too_long).unwrap_err());
        assert_eq!(name, "timeout");
        assert!(problem.contains("at most 600 seconds"), "{problem}");

        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open_data_dir(dir.path()).expect("open the store");
        let wake_up = Arc::new(CountingWakeUp {
            signal: agentmesh_api::WriteSignal::new(),
            notified: std::sync::atomic::AtomicUsize::new(0),
        });
        let local = LocalMesh::new(Arc::new(store), agentmesh_daemon::now)
            .with_cross_process_poll(Duration::from_secs(600))
            .with_wake_up(Arc::clone(&wake_up) as Arc<dyn agentmesh_api::WakeUp>);
        let (name, local_problem) = field(local.watch("m", body.clone(), too_long).unwrap_err());
        assert_eq!((name.as_str(), local_problem), ("timeout", problem), "the same words on both paths");

        let pusher = local.clone();
        let push = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let push = json!({ "event": blocked_event("t1"), "hint": { "coordinatorRunId": "run-1" } });
            pusher.push_event("m", serde_json::from_value(push).expect("a push body")).expect("pushed");
        });
        let started = Instant::now();
        let woke = local.watch("m", body, Duration::from_secs(60)).expect("the watch answers");
        push.join().expect("the push ran");
        assert_eq!(woke.events.len(), 1, "{woke:?}");
        assert!(started.elapsed() < Duration::from_secs(30), "woken by the write, not by the poll");
        assert!(wake_up.notified.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    })
    .await
    .expect("the blocking part ran");
}

// ── Batch enqueue, missions, sessions, deliveries, dispatches, placement ────

#[tokio::test]
async fn a_batch_resolves_refs_and_a_bad_batch_stores_nothing() {
    let daemon = TestDaemon::start().await;
    let batch = json!({ "tasks": [
        { "ref": "build", "message": "build it" },
        { "message": "test it", "id": "test", "dependsOn": ["build"] }
    ] });
    let (status, tasks) = daemon.post("/v1/meshes/m/tasks/batch", batch).await;
    assert_eq!(status, StatusCode::CREATED, "{tasks}");
    let tasks = tasks.as_array().expect("tasks").clone();
    assert_eq!(tasks.len(), 2);
    let build_id = tasks[0]["id"].as_str().expect("an id");
    assert_ne!(build_id, "build", "a ref is not an id");
    assert_eq!(tasks[1]["dependsOn"], json!([build_id]), "{tasks:?}");
    // The dependent waits for its dependency.
    let (_, claimed) = daemon.post("/v1/meshes/m/claims", json!({ "nodeId": "n1", "sessionId": "s1" })).await;
    assert_eq!(claimed["task"]["id"], build_id, "{claimed}");

    let twice = json!({ "tasks": [{ "ref": "a", "message": "x" }, { "ref": "a", "message": "y" }] });
    let response = daemon.post("/v1/meshes/m/tasks/batch", twice).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "tasks[1].ref");
    let typo = json!({ "tasks": [{ "message": "x" }, { "mesage": "y" }] });
    let response = daemon.post("/v1/meshes/m/tasks/batch", typo).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `mesage`");
    let cycle = json!({ "tasks": [
        { "id": "c1", "message": "x", "dependsOn": ["c2"] },
        { "id": "c2", "message": "y", "dependsOn": ["c1"] }
    ] });
    let response = daemon.post("/v1/meshes/m/tasks/batch", cycle).await;
    assert_eq!(response.0, StatusCode::CONFLICT, "{}", response.1);
    let duplicate = json!({ "tasks": [{ "id": "fresh", "message": "x" }, { "id": "test", "message": "y" }] });
    let response = daemon.post("/v1/meshes/m/tasks/batch", duplicate).await;
    assert_error(&response, StatusCode::CONFLICT, "duplicate_task_id", "test");
    let (_, listed) = daemon.get("/v1/meshes/m/tasks").await;
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(2),
        "a refused batch stores none of its tasks: {listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_posts_of_a_new_mission_exactly_one_answers_201() {
    let daemon = Arc::new(TestDaemon::start().await);
    for round in 0..100 {
        let id = format!("race-{round}");
        let posts: Vec<_> = (0..8)
            .map(|k| {
                let (daemon, id) = (Arc::clone(&daemon), id.clone());
                tokio::spawn(async move {
                    daemon
                        .post("/v1/meshes/m/missions", json!({ "id": id, "title": format!("post {k}") }))
                        .await
                })
            })
            .collect();
        let mut created = 0;
        for post in posts {
            let (status, saved) = post.await.expect("a post task");
            assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{status}: {saved}");
            assert_eq!(saved["created"], json!(status == StatusCode::CREATED), "{saved}");
            created += usize::from(status == StatusCode::CREATED);
        }
        assert_eq!(created, 1, "round {round}: {created} posts answered 201 for {id}");
    }
}

#[tokio::test]
async fn missions_are_created_updated_listed_and_shown() {
    let daemon = TestDaemon::start().await;
    let (status, saved) =
        daemon.post("/v1/meshes/m/missions", json!({ "id": "ms1", "title": "Ship it" })).await;
    assert_eq!(status, StatusCode::CREATED, "{saved}");
    assert_eq!((&saved["id"], &saved["created"]), (&json!("ms1"), &json!(true)), "{saved}");
    assert_eq!(saved["source"], Value::Null, "no source given: {saved}");
    let update = json!({ "id": "ms1", "title": "Ship it", "goal": "v1 out", "source": "coordinator" });
    let (status, updated) = daemon.post("/v1/meshes/m/missions", update).await;
    assert_eq!((status, &updated["created"]), (StatusCode::OK, &json!(false)), "{updated}");
    assert_eq!(updated["source"], "coordinator", "the first source is written: {updated}");
    let other = json!({ "id": "ms1", "title": "Ship it", "source": "import" });
    let (_, kept) = daemon.post("/v1/meshes/m/missions", other).await;
    assert_eq!(kept["source"], "coordinator", "a written source is kept: {kept}");
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "part", "id": "t1", "missionId": "ms1" })).await;

    let (status, list) = daemon.get("/v1/meshes/m/missions").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["goal"], "v1 out", "{list}");
    let (status, shown) = daemon.get("/v1/meshes/m/missions/ms1").await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["tasks"].as_array().map(|t| t.len()), Some(1), "{shown}");
    assert_eq!(daemon.get("/v1/meshes/other/missions").await, (StatusCode::OK, json!([])));

    let response = daemon.post("/v1/meshes/m/missions", json!({ "id": "ms2" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "missing field `title`");
    let response =
        daemon.post("/v1/meshes/m/missions", json!({ "id": "ms2", "title": "t", "status": "Done!" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "status");
    let response =
        daemon.post("/v1/meshes/m/missions", json!({ "id": "ms2", "title": "t", "owner": "me" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `owner`");
    let long = "s".repeat(201);
    let response =
        daemon.post("/v1/meshes/m/missions", json!({ "id": "ms2", "title": "t", "source": long })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "source");
    let response = daemon.get("/v1/meshes/m/missions?status=Done!").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "Done!");
    let response = daemon.get("/v1/meshes/m/missions/nope").await;
    assert_eq!(response.0, StatusCode::NOT_FOUND, "{}", response.1);
    let (_, list) = daemon.get("/v1/meshes/m/missions").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "refused upserts store nothing: {list}");
}

#[tokio::test]
async fn idle_sessions_are_reported_and_listed() {
    let daemon = TestDaemon::start().await;
    let idle = json!({ "nodeId": "n1", "sessionId": "s1", "providerType": "claude-cli", "ttlSecs": 60 });
    let (status, view) = daemon.post("/v1/meshes/m/idle-sessions", idle).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!((&view["sessionId"], &view["meshId"]), (&json!("s1"), &json!("m")), "{view}");
    let (status, list) = daemon.get("/v1/meshes/m/idle-sessions").await;
    assert_eq!((status, list.as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{list}");

    let zero = json!({ "nodeId": "n2", "sessionId": "s2", "providerType": "codex-cli", "ttlSecs": 0 });
    let response = daemon.post("/v1/meshes/m/idle-sessions", zero).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "ttlSecs");
    let blank = json!({ "nodeId": "n2", "sessionId": "s2", "providerType": " " });
    let response = daemon.post("/v1/meshes/m/idle-sessions", blank).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "providerType");
    let response = daemon.get("/v1/meshes/m/idle-sessions?node=n1").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `node`");
    let (_, list) = daemon.get("/v1/meshes/m/idle-sessions").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test]
async fn a_direct_dispatch_is_recorded_once_as_an_assigned_task_with_a_confirmed_delivery() {
    let daemon = TestDaemon::start().await;
    let (status, confirmed) = daemon.get("/v1/meshes/m/tasks/t1/delivery").await;
    assert_eq!((status, confirmed), (StatusCode::OK, json!({ "taskId": "t1", "confirmed": false })));
    let body = json!({ "id": "t1", "message": "fix the login form", "nodeId": "n1", "sessionId": "s1" });
    let (status, recorded) = daemon.post("/v1/meshes/m/tasks/dispatched", body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{recorded}");
    assert_eq!(recorded["created"], true);
    assert_eq!(
        (&recorded["task"]["status"], &recorded["task"]["assignedSessionId"]),
        (&json!("assigned"), &json!("s1")),
        "{recorded}"
    );
    assert!(recorded["task"]["dispatchTimestamp"].is_string(), "{recorded}");
    let (status, confirmed) = daemon.get("/v1/meshes/m/tasks/t1/delivery").await;
    assert_eq!((status, confirmed), (StatusCode::OK, json!({ "taskId": "t1", "confirmed": true })));

    let other = json!({ "id": "t1", "message": "something else", "nodeId": "n2", "sessionId": "s2" });
    let (status, again) = daemon.post("/v1/meshes/m/tasks/dispatched", other).await;
    assert_eq!((status, &again["created"]), (StatusCode::OK, &json!(false)), "{again}");
    assert_eq!(again["task"], recorded["task"], "an existing id changes nothing");

    for (bad, field) in [
        (json!({ "id": "t2", "message": " ", "nodeId": "n1", "sessionId": "s1" }), "message"),
        (json!({ "id": "t2", "message": "m", "nodeId": "", "sessionId": "s1" }), "nodeId"),
        (
            json!({ "id": "t2", "message": "m", "nodeId": "n1", "sessionId": "s1", "taskMode": "x" }),
            "taskMode",
        ),
        (json!({ "id": "t2", "message": "m", "nodeId": "n1" }), "sessionId"),
    ] {
        let response = daemon.post("/v1/meshes/m/tasks/dispatched", bad).await;
        assert_eq!(response.0, StatusCode::BAD_REQUEST, "{}", response.1);
        assert!(
            response.1["error"]["message"].as_str().unwrap_or_default().contains(field),
            "{}",
            response.1
        );
    }
    let response = daemon.get("/v1/meshes/m/tasks/t2").await;
    assert_eq!(response.0, StatusCode::NOT_FOUND, "refused records store nothing: {}", response.1);
}

#[tokio::test]
async fn inflight_holds_are_upserted_read_listed_and_released() {
    let daemon = TestDaemon::start().await;
    let first = json!({ "taskId": "t2", "holdReason": "acked" });
    let (status, held) = daemon.post("/v1/meshes/m/holds", first).await;
    assert_eq!(status, StatusCode::OK, "{held}");
    assert_eq!(
        (&held["taskId"], &held["meshId"], &held["holdReason"]),
        (&json!("t2"), &json!("m"), &json!("acked"))
    );
    assert_eq!(held["firstIdleSinceAck"], Value::Null, "an omitted idle anchor reads back empty: {held}");
    assert_eq!(held["readFailureCount"], 0);
    let held_at = held["heldAt"].clone();

    let update = json!({
        "taskId": "t2",
        "holdReason": "idle_after_ack",
        "firstIdleSinceAck": "2025-01-01T01:00:00+01:00",
        "readFailureCount": 2,
    });
    let (status, updated) = daemon.post("/v1/meshes/m/holds", update).await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["heldAt"], held_at, "the first heldAt is kept: {updated}");
    assert_eq!(updated["holdReason"], "idle_after_ack");
    assert_eq!(updated["firstIdleSinceAck"], "2025-01-01T00:00:00.000Z");
    assert_eq!(updated["readFailureCount"], 2);
    let (status, one) = daemon.get("/v1/meshes/m/holds/t2").await;
    assert_eq!((status, &one), (StatusCode::OK, &updated));

    daemon.post("/v1/meshes/m/holds", json!({ "taskId": "t1", "holdReason": "acked" })).await;
    let (status, list) = daemon.get("/v1/meshes/m/holds").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let order: Vec<&str> = list.as_array().unwrap().iter().filter_map(|h| h["taskId"].as_str()).collect();
    assert_eq!(order, ["t2", "t1"], "listed in the order first held: {list}");

    for (body, field) in [
        (json!({ "taskId": " ", "holdReason": "acked" }), "taskId"),
        (json!({ "taskId": "t3", "holdReason": "" }), "holdReason"),
        (
            json!({ "taskId": "t3", "holdReason": "acked", "firstIdleSinceAck": "yesterday" }),
            "firstIdleSinceAck",
        ),
        (json!({ "taskId": "t3", "holdReason": "acked", "readFailureCount": -1 }), "readFailureCount"),
    ] {
        let response = daemon.post("/v1/meshes/m/holds", body).await;
        assert_eq!(response.0, StatusCode::BAD_REQUEST, "{}", response.1);
        assert!(
            response.1["error"]["message"].as_str().unwrap_or_default().contains(field),
            "{}",
            response.1
        );
    }
    let (_, list) = daemon.get("/v1/meshes/m/holds").await;
    assert_eq!(list.as_array().map(Vec::len), Some(2), "refused holds store nothing: {list}");

    let (status, released) = daemon.send(Method::DELETE, "/v1/meshes/m/holds/t2", None).await;
    assert_eq!((status, released), (StatusCode::OK, json!({ "released": true })));
    let (_, again) = daemon.send(Method::DELETE, "/v1/meshes/m/holds/t2", None).await;
    assert_eq!(again, json!({ "released": false }));
    let response = daemon.get("/v1/meshes/m/holds/t2").await;
    assert_eq!(response.0, StatusCode::NOT_FOUND, "{}", response.1);
}

#[tokio::test]
async fn the_delivery_sweep_expires_deliveries_of_meshes_the_daemon_never_served() {
    let expired_at = Timestamp::from_millis(1_700_000_000_000);
    let daemon = TestDaemon::start_on(
        |store| {
            let delivery = agentmesh_core::NewSessionDelivery {
                id: "d1".to_owned(),
                kind: "message".to_owned(),
                session_id: Some("s1".to_owned()),
                message: "rebase first".to_owned(),
                expires_at: Some(expired_at.iso()),
                ..agentmesh_core::NewSessionDelivery::default()
            };
            store.insert_session_delivery("untouched", &delivery, expired_at).expect("a delivery");
        },
        |state| state.with_upkeep(upkeep_with(|c| c.deliveries_every = Duration::from_millis(25))),
    )
    .await;
    // Read beside the daemon, through a connection of its own: no route lists
    // deliveries that are no longer active.
    let db = rusqlite::Connection::open(daemon.dir.path().join(agentmesh_sqlite::DB_FILE_NAME)).expect("db");
    let status_of_d1 = || -> String {
        db.query_row("SELECT status FROM mesh_session_delivery WHERE id = 'd1'", [], |r| r.get(0))
            .expect("d1")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of_d1() != "expired" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status_of_d1(), "expired", "the sweep expired d1 in a mesh no request named");
}

#[tokio::test]
async fn deliveries_are_queued_and_listed() {
    let daemon = TestDaemon::start().await;
    let delivery = json!({ "sessionId": "s1", "message": "rebase first", "priority": 2 });
    let (status, view) = daemon.post("/v1/meshes/m/deliveries", delivery).await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!((&view["sessionId"], &view["kind"]), (&json!("s1"), &json!("message")), "{view}");
    let (status, list) = daemon.get("/v1/meshes/m/deliveries?sessionId=s1").await;
    assert_eq!((status, list.as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{list}");
    assert_eq!(daemon.get("/v1/meshes/m/deliveries?sessionId=s9").await, (StatusCode::OK, json!([])));

    let response = daemon.post("/v1/meshes/m/deliveries", json!({ "message": "to nobody" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "sessionId");
    // As later originals store it: a delivery without a message has an empty one.
    let (status, blank) =
        daemon.post("/v1/meshes/m/deliveries", json!({ "sessionId": "s1", "id": "d0" })).await;
    assert_eq!((status, &blank["message"]), (StatusCode::CREATED, &json!("")), "{blank}");
    daemon.post("/v1/meshes/m/deliveries/d0/status", json!({ "status": "cancelled" })).await;
    let late = json!({ "sessionId": "s1", "message": "x", "expiresAt": "whenever" });
    let response = daemon.post("/v1/meshes/m/deliveries", late).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "expiresAt");
    let response = daemon.post("/v1/meshes/m/deliveries", json!({ "sessionId": "s1", "text": "x" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `text`");
    let (_, list) = daemon.get("/v1/meshes/m/deliveries").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test]
async fn dispatches_are_recorded_and_listed() {
    let daemon = TestDaemon::start().await;
    let dispatch = json!({ "taskId": "t1", "sessionId": "s1", "nodeId": "n1", "message": "do it" });
    let (status, view) = daemon.post("/v1/meshes/m/dispatches", dispatch).await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!((&view["taskId"], &view["meshId"]), (&json!("t1"), &json!("m")), "{view}");
    let (status, list) = daemon.get("/v1/meshes/m/dispatches").await;
    assert_eq!((status, list.as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{list}");

    let response = daemon.post("/v1/meshes/m/dispatches", json!({ "taskId": " ", "message": "x" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "taskId");
    let response = daemon.post("/v1/meshes/m/dispatches", json!({ "taskId": "t2" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "missing field `message`");
    let response =
        daemon.post("/v1/meshes/m/dispatches", json!({ "taskId": "t2", "message": "x", "to": "s" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `to`");
    let response = daemon.get("/v1/meshes/m/dispatches?all=1").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "unknown field `all`");
    let (_, list) = daemon.get("/v1/meshes/m/dispatches").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test]
async fn placement_ranks_nodes_and_refuses_bad_input() {
    let daemon = TestDaemon::start().await;
    daemon
        .post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "t1", "requiredTags": ["os=linux"] }))
        .await;
    let body = json!({ "taskId": "t1", "nodes": [
        { "nodeId": "mac", "capabilityTags": ["os=macos"] },
        { "nodeId": "box", "capabilityTags": ["os=linux"], "schedulingPriority": 5 }
    ] });
    let (status, ranked) = daemon.post("/v1/meshes/m/placement", body).await;
    assert_eq!(status, StatusCode::OK, "{ranked}");
    let ranked = ranked.as_array().expect("nodes");
    assert_eq!(ranked.first().map(|n| &n["nodeId"]), Some(&json!("box")), "{ranked:?}");
    assert!(
        ranked.iter().all(|n| n["nodeId"] != "mac"),
        "a node without the tags is not offered: {ranked:?}"
    );

    let blank = json!({ "taskId": "t1", "nodes": [{ "nodeId": "a" }, { "nodeId": "" }] });
    let response = daemon.post("/v1/meshes/m/placement", blank).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "nodes[1].nodeId");
    let strategy = json!({ "taskId": "t1", "nodes": [], "strategy": "random" });
    let response = daemon.post("/v1/meshes/m/placement", strategy).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "random");
    let unknown = json!({ "taskId": "nope", "nodes": [{ "nodeId": "a" }] });
    let response = daemon.post("/v1/meshes/m/placement", unknown).await;
    assert_error(&response, StatusCode::NOT_FOUND, "task_not_found", "nope");
    let (_, task) = daemon.get("/v1/meshes/m/tasks/t1").await;
    assert_eq!(task["status"], "pending", "placement assigns nothing");
}

// ── Mesh ids ────────────────────────────────────────────────────────────────

#[tokio::test]
async fn mesh_ids_are_checked_and_an_unknown_mesh_has_no_tasks() {
    let daemon = TestDaemon::start().await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "x" })).await;
    assert_error(&daemon.get("/v1/meshes/nope/tasks/x").await, StatusCode::NOT_FOUND, "task_not_found", "x");
    let response = daemon.post("/v1/meshes/%20/tasks", json!({ "message": "x" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "mesh");
    let long = "a".repeat(201);
    let response = daemon.post(&format!("/v1/meshes/{long}/tasks"), json!({ "message": "x" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "mesh");
    let response = daemon.get("/v1/meshes/a%0Ab/status").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "mesh");
    let (_, ledger) = daemon.get("/v1/meshes/m/ledger").await;
    assert_eq!(ledger.as_array().map(Vec::len), Some(1), "{ledger}");
    assert_eq!(
        daemon.get(&format!("/v1/meshes/{}/tasks", "a".repeat(200))).await,
        (StatusCode::OK, json!([]))
    );
}

/// Every id a body or a path carries, on every route that takes one: the bad
/// value replaces the `BAD` placeholder, and the error names the field.
fn bad_id_cases() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("/tasks", json!({ "message": "x", "id": "BAD" }), "id"),
        ("/tasks", json!({ "message": "x", "dependsOn": ["t1", "BAD"] }), "dependsOn[1]"),
        ("/tasks", json!({ "message": "x", "targetNodeId": "BAD" }), "targetNodeId"),
        ("/tasks", json!({ "message": "x", "targetSessionId": "BAD" }), "targetSessionId"),
        ("/tasks", json!({ "message": "x", "missionId": "BAD" }), "missionId"),
        ("/tasks", json!({ "message": "x", "coordinator": { "daemonId": "BAD" } }), "coordinator.daemonId"),
        (
            "/tasks/batch",
            json!({ "tasks": [{ "message": "a" }, { "message": "b", "id": "BAD" }] }),
            "tasks[1].id",
        ),
        ("/tasks/batch", json!({ "tasks": [{ "message": "a", "ref": "BAD" }] }), "tasks[0].ref"),
        ("/claims", json!({ "nodeId": "BAD", "sessionId": "s1" }), "nodeId"),
        ("/claims", json!({ "nodeId": "n1", "sessionId": "BAD" }), "sessionId"),
        ("/heartbeats", json!({ "sessionId": "s1", "taskId": "BAD", "epoch": 1, "leaseMs": 1000 }), "taskId"),
        ("/completions", json!({ "sessionId": "BAD" }), "sessionId"),
        ("/completions", json!({ "sessionId": "s1", "taskId": "BAD" }), "taskId"),
        (
            "/complete-and-claim",
            json!({ "completion": { "sessionId": "s1" }, "claim": { "nodeId": "BAD", "sessionId": "s1" } }),
            "claim.nodeId",
        ),
        (
            "/events",
            json!({ "event": { "event": "agent:ready", "metadataEvent": {}, "eventId": "BAD" } }),
            "event.eventId",
        ),
        ("/events/drain", json!({ "daemonId": "BAD", "runId": "run-1" }), "daemonId"),
        ("/events/peek", json!({ "daemonId": "mach_A", "runId": "BAD" }), "runId"),
        ("/events/ack", json!({ "ids": ["e1", "BAD"] }), "ids[1]"),
        ("/events/delete", json!({ "ids": ["e1", "BAD"] }), "ids[1]"),
        ("/events/retract", json!({ "taskId": "BAD" }), "taskId"),
        ("/missions", json!({ "id": "BAD", "title": "T" }), "id"),
        ("/idle-sessions", json!({ "nodeId": "n1", "sessionId": "BAD", "providerType": "p" }), "sessionId"),
        ("/holds", json!({ "taskId": "BAD", "holdReason": "acked" }), "taskId"),
        (
            "/tasks/dispatched",
            json!({ "id": "t9", "message": "m", "nodeId": "n1", "sessionId": "BAD" }),
            "sessionId",
        ),
        ("/deliveries", json!({ "sessionId": "BAD", "message": "m" }), "sessionId"),
        ("/deliveries", json!({ "id": "BAD", "sessionId": "s1", "message": "m" }), "id"),
        ("/dispatches", json!({ "taskId": "BAD", "message": "m" }), "taskId"),
        ("/placement", json!({ "taskId": "t1", "nodes": [{ "nodeId": "BAD" }] }), "nodes[0].nodeId"),
        ("/coordinators/presence", json!({ "daemonId": "mach_A", "runId": "BAD" }), "runId"),
        ("/tool-calls", json!({ "tool": "x", "sessionId": "BAD" }), "sessionId"),
    ]
}

/// `value` with every string `"BAD"` in it replaced by `bad`.
fn with_placeholder_as(value: Value, bad: &str) -> Value {
    match value {
        Value::String(s) if s == "BAD" => Value::from(bad),
        Value::Array(items) => Value::Array(items.into_iter().map(|v| with_placeholder_as(v, bad)).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, with_placeholder_as(v, bad))).collect())
        }
        other => other,
    }
}

#[tokio::test]
async fn every_id_follows_the_one_id_rule_and_a_refused_one_changes_nothing() {
    let odd = "legacy\nforged";
    let daemon = TestDaemon::start_on(
        |store| {
            let task = agentmesh_core::Task::new(odd, "m", "from the original", "2025-01-01T00:00:00.000Z");
            store.import_page("m", &Records::Tasks(vec![task])).expect("a row as the original wrote it");
        },
        |state| state.with_upkeep(upkeep_with(|_| {})),
    )
    .await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "t1" })).await;
    let db = rusqlite::Connection::open(daemon.dir.path().join(agentmesh_sqlite::DB_FILE_NAME)).expect("db");
    let before = database_snapshot(&db);

    // The issue's own request: NUL and newline in a task id.
    let response = daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "x\u{0}y\nz" })).await;
    assert_error(
        &response,
        StatusCode::BAD_REQUEST,
        "invalid_input",
        "invalid id: must not contain control characters",
    );
    for bad in ["x\u{0}y\nz", "\u{1b}[2J", &"a".repeat(201)] {
        for (route, body, field) in bad_id_cases() {
            let body = with_placeholder_as(body, bad);
            let response = daemon.post(&format!("/v1/meshes/m{route}"), body).await;
            assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", &format!("invalid {field}: "));
        }
    }
    let paths = [
        (Method::GET, "/v1/meshes/m/tasks/x%00y", "invalid id: "),
        (Method::POST, "/v1/meshes/m/tasks/x%0Ay/cancel", "invalid id: "),
        (Method::POST, "/v1/meshes/m/tasks/x%0Ay/requeue", "invalid id: "),
        (Method::GET, "/v1/meshes/m/missions/m%0A1", "invalid id: "),
        (Method::GET, "/v1/meshes/m/deliveries?sessionId=s%0A1", "invalid sessionId: "),
        (Method::GET, "/v1/meshes/a%00b/tasks", "invalid mesh: "),
    ];
    for (method, path, needle) in paths {
        let body = (method == Method::POST).then(|| json!({}));
        let response = daemon.send(method, path, body).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", needle);
    }
    assert!(database_snapshot(&db) == before, "a refused id changed the database");

    // The row the original wrote is listed as it is.
    let (status, tasks) = daemon.get("/v1/meshes/m/tasks").await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = tasks.as_array().unwrap().iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, [odd, "t1"]);
}

#[tokio::test]
async fn the_meshes_route_lists_every_mesh_with_its_counts() {
    let daemon = TestDaemon::start().await;
    assert_eq!(daemon.get("/v1/meshes").await, (StatusCode::OK, json!([])));
    daemon.post("/v1/meshes/b/tasks", json!({ "message": "x", "id": "t1" })).await;
    daemon.post("/v1/meshes/a/missions", json!({ "id": "m1", "title": "T" })).await;
    let (status, meshes) = daemon.get("/v1/meshes").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        meshes,
        json!([
            { "meshId": "a", "tasks": { "pending": 0, "assigned": 0, "completed": 0, "failed": 0, "cancelled": 0 },
              "pendingEvents": 0, "ledgerEntries": meshes[0]["ledgerEntries"], "missions": 1 },
            { "meshId": "b", "tasks": { "pending": 1, "assigned": 0, "completed": 0, "failed": 0, "cancelled": 0 },
              "pendingEvents": 0, "ledgerEntries": 1, "missions": 0 },
        ])
    );
    assert_error(&daemon.get("/v1/meshes?x=1").await, StatusCode::BAD_REQUEST, "invalid_input", "x");
    let anonymous = daemon.client.get(daemon.url("/v1/meshes")).send().await.expect("sent");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED, "the listing is behind the token");
}

// ── Metrics ─────────────────────────────────────────────────────────────────

#[tokio::test]
async fn metrics_need_the_token_and_count_what_happened() {
    let daemon = TestDaemon::start().await;
    let response = daemon.client.get(daemon.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    enqueue_and_claim(&daemon, "t1").await;
    daemon.post("/v1/meshes/m/tasks", json!({ "message": "x", "id": "t2", "requiredTags": ["gpu"] })).await;
    daemon.post("/v1/meshes/m/claims", json!({ "nodeId": "n1", "sessionId": "s2" })).await;
    daemon
        .post("/v1/meshes/m/completions", json!({ "sessionId": "s1", "taskId": "t1", "summary": "ok" }))
        .await;
    daemon.post("/v1/meshes/m/events/drain", json!({ "daemonId": "d", "runId": "r" })).await;
    daemon.get("/v1/meshes/m/tasks/nope").await;

    let response = daemon.client.get(daemon.url("/metrics")).bearer_auth(TOKEN).send().await.unwrap();
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = response.text().await.unwrap();
    for line in [
        "agentmesh_tasks{mesh=\"m\",status=\"pending\"} 1",
        "agentmesh_tasks{mesh=\"m\",status=\"completed\"} 1",
        "agentmesh_tasks{mesh=\"m\",status=\"assigned\"} 0",
        "agentmesh_claims_total{outcome=\"claimed\"} 1",
        "agentmesh_claims_total{outcome=\"required_tags_unsatisfied\"} 1",
        "agentmesh_completions_total{status=\"completed\"} 1",
        "agentmesh_drains_total{kind=\"drain\"} 1",
        "agentmesh_drain_decisions_total{decision=\"v2Delivered\"} 0",
        "agentmesh_http_requests_total{route=\"/v1/meshes/{mesh}/tasks\",method=\"POST\",status=\"201\"} 2",
        "agentmesh_http_requests_total{route=\"/v1/meshes/{mesh}/tasks/{id}\",method=\"GET\",status=\"404\"} 1",
        "agentmesh_http_requests_total{route=\"/metrics\",method=\"GET\",status=\"401\"} 1",
        "agentmesh_http_request_duration_seconds_count{route=\"/v1/meshes/{mesh}/claims\",method=\"POST\",status=\"200\"} 2",
        "# TYPE agentmesh_http_request_duration_seconds histogram",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    assert!(!text.contains("mesh=\"nope\""), "only meshes answered with success are tracked");
}

/// The families of a scrape, parsed by an exposition-format parser (which refuses
/// malformed lines, duplicate series and families split in two).
fn parse_exposition(text: &str) -> HashMap<String, MetricFamily<PrometheusType, PrometheusValue>> {
    match parse_prometheus(text) {
        Ok(exposition) => exposition.families,
        Err(err) => panic!("/metrics is not a valid exposition ({err:?}):\n{text}"),
    }
}

/// Checks a family against the rules `promtool check metrics` applies to names,
/// types, help and labels; returns what it finds wrong, empty when nothing.
fn promtool_lint(family: &MetricFamily<PrometheusType, PrometheusValue>) -> Vec<String> {
    const TYPE_WORDS: [&str; 5] = ["counter", "gauge", "histogram", "summary", "untyped"];
    const UNIT_ABBREVIATIONS: [&str; 14] =
        ["s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"];
    let name = family.family_name.as_str();
    let mut problems = Vec::new();
    if family.help.trim().is_empty() {
        problems.push("no help text".to_owned());
    }
    let is_counter = family.family_type == PrometheusType::Counter;
    if is_counter != name.ends_with("_total") {
        problems.push("only a counter's name ends in _total, and every counter's does".to_owned());
    }
    let is_histogram = family.family_type == PrometheusType::Histogram;
    let is_summary = family.family_type == PrometheusType::Summary;
    if !is_histogram && !is_summary && ["_bucket", "_count", "_sum"].iter().any(|s| name.ends_with(s)) {
        problems.push("a reserved suffix (_bucket, _count, _sum)".to_owned());
    }
    for word in name.split('_') {
        if TYPE_WORDS.contains(&word) {
            problems.push(format!("the type word {word:?} in the name"));
        }
        if UNIT_ABBREVIATIONS.contains(&word) {
            problems.push(format!("the abbreviated unit {word:?} in the name"));
        }
    }
    if name.contains(':') || name.chars().any(|c| c.is_ascii_uppercase()) {
        problems.push("not snake_case".to_owned());
    }
    for label in family.get_label_names() {
        if label.chars().any(|c| c.is_ascii_uppercase()) {
            problems.push(format!("label {label:?} is not snake_case"));
        }
        if (label == "le" && !is_histogram) || (label == "quantile" && !is_summary) {
            problems.push(format!("the reserved label {label:?}"));
        }
    }
    if family.family_type == PrometheusType::Unknown {
        problems.push("no type".to_owned());
    }
    problems
}

/// The value of the sample of `family` whose labels are exactly `labels`.
#[track_caller]
fn sample_value(
    families: &HashMap<String, MetricFamily<PrometheusType, PrometheusValue>>,
    family: &str,
    labels: &[(&str, &str)],
) -> f64 {
    let found = families.get(family).unwrap_or_else(|| panic!("no family {family}"));
    let names = found.get_label_names();
    assert_eq!(names.len(), labels.len(), "{family} has the labels {names:?}");
    let values: Vec<String> = names
        .iter()
        .map(|name| {
            let (_, value) =
                labels.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} not given"));
            (*value).to_owned()
        })
        .collect();
    let sample = found
        .get_sample_by_label_values(&values)
        .unwrap_or_else(|| panic!("no {family} sample with {labels:?}"));
    match &sample.value {
        PrometheusValue::Counter(counter) => counter.value.as_f64(),
        PrometheusValue::Gauge(gauge) => gauge.as_f64(),
        other => panic!("{family} is not a counter or a gauge: {other:?}"),
    }
}

/// `/metrics` parses as an exposition, passes the naming rules of `promtool check
/// metrics`, carries the process, build and oldest-pending-task figures, and
/// exports every label value known in advance at zero before anything happened.
#[tokio::test]
async fn metrics_are_a_valid_exposition_with_process_build_and_queue_age_figures() {
    const HOUR_MS: i64 = 3_600_000;
    let enqueued = agentmesh_daemon::now().plus_millis(-HOUR_MS);
    let daemon = TestDaemon::start_on(
        |store| {
            let task = NewTask {
                id: Some("old".to_owned()),
                message: "an hour old".to_owned(),
                ..NewTask::default()
            };
            store.enqueue("m", &task, enqueued).expect("an old task");
        },
        |state| state.with_upkeep(upkeep_with(|c| c.fingerprints_every = Duration::from_secs(3600))),
    )
    .await;

    // Before any request: the daemon's own mesh and every known label value.
    let families = parse_exposition(&daemon.metrics().await);
    for family in families.values() {
        let problems = promtool_lint(family);
        assert!(problems.is_empty(), "{}: {problems:?}", family.family_name);
    }
    let zero = |family: &str, labels: &[(&str, &str)]| {
        assert_eq!(sample_value(&families, family, labels), 0.0, "{family} {labels:?}");
    };
    let outcomes =
        ["claimed", "session_already_assigned", "no_pending_candidates", "dependencies_unsatisfied"];
    for outcome in outcomes.into_iter().chain(["node_busy_with_active_assignment"]) {
        zero("agentmesh_claims_total", &[("outcome", outcome)]);
    }
    for status in ["completed", "failed"] {
        zero("agentmesh_completions_total", &[("status", status)]);
    }
    for operation in ["completion", "heartbeat"] {
        for code in ["stale_epoch", "not_assigned_to_session", "invalid_transition"] {
            zero("agentmesh_fencing_refusals_total", &[("operation", operation), ("code", code)]);
        }
    }
    for kind in ["drain", "watch"] {
        zero("agentmesh_drains_total", &[("kind", kind)]);
    }
    zero("agentmesh_drain_decisions_total", &[("decision", "v2Delivered")]);
    for outcome in ["requeued", "failed"] {
        zero("agentmesh_lease_reclaims_total", &[("outcome", outcome)]);
    }
    zero("agentmesh_upkeep_passes_total", &[("job", "fingerprints"), ("result", "error")]);
    for status in ["pending", "assigned", "completed", "failed", "cancelled"] {
        zero("agentmesh_tasks", &[("mesh", "default"), ("status", status)]);
    }
    zero("agentmesh_pending_events", &[("mesh", "default")]);
    zero("agentmesh_oldest_pending_task_age_seconds", &[("mesh", "default")]);
    assert!(!families.contains_key("agentmesh_drain_counter_total"));

    let commit = agentmesh_daemon::BUILD_COMMIT;
    assert!(
        commit == "unknown" || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
    let build = [("version", env!("CARGO_PKG_VERSION")), ("commit", commit)];
    assert_eq!(sample_value(&families, "agentmesh_build_info", &build), 1.0);
    assert_eq!(
        sample_value(&families, "agentmesh_store_durability_info", &[("mode", "full")]),
        1.0,
        "the store's default mode, as it runs"
    );

    let kinds = |name: &str| families.get(name).map(|f| f.family_type.clone());
    if cfg!(target_os = "linux") {
        for (name, kind) in [
            ("process_cpu_seconds_total", PrometheusType::Counter),
            ("process_resident_memory_bytes", PrometheusType::Gauge),
            ("process_virtual_memory_bytes", PrometheusType::Gauge),
            ("process_open_fds", PrometheusType::Gauge),
            ("process_max_fds", PrometheusType::Gauge),
            ("process_start_time_seconds", PrometheusType::Gauge),
        ] {
            assert_eq!(kinds(name), Some(kind), "{name}");
        }
        assert!(sample_value(&families, "process_resident_memory_bytes", &[]) > 0.0);
        let open = sample_value(&families, "process_open_fds", &[]);
        assert!(open >= 3.0 && open <= sample_value(&families, "process_max_fds", &[]), "{open}");
        let now_secs = agentmesh_daemon::now().millis() as f64 / 1000.0;
        let started = sample_value(&families, "process_start_time_seconds", &[]);
        assert!(
            started <= now_secs + 1.0 && started > now_secs - 86_400.0,
            "started {started}, now {now_secs}"
        );
    }

    // Once mesh `m` was served, its hour-old pending task shows in its age.
    let (status, _) = daemon.get("/v1/meshes/m/tasks").await;
    assert_eq!(status, StatusCode::OK);
    let families = parse_exposition(&daemon.metrics().await);
    let age = sample_value(&families, "agentmesh_oldest_pending_task_age_seconds", &[("mesh", "m")]);
    assert!((3600.0..3600.0 + 600.0).contains(&age), "an hour-old task is {age} s old");
    assert_eq!(sample_value(&families, "agentmesh_tasks", &[("mesh", "m"), ("status", "pending")]), 1.0);
    let requests = [("route", "/v1/meshes/{mesh}/tasks"), ("method", "GET"), ("status", "200")];
    assert_eq!(sample_value(&families, "agentmesh_http_requests_total", &requests), 1.0);
    for family in families.values() {
        let problems = promtool_lint(family);
        assert!(problems.is_empty(), "{}: {problems:?}", family.family_name);
    }
}

// ── Upkeep ──────────────────────────────────────────────────────────────────

#[tokio::test]
async fn inbox_retention_moves_an_old_undrained_event_to_the_ledger() {
    let daemon = TestDaemon::start_with(|state| {
        state.with_upkeep(upkeep_with(|c| c.inbox_retention_every = Duration::from_millis(25)))
    })
    .await;
    // `blocked_event` was queued in 2023: far past the 30 days an undrained event is kept.
    let (status, pushed) = daemon.post("/v1/meshes/m/events", json!({ "event": blocked_event("t1") })).await;
    assert_eq!(status, StatusCode::CREATED, "{pushed}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = loop {
        let held = ledger_of_kind(&daemon, "event_held").await;
        if !held.is_empty() {
            break held;
        }
        assert!(Instant::now() < deadline, "timed out waiting for the retention pass");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["payload"]["reason"], "pending_retention_expired", "{held:?}");
    let (_, status) = daemon.get("/v1/meshes/m/status").await;
    assert_eq!(status["pendingEvents"], 0, "{status}");
}

#[tokio::test]
async fn retention_moves_a_finished_task_and_its_entries_to_the_archive_where_reads_find_them() {
    let daemon = TestDaemon::start_with(|state| {
        state.with_upkeep(upkeep_with(|c| {
            c.retention_every = Duration::from_millis(25);
            c.retention = agentmesh_core::retention::RetentionPolicy {
                tasks: agentmesh_core::retention::Window::After(1),
                ledger: agentmesh_core::retention::Window::After(1),
                events: agentmesh_core::retention::Window::After(1),
            };
        }))
    })
    .await;
    let epoch = enqueue_and_claim(&daemon, "t1").await;
    let report = json!({ "sessionId": "s1", "taskId": "t1", "epoch": epoch, "summary": "done" });
    let (status, completed) = daemon.post("/v1/meshes/m/completions", report).await;
    assert_eq!(status, StatusCode::OK, "{completed}");
    let (status, pending) =
        daemon.post("/v1/meshes/m/tasks", json!({ "message": "later", "id": "t2" })).await;
    assert_eq!(status, StatusCode::CREATED, "{pending}");
    // A pass copies a finished task into the archive, then deletes it from the
    // hot database: until the delete commits, the task reads hot.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (state, (status, task)) = loop {
        let (status, state) = daemon.get("/v1/meshes/m/archive").await;
        assert_eq!(status, StatusCode::OK, "{state}");
        let read = daemon.get("/v1/meshes/m/tasks/t1").await;
        if state["tasks"] == 1 && read.1["archived"] == json!(true) {
            break (state, read);
        }
        assert!(Instant::now() < deadline, "timed out waiting for the retention pass: {state} {}", read.1);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(state["ledgerEntries"].as_u64().unwrap_or(0) >= 3, "{state}");
    // The finished task reads as it was, marked; the pending one stays hot.
    assert_eq!(
        (status, &task["archived"], &task["finalSummary"]),
        (StatusCode::OK, &json!(true), &json!("done"))
    );
    let (_, hot) = daemon.get("/v1/meshes/m/tasks/t2").await;
    assert!(hot.get("archived").is_none(), "{hot}");
    let (status, page) = daemon.get("/v1/meshes/m/ledger/slice?afterSeq=0&limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let kinds: Vec<&str> =
        page["entries"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..3], ["task_dispatched", "task_claimed", "task_completed"], "{page}");
    assert!(page["archived"].as_u64().unwrap() >= 3, "{page}");
    let (status, listed) = daemon.get("/v1/meshes/m/archive/tasks").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["tasks"][0]["task"]["id"], "t1", "{listed}");
    // Bad input names its field and changes nothing.
    let response = daemon.post("/v1/meshes/m/retention", json!({ "tasks": "soon" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "soon");
    let response = daemon.post("/v1/meshes/m/retention", json!({ "drained": "1d" })).await;
    assert_eq!(response.0, StatusCode::BAD_REQUEST, "{}", response.1);
    let response = daemon.post("/v1/meshes/m/retention", json!({ "events": "never" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "never");
    let response = daemon.get("/v1/meshes/m/archive/tasks?limit=0").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "limit");
    assert_eq!(daemon.get("/v1/meshes/m/archive").await.1["retention"], json!({}));
    // A mesh's own windows are set, read back and recorded.
    let (status, set) = daemon
        .post("/v1/meshes/m/retention", json!({ "tasks": "3d", "ledger": "off", "events": "2h" }))
        .await;
    let own = json!({ "tasks": "3d", "ledger": "off", "events": "2h" });
    assert_eq!((status, &set["retention"]), (StatusCode::OK, &own));
    assert_eq!(ledger_of_kind(&daemon, "retention_changed").await.len(), 1);
    // An export's drop, then the cursor before it has expired.
    let (status, dropped) = daemon.post("/v1/meshes/m/archive/drop", state["end"].clone()).await;
    assert_eq!(status, StatusCode::OK, "{dropped}");
    assert_eq!(dropped["ledgerThrough"], state["end"]["ledgerThrough"], "{dropped}");
    let response = daemon.get("/v1/meshes/m/ledger/slice?afterSeq=1").await;
    assert_error(&response, StatusCode::GONE, "cursor_expired", "afterSeq");
    let (status, _) = daemon.get("/v1/meshes/m/tasks/t1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_checkpoint_hook_runs_and_a_failing_pass_is_not_fatal() {
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let hook: agentmesh_daemon::CheckpointHook = Arc::new(move || {
        // Fail every other pass: the loop carries on regardless.
        let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n.is_multiple_of(2) { Err("the disk is on fire".to_owned()) } else { Ok(true) }
    });
    let daemon = TestDaemon::start_with(|state| {
        state.with_upkeep(upkeep_with(|c| {
            c.checkpoint_every = Duration::from_millis(10);
            c.checkpoint = Some(hook);
        }))
    })
    .await;
    let failed = "agentmesh_upkeep_passes_total{job=\"checkpoint\",result=\"error\"}";
    daemon.wait_for_count("failed passes", failed, 2).await;
    let ok = "agentmesh_upkeep_passes_total{job=\"checkpoint\",result=\"ok\"}";
    daemon.wait_for_count("passes after a failure", ok, 2).await;
    assert_eq!(daemon.get("/healthz").await.0, StatusCode::OK);
    daemon.shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), daemon.server).await;
    stopped.expect("the server and its loops stop").expect("the task ran").expect("serve returned Ok");
    let after = calls.load(std::sync::atomic::Ordering::SeqCst);
    tokio::task::yield_now().await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), after, "no pass runs after shutdown");
}

#[tokio::test]
async fn a_panicking_loop_is_restarted_and_counted_and_every_loop_is_exported_from_the_start() {
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let hook: agentmesh_daemon::CheckpointHook = Arc::new(move || {
        // The first two passes panic; the supervisor restarts the loop each time.
        if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
            panic!("a checkpoint pass panicked on purpose");
        }
        Ok(true)
    });
    let daemon = TestDaemon::start_with(|state| {
        state.with_upkeep(upkeep_with(|c| {
            c.checkpoint_every = Duration::from_millis(10);
            c.checkpoint = Some(hook);
        }))
    })
    .await;
    let text = daemon.metrics().await;
    for name in [
        "lease_reaper",
        "fingerprints",
        "idle_sessions",
        "deliveries",
        "tool_log",
        "dispatches",
        "inbox_retention",
        "reservations",
    ] {
        let line = format!("agentmesh_background_restarts_total{{loop=\"{name}\"}} 0");
        assert!(text.lines().any(|l| l == line), "no {line} in {text}");
    }
    let restarts = "agentmesh_background_restarts_total{loop=\"checkpoint\"}";
    daemon.wait_for_count("restarts", restarts, 2).await;
    let ok = "agentmesh_upkeep_passes_total{job=\"checkpoint\",result=\"ok\"}";
    daemon.wait_for_count("passes after the restarts", ok, 2).await;
    assert_eq!(daemon.metric_value(restarts).await, 2);
    daemon.shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), daemon.server).await;
    stopped.expect("the server and its loops stop").expect("the task ran").expect("serve returned Ok");
}

/// The routes that take a JSON body (all but the watch, which a valid body would
/// keep waiting), each with a body it takes. `t1` exists when the fuzzing starts.
fn body_routes() -> Vec<(&'static str, Value)> {
    let coordinator = coordinator();
    vec![
        ("/tasks", json!({ "message": "fuzz", "priority": "high", "requiredTags": ["rust"] })),
        (
            "/tasks/batch",
            json!({ "tasks": [{ "ref": "a", "message": "one" }, { "message": "two", "dependsOn": ["a"] }] }),
        ),
        ("/tasks/t1/cancel", json!({ "reason": "no longer needed" })),
        ("/tasks/t1/requeue", json!({ "force": true })),
        ("/tasks/t1/priority", json!({ "priority": "high", "reason": "first" })),
        ("/claims", json!({ "nodeId": "n1", "sessionId": "s1", "leaseMs": 60_000 })),
        ("/heartbeats", json!({ "sessionId": "s1", "taskId": "t1", "epoch": 1, "leaseMs": 60_000 })),
        ("/completions", json!({ "sessionId": "s1", "taskId": "t1", "epoch": 1, "summary": "ok" })),
        (
            "/complete-and-claim",
            json!({
                "completion": { "sessionId": "s1", "taskId": "t1", "epoch": 1, "summary": "ok" },
                "claim": { "nodeId": "n1", "sessionId": "s1" },
            }),
        ),
        ("/ledger/import", json!({ "entries": [foreign_entry("e1", "m")] })),
        ("/events", blocked_event("t1")),
        ("/events/drain", coordinator.clone()),
        ("/events/peek", coordinator.clone()),
        ("/events/ack", json!({ "ids": ["evt-1"] })),
        ("/events/delete", json!({ "ids": ["evt-1"] })),
        ("/events/retract", json!({ "taskId": "t1" })),
        ("/missions", json!({ "id": "mission-1", "title": "Fuzz", "goal": "find bugs" })),
        (
            "/idle-sessions",
            json!({ "nodeId": "n1", "sessionId": "s1", "providerType": "claude", "ttlSecs": 60 }),
        ),
        (
            "/holds",
            json!({ "taskId": "t1", "holdReason": "acked", "firstIdleSinceAck": "2025-01-01T00:00:00Z" }),
        ),
        ("/tasks/dispatched", json!({ "id": "t7", "message": "x", "nodeId": "n1", "sessionId": "s1" })),
        ("/deliveries", json!({ "sessionId": "s1", "message": "hello" })),
        ("/dispatches", json!({ "taskId": "t1", "sessionId": "s1", "message": "x" })),
        ("/placement", json!({ "taskId": "t1", "nodes": [{ "nodeId": "n1", "capabilityTags": ["rust"] }] })),
        ("/coordinators/presence", json!({ "daemonId": "daemon_mach_abc", "runId": "run-1" })),
        ("/tool-calls", json!({ "tool": "mesh_enqueue", "sessionId": "s1", "callerRole": "coordinator" })),
        ("/events/held/requeue", json!({ "reason": "pending_retention_expired", "olderThanSecs": 60 })),
        ("/deliveries/d1/status", json!({ "status": "delivered", "error": "x", "attempt": false })),
        ("/dispatches/status", json!({ "status": "acked", "taskId": "t1" })),
        ("/dispatches/mark-stale", json!({ "olderThanSecs": 3600 })),
        ("/dispatches/remove", json!({ "taskIds": ["t1"] })),
    ]
}

/// Field names the request bodies use.
const BODY_KEYS: &[&str] = &[
    "id",
    "status",
    "olderThanSecs",
    "taskIds",
    "callerRole",
    "all",
    "message",
    "tasks",
    "ref",
    "dependsOn",
    "priority",
    "nodeId",
    "sessionId",
    "taskId",
    "epoch",
    "leaseMs",
    "summary",
    "error",
    "event",
    "meshId",
    "metadataEvent",
    "queuedAt",
    "daemonId",
    "runId",
    "ids",
    "limit",
    "onlyEvents",
    "entries",
    "kind",
    "timestamp",
    "payload",
    "title",
    "goal",
    "status",
    "providerType",
    "tool",
    "reason",
    "force",
    "maxRetries",
    "targetNodeId",
    "requiredTags",
    "nodes",
    "ttlSecs",
    "metadata",
    "holdReason",
    "firstIdleSinceAck",
    "readFailureCount",
    "ended",
    "strategy",
    "notBefore",
];

fn body_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e12..1e12f64).prop_map(Value::from),
        prop::sample::select(vec!["", " ", "t1", "n1", "s1", "m", "pending", "high", "2.0"])
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    let key = prop_oneof![4 => prop::sample::select(BODY_KEYS).prop_map(str::to_owned), 1 => "\\PC{0,8}"];
    scalar.prop_recursive(3, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A body for one of `routes`: its own body with up to three keys set to anything
/// (or removed), any JSON, or any bytes.
fn fuzzed_request(
    routes: Vec<(&'static str, Value)>,
) -> impl proptest::strategy::Strategy<Value = (&'static str, Vec<u8>)> {
    use proptest::prelude::*;
    prop::sample::select(routes).prop_flat_map(move |(route, base)| {
        let edit = (prop::sample::select(BODY_KEYS), prop::option::of(body_json()));
        let edited = prop::collection::vec(edit, 0..4).prop_map(move |edits| {
            let mut body = base.clone();
            for (key, value) in edits {
                let Some(map) = body.as_object_mut() else { break };
                match value {
                    Some(value) => map.insert(key.to_owned(), value),
                    None => map.remove(key),
                };
            }
            body.to_string().into_bytes()
        });
        let bytes = prop_oneof![
            6 => edited,
            2 => body_json().prop_map(|v| v.to_string().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..64),
        ];
        bytes.prop_map(move |body| (route, body))
    })
}

/// Every row of every table of the daemon's database, as text.
fn database_snapshot(db: &rusqlite::Connection) -> Vec<(String, String)> {
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("table names");
    tables
        .into_iter()
        .map(|table| {
            let columns: Vec<String> = db
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                .expect("column names");
            let row = columns.iter().map(|c| format!("quote(\"{c}\")")).collect::<Vec<_>>().join(" || ',' || ");
            let rows: String = db
                .query_row(
                    &format!("SELECT coalesce(group_concat(r, '|'), '') FROM (SELECT {row} AS r FROM \"{table}\" ORDER BY r)"),
                    [],
                    |r| r.get(0),
                )
                .expect("rows");
            (table, rows)
        })
        .collect()
}

/// The OpenAPI operation of `POST path` (`path` with its mesh and ids filled
/// in): the documented path it is an instance of with the fewest parameters.
fn documented_post<'a>(document: &'a Value, path: &str) -> &'a Value {
    let segments: Vec<&str> = path.split('/').collect();
    let fits = |template: &str| {
        let parts: Vec<&str> = template.split('/').collect();
        parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(t, p)| t == p || t.starts_with('{'))
    };
    let (_, item) = document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .filter(|(template, item)| fits(template) && item.get("post").is_some())
        .min_by_key(|(template, _)| template.matches('{').count())
        .unwrap_or_else(|| panic!("POST {path} is not in the OpenAPI document"));
    &item["post"]
}

/// Fuzzes every body-taking route with generated JSON and raw bytes: the daemon
/// never answers 5xx nor a status its OpenAPI operation does not list, every 4xx
/// is a JSON error with a code and a message, and a body refused as malformed
/// (400, 413, 415, 422) changes nothing in the database.
#[test]
fn fuzzed_bodies_get_typed_errors_and_a_refused_one_changes_nothing() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let daemon = runtime.block_on(async {
        let daemon = TestDaemon::start().await;
        let (status, _) =
            daemon.post("/v1/meshes/m/tasks", json!({ "id": "t1", "message": "fuzz target" })).await;
        assert_eq!(status, StatusCode::CREATED);
        daemon
    });
    let db = rusqlite::Connection::open(daemon.dir.path().join(agentmesh_sqlite::DB_FILE_NAME)).expect("db");
    let case = (fuzzed_request(body_routes()), prop::sample::select(vec!["m", "m", "m", "bad mesh"]));
    // proptest's default number of cases (256), `PROPTEST_CASES` for longer runs.
    let mut runner = TestRunner::new(Config { failure_persistence: None, ..Config::default() });
    let cases = runner.config().cases;
    let statuses = std::cell::RefCell::new(std::collections::BTreeMap::<u16, usize>::new());
    let document = agentmesh_daemon::openapi_document();
    // Statuses a route answered that its OpenAPI operation does not list.
    let undocumented = std::cell::RefCell::new(std::collections::BTreeMap::new());
    runner
        .run(&case, |((route, body), mesh)| {
            let before = database_snapshot(&db);
            let path = format!("/v1/meshes/{}{route}", mesh.replace(' ', "%20"));
            let (status, answer) = runtime.block_on(daemon.post_raw(&path, body.clone()));
            *statuses.borrow_mut().entry(status.as_u16()).or_default() += 1;
            prop_assert!(!status.is_server_error(), "{path} answered {status}: {answer}");
            let operation = documented_post(&document, &format!("/v1/meshes/m{route}"));
            if operation["responses"].get(status.as_str()).is_none() {
                undocumented.borrow_mut().insert((route, status.as_u16()), answer["error"]["code"].clone());
            }
            if status.is_client_error() {
                prop_assert!(
                    answer["error"]["code"].is_string(),
                    "{path} answered {status} without a code: {answer}"
                );
                let message = answer["error"]["message"].as_str().unwrap_or_default();
                prop_assert!(!message.is_empty(), "{path} answered {status} without a message: {answer}");
                let malformed = [400, 413, 415, 422].contains(&status.as_u16());
                prop_assert!(
                    !malformed || database_snapshot(&db) == before,
                    "{path} refused {} with {status} and changed the database",
                    String::from_utf8_lossy(&body)
                );
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let undocumented = undocumented.into_inner();
    assert!(undocumented.is_empty(), "answers the OpenAPI document does not list: {undocumented:?}");
    // The generated bodies reach past the parsers: some are refused, some taken.
    let statuses = statuses.into_inner();
    let refused: usize = statuses.iter().filter(|(s, _)| (400..500).contains(*s)).map(|(_, n)| n).sum();
    let taken: usize = statuses.iter().filter(|(s, _)| (200..300).contains(*s)).map(|(_, n)| n).sum();
    let enough = cases as usize / 20;
    assert!(refused > enough && taken > enough, "statuses: {statuses:?}");
    runtime.block_on(async {
        daemon.shutdown.cancel();
        daemon.server.await.expect("the task ran").expect("serve returned Ok");
    });
}

#[tokio::test]
async fn a_readonly_task_asking_for_a_forbidden_operation_is_refused_with_the_originals_reason() {
    let daemon = TestDaemon::start().await;
    let reason = "live_debug_readonly_guardrail_violation: forbidden operations";
    let body =
        json!({ "message": "read the logs, then git commit -am wip", "taskMode": "live_debug_readonly" });
    let response = daemon.post("/v1/meshes/m/tasks", body).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", &format!("{reason} (git_mutation)"));
    let batch = json!({ "tasks": [
        { "message": "summarize the logs", "readonly": true },
        { "message": "rm -rf build && npm publish", "readonly": true }
    ] });
    let response = daemon.post("/v1/meshes/m/tasks/batch", batch).await;
    let expected = format!("{reason} (deploy_or_version_bump, destructive_shell)");
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", &expected);
    assert_eq!(daemon.get("/v1/meshes/m/tasks").await, (StatusCode::OK, json!([])));
    assert_eq!(daemon.get("/v1/meshes/m/ledger").await, (StatusCode::OK, json!([])));
    let body = json!({ "message": "rm -rf build && npm publish", "taskMode": "code_change" });
    assert_eq!(daemon.post("/v1/meshes/m/tasks", body).await.0, StatusCode::CREATED);
}

#[tokio::test]
async fn a_task_id_held_by_another_mesh_is_409_naming_that_mesh() {
    let daemon = TestDaemon::start().await;
    let (status, _) = daemon.post("/v1/meshes/A/tasks", json!({ "message": "first", "id": "t1" })).await;
    assert_eq!(status, StatusCode::CREATED);
    let response = daemon.post("/v1/meshes/B/tasks", json!({ "message": "second", "id": "t1" })).await;
    let expected = "task t1 already exists (task ids are unique per database; it is in mesh A)";
    assert_error(&response, StatusCode::CONFLICT, "duplicate_task_id", expected);
    assert_eq!(daemon.get("/v1/meshes/B/tasks/t1").await.0, StatusCode::NOT_FOUND);
}

/// The records around the queue over HTTP: held events listed and requeued,
/// fingerprints and conflicts, a delivery and a dispatch moved and read, an idle
/// report removed, the tool-call log per caller role. Bad input names its field.
#[tokio::test]
async fn the_records_around_the_queue_are_read_and_moved_over_http() {
    let far = Timestamp::parse_iso("2999-01-01T00:00:00.000Z").expect("an instant");
    let daemon = TestDaemon::start_on(
        |store| {
            let fingerprint = agentmesh_core::CompletionFingerprint {
                fingerprint: "m::agent:stopped::t1::genuine".into(),
                expires_at_ms: far.millis(),
            };
            store.import_page("m", &Records::CompletionFingerprints(vec![fingerprint])).unwrap();
            let conflict = agentmesh_core::CompletionConflict {
                id: "c1".into(),
                mesh_id: "m".into(),
                fingerprint: "m::agent:stopped::t1::genuine".into(),
                conflicting_task_id: Some("t2".into()),
                conflicting_session_id: Some("s2".into()),
                original_task_id: Some("t1".into()),
                original_session_id: Some("s1".into()),
                event: "agent:stopped".into(),
                created_at: far.iso(),
            };
            store.import_page("m", &Records::CompletionConflicts(vec![conflict])).unwrap();
        },
        |state| state.with_upkeep(upkeep_with(|_| {})),
    )
    .await;

    // An unversioned event held back by an enforce-mode drain, then put back.
    let pushed =
        json!({ "event": { "event": "agent:stopped", "nodeId": "n1", "metadataEvent": { "taskId": "t1" } } });
    assert_eq!(daemon.post("/v1/meshes/m/events", pushed).await.0, StatusCode::CREATED);
    let drainer = json!({ "daemonId": "mach_A", "runId": "run-1", "enforce": true });
    let (_, drained) = daemon.post("/v1/meshes/m/events/drain", drainer).await;
    assert_eq!(drained["quarantined"].as_array().map(Vec::len), Some(1), "{drained}");
    let (status, held) =
        daemon.get("/v1/meshes/m/events/held?taskId=t1&reason=v2_enforce_unversioned_quarantined").await;
    assert_eq!((status, held.as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{held}");
    assert_eq!(daemon.get("/v1/meshes/m/events/held?olderThanSecs=3600").await.1, json!([]));
    let response = daemon.get("/v1/meshes/m/events/held?reason=bored").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "reason");
    let response = daemon.post("/v1/meshes/m/events/held/requeue", json!({})).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "all");
    let response = daemon.post("/v1/meshes/m/events/held/requeue", json!({ "ids": ["nope"] })).await;
    assert_error(&response, StatusCode::NOT_FOUND, "not_found", "nope");
    let id = held[0]["heldEntryId"].clone();
    let (status, requeued) = daemon.post("/v1/meshes/m/events/held/requeue", json!({ "ids": [id] })).await;
    assert_eq!((status, &requeued["requeued"]), (StatusCode::OK, &json!(1)), "{requeued}");
    assert_eq!(daemon.get("/v1/meshes/m/events/held").await.1, json!([]));

    let (_, fingerprints) = daemon.get("/v1/meshes/m/completions/fingerprints?taskId=t1").await;
    assert_eq!(fingerprints[0]["fingerprint"], "m::agent:stopped::t1::genuine", "{fingerprints}");
    assert_eq!(daemon.get("/v1/meshes/m/completions/fingerprints?taskId=t9").await.1, json!([]));
    let (_, conflicts) = daemon.get("/v1/meshes/m/completions/conflicts?sessionId=s2").await;
    assert_eq!(conflicts[0]["id"], "c1", "{conflicts}");
    let response = daemon.get("/v1/meshes/m/completions/conflicts?window=1").await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "window");

    daemon.post("/v1/meshes/m/deliveries", json!({ "id": "d1", "sessionId": "s1", "message": "hi" })).await;
    let (status, moved) =
        daemon.post("/v1/meshes/m/deliveries/d1/status", json!({ "status": "acked" })).await;
    assert_eq!(
        (status, &moved["changed"], &moved["delivery"]["status"]),
        (StatusCode::OK, &json!(true), &json!("acked"))
    );
    let (_, back) = daemon.post("/v1/meshes/m/deliveries/d1/status", json!({ "status": "queued" })).await;
    assert_eq!(back["changed"], false, "{back}");
    assert_eq!(daemon.get("/v1/meshes/m/deliveries/d1").await.1["status"], "acked");
    let response = daemon.post("/v1/meshes/m/deliveries/d1/status", json!({ "status": "read" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "status");
    assert_error(
        &daemon.get("/v1/meshes/m/deliveries/nope").await,
        StatusCode::NOT_FOUND,
        "not_found",
        "nope",
    );

    daemon
        .post("/v1/meshes/m/dispatches", json!({ "taskId": "t1", "sessionId": "s1", "message": "x" }))
        .await;
    let (_, changed) =
        daemon.post("/v1/meshes/m/dispatches/status", json!({ "status": "acked", "sessionId": "s1" })).await;
    assert_eq!(changed, json!({ "changed": 1 }));
    assert_eq!(daemon.get("/v1/meshes/m/dispatches/t1").await.1["status"], "acked");
    let response = daemon.post("/v1/meshes/m/dispatches/status", json!({ "status": "acked" })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "taskId");
    let (_, stale) = daemon.post("/v1/meshes/m/dispatches/mark-stale", json!({ "olderThanSecs": 0 })).await;
    assert_eq!(stale, json!({ "markedStale": 0 }), "an acked dispatch is not made stale");
    let (_, removed) = daemon.post("/v1/meshes/m/dispatches/remove", json!({ "taskIds": ["t1"] })).await;
    assert_eq!(removed, json!({ "removed": 1 }));
    let response = daemon.post("/v1/meshes/m/dispatches/remove", json!({ "taskIds": [] })).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "taskIds");

    let idle = json!({ "nodeId": "n1", "sessionId": "s1", "providerType": "claude", "ttlSecs": 60 });
    daemon.post("/v1/meshes/m/idle-sessions", idle).await;
    let (status, removed) = daemon.send(Method::DELETE, "/v1/meshes/m/idle-sessions/n1/s1", None).await;
    assert_eq!((status, removed), (StatusCode::OK, json!({ "removed": true })));
    assert_eq!(daemon.get("/v1/meshes/m/idle-sessions").await.1, json!([]));
    let (_, again) = daemon.send(Method::DELETE, "/v1/meshes/m/idle-sessions/n1/s1", None).await;
    assert_eq!(again, json!({ "removed": false }));

    let call = |tool: &str, role: &str| json!({ "tool": tool, "sessionId": "s1", "callerRole": role });
    daemon.post("/v1/meshes/m/tool-calls", call("list_tasks", "coordinator")).await;
    daemon.post("/v1/meshes/m/tool-calls", call("claim_task", "worker")).await;
    let response = daemon.post("/v1/meshes/m/tool-calls", call("list_tasks", "boss")).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "callerRole");
    let (_, log) = daemon.get("/v1/meshes/m/tool-calls?role=worker").await;
    assert_eq!(
        log["byRole"],
        json!([{ "callerRole": "worker", "calls": 1, "byTool": [{ "tool": "claim_task", "calls": 1 }] }])
    );
    let (_, log) = daemon.get("/v1/meshes/m/tool-calls").await;
    assert_eq!(log["calls"].as_array().map(Vec::len), Some(2), "{log}");
}

#[tokio::test]
async fn a_reservation_is_granted_denied_checked_and_a_waiting_one_is_woken_by_the_release() {
    // A fallback poll far longer than the test: only the release's wake-up can
    // end the wait in time.
    let daemon = TestDaemon::start_with(|state| {
        state.with_upkeep(upkeep_with(|_| {})).with_fallback_watch_poll(Duration::from_secs(600))
    })
    .await;
    let mine = json!({ "scope": "app", "sessionId": "w1", "nodeId": "n1", "patterns": ["src/**"] });
    let (status, granted) = daemon.post("/v1/meshes/m/reservations", mine).await;
    assert_eq!((status, &granted["granted"]), (StatusCode::OK, &json!(true)), "{granted}");
    let id = granted["reservation"]["id"].as_str().unwrap().to_owned();
    let theirs = json!({ "scope": "app", "sessionId": "w2", "nodeId": "n2", "patterns": ["src/lib.rs"] });
    let (_, denied) = daemon.post("/v1/meshes/m/reservations", theirs.clone()).await;
    assert_eq!((&denied["granted"], &denied["conflicts"][0]["reservationId"]), (&json!(false), &json!(id)));
    let check = json!({ "scope": "app", "paths": ["src/a.rs", "README.md"], "sessionId": "w2" });
    let (_, checked) = daemon.post("/v1/meshes/m/reservations/check", check).await;
    assert_eq!((&checked["clear"], &checked["blocked"][0]["path"]), (&json!(false), &json!("src/a.rs")));
    for (body, field) in [
        (json!({ "scope": "app", "sessionId": "w2", "nodeId": "n2", "patterns": ["/etc"] }), "patterns[0]"),
        (json!({ "scope": "", "sessionId": "w2", "nodeId": "n2", "patterns": ["a"] }), "scope"),
        (
            json!({ "scope": "a", "sessionId": "w2", "nodeId": "n2", "patterns": ["a"], "waitSecs": 601 }),
            "waitSecs",
        ),
    ] {
        let response = daemon.post("/v1/meshes/m/reservations", body).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", field);
    }
    for (body, field) in [
        (json!({ "scope": "app", "paths": [] }), "paths"),
        (json!({ "scope": "app", "paths": ["ok.rs", "../up"] }), "paths[1]"),
        (json!({ "scope": " ", "paths": ["a"] }), "scope"),
    ] {
        let response = daemon.post("/v1/meshes/m/reservations/check", body).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", field);
    }
    // A bad renewal or release is refused naming the field, and the reservation is as it was.
    let renew = json!({ "sessionId": "w1", "epoch": 1, "ttlMs": 0 });
    let response = daemon.post(&format!("/v1/meshes/m/reservations/{id}/renew"), renew).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "ttlMs");
    let release = json!({ "sessionId": "w1", "epoch": 1, "ttlMs": 5 });
    let response = daemon.post(&format!("/v1/meshes/m/reservations/{id}/release"), release).await;
    assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", "ttlMs");
    let (_, listed) = daemon.get("/v1/meshes/m/reservations?scope=app").await;
    assert_eq!(listed[0]["expiresAt"], granted["reservation"]["expiresAt"], "unchanged: {listed}");
    let stale = json!({ "sessionId": "w1", "epoch": 2 });
    let response = daemon.post(&format!("/v1/meshes/m/reservations/{id}/release"), stale).await;
    assert_error(&response, StatusCode::CONFLICT, "reservation_fenced", "epoch");

    // w2 waits; w1's release wakes it.
    let waiting = {
        let (client, url) = (daemon.client.clone(), daemon.url("/v1/meshes/m/reservations"));
        let body = json!({ "scope": "app", "sessionId": "w2", "nodeId": "n2", "patterns": ["src/lib.rs"], "waitSecs": 60 });
        tokio::spawn(async move {
            read(client.post(url).bearer_auth(TOKEN).json(&body).send().await.unwrap()).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let (status, released) = daemon
        .post(&format!("/v1/meshes/m/reservations/{id}/release"), json!({ "sessionId": "w1", "epoch": 1 }))
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    let (status, woken) =
        tokio::time::timeout(Duration::from_secs(20), waiting).await.expect("woken").unwrap();
    assert_eq!((status, &woken["granted"]), (StatusCode::OK, &json!(true)), "{woken}");
    assert!(started.elapsed() < Duration::from_secs(10), "woken by the release, not a poll");
    let (_, listed) = daemon.get("/v1/meshes/m/reservations?scope=app").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    // A claim steps over a task whose paths are reserved, naming the holder.
    let task = json!({ "id": "edits", "message": "edit lib", "paths": ["src/lib.rs"], "pathsScope": "app" });
    assert_eq!(daemon.post("/v1/meshes/m/tasks", task).await.0, StatusCode::CREATED);
    let (_, refused) = daemon.post("/v1/meshes/m/claims", json!({ "nodeId": "n3", "sessionId": "w3" })).await;
    assert_eq!(refused["refusal"], "paths_reserved", "{refused}");
    assert_eq!(refused["blockedBy"][0]["sessionId"], "w2", "{refused}");
    assert_eq!(refused["blockedBy"][0]["patterns"], json!(["src/lib.rs"]), "{refused}");

    // Denied twice: the request above, and the waiting one's first try.
    let metrics = daemon.metrics().await;
    assert!(metrics.contains("agentmesh_reservations_total{outcome=\"denied\"} 2"), "{metrics}");
    assert!(metrics.contains("agentmesh_reservations_total{outcome=\"granted\"} 2"), "{metrics}");
}

/// A receiver on loopback that answers 204 to every request, after `delay`,
/// and keeps each one's `webhook-id` and body as it arrives.
async fn webhook_receiver(
    delay: Duration,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>) {
    use axum::http::HeaderMap;
    let got: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>> = std::sync::Arc::default();
    let kept = std::sync::Arc::clone(&got);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let kept = std::sync::Arc::clone(&kept);
            async move {
                let id =
                    headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                kept.lock().unwrap().push((id, serde_json::from_slice(&body).unwrap_or(Value::Null)));
                tokio::time::sleep(delay).await;
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got)
}

#[tokio::test]
async fn webhooks_are_added_listed_without_their_secret_delivered_tested_and_removed() {
    let daemon = TestDaemon::start().await;
    for (body, field) in [
        (json!({ "url": "ftp://x.example/" }), "url"),
        (json!({ "url": "http://hooks.example.com/" }), "url"),
        (json!({ "url": "https://192.168.1.5/h" }), "url"),
        (json!({ "url": "https://169.254.169.254/latest" }), "url"),
        (json!({ "url": "http://127.0.0.1:1/h", "kinds": ["Task Completed"] }), "kinds[0]"),
        (json!({ "url": "http://127.0.0.1:1/h", "secret": "hunter2" }), "secret"),
        (json!({ "url": "http://127.0.0.1:1/h", "tags": [""] }), "tags[0]"),
        (json!({ "url": "http://127.0.0.1:1/h", "events": ["x"] }), "events"),
    ] {
        let response = daemon.post("/v1/meshes/m/webhooks", body.clone()).await;
        assert_error(&response, StatusCode::BAD_REQUEST, "invalid_input", field);
    }
    let (_, listed) = daemon.get("/v1/meshes/m/webhooks").await;
    assert_eq!(listed, json!({ "webhooks": [] }), "a refused subscription changes nothing");

    let (url, got) = webhook_receiver(Duration::ZERO).await;
    let (status, added) =
        daemon.post("/v1/meshes/m/webhooks", json!({ "url": url, "kinds": ["task_dispatched"] })).await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let id = added["webhook"]["id"].as_str().unwrap().to_owned();
    let secret = added["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{added}");
    let (_, listed) = daemon.get("/v1/meshes/m/webhooks").await;
    assert_eq!(listed["webhooks"][0]["id"], json!(id));
    let (_, one) = daemon.get(&format!("/v1/meshes/m/webhooks/{id}")).await;
    let (_, ledger) = daemon.get("/v1/meshes/m/ledger").await;
    for text in [listed.to_string(), one.to_string(), ledger.to_string()] {
        assert!(!text.contains(&secret[6..]), "the secret must not be shown again: {text}");
    }

    daemon.post("/v1/meshes/m/tasks", json!({ "id": "t1", "message": "hello" })).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the entry never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (id0, body) = got.lock().unwrap()[0].clone();
    assert_eq!(
        (body["type"].as_str(), body["data"]["taskId"].as_str()),
        (Some("task_dispatched"), Some("t1"))
    );
    assert_eq!(body["data"]["entryId"], json!(id0), "the webhook-id is the ledger entry's id");
    assert_eq!(body["data"]["links"]["task"], "/v1/meshes/m/tasks/t1");

    let (status, tested) = daemon.post(&format!("/v1/meshes/m/webhooks/{id}/test"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{tested}");
    assert_eq!(tested["attempt"]["status"], 204, "{tested}");
    assert_eq!(got.lock().unwrap().last().unwrap().1["type"], "webhook_test");
    daemon
        .wait_for_count("the delivery counted", "agentmesh_webhook_attempts_total{result=\"delivered\"}", 1)
        .await;
    assert!(daemon.metrics().await.contains("agentmesh_webhooks{mesh=\"m\",state=\"active\"} 1"));

    let skip = daemon.post(&format!("/v1/meshes/m/webhooks/{id}/skip"), json!({})).await;
    assert_error(&skip, StatusCode::BAD_REQUEST, "invalid_input", "nothing to skip");
    let response = daemon.send(Method::DELETE, &format!("/v1/meshes/m/webhooks/{id}"), None).await;
    assert_eq!(response.0, StatusCode::OK, "{}", response.1);
    let gone = daemon.get(&format!("/v1/meshes/m/webhooks/{id}")).await;
    assert_error(&gone, StatusCode::NOT_FOUND, "not_found", &id);
    let gone = daemon.post(&format!("/v1/meshes/m/webhooks/{id}/resume"), json!({})).await;
    assert_error(&gone, StatusCode::NOT_FOUND, "not_found", &id);
}

#[tokio::test]
async fn a_slow_receiver_delays_only_its_own_subscription() {
    let daemon = TestDaemon::start().await;
    let (slow, slow_got) = webhook_receiver(Duration::from_secs(3)).await;
    let (fast, fast_got) = webhook_receiver(Duration::ZERO).await;
    for url in [&slow, &fast] {
        let (status, added) =
            daemon.post("/v1/meshes/m/webhooks", json!({ "url": url, "kinds": ["task_dispatched"] })).await;
        assert_eq!(status, StatusCode::CREATED, "{added}");
    }
    for i in 0..5 {
        daemon.post("/v1/meshes/m/tasks", json!({ "id": format!("t{i}"), "message": "hello" })).await;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while fast_got.lock().unwrap().len() < 5 {
        assert!(Instant::now() < deadline, "the fast receiver waited behind the slow one");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(slow_got.lock().unwrap().len() <= 1, "the slow receiver is still on its first entry");
    let order: Vec<String> = fast_got
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, b)| b["data"]["taskId"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(order, ["t0", "t1", "t2", "t3", "t4"], "in ledger order");
}
