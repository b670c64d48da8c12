//! A full disk, end to end: a real daemon (`agentmesh serve`) on a data dir in a
//! small tmpfs that a filler file and the daemon's own writes fill up.
//!
//! While the disk is full every write is refused with `storage_full` on every
//! transport (HTTP 507, the CLI's `--json` error and exit code 1, the MCP tool
//! error), `/healthz` stays 200 and `/readyz` is 503. Once a few MB are freed
//! and the daemon is restarted, writes succeed again and `/readyz` is 200, and
//! every write acknowledged before the disk filled is there, and none refused.
//!
//! The test mounts a tmpfs, which needs root (CI runs as root) or a private mount
//! namespace (`unshare --user --map-root-user --mount`); without either it fails
//! saying so. The mount is undone when the test ends, however it ends.

use crate::daemon_log::DaemonLog;
use crate::mcp_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::{Value, json};

/// The size of the filesystem.
const FS_BYTES: u64 = 24 * 1024 * 1024;
/// What the filler file takes of it at first; the daemon's writes fill the rest.
const FILLER_BYTES: u64 = 8 * 1024 * 1024;
/// How much of the filler is deleted once the disk is full.
const FREED_BYTES: u64 = 4 * 1024 * 1024;
/// The message size of the writes that fill the disk: mostly new pages, as the
/// database's real content grows, rather than rewrites of the same few pages.
const FILL_MESSAGE_BYTES: usize = 48 * 1024;
/// How long any wait may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(60);

/// A tmpfs mounted on a temp dir, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(bytes: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("a temp dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={}k", bytes / 1024), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "this test needs a small filesystem of its own and could not mount a tmpfs ({}); run it as root \
             (as CI does) or inside `unshare --user --map-root-user --mount`",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(self.dir.path()).status().is_ok_and(|s| s.success());
        if !unmounted {
            // Something still holds a file there; detach it now, free it when let go.
            let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
        }
    }
}

/// `agentmesh serve` on a data dir, killed when dropped (before the tmpfs, which
/// is declared earlier, is unmounted).
struct Daemon {
    child: Child,
    url: String,
    token: String,
}

impl Daemon {
    fn start(data_dir: &Path) -> Daemon {
        let mut child = agentmesh()
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts");
        let log = DaemonLog::watch(child.stderr.take().expect("piped stderr"));
        let url = log.address(DEADLINE);
        let token = std::fs::read_to_string(data_dir.join("daemon.token")).expect("the token file");
        Daemon { child, url, token: token.trim().to_owned() }
    }

    /// Sends SIGTERM and requires a clean exit.
    fn stop(mut self) {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill");
        assert!(sent.success());
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                assert!(status.success(), "the daemon exits 0 on SIGTERM, got {status}");
                return;
            }
            assert!(Instant::now() < until, "the daemon did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// POSTs a task with `message`; the status and the JSON body.
    fn add(&self, http: &Client, id: &str, message: &str) -> (StatusCode, Value) {
        let response = http
            .post(format!("{}/v1/meshes/default/tasks", self.url))
            .bearer_auth(&self.token)
            .json(&json!({ "id": id, "message": message }))
            .send()
            .expect("the daemon answers");
        (response.status(), response.json().expect("a JSON body"))
    }

    /// GETs an unauthenticated path; the status and the JSON body.
    fn probe(&self, http: &Client, path: &str) -> (StatusCode, Value) {
        let response = http.get(format!("{}{path}", self.url)).send().expect("the daemon answers");
        (response.status(), response.json().expect("a JSON body"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary, with an environment that cannot leak a developer's mesh.
fn agentmesh() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentmesh"));
    for var in
        ["AGENTMESH_HOME", "AGENTMESH_DATABASE_URL", "AGENTMESH_MESH", "AGENTMESH_SERVER", "AGENTMESH_TOKEN"]
    {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// Runs the binary with `args`; the exit code, stdout as JSON and stderr.
fn run(args: &[&str]) -> (i32, Value, String) {
    let Output { status, stdout, stderr } =
        agentmesh().args(args).stdin(Stdio::null()).output().expect("runs");
    let doc = serde_json::from_slice(&stdout).unwrap_or(Value::Null);
    (status.code().expect("exited"), doc, String::from_utf8_lossy(&stderr).into_owned())
}

/// Writes `bytes` of data to `path`.
fn fill_file(path: &Path, bytes: u64) {
    let chunk = vec![0x5a_u8; 1024 * 1024];
    let mut file = std::fs::File::create(path).expect("the filler is created");
    for _ in 0..bytes / chunk.len() as u64 {
        std::io::Write::write_all(&mut file, &chunk).expect("the filler fits");
    }
    file.sync_all().expect("the filler is synced");
}

#[track_caller]
fn assert_storage_full(status: StatusCode, body: &Value) {
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert_eq!(body["error"]["code"], "storage_full", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no space left"), "the message names the cause: {message}");
}

#[test]
fn a_full_disk_refuses_writes_as_storage_full_and_a_few_freed_mb_let_a_restarted_daemon_write_again() {
    let fs = Tmpfs::mount(FS_BYTES);
    let filler: PathBuf = fs.path().join("filler");
    fill_file(&filler, FILLER_BYTES);
    let data_dir = fs.path().join("data");
    let data = data_dir.to_str().expect("a UTF-8 path");
    let http = Client::builder().timeout(DEADLINE).build().expect("an HTTP client");

    // The daemon's writes fill the rest of the disk.
    let daemon = Daemon::start(&data_dir);
    let big = "x".repeat(FILL_MESSAGE_BYTES);
    let mut acknowledged = Vec::new();
    let refused = loop {
        let id = format!("fill-{}", acknowledged.len());
        let (status, body) = daemon.add(&http, &id, &big);
        if status == StatusCode::CREATED {
            acknowledged.push(id);
            assert!(acknowledged.len() < 2_000, "the disk never filled up");
            continue;
        }
        assert_storage_full(status, &body);
        break id;
    };
    assert!(acknowledged.len() > 50, "the disk filled only after {} writes", acknowledged.len());

    // Every transport says storage_full; the process is healthy but not ready.
    let (status, body) = daemon.add(&http, "http-refused", &big);
    assert_storage_full(status, &body);
    assert_eq!(daemon.probe(&http, "/healthz"), (StatusCode::OK, json!({ "status": "ok" })));
    let (status, body) = daemon.probe(&http, "/readyz");
    assert_eq!(
        (status, &body["reason"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("storage_full")),
        "{body}"
    );
    // Once that failure is no longer fresh, a probe write answers, the same.
    std::thread::sleep(agentmesh_daemon::READY_FRESH);
    let (status, body) = daemon.probe(&http, "/readyz");
    assert_eq!(
        (status, &body["reason"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("storage_full")),
        "{body}"
    );
    let local = ["--data-dir", data, "--json", "task", "add", &big, "--id", "cli-refused"];
    let (code, doc, stderr) = run(&local);
    assert_eq!((code, &doc["error"]["code"]), (1, &json!("storage_full")), "{doc} {stderr}");
    assert!(stderr.contains("storage full"), "{stderr}");
    let token_file = data_dir.join("daemon.token");
    let token_file = token_file.to_str().expect("a UTF-8 path");
    let remote = [
        "--server",
        &daemon.url,
        "--token-file",
        token_file,
        "--json",
        "task",
        "add",
        &big,
        "--id",
        "remote-refused",
    ];
    let (code, doc, stderr) = run(&remote);
    assert_eq!((code, &doc["error"]["code"]), (1, &json!("storage_full")), "{doc} {stderr}");
    let tool_error = tokio::runtime::Runtime::new().expect("a runtime").block_on(async {
        let client = mcp_support::spawn_stdio(&data_dir, None).await;
        let error =
            mcp_support::tool_error(&client, "enqueue_task", json!({ "message": big, "id": "mcp-refused" }))
                .await;
        let _ = client.cancel().await;
        error
    });
    assert_eq!(tool_error["code"], "storage_full", "{tool_error}");
    daemon.stop();

    // A few MB are freed: a restarted daemon writes again.
    let file = std::fs::OpenOptions::new().write(true).open(&filler).expect("the filler opens");
    file.set_len(FILLER_BYTES - FREED_BYTES).expect("part of the filler is deleted");
    drop(file);
    let daemon = Daemon::start(&data_dir);
    for i in 0..20 {
        let id = format!("after-{i}");
        let (status, body) = daemon.add(&http, &id, "a task after space was freed");
        assert_eq!(status, StatusCode::CREATED, "write {i} after freeing {FREED_BYTES} bytes: {body}");
        acknowledged.push(id);
    }
    assert_eq!(daemon.probe(&http, "/readyz"), (StatusCode::OK, json!({ "status": "ready" })));

    // Every acknowledged write is there; no refused one left anything.
    let listed = http
        .get(format!("{}/v1/meshes/default/tasks", daemon.url))
        .bearer_auth(&daemon.token)
        .send()
        .and_then(|r| r.json::<Value>())
        .expect("the tasks are listed");
    let mut ids: Vec<&str> =
        listed.as_array().expect("a list").iter().filter_map(|t| t["id"].as_str()).collect();
    ids.sort_unstable();
    let mut expected: Vec<&str> = acknowledged.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected, "exactly the acknowledged writes (refused first: {refused})");
    daemon.stop();
}
