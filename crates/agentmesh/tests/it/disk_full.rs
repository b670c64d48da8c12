//! A full disk, end to end: a real daemon (`agentmesh serve`) on a data dir in a
//! small tmpfs that a filler file and the daemon's own writes fill up.
//!
//! While the disk is full every write is refused with `storage_full` on every
//! transport (HTTP 507, the CLI's `--json` error and exit code 1, the MCP tool
//! error), `/healthz` stays 200 and `/readyz` is 503. Once a few MB are freed
//! and the daemon is restarted, writes succeed again and `/readyz` is 200, and
//! every write acknowledged before the disk filled is there, and none refused.
//!
//! The PostgreSQL twin puts the installation's tables in a tablespace on such a
//! tmpfs, so the database server's disk fills: writes are refused the same way,
//! and once space is freed the same daemon writes again, with nothing
//! acknowledged lost.
//!
//! The tests mount a tmpfs, which needs root (CI runs as root) or a private mount
//! namespace (`unshare --user --map-root-user --mount`); without either they
//! skip (see `agentmesh_test_support::tools`). The mount is undone when the test ends, however it ends.

use super::agentmesh;
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
        Daemon::start_with(&[], data_dir)
    }

    /// The daemon with `globals` (such as `--database-url URL`) before `serve`.
    fn start_with(globals: &[&str], data_dir: &Path) -> Daemon {
        let (child, log) = DaemonLog::spawn(
            agentmesh().args(globals).args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data_dir),
        );
        let url = log.address(DEADLINE);
        let token = std::fs::read_to_string(data_dir.join("daemon.token")).expect("the token file");
        Daemon { child, url, token: token.trim().to_owned() }
    }

    /// Sends SIGTERM and requires a clean exit.
    fn stop(mut self) {
        agentmesh_test_support::signal(self.child.id(), "TERM").expect("kill -TERM");
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

    /// POSTs tasks until one is refused for want of space: the ids acknowledged
    /// before, and the refused one (which must say `storage_full`).
    #[track_caller]
    fn fill_disk(&self, http: &Client) -> (Vec<String>, String) {
        let mut acknowledged = Vec::new();
        let refused = loop {
            let id = format!("fill-{}", acknowledged.len());
            let (status, body) = self.add(http, &id, &incompressible(acknowledged.len()));
            if status == StatusCode::CREATED {
                acknowledged.push(id);
                assert!(acknowledged.len() < 2_000, "the disk never filled up");
                continue;
            }
            assert_storage_full(status, &body);
            break id;
        };
        assert!(acknowledged.len() > 50, "the disk filled only after {} writes", acknowledged.len());
        (acknowledged, refused)
    }

    /// The ids of the mesh's tasks, sorted.
    fn task_ids(&self, http: &Client) -> Vec<String> {
        let listed = http
            .get(format!("{}/v1/meshes/default/tasks", self.url))
            .bearer_auth(&self.token)
            .send()
            .and_then(|r| r.json::<Value>())
            .expect("the tasks are listed");
        let mut ids: Vec<String> = listed
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|t| t["id"].as_str().map(str::to_owned))
            .collect();
        ids.sort_unstable();
        ids
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

/// Deletes [`FREED_BYTES`] of the filler file.
fn free_space(filler: &Path) {
    let file = std::fs::OpenOptions::new().write(true).open(filler).expect("the filler opens");
    file.set_len(FILLER_BYTES - FREED_BYTES).expect("part of the filler is deleted");
}

/// A message of [`FILL_MESSAGE_BYTES`] printable characters that differ
/// throughout, by `seed`: a database that compresses long values (PostgreSQL's
/// TOAST) stores it at its full size.
fn incompressible(seed: usize) -> String {
    let mut x = seed as u64 ^ 0x9e37_79b9_7f4a_7c15;
    (0..FILL_MESSAGE_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 94) as u8)
        })
        .collect()
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
    agentmesh_test_support::require!(agentmesh_test_support::Tool::Tmpfs);
    let fs = Tmpfs::mount(FS_BYTES);
    let filler: PathBuf = fs.path().join("filler");
    fill_file(&filler, FILLER_BYTES);
    let data_dir = fs.path().join("data");
    let data = data_dir.to_str().expect("a UTF-8 path");
    let http = Client::builder().timeout(DEADLINE).build().expect("an HTTP client");

    // The daemon's writes fill the rest of the disk.
    let daemon = Daemon::start(&data_dir);
    let (mut acknowledged, refused) = daemon.fill_disk(&http);
    let big = incompressible(usize::MAX);

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
    free_space(&filler);
    let daemon = Daemon::start(&data_dir);
    for i in 0..20 {
        let id = format!("after-{i}");
        let (status, body) = daemon.add(&http, &id, "a task after space was freed");
        assert_eq!(status, StatusCode::CREATED, "write {i} after freeing {FREED_BYTES} bytes: {body}");
        acknowledged.push(id);
    }
    assert_eq!(daemon.probe(&http, "/readyz"), (StatusCode::OK, json!({ "status": "ready" })));

    // Every acknowledged write is there; no refused one left anything.
    acknowledged.sort_unstable();
    assert_eq!(
        daemon.task_ids(&http),
        acknowledged,
        "exactly the acknowledged writes (refused first: {refused})"
    );
    daemon.stop();
}

/// A PostgreSQL tablespace on a directory of the tmpfs, on the server at a URL,
/// dropped when the guard drops (after the schema whose tables it holds, which
/// is declared later).
struct Tablespace {
    name: String,
    url: String,
}

impl Tablespace {
    /// Creates it on `dir`, which the server's user gets to own.
    fn create(url: &str, dir: &Path) -> Tablespace {
        std::fs::create_dir(dir).expect("the tablespace dir");
        let chown =
            Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status().expect("chown runs");
        assert!(chown.success(), "the server's user (postgres) owns {}", dir.display());
        let name = format!("am_full_{}", std::process::id());
        let mut client =
            postgres::Client::connect(url, postgres::NoTls).expect("a connection to the test server");
        client
            .batch_execute(&format!("CREATE TABLESPACE {name} LOCATION '{}'", dir.display()))
            .expect("a tablespace on the tmpfs (the test server's user must be a superuser)");
        Tablespace { name, url: url.to_owned() }
    }
}

impl Drop for Tablespace {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP TABLESPACE IF EXISTS {}", self.name));
        }
    }
}

/// The PostgreSQL twin: the installation's tables live in a tablespace on the
/// small tmpfs (its WAL stays on the server's own disk), so the database server's
/// disk is what fills up. Writes are refused as `storage_full` on HTTP and the
/// CLI while `/healthz` stays 200, and once space is freed the same daemon writes
/// again with no restart: the server, not the daemon, held the fault. Every
/// acknowledged write is there, and no refused one.
#[test]
fn a_full_database_disk_on_postgresql_refuses_writes_as_storage_full_and_freed_space_lets_the_same_daemon_write_again()
 {
    let server = agentmesh_test_support::require_postgres!();
    agentmesh_test_support::require!(agentmesh_test_support::Tool::Tmpfs);
    let fs = Tmpfs::mount(FS_BYTES);
    // The server's processes reach the tablespace through the mount's root.
    let opened = Command::new("chmod").arg("755").arg(fs.path()).status().expect("chmod runs");
    assert!(opened.success());
    let filler: PathBuf = fs.path().join("filler");
    fill_file(&filler, FILLER_BYTES);
    let tablespace = Tablespace::create(&server, &fs.path().join("tablespace"));
    let schema = agentmesh_test_support::postgres::Schema::fresh(&server, "am_disk_full");
    // Every table of the installation is made in the tablespace.
    let url = format!("{server}?options=-c%20default_tablespace%3D{}", tablespace.name);
    let globals = ["--database-url", url.as_str(), "--database-schema", schema.name()];
    let data_dir = tempfile::tempdir().expect("a data dir");
    let http = Client::builder().timeout(DEADLINE).build().expect("an HTTP client");

    let daemon = Daemon::start_with(&globals, data_dir.path());
    let mut client =
        postgres::Client::connect(&server, postgres::NoTls).expect("a connection to the test server");
    let elsewhere: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablespace IS DISTINCT FROM $2",
            &[&schema.name(), &tablespace.name],
        )
        .expect("the installation's tables")
        .get(0);
    assert_eq!(elsewhere, 0, "every table of the installation is in the tablespace on the tmpfs");
    let (mut acknowledged, refused) = daemon.fill_disk(&http);

    let (status, body) = daemon.add(&http, "http-refused", &incompressible(usize::MAX));
    assert_storage_full(status, &body);
    assert_eq!(daemon.probe(&http, "/healthz"), (StatusCode::OK, json!({ "status": "ok" })));
    let data = data_dir.path().to_str().expect("a UTF-8 path");
    let mut local = globals.to_vec();
    let message = incompressible(usize::MAX - 1);
    local.extend(["--data-dir", data, "--json", "task", "add", &message, "--id", "cli-refused"]);
    let (code, doc, stderr) = run(&local);
    assert_eq!((code, &doc["error"]["code"]), (1, &json!("storage_full")), "{doc} {stderr}");

    // A few MB are freed: the same daemon writes again.
    free_space(&filler);
    for i in 0..20 {
        let id = format!("after-{i}");
        let (status, body) = daemon.add(&http, &id, "a task after space was freed");
        assert_eq!(status, StatusCode::CREATED, "write {i} after freeing {FREED_BYTES} bytes: {body}");
        acknowledged.push(id);
    }
    acknowledged.sort_unstable();
    assert_eq!(
        daemon.task_ids(&http),
        acknowledged,
        "exactly the acknowledged writes (refused first: {refused})"
    );
    daemon.stop();
}
