//! `agentmesh serve` as an operator runs it: a real daemon process per test,
//! over a temp data dir, talked to with plain HTTP/1.1 over loopback sockets.
//!
//! What is checked: a dead log sink (a closed stderr pipe, stderr on a full
//! disk) stops neither the lease reaper, nor a request, nor SIGTERM; JSON logs
//! are JSON on every line, with an access line per request that never carries
//! the token; thousands of idle and half-sent connections leave a client with
//! the token answered within a second; the header and idle timeouts close what
//! they should and the connection cap refuses the excess at once; a second
//! daemon on one data dir refuses to start and names the first, while a killed
//! daemon's lock blocks nobody.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// How long anything a test waits for may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);

fn agentmesh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentmesh"))
}

/// Where a daemon's stderr goes.
enum Stderr {
    /// A pipe whose reading end is closed before the daemon starts: every write fails.
    ClosedPipe,
    /// A file on a full disk (`/dev/full`): every write fails.
    #[cfg(target_os = "linux")]
    FullDisk,
    /// A pipe the test reads, line by line.
    Collected,
}

/// A daemon process and what it printed.
struct Daemon {
    child: Child,
    addr: SocketAddr,
    /// The `listening on ...` line the daemon printed on stdout.
    announced: String,
    /// Its stderr lines so far, with [`Stderr::Collected`].
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_reader: Option<JoinHandle<()>>,
}

impl Daemon {
    /// Starts `agentmesh serve --listen 127.0.0.1:0` on `data_dir` with `extra`
    /// arguments and waits for its `listening on` line on stdout.
    fn start(data_dir: &Path, stderr: Stderr, extra: &[&str]) -> Daemon {
        Daemon::start_with(agentmesh(), data_dir, stderr, extra)
    }

    /// [`Daemon::start`] with the soft open-file limit at 1,024, as a login shell
    /// hands it down.
    fn start_under_1024_files(data_dir: &Path, extra: &[&str]) -> Daemon {
        let mut command = Command::new("sh");
        command.args(["-c", r#"ulimit -Sn 1024 && exec "$0" "$@""#, env!("CARGO_BIN_EXE_agentmesh")]);
        Daemon::start_with(command, data_dir, Stderr::Collected, extra)
    }

    fn start_with(mut command: Command, data_dir: &Path, stderr: Stderr, extra: &[&str]) -> Daemon {
        command
            .arg("--data-dir")
            .arg(data_dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        match stderr {
            Stderr::ClosedPipe => {
                let (reader, writer) = std::io::pipe().expect("a pipe");
                drop(reader);
                command.stderr(writer);
            }
            #[cfg(target_os = "linux")]
            Stderr::FullDisk => {
                let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
                command.stderr(full);
            }
            Stderr::Collected => {
                command.stderr(Stdio::piped());
            }
        }
        let mut child = command.spawn().expect("serve starts");
        // The command's copy of the pipe's writing end must go, or the pipe
        // would stay open for the daemon's writes.
        drop(command);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr_reader = child.stderr.take().map(|pipe| {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            })
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        // Reads stdout for the daemon's whole life, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let announced = match rx.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("the daemon printed no line on stdout; stderr: {:?}", lines.lock().unwrap());
            }
        };
        let url = announced
            .strip_prefix("listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("not a listening line: {announced:?}"));
        let addr = url.parse().expect("an address");
        Daemon { child, addr, announced, stderr: lines, stderr_reader }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and returns the exit status, failing the test if the daemon
    /// is still running `within` later.
    #[track_caller]
    fn terminate(&mut self, within: Duration) -> ExitStatus {
        signal(self.pid(), "TERM");
        let status = wait_exit(&mut self.child, within, "the daemon after SIGTERM");
        if let Some(reader) = self.stderr_reader.take() {
            reader.join().expect("the stderr reader");
        }
        status
    }

    /// Waits until a stderr line contains `needle`; fails the test after [`DEADLINE`].
    #[track_caller]
    fn wait_for_stderr(&self, needle: &str) {
        let until = Instant::now() + DEADLINE;
        while !self.stderr_lines().iter().any(|line| line.contains(needle)) {
            assert!(Instant::now() < until, "no {needle:?} on stderr: {:?}", self.stderr_lines());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The stderr lines read so far.
    fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `signal` (`TERM`, `KILL`) to a process.
fn signal(pid: u32, signal: &str) {
    agentmesh_test_support::signal(pid, signal).unwrap_or_else(|err| panic!("kill -{signal} {pid}: {err}"));
}

/// Waits for a process to exit, killing it and failing the test after `within`.
#[track_caller]
fn wait_exit(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("{what} did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The token of the daemon serving `data_dir`.
fn token(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("daemon.token")).expect("the token file").trim().to_owned()
}

/// One HTTP/1.1 answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.body))
    }
}

/// Sends one request on a connection of its own (`Connection: close`) and reads
/// the whole answer; fails the test if it takes longer than 10 s.
fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    stream.write_all(request_text(method, path, token, body, false).as_bytes()).expect("request written");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("the answer is read to its end");
    parse_answer(&raw)
}

/// The text of a request; `keep_alive` leaves the connection open after it.
fn request_text(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    keep_alive: bool,
) -> String {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut text =
        format!("{method} {path} HTTP/1.1\r\nhost: agentmesh\r\ncontent-length: {}\r\n", body.len());
    if let Some(token) = token {
        text.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    if !body.is_empty() {
        text.push_str("content-type: application/json\r\n");
    }
    if !keep_alive {
        text.push_str("connection: close\r\n");
    }
    text.push_str("\r\n");
    text.push_str(&body);
    text
}

/// Parses an answer with a `content-length` body.
#[track_caller]
fn parse_answer(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no complete head in {text:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    Answer { status, body: body.to_owned() }
}

/// Reads one answer from a keep-alive connection (its head, then
/// `content-length` bytes of body).
fn read_one_answer(stream: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    let mut byte = [0_u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).expect("the answer's head"), 1, "closed mid-head: {raw:?}");
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a content-length");
    let mut body = vec![0_u8; length];
    stream.read_exact(&mut body).expect("the answer's body");
    raw.extend(body);
    parse_answer(&raw)
}

/// Polls `GET path` until `done` holds for the JSON answer; fails after `within`.
#[track_caller]
fn wait_for(
    addr: SocketAddr,
    token: &str,
    path: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + within;
    loop {
        let answer = request(addr, "GET", path, Some(token), None);
        let value = answer.json();
        if answer.status == 200 && done(&value) {
            return value;
        }
        assert!(Instant::now() < until, "still not there after {within:?}: {value}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Enqueues task `id` in mesh `default` and claims it with a lease of `lease_ms`.
fn enqueue_and_claim(addr: SocketAddr, token: &str, id: &str, lease_ms: u32) {
    let task = serde_json::json!({ "message": "work", "id": id });
    let answer = request(addr, "POST", "/v1/meshes/default/tasks", Some(token), Some(&task));
    assert_eq!(answer.status, 201, "{}", answer.body);
    let claim = serde_json::json!({ "nodeId": "n1", "sessionId": "s1", "leaseMs": lease_ms });
    let answer = request(addr, "POST", "/v1/meshes/default/claims", Some(token), Some(&claim));
    assert_eq!((answer.status, &answer.json()["task"]["id"]), (200, &Value::from(id)), "{}", answer.body);
}

#[test]
fn a_daemon_whose_stderr_pipe_is_closed_still_reclaims_leases_and_stops_on_sigterm() {
    let dir = TempDir::new().expect("a temp dir");
    closed_stderr_pipe(dir.path(), &[]);
}

/// The same on a PostgreSQL installation, where the daemon also logs taking the
/// installation's upkeep over before its reaper runs.
#[test]
fn a_daemon_on_postgresql_whose_stderr_pipe_is_closed_still_reclaims_leases_and_stops_on_sigterm() {
    let url = agentmesh_test_support::require_postgres!();
    let schema = agentmesh_test_support::postgres::Schema::fresh(&url, "am_closed_pipe");
    let dir = TempDir::new().expect("a temp dir");
    closed_stderr_pipe(
        &dir.path().join("data"),
        &["--database-url", &url, "--database-schema", schema.name()],
    );
}

/// Serves on `data_dir` with stderr a pipe nobody reads (closed): leases are
/// still reclaimed (each reclaim logged into the pipe), and SIGTERM stops it.
fn closed_stderr_pipe(data_dir: &Path, extra: &[&str]) {
    let mut daemon = Daemon::start(data_dir, Stderr::ClosedPipe, extra);
    let token = token(data_dir);
    enqueue_and_claim(daemon.addr, &token, "t1", 200);
    // The reaper runs every 5 s and logs each reclaim, into the closed pipe.
    let task = wait_for(daemon.addr, &token, "/v1/meshes/default/tasks/t1", DEADLINE, |task| {
        task["status"] == "pending"
    });
    assert_eq!(task["status"], "pending", "{task}");
    // And the reaper keeps running: the task's next lease runs out and it comes back again.
    let claim = serde_json::json!({ "nodeId": "n1", "sessionId": "s2", "leaseMs": 200 });
    let answer = request(daemon.addr, "POST", "/v1/meshes/default/claims", Some(&token), Some(&claim));
    assert_eq!((answer.status, &answer.json()["task"]["id"]), (200, &Value::from("t1")), "{}", answer.body);
    wait_for(daemon.addr, &token, "/v1/meshes/default/tasks/t1", DEADLINE, |task| {
        task["status"] == "pending" && task["strandedReclaimCount"] == 2
    });
    let status = daemon.terminate(Duration::from_secs(5));
    assert!(status.success(), "the daemon exits 0 on SIGTERM, got {status}");
}

#[cfg(target_os = "linux")]
#[test]
fn serve_with_stderr_on_a_full_disk_starts_serves_and_stops() {
    let dir = TempDir::new().expect("a temp dir");
    let mut daemon = Daemon::start(dir.path(), Stderr::FullDisk, &["--log-format", "json"]);
    let token = token(dir.path());
    assert_eq!(request(daemon.addr, "GET", "/healthz", None, None).status, 200);
    enqueue_and_claim(daemon.addr, &token, "t1", 60_000);
    let status = daemon.terminate(Duration::from_secs(5));
    assert!(status.success(), "the daemon exits 0 on SIGTERM, got {status}");
}

#[test]
fn json_logs_put_every_stderr_line_in_json_with_an_access_line_per_request_and_no_token() {
    let dir = TempDir::new().expect("a temp dir");
    let mut command = agentmesh();
    command.env("RUST_LOG", "debug");
    let mut daemon = Daemon::start_with(command, dir.path(), Stderr::Collected, &["--log-format", "json"]);
    let token = token(dir.path());
    let token_file = dir.path().join("daemon.token");
    assert_eq!(
        daemon.announced,
        format!("listening on {} (token file: {})", daemon.url(), token_file.display())
    );

    let task = serde_json::json!({ "message": "work", "id": "t1" });
    let answer = request(daemon.addr, "POST", "/v1/meshes/m1/tasks", Some(&token), Some(&task));
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(request(daemon.addr, "GET", "/v1/meshes/m1/tasks/t1", Some(&token), None).status, 200);
    assert_eq!(request(daemon.addr, "GET", "/v1/meshes/m1/tasks", Some("wrong"), None).status, 401);
    let status = daemon.terminate(Duration::from_secs(5));
    assert!(status.success(), "the daemon exits 0 on SIGTERM, got {status}");

    let lines = daemon.stderr_lines();
    let objects: Vec<Value> = lines
        .iter()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(value @ Value::Object(_)) => value,
            _ => panic!("a stderr line is not a JSON object: {line:?}"),
        })
        .collect();
    for (line, object) in lines.iter().zip(&objects) {
        assert!(object["message"].is_string(), "no top-level message: {line}");
        assert!(object.get("fields").is_none(), "fields are nested: {line}");
        assert!(!line.contains(&token), "the token is logged: {line}");
    }
    let messages: Vec<&str> = objects.iter().filter_map(|o| o["message"].as_str()).collect();
    assert!(messages.contains(&daemon.announced.as_str()), "no listening line in {messages:?}");
    assert!(messages.contains(&"shutting down"), "no shutdown line in {messages:?}");
    assert!(messages.iter().any(|m| m.contains("upkeep pass")), "no debug line in {messages:?}");

    let access: Vec<&Value> = objects.iter().filter(|o| o["target"] == "agentmesh::access").collect();
    assert_eq!(access.len(), 3, "one access line per request: {access:?}");
    let enqueue = access
        .iter()
        .find(|o| o["method"] == "POST")
        .unwrap_or_else(|| panic!("no access line for the POST: {access:?}"));
    assert_eq!(enqueue["route"], "/v1/meshes/{mesh}/tasks", "{enqueue}");
    assert_eq!(enqueue["status"], 201, "{enqueue}");
    assert_eq!(enqueue["mesh"], "m1", "{enqueue}");
    assert_eq!(enqueue["level"], "INFO", "{enqueue}");
    assert!(enqueue["duration_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{enqueue}");
    assert!(access.iter().any(|o| o["route"] == "/v1/meshes/{mesh}/tasks/{id}" && o["status"] == 200));
    assert!(access.iter().any(|o| o["status"] == 401), "the refused request is logged too: {access:?}");
}

#[test]
fn two_thousand_idle_and_half_sent_connections_leave_a_client_with_the_token_answered_within_a_second() {
    // The test itself holds 2,000 sockets.
    agentmesh_daemon::raise_open_file_limit().expect("the test's own open-file limit");
    let dir = TempDir::new().expect("a temp dir");
    let daemon = Daemon::start_under_1024_files(dir.path(), &[]);
    let token = token(dir.path());
    let addr = daemon.addr;

    let (opened_tx, opened_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let opener = std::thread::spawn(move || {
        let mut held = Vec::with_capacity(2_000);
        for i in 0..2_000 {
            let mut stream = TcpStream::connect(addr).expect("an idle connection");
            if i % 2 == 1 {
                // Half a request head: the blank line that ends it never comes.
                stream.write_all(b"GET /v1/meshes/default/status HTTP/1.1\r\nhost: x\r\n").expect("sent");
            }
            held.push(stream);
            // Idle connections opened at a steady pace, not a flood of handshakes
            // overrunning the listen queue.
            std::thread::sleep(Duration::from_millis(1));
            if i % 100 == 99 {
                let _ = opened_tx.send(i + 1);
            }
        }
        let _ = release_rx.recv();
        held.len()
    });

    let mut latencies = Vec::new();
    let mut opened = 0;
    let mut all_open_at = None;
    // Requests all the while the connections are being opened, and for 2 s after.
    while all_open_at.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(2)) {
        while let Ok(n) = opened_rx.try_recv() {
            opened = n;
            if n == 2_000 {
                all_open_at = Some(Instant::now());
            }
        }
        let started = Instant::now();
        let answer = request(addr, "GET", "/v1/meshes/default/tasks", Some(&token), None);
        let took = started.elapsed();
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(took < Duration::from_secs(1), "a request took {took:?} with {opened} connections held open");
        latencies.push(took);
        std::thread::sleep(Duration::from_millis(50));
        assert!(latencies.len() < 2_000, "the connections were not all opened");
    }
    release_tx.send(()).expect("the opener waits");
    assert_eq!(opener.join().expect("the opener"), 2_000);
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let max = latencies[latencies.len() - 1];
    eprintln!(
        "with 2,000 idle and half-sent connections: {} requests, median {median:?}, max {max:?}",
        latencies.len()
    );
}

#[test]
fn silent_half_sent_and_idle_connections_are_closed_at_their_timeouts() {
    let dir = TempDir::new().expect("a temp dir");
    let daemon =
        Daemon::start(dir.path(), Stderr::Collected, &["--header-timeout", "1s", "--idle-timeout", "2s"]);
    let token = token(dir.path());

    let silent = TcpStream::connect(daemon.addr).expect("connect");
    let mut half = TcpStream::connect(daemon.addr).expect("connect");
    half.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n").expect("sent");
    let opened = Instant::now();
    for (what, stream) in [("a silent connection", silent), ("a half-sent head", half)] {
        let closed = wait_closed(stream);
        let after = closed - opened;
        assert!(after >= Duration::from_millis(900), "{what} was closed after {after:?}, before its timeout");
    }

    // A keep-alive connection: answered, then closed once idle for 2 s.
    let mut kept = TcpStream::connect(daemon.addr).expect("connect");
    kept.set_read_timeout(Some(DEADLINE)).expect("read timeout");
    let text = request_text("GET", "/v1/meshes/default/tasks", Some(&token), None, true);
    kept.write_all(text.as_bytes()).expect("sent");
    assert_eq!(read_one_answer(&mut kept).status, 200);
    // Idle longer than the header timeout, shorter than the idle timeout: open still.
    std::thread::sleep(Duration::from_millis(1_500));
    kept.write_all(text.as_bytes()).expect("sent");
    assert_eq!(read_one_answer(&mut kept).status, 200);
    let answered = Instant::now();
    let idle = wait_closed(kept) - answered;
    assert!(idle >= Duration::from_millis(1_200), "closed {idle:?} after the last answer");

    // A request that takes long by design (a watch) outlives both timeouts.
    let watch = serde_json::json!({ "daemonId": "d1", "runId": "r1" });
    let path = "/v1/meshes/default/events/watch?timeoutSecs=3";
    let started = Instant::now();
    let answer = request(daemon.addr, "POST", path, Some(&token), Some(&watch));
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(started.elapsed() >= Duration::from_secs(3), "the watch ended early: {}", answer.body);
}

/// Waits until the daemon closes `stream`; returns when it did.
#[track_caller]
fn wait_closed(mut stream: TcpStream) -> Instant {
    stream.set_read_timeout(Some(DEADLINE)).expect("read timeout");
    let mut buf = [0_u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Instant::now(),
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return Instant::now(),
            Err(err) => panic!("the connection was not closed: {err}"),
        }
    }
}

#[test]
fn connections_beyond_the_cap_are_refused_at_once_and_served_once_there_is_room() {
    let dir = TempDir::new().expect("a temp dir");
    let daemon = Daemon::start(dir.path(), Stderr::Collected, &["--max-connections", "4"]);
    let token = token(dir.path());
    let held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(daemon.addr).expect("connect")).collect();

    let started = Instant::now();
    let refused = request(daemon.addr, "GET", "/v1/meshes/default/tasks", Some(&token), None);
    assert!(started.elapsed() < Duration::from_secs(5), "the refusal took {:?}", started.elapsed());
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "too_many_connections");

    drop(held);
    let until = Instant::now() + DEADLINE;
    loop {
        let answer = request(daemon.addr, "GET", "/v1/meshes/default/tasks", Some(&token), None);
        if answer.status == 200 {
            break;
        }
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert!(Instant::now() < until, "still refused after the held connections closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon.wait_for_stderr("at the connection limit");
}

#[test]
fn a_second_daemon_on_one_data_dir_refuses_to_start_naming_the_first_and_a_killed_ones_lock_blocks_nobody() {
    let dir = TempDir::new().expect("a temp dir");
    let mut first = Daemon::start(dir.path(), Stderr::Collected, &[]);

    let second = agentmesh()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .expect("a second serve runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "the second daemon must refuse: {stderr}");
    assert!(stderr.contains(&format!("pid {}", first.pid())), "the first's pid is named: {stderr}");
    assert!(stderr.contains(&first.url()), "the first's address is named: {stderr}");
    assert!(stderr.contains("--allow-second-daemon"), "the way around is named: {stderr}");
    assert!(String::from_utf8_lossy(&second.stdout).is_empty(), "the refused daemon announced itself");

    // With JSON logs the refusal is a JSON line like every other.
    let second = agentmesh()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .stdin(Stdio::null())
        .output()
        .expect("a second serve runs");
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    let refusal = stderr
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|_| panic!("not JSON: {line:?}")))
        .find(|object| object["level"] == "ERROR")
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    let message = refusal["message"].as_str().expect("a message");
    assert!(message.contains(&format!("pid {}", first.pid())) && message.contains(&first.url()), "{message}");

    // CLI processes keep sharing the data dir with the daemon.
    let add =
        agentmesh().arg("--data-dir").arg(dir.path()).args(["task", "add", "local", "--id", "t1"]).output();
    let add = add.expect("task add runs");
    assert!(add.status.success(), "{}", String::from_utf8_lossy(&add.stderr));
    let token = token(dir.path());
    assert_eq!(request(first.addr, "GET", "/v1/meshes/default/tasks/t1", Some(&token), None).status, 200);

    // Told otherwise, a second daemon starts.
    let mut allowed = Daemon::start(dir.path(), Stderr::Collected, &["--allow-second-daemon"]);
    assert_eq!(request(allowed.addr, "GET", "/healthz", None, None).status, 200);
    assert!(allowed.terminate(Duration::from_secs(5)).success());

    // A daemon killed outright leaves its lock file, but not its lock.
    signal(first.pid(), "KILL");
    wait_exit(&mut first.child, DEADLINE, "the killed daemon");
    assert!(dir.path().join("daemon.lock").exists());
    let mut next = Daemon::start(dir.path(), Stderr::Collected, &[]);
    assert_eq!(request(next.addr, "GET", "/v1/meshes/default/tasks/t1", Some(&token), None).status, 200);
    assert!(next.terminate(Duration::from_secs(5)).success());
}
