//! The OpenAPI document against the daemon that serves it: fetched from
//! `/openapi.json` without a token; every operation it names probed on the live
//! router (served, behind the token or not as it says) and every path or method
//! it does not name refused; the document validated as OpenAPI 3.1 by Python's
//! `openapi-spec-validator`, and the answers of a worker's loop (enqueue, claim,
//! complete, show, a missing task, a refused claim) and of every JSON read of the
//! mesh validated against its schemas by `openapi-schema-validator`, which must
//! also refuse a few answers the document does not allow. The Python checks run in a virtualenv made from
//! `tests/python/requirements.txt`; without Python 3.11+ and its venv module
//! they print one `skipped: ...` line (see `agentmesh_test_support::tools`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use agentmesh_daemon::{ApiToken, AppState};
use agentmesh_sqlite::SqliteStore;
use agentmesh_test_support::{Tool, require};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The token the test daemon accepts.
const TOKEN: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// The paths the router serves that the document leaves out, as its
/// description says: the dashboard's pages and the MCP endpoints.
const LEFT_OUT: &[&str] = &["/", "/login", "/logout", "/assets/{name}", "/mcp", "/mcp/{mesh}"];

/// What an unknown path answers.
fn no_such_route() -> Value {
    json!({ "error": { "code": "not_found", "message": "no such route" } })
}

/// A daemon on loopback over a fresh store.
struct Daemon {
    addr: SocketAddr,
    client: Client,
    shutdown: CancellationToken,
    server: JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Daemon {
    async fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open_data_dir(dir.path()).expect("open the store");
        let state = AppState::new(Arc::new(store), ApiToken::new(TOKEN).expect("token"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(agentmesh_daemon::serve(listener, state, shutdown.clone()));
        Daemon { addr, client: Client::new(), shutdown, server, _dir: dir }
    }

    /// Sends `method path`, with the token when `token`, and `body` as JSON;
    /// answers the status and the body (JSON, or `null`), reading the body only
    /// when it is JSON (a stream's never ends).
    async fn send(
        &self,
        method: Method,
        path: &str,
        token: bool,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.client.request(method, format!("http://{}{path}", self.addr));
        if token {
            request = request.bearer_auth(TOKEN);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status();
        let json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .is_some_and(|t| t.to_str().unwrap_or_default().starts_with("application/json"));
        if !json {
            return (status, Value::Null);
        }
        let bytes = response.bytes().await.expect("response body");
        (status, serde_json::from_slice(&bytes).expect("a JSON body"))
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.server.await.expect("server task").expect("server");
    }
}

/// The document the daemon serves, fetched without a token.
async fn served_document(daemon: &Daemon) -> Value {
    let (status, document) = daemon.send(Method::GET, "/openapi.json", false, None).await;
    assert_eq!(status, StatusCode::OK, "{document}");
    document
}

/// Every operation of the document: method and path template.
fn operations(document: &Value) -> Vec<(Method, String)> {
    let mut all = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            all.push((Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap(), path.clone()));
        }
    }
    all
}

/// `template` with its `{mesh}` segment as `m` and every other parameter as `x`.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|segment| match segment {
            "{mesh}" => "m",
            s if s.starts_with('{') => "x",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether `path` is an instance of `template`.
fn matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| t == p || (t.starts_with('{') && !p.is_empty()))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_document_is_served_without_a_token_and_its_example_is_taken() {
    let daemon = Daemon::start().await;
    let document = served_document(&daemon).await;
    assert_eq!(document, agentmesh_daemon::openapi_document());
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
    assert_eq!(document["security"], json!([{ "bearerAuth": [] }]));
    let description = document["info"]["description"].as_str().unwrap();
    for left_out in LEFT_OUT {
        assert!(description.contains(left_out), "the description names {left_out} as left out");
        assert!(document["paths"].get(*left_out).is_none(), "{left_out} is left out");
    }
    // The examples are bodies the routes take.
    let enqueue = &document["paths"]["/v1/meshes/{mesh}/tasks"]["post"];
    let example = &enqueue["requestBody"]["content"]["application/json"]["example"];
    let (status, task) = daemon.send(Method::POST, "/v1/meshes/m/tasks", true, Some(example)).await;
    assert_eq!(status, StatusCode::CREATED, "{task}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_the_router_serves_is_documented_and_nothing_else() {
    let daemon = Daemon::start().await;
    let document = served_document(&daemon).await;
    let operations = operations(&document);
    assert!(operations.len() > 50, "{} operations", operations.len());
    for (method, template) in &operations {
        let operation = &document["paths"][template][method.as_str().to_ascii_lowercase()];
        let path = concrete(template);
        // A body that is not any route's (every body is an object) is refused
        // before any store is touched, so probing changes nothing.
        let body = operation.get("requestBody").map(|_| json!([]));
        let (status, answer) = daemon.send(method.clone(), &path, true, body.as_ref()).await;
        assert_ne!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {template} is documented but not served"
        );
        assert_ne!(answer, no_such_route(), "{method} {template} is documented but not served");
        assert!(
            status.is_success() || operation["responses"].get(status.as_str()).is_some(),
            "{method} {path} answered {status}, which the document does not list: {answer}"
        );
        // The token: required unless the document says the route is open.
        let open = operation.get("security") == Some(&json!([]));
        let (status, answer) = daemon.send(method.clone(), &path, false, body.as_ref()).await;
        if open {
            assert_ne!(status, StatusCode::UNAUTHORIZED, "{method} {template} is documented open");
        } else {
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {template} needs the token: {answer}");
        }
    }
    // A documented path with a method the document does not give it is refused.
    let methods = [Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
    for template in document["paths"].as_object().unwrap().keys() {
        for method in &methods {
            if operations.iter().any(|(m, t)| m == method && t == template) {
                continue;
            }
            let (status, answer) = daemon.send(method.clone(), &concrete(template), true, None).await;
            assert_eq!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {template} is not documented: {answer}"
            );
        }
    }
    // Paths next to the documented ones, and none of them, are not served.
    let mut near: Vec<String> =
        vec!["/v1".into(), "/v1/meshes/m".into(), "/v2/meshes".into(), "/openapi.yaml".into()];
    for template in document["paths"].as_object().unwrap().keys() {
        near.push(format!("{}/undocumented", concrete(template)));
        if let Some((parent, _)) = template.rsplit_once('/') {
            near.push(concrete(parent));
        }
    }
    for path in near {
        let documented = operations.iter().any(|(_, t)| matches(t, &path));
        let left_out = LEFT_OUT.iter().any(|t| matches(t, &path));
        if documented || left_out || path.is_empty() {
            continue;
        }
        for method in [Method::GET, Method::POST] {
            let (status, answer) = daemon.send(method.clone(), &path, true, None).await;
            assert_eq!(
                (status, &answer),
                (StatusCode::NOT_FOUND, &no_such_route()),
                "{method} {path} is served but not documented"
            );
        }
    }
    // What the document leaves out is served, as its description says.
    for path in ["/login", "/assets/app.js"] {
        let (status, _) = daemon.send(Method::GET, path, false, None).await;
        assert_ne!(status, StatusCode::NOT_FOUND, "{path}");
    }
    daemon.stop().await;
}

/// The interpreter of the virtualenv holding the validators.
fn venv_python(python3: &str) -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-openapi");
        agentmesh_test_support::python::venv(python3, &root, &python_dir().join("requirements.txt"))
    })
}

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("python")
}

/// Runs `openapi_check.py` on `document` and `exchanges`; answers, for each
/// exchange, why it does not match the document (`null` when it does).
/// Fails the test when the document is not valid OpenAPI 3.1.
fn check(python3: &str, document: &Value, exchanges: &[Value]) -> Vec<Value> {
    let python = venv_python(python3);
    let dir = tempfile::tempdir().unwrap();
    let (doc_path, exchanges_path) = (dir.path().join("openapi.json"), dir.path().join("exchanges.json"));
    std::fs::write(&doc_path, serde_json::to_vec(document).unwrap()).unwrap();
    std::fs::write(&exchanges_path, serde_json::to_vec(exchanges).unwrap()).unwrap();
    let out = Command::new(python)
        .args(["-I", "-B"])
        .arg(python_dir().join("openapi_check.py"))
        .arg(&doc_path)
        .arg(&exchanges_path)
        .output()
        .unwrap_or_else(|e| panic!("{} did not run: {e}", python.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "openapi_check.py failed ({}):\n{stderr}", out.status);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(report["valid"], true, "{report}");
    report["exchanges"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_document_is_valid_openapi_3_1_and_a_worker_loop_answers_what_it_says() {
    let python3 = require!(Tool::Python);
    let daemon = Daemon::start().await;
    let document = served_document(&daemon).await;
    let example = |template: &str| {
        document["paths"][template]["post"]["requestBody"]["content"]["application/json"]["example"].clone()
    };
    let mut exchanges = Vec::new();
    let mut call = async |method: Method, template: &str, path: &str, body: Option<Value>| {
        let (status, answer) = daemon.send(method.clone(), path, true, body.as_ref()).await;
        exchanges.push(
            json!({ "method": method.as_str(), "path": template, "status": status.as_u16(), "body": answer }),
        );
        answer
    };
    let task = call(
        Method::POST,
        "/v1/meshes/{mesh}/tasks",
        "/v1/meshes/m/tasks",
        Some(example("/v1/meshes/{mesh}/tasks")),
    )
    .await;
    let claimed = call(
        Method::POST,
        "/v1/meshes/{mesh}/claims",
        "/v1/meshes/m/claims",
        Some(example("/v1/meshes/{mesh}/claims")),
    )
    .await;
    assert_eq!(claimed["task"]["id"], task["id"], "{claimed}");
    let completion = json!({
        "sessionId": "worker-1",
        "taskId": claimed["task"]["id"],
        "epoch": claimed["task"]["epoch"],
        "summary": "fixed",
    });
    let done =
        call(Method::POST, "/v1/meshes/{mesh}/completions", "/v1/meshes/m/completions", Some(completion))
            .await;
    assert_eq!(done["status"], "completed", "{done}");
    let id = task["id"].as_str().unwrap();
    call(Method::GET, "/v1/meshes/{mesh}/tasks/{id}", &format!("/v1/meshes/m/tasks/{id}"), None).await;
    let none = call(
        Method::POST,
        "/v1/meshes/{mesh}/claims",
        "/v1/meshes/m/claims",
        Some(example("/v1/meshes/{mesh}/claims")),
    )
    .await;
    assert!(none["task"].is_null(), "{none}");
    let missing = call(Method::GET, "/v1/meshes/{mesh}/tasks/{id}", "/v1/meshes/m/tasks/missing", None).await;
    assert_eq!(missing["error"]["code"], "task_not_found", "{missing}");
    call(Method::POST, "/v1/meshes/{mesh}/claims", "/v1/meshes/m/claims", Some(json!({ "nodeId": "" })))
        .await;
    // Every JSON read that names nothing but the mesh, on a mesh with a history.
    for (method, template) in operations(&document) {
        let json = document["paths"][&template]["get"]["responses"]["200"]["content"].get("application/json");
        if method == Method::GET && json.is_some() && !template.replace("{mesh}", "").contains('{') {
            call(Method::GET, &template, &concrete(&template), None).await;
        }
    }
    let genuine = exchanges.len();
    assert!(genuine > 20, "{genuine} answers");
    // Answers the document does not allow must be caught: a task without its id,
    // a status it does not list, an error body of another shape.
    let mut no_id = task.clone();
    no_id.as_object_mut().unwrap().remove("id");
    exchanges
        .push(json!({ "method": "POST", "path": "/v1/meshes/{mesh}/tasks", "status": 201, "body": no_id }));
    exchanges
        .push(json!({ "method": "POST", "path": "/v1/meshes/{mesh}/claims", "status": 418, "body": none }));
    let (show, wrong_error) = ("/v1/meshes/{mesh}/tasks/{id}", json!({ "error": "task_not_found" }));
    exchanges.push(json!({ "method": "GET", "path": show, "status": 404, "body": wrong_error }));

    let verdicts = check(&python3, &document, &exchanges);
    assert_eq!(verdicts.len(), exchanges.len());
    for (exchange, verdict) in exchanges.iter().zip(&verdicts).take(genuine) {
        assert!(verdict.is_null(), "{exchange} does not match the document: {verdict}");
    }
    for (exchange, verdict) in exchanges.iter().zip(&verdicts).skip(genuine) {
        assert!(verdict.is_string(), "{exchange} was let through");
    }
    daemon.stop().await;
}
