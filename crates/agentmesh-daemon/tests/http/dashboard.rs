//! The dashboard over real HTTP on loopback: the login page and the token
//! exchange, the session cookie on the API with its cross-site rule, the
//! security and cache headers of the page and its assets, the live stream, and
//! the task listing's pages and filters the board reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_daemon::{ApiToken, AppState, CONTENT_SECURITY_POLICY, SESSION_COOKIE};
use agentmesh_sqlite::SqliteStore;
use reqwest::header::{self, HeaderMap};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

struct Daemon {
    addr: SocketAddr,
    client: Client,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Daemon {
    async fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_data_dir(dir.path()).unwrap();
        let state = AppState::new(Arc::new(store), ApiToken::new(TOKEN).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn(agentmesh_daemon::serve(listener, state, shutdown.clone()));
        let client = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Daemon { addr, client, shutdown, _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn api(&self, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
        let mut request = self.client.request(method.clone(), self.url(path)).bearer_auth(TOKEN);
        if method != Method::GET {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn enqueue(&self, body: Value) -> Value {
        let (status, task) = self.api(Method::POST, "/v1/meshes/default/tasks", body).await;
        assert_eq!(status, StatusCode::CREATED, "{task}");
        task
    }

    /// The session cookie, through the `?token=` exchange.
    async fn cookie(&self) -> String {
        let response = self.client.get(self.url(&format!("/?token={TOKEN}"))).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        let set = response.headers()[header::SET_COOKIE].to_str().unwrap();
        set.split(';').next().unwrap().to_owned()
    }
}

fn assert_security_headers(headers: &HeaderMap) {
    assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
    let csp = CONTENT_SECURITY_POLICY;
    assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
}

fn assert_login_page(body: &str) {
    assert!(body.contains("<form") && body.contains("action=\"/login\""), "not the login page: {body}");
}

#[tokio::test]
async fn without_credentials_every_route_answers_the_login_page_or_401_never_data() {
    let daemon = Daemon::start().await;
    let task = daemon.enqueue(json!({"message": "secret plans for the parser"})).await;
    let id = task["id"].as_str().unwrap();
    let (status, _) = daemon
        .api(Method::POST, "/v1/meshes/default/missions", json!({"id": "m1", "title": "secret mission"}))
        .await;
    assert!(status.is_success());

    let response = daemon.client.get(daemon.url("/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_security_headers(response.headers());
    assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    let body = response.text().await.unwrap();
    assert_login_page(&body);
    assert!(!body.contains("secret"), "{body}");

    let data_routes = [
        "/v1/meshes".to_owned(),
        "/v1/meshes/default/tasks".to_owned(),
        format!("/v1/meshes/default/tasks/{id}"),
        "/v1/meshes/default/status".to_owned(),
        "/v1/meshes/default/ledger".to_owned(),
        format!("/v1/meshes/default/ledger?task={id}"),
        "/v1/meshes/default/ledger/slice".to_owned(),
        "/v1/meshes/default/missions".to_owned(),
        "/v1/meshes/default/missions/m1".to_owned(),
        "/v1/meshes/default/events/held".to_owned(),
        "/v1/meshes/default/idle-sessions".to_owned(),
        "/v1/meshes/default/deliveries".to_owned(),
        "/v1/meshes/default/dispatches".to_owned(),
        "/v1/meshes/default/completions/fingerprints".to_owned(),
        "/v1/meshes/default/completions/conflicts".to_owned(),
        "/v1/meshes/default/tool-calls".to_owned(),
        "/v1/meshes/default/stream".to_owned(),
        "/metrics".to_owned(),
    ];
    for route in &data_routes {
        // An API client: 401 and nothing else.
        let response = daemon.client.get(daemon.url(route)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{route}");
        let body = response.text().await.unwrap();
        assert!(!body.contains("secret") && !body.contains(id), "{route} leaked: {body}");
        // A browser: the login page.
        let response =
            daemon.client.get(daemon.url(route)).header(header::ACCEPT, "text/html").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{route}");
        let body = response.text().await.unwrap();
        assert_login_page(&body);
        assert!(!body.contains("secret") && !body.contains(id), "{route} leaked: {body}");
        // A wrong cookie is no cookie.
        let response = daemon
            .client
            .get(daemon.url(route))
            .header(header::COOKIE, format!("{SESSION_COOKIE}={}", "0".repeat(64)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{route}");
    }
}

#[tokio::test]
async fn a_token_in_the_address_is_exchanged_once_for_an_httponly_strict_cookie() {
    let daemon = Daemon::start().await;
    let response = daemon.client.get(daemon.url(&format!("/?token={TOKEN}"))).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    // The redirect strips the token from the address.
    assert_eq!(response.headers()[header::LOCATION], "/");
    let cookie = response.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.starts_with(&format!("{SESSION_COOKIE}={TOKEN};")), "{cookie}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.split("; ").any(|a| a == attribute), "{attribute} missing: {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP cannot keep a Secure cookie: {cookie}");

    let pair = cookie.split(';').next().unwrap();
    let response = daemon.client.get(daemon.url("/")).header(header::COOKIE, pair).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_security_headers(response.headers());
    assert_eq!(response.headers()[header::CACHE_CONTROL], "no-cache");
    assert!(response.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    let page = response.text().await.unwrap();
    assert!(page.contains("src=\"/assets/app.js\""), "{page}");
    // No inline script: every script element names its source.
    for script in page.split("<script").skip(1) {
        let tag = &script[..script.find('>').unwrap()];
        assert!(tag.contains("src="), "inline script: <script{tag}>");
    }

    // A wrong token gets the login page with a notice, and no cookie.
    let response = daemon.client.get(daemon.url("/?token=nope")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().get(header::SET_COOKIE).is_none());
    let body = response.text().await.unwrap();
    assert_login_page(&body);
    assert!(body.contains("refused"), "{body}");
}

#[tokio::test]
async fn the_login_form_sets_the_cookie_and_refuses_a_wrong_token_or_a_foreign_origin() {
    let daemon = Daemon::start().await;
    let response = daemon.client.post(daemon.url("/login")).form(&[("token", TOKEN)]).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");

    let response = daemon.client.post(daemon.url("/login")).form(&[("token", "wrong")]).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().get(header::SET_COOKIE).is_none());
    assert_login_page(&response.text().await.unwrap());

    let response = daemon
        .client
        .post(daemon.url("/login"))
        .header(header::ORIGIN, "https://evil.example")
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(response.headers().get(header::SET_COOKIE).is_none());

    // Signing out forgets the cookie.
    let pair = format!("{SESSION_COOKIE}={TOKEN}");
    let response = daemon
        .client
        .post(daemon.url("/logout"))
        .header(header::COOKIE, &pair)
        .header("x-agentmesh-request", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert!(response.headers()[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
}

#[tokio::test]
async fn assets_are_embedded_with_an_etag_and_revalidated() {
    let daemon = Daemon::start().await;
    for (name, kind) in
        [("app.js", "text/javascript"), ("views.js", "text/javascript"), ("app.css", "text/css")]
    {
        let response = daemon.client.get(daemon.url(&format!("/assets/{name}"))).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{name}");
        assert_security_headers(response.headers());
        assert!(response.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind), "{name}");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-cache");
        let etag = response.headers()[header::ETAG].to_str().unwrap().to_owned();
        assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
        assert!(!response.bytes().await.unwrap().is_empty());

        let again = daemon
            .client
            .get(daemon.url(&format!("/assets/{name}")))
            .header(header::IF_NONE_MATCH, &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{name}");
        assert_eq!(again.headers()[header::ETAG].to_str().unwrap(), etag);
        assert!(again.bytes().await.unwrap().is_empty());
    }
    let response = daemon.client.get(daemon.url("/assets/../Cargo.toml")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = daemon.client.get(daemon.url("/assets/nothing.js")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // The page loads nothing from anywhere else.
    for name in ["app.js", "api.js", "views.js", "graph.js", "dom.js", "words.js", "app.css"] {
        let text = daemon
            .client
            .get(daemon.url(&format!("/assets/{name}")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        // (The SVG namespace is a name, not an address anything loads.)
        let text = text.replace("http://www.w3.org/2000/svg", "");
        assert!(!text.contains("https://") && !text.contains("http://"), "{name} reaches out");
    }
}

#[tokio::test]
async fn the_cookie_reads_the_api_and_writes_only_with_the_request_header_from_the_same_origin() {
    let daemon = Daemon::start().await;
    let task = daemon.enqueue(json!({"message": "cancel me"})).await;
    let id = task["id"].as_str().unwrap();
    let cookie = daemon.cookie().await;

    let response = daemon
        .client
        .get(daemon.url("/v1/meshes/default/tasks"))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let tasks: Value = response.json().await.unwrap();
    assert_eq!(tasks[0]["id"], id);

    let cancel = daemon.url(&format!("/v1/meshes/default/tasks/{id}/cancel"));
    // No header: a cross-site form could send this; refused, nothing changed.
    let response =
        daemon.client.post(&cancel).header(header::COOKIE, &cookie).json(&json!({})).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
    // The header from another origin: refused too.
    let response = daemon
        .client
        .post(&cancel)
        .header(header::COOKIE, &cookie)
        .header("x-agentmesh-request", "1")
        .header(header::ORIGIN, "http://evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let (_, task) = daemon.api(Method::GET, &format!("/v1/meshes/default/tasks/{id}"), Value::Null).await;
    assert_eq!(task["status"], "pending");

    // The page's own request.
    let response = daemon
        .client
        .post(&cancel)
        .header(header::COOKIE, &cookie)
        .header("x-agentmesh-request", "1")
        .header(header::ORIGIN, format!("http://{}", daemon.addr))
        .json(&json!({"reason": "from the dashboard"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (_, task) = daemon.api(Method::GET, &format!("/v1/meshes/default/tasks/{id}"), Value::Null).await;
    assert_eq!(task["status"], "cancelled");
}

#[tokio::test]
async fn the_priority_of_a_task_changes_with_a_ledger_entry_and_bad_bodies_name_the_field() {
    let daemon = Daemon::start().await;
    let task = daemon.enqueue(json!({"message": "make it faster", "id": "fast"})).await;
    assert_eq!(task.get("priority"), None);
    let path = "/v1/meshes/default/tasks/fast/priority";
    for (body, field) in [
        (json!({"priority": "urgent"}), "priority"),
        (json!({"priority": "high", "colour": "red"}), "colour"),
        (json!({"reason": "no priority"}), "priority"),
    ] {
        let (status, answer) = daemon.api(Method::POST, path, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(field), "{body}: {answer}");
    }
    let (_, unchanged) = daemon.api(Method::GET, "/v1/meshes/default/tasks/fast", Value::Null).await;
    assert_eq!(unchanged, task);

    let (status, raised) =
        daemon.api(Method::POST, path, json!({"priority": "high", "reason": "the demo is tomorrow"})).await;
    assert_eq!(status, StatusCode::OK, "{raised}");
    assert_eq!(raised["priority"], "high");
    let (_, history) = daemon.api(Method::GET, "/v1/meshes/default/ledger?task=fast", Value::Null).await;
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "task_priority_changed", "{history}");
    assert_eq!(last["payload"]["from"], "normal");
    assert_eq!(last["payload"]["to"], "high");
    assert_eq!(last["payload"]["reason"], "the demo is tomorrow");

    let (status, _) =
        daemon.api(Method::POST, "/v1/meshes/default/tasks/nope/priority", json!({"priority": "low"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, answer) = daemon.api(Method::GET, "/v1/meshes/default/ledger?task=nope", Value::Null).await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("task_not_found")),
        "{answer}"
    );
}

/// Reads the stream until an event named `name` arrives; returns its data.
async fn next_event(response: &mut reqwest::Response, buffer: &mut String, name: &str) -> Value {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut event = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v.to_owned());
                }
            }
            if event.as_deref() == Some(name) {
                return serde_json::from_str(&data.unwrap()).unwrap();
            }
        }
        let chunk = response.chunk().await.unwrap().expect("the stream ended");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn the_stream_tells_of_a_change_within_a_second_with_its_ledger_entries() {
    let daemon = Daemon::start().await;
    let first = daemon.enqueue(json!({"message": "before the stream"})).await;
    let mut response =
        daemon.client.get(daemon.url("/v1/meshes/default/stream")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut buffer = String::new();
    let ready = next_event(&mut response, &mut buffer, "ready").await;
    let start = ready["cursor"].as_u64().unwrap_or_else(|| panic!("a sequence cursor: {ready}"));
    assert!(start > 0, "{ready}");

    let started = Instant::now();
    let task = daemon.enqueue(json!({"message": "after the stream"})).await;
    let changed =
        tokio::time::timeout(Duration::from_secs(5), next_event(&mut response, &mut buffer, "changed"))
            .await
            .expect("a changed event");
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    let entries = changed["entries"].as_array().unwrap();
    // Only what came after the cursor.
    assert!(entries.iter().all(|e| e["payload"]["taskId"] != first["id"]), "{changed}");
    assert!(
        entries.iter().any(|e| e["kind"] == "task_dispatched" && e["payload"]["taskId"] == task["id"]),
        "{changed}"
    );
    let cursor = changed["cursor"].as_u64().unwrap_or_else(|| panic!("a sequence cursor: {changed}"));
    assert!(cursor > start, "{changed}");

    // An entry committed now but stamped years ago (imported from another
    // daemon) still comes down the stream: it pages in commit order.
    let old = json!({"entries": [{
        "id": "imported-late", "meshId": "default", "timestamp": "2020-01-01T00:00:00.000Z",
        "kind": "task_dispatched", "payload": {"taskId": "elsewhere-1"}
    }]});
    let (status, body) = daemon.api(Method::POST, "/v1/meshes/default/ledger/import", old).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let late =
        tokio::time::timeout(Duration::from_secs(5), next_event(&mut response, &mut buffer, "changed"))
            .await
            .expect("the late entry streamed");
    assert_eq!(late["entries"][0]["id"], "imported-late", "{late}");
    assert!(late["cursor"].as_u64().unwrap() > cursor, "{late}");

    // Another mesh's write moves nothing here.
    let (status, _) =
        daemon.api(Method::POST, "/v1/meshes/other/tasks", json!({"message": "elsewhere"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let quiet =
        tokio::time::timeout(Duration::from_millis(1500), next_event(&mut response, &mut buffer, "changed"))
            .await;
    assert!(quiet.is_err(), "{quiet:?}");

    // A bad query names the field.
    for (query, field) in [("since=x", "since"), ("afterSeq=x", "afterSeq"), ("after=abc", "after")] {
        let (status, body) =
            daemon.api(Method::GET, &format!("/v1/meshes/default/stream?{query}"), Value::Null).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(field), "{query}: {body}");
    }
}

#[tokio::test]
async fn task_listing_pages_and_filters() {
    let daemon = Daemon::start().await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let tags = if i % 2 == 0 { json!(["gpu"]) } else { json!([]) };
        let task = daemon.enqueue(json!({"message": format!("job number {i}"), "requiredTags": tags, "missionId": if i < 3 { "m1" } else { "m2" }})).await;
        ids.push(task["id"].as_str().unwrap().to_owned());
    }
    let dependent =
        daemon.enqueue(json!({"message": "after the first", "dependsOn": [ids[0].clone()]})).await;
    let list = |query: &str| {
        let query = query.to_owned();
        let daemon = &daemon;
        async move {
            let (status, body) =
                daemon.api(Method::GET, &format!("/v1/meshes/default/tasks?{query}"), Value::Null).await;
            assert_eq!(status, StatusCode::OK, "{query}: {body}");
            body.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }
    };
    assert_eq!(list("limit=3").await, ids[..3]);
    assert_eq!(list("limit=3&offset=3").await, ids[3..6]);
    assert_eq!(
        list("offset=6&status=pending").await,
        vec![ids[6].clone(), dependent["id"].as_str().unwrap().to_owned()]
    );
    assert_eq!(list("tag=gpu").await, vec![ids[0].clone(), ids[2].clone(), ids[4].clone(), ids[6].clone()]);
    assert_eq!(list("mission=m1&tag=gpu").await, vec![ids[0].clone(), ids[2].clone()]);
    assert_eq!(list("q=NUMBER%205").await, vec![ids[5].clone()]);
    assert_eq!(
        list(&format!("dependsOn={}", ids[0])).await,
        vec![dependent["id"].as_str().unwrap().to_owned()]
    );

    for bad in ["limit=0", "limit=100000"] {
        let (status, body) =
            daemon.api(Method::GET, &format!("/v1/meshes/default/tasks?{bad}"), Value::Null).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("limit"), "{body}");
    }
    let (status, body) = daemon.api(Method::GET, "/v1/meshes/default/tasks?offset=-1", Value::Null).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("offset"), "{body}");

    // The ledger of one task.
    let (_, cancelled) =
        daemon.api(Method::POST, &format!("/v1/meshes/default/tasks/{}/cancel", ids[1]), json!({})).await;
    assert_eq!(cancelled["status"], "cancelled");
    let (status, history) =
        daemon.api(Method::GET, &format!("/v1/meshes/default/ledger?task={}", ids[1]), Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{history}");
    let kinds: Vec<&str> = history.as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["task_dispatched", "task_cancelled"], "{history}");
    assert!(history.as_array().unwrap().iter().all(|e| e["payload"]["taskId"] == ids[1].as_str()));
}
