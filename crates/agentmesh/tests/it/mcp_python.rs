//! The official Python MCP SDK's clients against agentmesh, as a Python host
//! connects: the stdio client spawning `agentmesh mcp` (on the embedded database
//! and on a PostgreSQL installation) and the streamable HTTP client against a
//! running `agentmesh serve`. `tests/python/mcp_client.py` is the client; it runs
//! in a virtualenv made once per target dir from `tests/python/requirements.txt`.
//! On a machine without Python 3.11+ and its venv module the tests print one
//! `skipped: ...` line and pass (see `agentmesh_test_support::tools`).

use crate::daemon_log::DaemonLog;
use crate::mcp_stdio::wait_exit;
use crate::mcp_support;

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use agentmesh_test_support::{Tool, require};
use serde_json::{Value, json};

/// How long the Python client gets: past the request timeout it gives the SDK
/// (60 s), so a server that never answers fails with the SDK's error.
const CLIENT_DEADLINE: Duration = Duration::from_secs(90);
/// How long a daemon gets to print the address it listens on.
const DAEMON_START: Duration = Duration::from_secs(30);
/// The message of the task the client enqueues (as `mcp_client.py` writes it).
const MESSAGE: &str = "written by the Python client";

/// The directory of the Python client and its requirements.
fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("python")
}

/// The interpreter of the virtualenv holding the pinned SDK, made on first use
/// by `python3` (what `require!(Tool::Python)` found).
fn venv_python(python3: &str) -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-mcp-client");
        agentmesh_test_support::python::venv(python3, &root, &python_dir().join("requirements.txt"))
    })
}

/// Runs `mcp_client.py ARGS` with `env` added, in the virtualenv `python3`
/// makes, and returns its report.
fn python_client_report(python3: &str, args: &[&OsStr], env: &[(&str, &str)]) -> Value {
    let python = venv_python(python3);
    let dir = tempfile::tempdir().unwrap();
    // Files, not pipes: a stdio server the client spawns inherits its stderr, and
    // a pipe it held open would keep a reader waiting after the client is gone.
    let (out_path, err_path) = (dir.path().join("report.json"), dir.path().join("stderr.txt"));
    let mut cmd = Command::new(python);
    // -I: no PYTHON* variables, no user site-packages; -B: no bytecode written
    // beside the script.
    cmd.args(["-I", "-B"]).arg(python_dir().join("mcp_client.py")).args(args);
    for var in ["AGENTMESH_HOME", "AGENTMESH_MESH", "AGENTMESH_SERVER", "AGENTMESH_TOKEN"] {
        cmd.env_remove(var);
    }
    let mut child = cmd
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{} did not run: {e}", python.display()));
    let status = wait_exit(&mut child, "the Python client", CLIENT_DEADLINE);
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert!(status.success(), "the Python client failed ({status}):\n{stderr}");
    let report = std::fs::read_to_string(&out_path).unwrap();
    serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}\n{stderr}"))
}

/// The stdio client's report, against `agentmesh --data-dir DATA [globals] mcp`.
fn stdio_report(python3: &str, data_dir: &Path, globals: &[&str]) -> Value {
    let mut args =
        vec![OsStr::new("stdio"), OsStr::new(env!("CARGO_BIN_EXE_agentmesh")), data_dir.as_os_str()];
    args.extend(globals.iter().map(OsStr::new));
    python_client_report(python3, &args, &[])
}

/// What every run of the client must report: the server, its tools, input schemas
/// that are JSON Schema objects both dialects accept, the task the call enqueued
/// and the same task read back. Returns the task's id.
#[track_caller]
fn assert_python_report(report: &Value) -> String {
    assert_eq!(report["server"]["name"], "agentmesh", "{report}");
    assert_eq!(report["tools"], json!(&mcp_support::TOOLS[..]), "{report}");
    assert_eq!(report["schemaErrors"], json!([]), "{report}");

    let enqueued = &report["enqueued"];
    assert_eq!(enqueued["isError"], false, "enqueue_task failed: {enqueued}");
    let task = &enqueued["structuredContent"]["task"];
    assert_eq!(task["message"], MESSAGE, "{enqueued}");
    assert_eq!(task["taskMode"], "code_change", "{enqueued}");
    assert_eq!(task["status"], "pending", "{enqueued}");
    assert_eq!(task["meshId"], "default", "{enqueued}");
    let id =
        task["id"].as_str().filter(|id| !id.is_empty()).unwrap_or_else(|| panic!("no task id: {enqueued}"));

    let shown = &report["shown"];
    assert_eq!(shown["isError"], false, "show_task failed: {shown}");
    assert_eq!(&shown["structuredContent"]["task"], task, "show_task reads back the task enqueue_task made");
    id.to_owned()
}

/// The task `id` as the embedded database holds it: (mesh, status, payload).
#[track_caller]
fn sqlite_task(data_dir: &Path, id: &str) -> (String, String, String) {
    let db = data_dir.join(agentmesh_sqlite::DB_FILE_NAME);
    let conn = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| panic!("opening {}: {e}", db.display()));
    let (mesh, status, stored) = conn
        .query_row(
            "SELECT mesh_id, status, CAST(payload AS BLOB) FROM mesh_queue WHERE id = ?1",
            [id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get::<_, Vec<u8>>(2)?)),
        )
        .unwrap_or_else(|e| panic!("task {id} in {}: {e}", db.display()));
    (mesh, status, agentmesh_store::packed::unpack(&stored).expect("a readable payload").into_owned())
}

#[test]
fn the_python_sdk_stdio_client_lists_the_tools_enqueues_a_task_and_reads_it_back() {
    let python3 = require!(Tool::Python);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let report = stdio_report(&python3, &data_dir, &[]);
    let id = assert_python_report(&report);
    let (mesh, status, payload) = sqlite_task(&data_dir, &id);
    assert_eq!((mesh.as_str(), status.as_str()), ("default", "pending"));
    assert!(payload.contains(MESSAGE), "{payload}");
}

/// The same host against an installation on PostgreSQL (`--database-url`,
/// `--database-schema`): the tools answer alike, and the task is a row of the
/// installation's schema on the server.
#[test]
fn the_python_sdk_stdio_client_works_on_a_postgresql_installation() {
    let url = agentmesh_test_support::require_postgres!();
    let python3 = require!(Tool::Python);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let schema = agentmesh_test_support::postgres::Schema::fresh(&url, "am_mcp_python");
    let report =
        stdio_report(&python3, &data_dir, &["--database-url", &url, "--database-schema", schema.name()]);
    let id = assert_python_report(&report);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
    let rows = client
        .query(
            &format!("SELECT mesh_id, status, payload FROM \"{}\".mesh_queue WHERE id = $1", schema.name()),
            &[&id],
        )
        .expect("the queue of the schema");
    assert_eq!(rows.len(), 1, "the task is one row of schema {}", schema.name());
    let (mesh, status, payload): (String, String, String) = (
        rows[0].get(0),
        rows[0].get(1),
        agentmesh_store::packed::unpack(rows[0].get(2)).expect("a readable payload").into_owned(),
    );
    assert_eq!((mesh.as_str(), status.as_str()), ("default", "pending"));
    assert!(payload.contains(MESSAGE), "{payload}");
    assert!(
        !data_dir.join(agentmesh_sqlite::DB_FILE_NAME).exists(),
        "nothing was written to an embedded file"
    );
}

/// `agentmesh serve` on a free loopback port, over a data dir of its own; killed
/// when dropped.
struct Daemon {
    _dir: tempfile::TempDir,
    data_dir: PathBuf,
    child: Child,
    /// The daemon's root URL, as it printed it.
    url: String,
    /// What the daemon wrote to stderr, for a failure message.
    log: DaemonLog,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentmesh"));
        for var in ["AGENTMESH_HOME", "AGENTMESH_MESH", "AGENTMESH_SERVER", "AGENTMESH_TOKEN"] {
            cmd.env_remove(var);
        }
        let (child, log) =
            DaemonLog::spawn(cmd.env("RUST_LOG", "warn").arg("--data-dir").arg(&data_dir).args([
                "serve",
                "--listen",
                "127.0.0.1:0",
            ]));
        let url = log.address(DAEMON_START);
        Daemon { _dir: dir, data_dir, child, url, log }
    }

    /// The bearer token the daemon wrote beside its database.
    fn token(&self) -> String {
        let path = self.data_dir.join("daemon.token");
        let token =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        token.trim().to_owned()
    }

    fn log_text(&self) -> String {
        self.log.text()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The streamable HTTP client against `agentmesh serve`'s `/mcp`, with the token
/// of the daemon's data dir as its bearer token.
#[test]
fn the_python_sdk_streamable_http_client_works_against_agentmesh_serve() {
    let python3 = require!(Tool::Python);
    let daemon = Daemon::start();
    let endpoint = format!("{}/mcp", daemon.url);
    let token = daemon.token();
    let args = [OsStr::new("http"), OsStr::new(&endpoint)];
    let report = python_client_report(&python3, &args, &[("AGENTMESH_TOKEN", &token)]);
    let id = assert_python_report(&report);
    let (mesh, status, payload) = sqlite_task(&daemon.data_dir, &id);
    assert_eq!((mesh.as_str(), status.as_str()), ("default", "pending"), "{}", daemon.log_text());
    assert!(payload.contains(MESSAGE), "{payload}");
}
