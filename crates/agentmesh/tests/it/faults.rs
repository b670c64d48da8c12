//! Faults of the environment, end to end, with real processes: a PostgreSQL
//! server of the test's own that stops, a loopback proxy that black-holes the
//! link to the server, a table lock an operator holds, and a SQLite writer
//! frozen (SIGSTOP) while it holds the file's write lock.
//!
//! In each, every request a daemon answers (`--request-timeout 2s`) comes
//! back within the deadline plus one second, as a 503 with the code of what
//! held it up (`unavailable`, `lock_timeout`, `busy`) and `Retry-After`,
//! never a 500; `/readyz` and `/metrics` say the same; nothing acknowledged is
//! lost, and the daemon writes again once the fault is gone. With two daemons
//! on one database and the link of one cut, a client that retries on the other
//! loses nothing and waits no longer than the deadline, and the other daemon
//! takes the upkeep over.

use crate::daemon_log::DaemonLog;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentmesh_test_support::cluster::Cluster;
use agentmesh_test_support::postgres::Schema;
use agentmesh_test_support::require_postgres;
use serde_json::{Value, json};

/// Every daemon's `--request-timeout`.
const TIMEOUT: Duration = Duration::from_secs(2);
/// What any answer may take while a fault lasts.
const BOUND: Duration = Duration::from_secs(3);
/// How long a wait for a daemon to recover may take before the test gives up.
const RECOVERY: Duration = Duration::from_secs(60);
/// The mesh every test works in.
const MESH: &str = "faults";
/// What a daemon logs when it takes the upkeep leadership.
const LEADS: &str = "this daemon now runs the installation's upkeep";

/// The binary under test, with an environment that cannot leak a developer's mesh.
fn agentmesh() -> Command {
    let mut cmd = super::agentmesh();
    cmd.env("RUST_LOG", "warn,agentmesh_postgres=info");
    cmd
}

/// One answer: status, `Retry-After`, body, and how long it took.
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
    took: Duration,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().or(self.body["reason"].as_str()).unwrap_or("")
    }

    /// Asserts a typed 503 with `code`, within [`BOUND`].
    #[track_caller]
    fn assert_fault(&self, what: &str, code: &str) {
        assert!(self.took <= BOUND, "{what} took {:?} (bound {BOUND:?}): {}", self.took, self.body);
        assert_eq!((self.status, self.code()), (503, code), "{what}: {}", self.body);
        assert_eq!(self.retry_after.as_deref(), Some("1"), "{what} carries Retry-After");
    }
}

/// `agentmesh serve` on a data dir of its own, with `global` options.
struct Daemon {
    dir: tempfile::TempDir,
    child: Child,
    url: String,
    token: String,
    log: DaemonLog,
    http: reqwest::blocking::Client,
}

impl Daemon {
    fn start(global: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("a temp dir");
        Daemon::start_in(dir, global)
    }

    fn start_in(dir: tempfile::TempDir, global: &[&str]) -> Daemon {
        let serve = ["--request-timeout", "2s", "serve", "--listen", "127.0.0.1:0"];
        let (child, log) =
            DaemonLog::spawn(agentmesh().args(global).arg("--data-dir").arg(dir.path()).args(serve));
        let url = log.address(RECOVERY);
        let token = std::fs::read_to_string(dir.path().join("daemon.token")).expect("the token file");
        let http = reqwest::blocking::Client::builder().timeout(RECOVERY).build().expect("an HTTP client");
        Daemon { dir, child, url, token: token.trim().to_owned(), log, http }
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Answer {
        let began = Instant::now();
        let mut request = self.http.request(method, format!("{}{path}", self.url)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().unwrap_or_else(|err| panic!("{path}: no answer: {err}"));
        let status = response.status().as_u16();
        let retry_after =
            response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = response.text().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer { status, retry_after, body, took: began.elapsed() }
    }

    fn post(&self, route: &str, body: &Value) -> Answer {
        self.call(reqwest::Method::POST, &format!("/v1/meshes/{MESH}/{route}"), Some(body))
    }

    fn get(&self, route: &str) -> Answer {
        self.call(reqwest::Method::GET, &format!("/v1/meshes/{MESH}/{route}"), None)
    }

    fn enqueue(&self, id: &str) -> Answer {
        self.post("tasks", &json!({ "id": id, "message": format!("task {id}") }))
    }

    fn readyz(&self) -> Answer {
        self.call(reqwest::Method::GET, "/readyz", None)
    }

    /// The `agentmesh_store_faults_total` sample of `code`.
    fn faults(&self, code: &str) -> f64 {
        let text = self.call(reqwest::Method::GET, "/metrics", None).body;
        let text = text.as_str().unwrap_or_default().to_owned();
        let prefix = format!("agentmesh_store_faults_total{{code=\"{code}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("/metrics has no {prefix}sample:\n{text}"))
    }

    /// Asks the mix of requests a mesh serves, each of which must fail with
    /// `code` within the bound.
    #[track_caller]
    fn assert_every_request_fails(&self, round: usize, code: &str, reads_too: bool) {
        let claim = json!({ "nodeId": format!("node-{round}"), "sessionId": format!("s-{round}") });
        self.enqueue(&format!("refused-{round}")).assert_fault("an enqueue", code);
        self.post("claims", &claim).assert_fault("a claim", code);
        if reads_too {
            let drain = json!({ "daemonId": "mach_faults", "runId": "run-1" });
            self.post("events/drain", &drain).assert_fault("a drain", code);
            self.get("tasks").assert_fault("a task list", code);
            self.get("tasks/kept-0").assert_fault("a task read", code);
        }
    }

    /// Waits until an enqueue of `id` is acknowledged.
    fn wait_until_it_writes(&self, id: &str) {
        let until = Instant::now() + RECOVERY;
        loop {
            let answer = self.enqueue(id);
            if answer.status == 201 {
                return;
            }
            assert!(
                Instant::now() < until,
                "the daemon never wrote again: {}\n{}",
                answer.body,
                self.log.text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The ids of every task of the mesh.
    fn task_ids(&self) -> Vec<String> {
        let answer = self.get("tasks?limit=1000");
        assert_eq!(answer.status, 200, "{}", answer.body);
        let tasks = answer.body.as_array().or(answer.body["tasks"].as_array()).cloned().unwrap_or_default();
        let mut ids: Vec<String> = tasks.iter().filter_map(|t| t["id"].as_str().map(str::to_owned)).collect();
        ids.sort();
        ids
    }

    fn wait_logged(&self, needle: &str, until: Instant) -> Option<Instant> {
        loop {
            if let Some(at) = self.log.logged(&[needle]) {
                return Some(at);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.dir;
    }
}

/// Enqueues `n` tasks `kept-<i>` and returns their ids.
fn acknowledged(daemon: &Daemon, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let id = format!("kept-{i}");
            let answer = daemon.enqueue(&id);
            assert_eq!(answer.status, 201, "{}", answer.body);
            id
        })
        .collect()
}

#[track_caller]
fn assert_kept(daemon: &Daemon, mut acknowledged: Vec<String>) {
    acknowledged.sort();
    let found = daemon.task_ids();
    for id in &acknowledged {
        assert!(found.contains(id), "acknowledged task {id} is there: {found:?}");
    }
}

#[test]
fn a_stopped_postgresql_server_is_answered_503_unavailable_within_the_deadline_and_nothing_is_lost() {
    let _ = require_postgres!();
    let cluster = Cluster::start();
    let url = cluster.url();
    let daemon = Daemon::start(&["--database-url", &url]);
    let mut kept = acknowledged(&daemon, 5);

    cluster.stop();
    for round in 0..3 {
        daemon.assert_every_request_fails(round, "unavailable", true);
    }
    daemon.readyz().assert_fault("/readyz", "unavailable");
    let counted = daemon.faults("unavailable");
    assert!(counted >= 15.0, "/metrics counts the faults by code: {counted}");
    // The CLI on the same database says the same, with exit status 75.
    let began = Instant::now();
    let out = agentmesh()
        .args(["--database-url", &url, "--request-timeout", "2s", "--json", "task", "list"])
        .output()
        .expect("the CLI runs");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!((out.status.code(), &doc["error"]["code"]), (Some(75), &json!("unavailable")), "{doc}");
    assert!(began.elapsed() <= BOUND + Duration::from_secs(2), "the CLI took {:?}", began.elapsed());

    cluster.start_again();
    daemon.wait_until_it_writes("after-restart");
    kept.push(String::from("after-restart"));
    assert_kept(&daemon, kept);
}

/// A TCP proxy on loopback to `upstream` that can black-hole the link: while
/// cut, what either side sends is read and dropped, as a network partition or
/// a dead NAT entry does (the sockets stay open; nothing answers).
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("a proxy port");
        let port = listener.local_addr().expect("its address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let cutting = Arc::clone(&cut);
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                for (from, to) in [
                    (client.try_clone().expect("a clone"), server.try_clone().expect("a clone")),
                    (server, client),
                ] {
                    let cut = Arc::clone(&cutting);
                    std::thread::spawn(move || pump(from, to, &cut));
                }
            }
        });
        Proxy { port, cut }
    }

    fn cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, cut: &AtomicBool) {
    let mut buf = [0_u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !cut.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

#[test]
fn a_black_holed_link_is_answered_within_the_deadline_and_clients_that_retry_on_another_daemon_lose_nothing()
{
    let url = require_postgres!();
    let schema = Schema::fresh(&url, "am_faults");
    let upstream: u16 = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
        .expect("the test server's URL names its port");
    let proxy = Proxy::start(upstream);
    let via_proxy = url.replacen(&format!(":{upstream}/"), &format!(":{}/", proxy.port), 1);
    // A starts first and leads the upkeep; B reaches the server directly.
    let a = Daemon::start(&["--database-url", &via_proxy, "--database-schema", schema.name()]);
    a.wait_logged(LEADS, Instant::now() + RECOVERY).expect("the first daemon leads the upkeep");
    let b = Daemon::start(&["--database-url", &url, "--database-schema", schema.name()]);
    let mut kept = acknowledged(&a, 5);

    proxy.cut(true);
    let cut_at = Instant::now();
    for round in 0..2 {
        a.assert_every_request_fails(round, "unavailable", true);
    }
    // A client that gets the 503 asks the other daemon, which answers in time.
    for i in 0..5 {
        let id = format!("retried-{i}");
        a.enqueue(&id).assert_fault("an enqueue through the cut link", "unavailable");
        let answer = b.enqueue(&id);
        assert!(answer.took <= TIMEOUT, "the other daemon took {:?}", answer.took);
        assert_eq!(answer.status, 201, "{}", answer.body);
        kept.push(id);
        let claim = json!({ "nodeId": format!("node-b{i}"), "sessionId": format!("b-{i}") });
        let answer = b.post("claims", &claim);
        assert!(
            answer.took <= TIMEOUT && answer.status == 200,
            "a claim on B: {:?} {}",
            answer.took,
            answer.body
        );
    }
    a.readyz().assert_fault("/readyz", "unavailable");
    let counted = a.faults("unavailable");
    assert!(counted >= 15.0, "/metrics counts the faults by code: {counted}");
    // The daemon cut off loses the upkeep: the server ends its silent session
    // after one lease, and B takes it over at its next tick.
    let lease = agentmesh_postgres::LEADER_LEASE;
    let leads = b
        .wait_logged(LEADS, cut_at + lease + Duration::from_secs(10))
        .unwrap_or_else(|| panic!("B never took the upkeep over:\n{}", b.log.text()));
    assert!(leads.duration_since(cut_at) <= lease + Duration::from_secs(10));

    proxy.cut(false);
    a.wait_until_it_writes("after-the-cut");
    kept.push(String::from("after-the-cut"));
    assert_kept(&a, kept.clone());
    assert_kept(&b, kept);
}

#[test]
fn a_table_lock_held_past_the_deadline_is_answered_503_lock_timeout() {
    let url = require_postgres!();
    let schema = Schema::fresh(&url, "am_faults");
    let daemon = Daemon::start(&["--database-url", &url, "--database-schema", schema.name()]);
    let kept = acknowledged(&daemon, 3);

    let mut operator = postgres::Client::connect(&url, postgres::NoTls).expect("the test database");
    let mut lock = operator.transaction().expect("a transaction");
    lock.batch_execute(&format!("LOCK TABLE \"{}\".mesh_queue IN ACCESS EXCLUSIVE MODE", schema.name()))
        .expect("the table lock");
    for round in 0..2 {
        daemon.assert_every_request_fails(round, "lock_timeout", false);
        daemon.get("tasks").assert_fault("a task list", "lock_timeout");
    }
    let counted = daemon.faults("lock_timeout");
    assert!(counted >= 6.0, "/metrics counts the faults by code: {counted}");
    lock.rollback().expect("the lock is let go");

    daemon.wait_until_it_writes("after-the-lock");
    let mut kept = kept;
    kept.push(String::from("after-the-lock"));
    assert_kept(&daemon, kept);
}

#[test]
fn a_frozen_sqlite_writer_costs_a_request_its_deadline_not_more() {
    // The frozen writer is a Python process (its sqlite3 module).
    let python = agentmesh_test_support::require!(agentmesh_test_support::Tool::Python);
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().to_owned();
    let daemon = Daemon::start_in(dir, &[]);
    let kept = acknowledged(&daemon, 3);

    // Another process takes the file's write lock and is stopped holding it.
    let mut holder = freeze_holding_the_write_lock(&python, &data.join("mesh-runtime.db"));
    for round in 0..2 {
        daemon.assert_every_request_fails(round, "busy", false);
    }
    // Reads go on beside it.
    assert_eq!(daemon.get("tasks").status, 200);
    let counted = daemon.faults("busy");
    assert!(counted >= 4.0, "/metrics counts the faults by code: {counted}");
    let began = Instant::now();
    let out = agentmesh()
        .arg("--data-dir")
        .arg(&data)
        .args(["--request-timeout", "1s", "--json", "task", "add", "from the CLI"])
        .output()
        .expect("the CLI runs");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!((out.status.code(), &doc["error"]["code"]), (Some(75), &json!("busy")), "{doc}");
    assert!(began.elapsed() <= BOUND, "the CLI took {:?}", began.elapsed());

    let _ = holder.kill();
    let _ = holder.wait();
    daemon.wait_until_it_writes("after-the-freeze");
    let mut kept = kept;
    kept.push(String::from("after-the-freeze"));
    assert_kept(&daemon, kept);
}

/// A Python process that opens `db`, takes its write lock (`BEGIN IMMEDIATE`),
/// says so, and stops itself (SIGSTOP) while it holds the lock.
fn freeze_holding_the_write_lock(python: &str, db: &Path) -> Child {
    let script = "import os, signal, sqlite3, sys\n\
                  c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                  c.execute('BEGIN IMMEDIATE')\n\
                  print('locked', flush=True)\n\
                  os.kill(os.getpid(), signal.SIGSTOP)\n";
    let mut child = Command::new(python)
        .args(["-c", script])
        .arg(db)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut line).expect("a line");
    assert_eq!(line.trim(), "locked", "the holder took the write lock");
    child
}
