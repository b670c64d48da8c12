//! End-to-end tests of `agentmesh work`, of the CLI against a real daemon and of
//! `agentmesh demo`: every test runs the real binaries as processes (`agentmesh
//! serve`, workers, a coordinator's commands, the demo) on a temporary data dir.
//!
//! Nothing here asserts on timing. Waits have generous deadlines and end as soon
//! as what they wait for has happened; signals are sent with `kill(2)`.

use super::agentmesh;
use super::cli::Run;
use crate::daemon_log::DaemonLog;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// How long any wait may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(60);

/// Runs the binary on `data_dir` with `args` and waits for it.
fn run(data_dir: &Path, args: &[&str]) -> Run {
    let output = agentmesh()
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    Run::from_output(output)
}

/// Sends `signal` (`INT`, `TERM`) to a process.
fn signal(child: &Child, signal: &str) {
    agentmesh_test_support::signal(child.id(), signal)
        .unwrap_or_else(|err| panic!("kill -{signal} {}: {err}", child.id()));
}

/// Waits for a process to exit, killing it and failing the test at the deadline.
#[track_caller]
fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    let until = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("{what} did not exit within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A daemon (`agentmesh serve`) on a loopback port of its own, over a temp data dir.
struct Daemon {
    dir: TempDir,
    child: Child,
    url: String,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (child, log) = DaemonLog::spawn(
            agentmesh().args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(dir.path()),
        );
        let url = log.address(DEADLINE);
        Daemon { dir, child, url }
    }

    fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn token_file(&self) -> PathBuf {
        self.dir.path().join("daemon.token")
    }

    /// Runs a client command against the daemon.
    fn remote(&self, args: &[&str]) -> Run {
        let mut all = vec!["--server", &self.url];
        let token = self.token_file();
        let token = token.to_str().expect("UTF-8 temp path");
        all.extend(["--token-file", token]);
        all.extend(args);
        run(self.data_dir(), &all)
    }

    /// Spawns a worker against the daemon; its output goes to files in `logs`.
    fn worker(&self, logs: &Path, session: &str, command: &[&str]) -> Child {
        let out = std::fs::File::create(logs.join(format!("{session}.out"))).expect("log file");
        let err = std::fs::File::create(logs.join(format!("{session}.err"))).expect("log file");
        agentmesh()
            .args(["--server", &self.url, "--token-file"])
            .arg(self.token_file())
            .args(["work", "--node", "n1", "--session", session, "--json", "--"])
            .args(command)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("a worker starts")
    }

    /// Stops the daemon with SIGTERM and asserts a clean exit.
    fn stop(mut self) {
        signal(&self.child, "TERM");
        let status = wait_exit(&mut self.child, "the daemon");
        assert!(status.success(), "the daemon exits 0 on SIGTERM, got {status}");
    }
}

#[test]
fn two_workers_run_a_coordinators_tasks_and_each_completion_arrives_once() {
    let daemon = Daemon::start();
    let coordinator = ["--coordinator-daemon", "mach_X", "--coordinator-run", "run-1"];
    for (id, message, deps) in [
        ("t1", "alpha", &[][..]),
        ("t2", "beta", &[][..]),
        ("t3", "gamma", &["--depends-on", "t1", "--depends-on", "t2"][..]),
    ] {
        let mut args = vec!["task", "add", message, "--id", id, "--json"];
        args.extend(coordinator);
        args.extend(deps);
        daemon.remote(&args).ok();
    }

    let logs = tempfile::tempdir().expect("a temp dir");
    let script = r#"printf 'did %s\n' "$(printf '%s' "$AGENTMESH_TASK_MESSAGE" | tr a-z A-Z)""#;
    let mut workers: Vec<(&str, Child)> = ["w1", "w2"]
        .into_iter()
        .map(|session| (session, daemon.worker(logs.path(), session, &["sh", "-c", script])))
        .collect();

    let expected = |message: &str| format!("did {}", message.to_uppercase());
    let mut seen: Vec<(String, String)> = Vec::new();
    let until = Instant::now() + DEADLINE;
    while seen.len() < 3 {
        assert!(Instant::now() < until, "only these completions arrived in time: {seen:?}");
        let drain = daemon
            .remote(&["events", "watch", "--daemon", "mach_X", "--run", "run-1", "--timeout", "5", "--json"])
            .ok()
            .json();
        for event in drain["events"].as_array().expect("an events array") {
            assert_eq!(event["event"], "agent:generating_completed", "{event}");
            let metadata = &event["payload"]["metadataEvent"];
            let task = metadata["taskId"].as_str().expect("a task id").to_owned();
            let summary = metadata["finalSummary"].as_str().expect("a summary").to_owned();
            assert!(seen.iter().all(|(id, _)| *id != task), "{task} completed twice: {seen:?}");
            seen.push((task, summary));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("t1".to_owned(), expected("alpha")),
            ("t2".to_owned(), expected("beta")),
            ("t3".to_owned(), expected("gamma"))
        ]
    );
    let last =
        daemon.remote(&["events", "drain", "--daemon", "mach_X", "--run", "run-1", "--json"]).ok().json();
    assert_eq!(last["events"], Value::Array(Vec::new()), "nothing is delivered twice: {last}");

    let ledger = daemon.remote(&["ledger", "tail", "--limit", "100", "--json"]).ok().json();
    let count = |kind: &str, task: &str| {
        ledger
            .as_array()
            .expect("a ledger array")
            .iter()
            .filter(|e| e["kind"] == kind && e["payload"]["taskId"] == task)
            .count()
    };
    for task in ["t1", "t2", "t3"] {
        for kind in ["task_dispatched", "task_claimed", "task_completed"] {
            assert_eq!(count(kind, task), 1, "one {kind} for {task} in {ledger:#}");
        }
    }
    let t3 = daemon.remote(&["task", "show", "t3", "--json"]).ok().json();
    assert_eq!(t3["status"], "completed");

    for (session, worker) in &mut workers {
        signal(worker, "INT");
        let status = wait_exit(worker, session);
        let err = std::fs::read_to_string(logs.path().join(format!("{session}.err"))).unwrap_or_default();
        assert!(status.success(), "worker {session} exits 0 on SIGINT, got {status}\n{err}");
        let out = std::fs::read_to_string(logs.path().join(format!("{session}.out"))).expect("worker stdout");
        let summary: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("one JSON document ({e}): {out}"));
        assert_eq!(summary["failed"], 0, "{summary}");
    }
    daemon.stop();
}

/// A worker that keeps going reports each task and claims the next in one
/// `complete-and-claim` request: no report goes to `/completions` on its own.
#[test]
fn a_worker_chains_each_report_with_its_next_claim() {
    let daemon = Daemon::start();
    for id in ["t1", "t2", "t3"] {
        daemon.remote(&["task", "add", "chained work", "--id", id, "--json"]).ok();
    }
    let logs = tempfile::tempdir().expect("a temp dir");
    let mut worker = daemon.worker(logs.path(), "w1", &["sh", "-c", "echo done"]);
    for id in ["t1", "t2", "t3"] {
        wait_status(daemon.data_dir(), id, "completed");
    }
    signal(&worker, "INT");
    let status = wait_exit(&mut worker, "the worker");
    assert!(status.success(), "the worker exits 0 on SIGINT, got {status}");
    let out = std::fs::read_to_string(logs.path().join("w1.out")).expect("worker stdout");
    let summary: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("one JSON document ({e}): {out}"));
    assert_eq!((&summary["completed"], &summary["failed"]), (&Value::from(3), &Value::from(0)), "{summary}");

    let token = std::fs::read_to_string(daemon.token_file()).expect("the token file");
    let metrics = reqwest::blocking::Client::new()
        .get(format!("{}/metrics", daemon.url))
        .bearer_auth(token.trim())
        .send()
        .and_then(|r| r.text())
        .expect("the daemon's metrics");
    let requests = |route: &str| {
        let series = format!(
            "agentmesh_http_requests_total{{route=\"/v1/meshes/{{mesh}}/{route}\",method=\"POST\",status=\"200\"}} "
        );
        metrics.lines().find_map(|line| line.strip_prefix(&series)).map(|n| n.trim().to_owned())
    };
    assert_eq!(requests("complete-and-claim").as_deref(), Some("3"), "three chained reports in\n{metrics}");
    assert_eq!(requests("completions"), None, "no report on its own in\n{metrics}");
    daemon.stop();
}

/// A TCP proxy in front of `daemon_url` that loses one answer: the first
/// `complete-and-claim` request is passed on, the daemon commits it, and the proxy
/// closes the worker's connection instead of passing the answer back. Returns the
/// proxy's URL and whether it has lost the answer yet.
fn proxy_losing_one_chained_answer(daemon_url: &str) -> (String, Arc<AtomicBool>) {
    let upstream = daemon_url.trim_start_matches("http://").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let url = format!("http://{}", listener.local_addr().expect("proxy address"));
    let lost = Arc::new(AtomicBool::new(false));
    let lost_once = Arc::clone(&lost);
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(server) = TcpStream::connect(&upstream) else { return };
            // Set once this connection has carried the request whose answer is lost.
            let armed = Arc::new(AtomicBool::new(false));
            let (mut from_client, mut to_server) =
                (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
            let (armed_up, lost_up) = (Arc::clone(&armed), Arc::clone(&lost_once));
            std::thread::spawn(move || {
                let mut buf = [0_u8; 64 * 1024];
                while let Ok(n @ 1..) = from_client.read(&mut buf) {
                    let chunk = &buf[..n];
                    if !lost_up.load(Ordering::SeqCst)
                        && chunk.windows(19).any(|w| w == b"/complete-and-claim")
                    {
                        armed_up.store(true, Ordering::SeqCst);
                    }
                    if to_server.write_all(chunk).is_err() {
                        break;
                    }
                }
                let _ = to_server.shutdown(Shutdown::Write);
            });
            let (mut from_server, mut to_client, lost_down) = (server, client, Arc::clone(&lost_once));
            std::thread::spawn(move || {
                let mut buf = [0_u8; 64 * 1024];
                while let Ok(n @ 1..) = from_server.read(&mut buf) {
                    if armed.load(Ordering::SeqCst) && !lost_down.swap(true, Ordering::SeqCst) {
                        let _ = to_client.shutdown(Shutdown::Both);
                        let _ = from_server.shutdown(Shutdown::Both);
                        return;
                    }
                    if to_client.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = to_client.shutdown(Shutdown::Write);
            });
        }
    });
    (url, lost)
}

/// When the answer to a chained report is lost, the retried report finds the task
/// already completed, and the worker takes over the task the lost answer claimed
/// for its session instead of leaving it stranded until its lease runs out.
#[test]
fn a_worker_takes_over_the_task_a_lost_chained_answer_claimed() {
    let daemon = Daemon::start();
    for id in ["t1", "t2", "t3"] {
        daemon.remote(&["task", "add", "chained work", "--id", id, "--json"]).ok();
    }
    let (proxy, lost) = proxy_losing_one_chained_answer(&daemon.url);
    let logs = tempfile::tempdir().expect("a temp dir");
    let err_log = logs.path().join("w1.err");
    let mut worker = agentmesh()
        .args(["--server", &proxy, "--token-file"])
        .arg(daemon.token_file())
        .args(["work", "--node", "n1", "--session", "w1", "--json", "--", "sh", "-c", "echo done"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(logs.path().join("w1.out")).expect("log file"))
        .stderr(std::fs::File::create(&err_log).expect("log file"))
        .spawn()
        .expect("a worker starts");
    for id in ["t1", "t2", "t3"] {
        wait_status(daemon.data_dir(), id, "completed");
    }
    signal(&worker, "INT");
    let status = wait_exit(&mut worker, "the worker");
    let err = std::fs::read_to_string(&err_log).unwrap_or_default();
    assert!(status.success(), "the worker exits 0 on SIGINT, got {status}\n{err}");
    assert!(lost.load(Ordering::SeqCst), "the proxy lost a chained answer\n{err}");
    assert!(err.contains("taking over the task a lost answer had claimed"), "{err}");
    let out = std::fs::read_to_string(logs.path().join("w1.out")).expect("worker stdout");
    let summary: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("one JSON document ({e}): {out}"));
    assert_eq!((&summary["completed"], &summary["failed"]), (&Value::from(3), &Value::from(0)), "{summary}");
    let ledger = daemon.remote(&["ledger", "tail", "--limit", "100", "--json"]).ok().json();
    for task in ["t1", "t2", "t3"] {
        let completed = ledger
            .as_array()
            .expect("a ledger array")
            .iter()
            .filter(|e| e["kind"] == "task_completed" && e["payload"]["taskId"] == task)
            .count();
        assert_eq!(completed, 1, "{task} completed once in {ledger:#}");
    }
    daemon.stop();
}

#[test]
fn reads_print_the_same_bytes_with_and_without_the_daemon() {
    let daemon = Daemon::start();
    let dir = daemon.data_dir();
    run(dir, &["mission", "add", "m1", "--title", "Harden login", "--goal", "no flaky tests"]).ok();
    run(dir, &["task", "add", "first", "--id", "t1", "--mission", "m1", "--tag", "os=linux"]).ok();
    run(dir, &["task", "add", "second", "--id", "t2", "--depends-on", "t1", "--priority", "high"]).ok();
    run(dir, &["claim", "--node", "n1", "--session", "w1", "--tag", "os=linux"]).ok();
    run(dir, &["complete", "--session", "w1", "--summary", "done"]).ok();

    for args in [
        &["task", "show", "t1", "--json"][..],
        &["task", "list", "--json"],
        &["ledger", "tail", "--json"],
        &["mission", "show", "m1", "--json"],
        &["status", "--json"],
        &["meshes", "--json"],
        &["meshes"],
    ] {
        let local = run(dir, args).ok();
        let remote = daemon.remote(args).ok();
        assert_eq!(local.stdout, remote.stdout, "{args:?} differs with --server");
    }
    daemon.stop();
}

#[test]
fn a_wrong_token_is_unauthorized_and_a_missing_daemon_is_named() {
    let daemon = Daemon::start();
    let wrong = daemon.data_dir().join("wrong.token");
    std::fs::write(&wrong, "not-the-token\n").expect("write a token file");
    let refused = run(
        daemon.data_dir(),
        &["--server", &daemon.url, "--token-file", wrong.to_str().unwrap(), "task", "list", "--json"],
    );
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_eq!(refused.json()["error"]["code"], "unauthorized", "{}", refused.stdout);
    daemon.stop();

    // A port that was free a moment ago: nothing listens there.
    let addr = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
    let nobody = format!("http://{addr}");
    let dir = tempfile::tempdir().expect("a temp dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "t").expect("write a token file");
    let down =
        run(dir.path(), &["--server", &nobody, "--token-file", token.to_str().unwrap(), "task", "list"]);
    assert_eq!(down.code, 1, "{}", down.stderr);
    assert!(down.stderr.contains(&addr.to_string()), "the error names {addr}: {}", down.stderr);
}

#[test]
fn work_once_fails_a_task_whose_command_fails_naming_the_exit_status() {
    let dir = tempfile::tempdir().expect("a temp dir");
    run(dir.path(), &["task", "add", "break things", "--id", "t1"]).ok();
    let worked = run(
        dir.path(),
        &[
            "work",
            "--node",
            "n1",
            "--session",
            "w1",
            "--once",
            "--json",
            "--",
            "sh",
            "-c",
            "echo broken >&2; exit 3",
        ],
    )
    .ok();
    let summary = worked.json();
    assert_eq!((summary["completed"].as_u64(), summary["failed"].as_u64()), (Some(0), Some(1)), "{summary}");
    assert_eq!(summary["tasks"][0]["exitCode"], 3);

    let task = run(dir.path(), &["task", "show", "t1", "--json"]).ok().json();
    assert_eq!(task["status"], "failed");
    let reason = task["failureReason"].as_str().expect("a failure reason");
    assert!(reason.contains("exit status 3"), "{reason}");
    assert_eq!(task["finalSummary"], "broken", "stderr is the summary when stdout is empty");
}

#[test]
fn work_once_with_nothing_to_claim_says_so_and_exits_0() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let human = run(dir.path(), &["work", "--node", "n1", "--session", "w1", "--once", "--", "true"]).ok();
    assert!(human.stdout.contains("nothing to claim"), "{}", human.stdout);
    let json =
        run(dir.path(), &["work", "--node", "n1", "--session", "w1", "--once", "--json", "--", "true"]).ok();
    assert_eq!(json.json(), serde_json::json!({"completed": 0, "failed": 0, "tasks": []}));
}

#[test]
fn work_substitutes_the_message_and_id_and_feeds_the_message_on_stdin() {
    let dir = tempfile::tempdir().expect("a temp dir");
    run(dir.path(), &["task", "add", "paint it {id} blue", "--id", "t1", "--mesh", "m"]).ok();
    let script = r#"printf '%s|%s|%s|%s|%s|' "$0" "$1" "$AGENTMESH_TASK_ID" "$AGENTMESH_MESH" "$AGENTMESH_TASK_EPOCH"; cat"#;
    run(
        dir.path(),
        &[
            "work",
            "--mesh",
            "m",
            "--node",
            "n1",
            "--session",
            "w1",
            "--once",
            "--",
            "sh",
            "-c",
            script,
            "{message}",
            "id={id}",
        ],
    )
    .ok();
    let task = run(dir.path(), &["task", "show", "t1", "--mesh", "m", "--json"]).ok().json();
    assert_eq!(task["status"], "completed");
    assert_eq!(task["finalSummary"], "paint it {id} blue|id=t1|t1|m|1|paint it {id} blue");
}

/// Waits until `task` of the data dir has `status`.
#[track_caller]
fn wait_status(dir: &Path, task: &str, status: &str) {
    let until = Instant::now() + DEADLINE;
    loop {
        let shown = run(dir, &["task", "show", task, "--json"]).ok().json();
        if shown["status"] == status {
            return;
        }
        assert!(Instant::now() < until, "{task} never became {status}: {shown}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A command that runs until the file named by its first argument exists.
const WAIT_FOR_FILE: &str = r#"while [ ! -e "$0" ]; do sleep 0.05; done; echo finished"#;

/// A command that prints `step 1` to `step 3`, each once the file named by its
/// first argument with `.N` appended exists, and exits once `.4` does.
const THREE_STEPS: &str = r#"for i in 1 2 3 4; do while [ ! -e "$0.$i" ]; do sleep 0.05; done; [ $i -lt 4 ] && echo step $i; done; true"#;

#[test]
fn a_running_commands_last_output_line_is_its_tasks_progress_while_it_runs() {
    let daemon = Daemon::start();
    let logs = tempfile::tempdir().expect("a temp dir");
    let gate = logs.path().join("gate");
    daemon.remote(&["task", "add", "three steps", "--id", "t1"]).ok();
    let gate_arg = gate.to_str().expect("UTF-8 temp path");
    let mut worker = daemon.worker(logs.path(), "w1", &["sh", "-c", THREE_STEPS, gate_arg]);

    for step in 1..=3 {
        std::fs::write(format!("{gate_arg}.{step}"), "").expect("open the gate");
        let want = format!("step {step}");
        let until = Instant::now() + DEADLINE;
        loop {
            let task = daemon.remote(&["task", "show", "t1", "--json"]).ok().json();
            if task["progress"]["note"] == want.as_str() {
                assert_eq!(task["status"], "assigned", "the step shows while the command runs: {task}");
                let human = daemon.remote(&["task", "show", "t1"]).ok().stdout;
                let line = human.lines().find(|l| l.starts_with("progress")).unwrap_or_default();
                assert!(
                    line.ends_with(&format!(" {want} (at {})", task["progress"]["at"].as_str().unwrap())),
                    "{human}"
                );
                break;
            }
            assert!(Instant::now() < until, "{want:?} never showed as the task's progress: {task}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    std::fs::write(format!("{gate_arg}.4"), "").expect("let the command end");
    wait_status(daemon.data_dir(), "t1", "completed");
    signal(&worker, "INT");
    assert!(wait_exit(&mut worker, "the worker").success());

    let ledger = daemon.remote(&["ledger", "tail", "--json"]).ok().json();
    let trail: Vec<&str> = ledger
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["kind"] == "task_progress")
        .filter_map(|e| e["payload"]["note"].as_str())
        .collect();
    assert_eq!(trail, ["step 1", "step 2", "step 3"], "the ledger keeps the trail: {ledger}");
    let task = daemon.remote(&["task", "show", "t1", "--json"]).ok().json();
    assert_eq!(task["finalSummary"], "step 1\nstep 2\nstep 3", "{task}");
    daemon.stop();
}

#[test]
fn sigint_lets_the_running_command_finish_reports_it_and_takes_no_more_work() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let go = dir.path().join("go");
    run(dir.path(), &["task", "add", "first", "--id", "t1"]).ok();
    run(dir.path(), &["task", "add", "second", "--id", "t2"]).ok();
    let mut worker = agentmesh()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["work", "--node", "n1", "--session", "w1", "--json", "--", "sh", "-c", WAIT_FOR_FILE])
        .arg(&go)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a worker starts");
    wait_status(dir.path(), "t1", "assigned");
    signal(&worker, "INT");
    std::fs::write(&go, "").expect("release the command");
    let status = wait_exit(&mut worker, "the worker");
    let output = worker.wait_with_output().expect("worker output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(status.success(), "exit 0 after finishing the running task, got {status}\n{stderr}");
    let summary: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(summary["completed"], 1, "{summary}");
    let t1 = run(dir.path(), &["task", "show", "t1", "--json"]).ok().json();
    assert_eq!((t1["status"].as_str(), t1["finalSummary"].as_str()), (Some("completed"), Some("finished")));
    let t2 = run(dir.path(), &["task", "show", "t2", "--json"]).ok().json();
    assert_eq!(t2["status"], "pending", "no new work after the signal");
}

#[test]
fn a_task_taken_away_kills_the_command_and_reports_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let never = dir.path().join("never");
    run(dir.path(), &["task", "add", "long job", "--id", "t1"]).ok();
    let mut worker = agentmesh()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["work", "--node", "n1", "--session", "w1", "--lease", "3", "--once", "--json", "--"])
        .args(["sh", "-c", WAIT_FOR_FILE])
        .arg(&never)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a worker starts");
    wait_status(dir.path(), "t1", "assigned");
    run(dir.path(), &["task", "cancel", "t1", "--reason", "changed my mind"]).ok();
    let status = wait_exit(&mut worker, "the worker");
    let output = worker.wait_with_output().expect("worker output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(status.success(), "{status}\n{stderr}");
    let summary: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(summary["tasks"][0]["status"], "taken_away", "{summary}\n{stderr}");
    assert_eq!((summary["completed"].as_u64(), summary["failed"].as_u64()), (Some(0), Some(0)));
    let t1 = run(dir.path(), &["task", "show", "t1", "--json"]).ok().json();
    assert_eq!(t1["status"], "cancelled");
}

#[test]
fn a_worker_killed_mid_task_loses_it_to_the_reaper_and_its_late_completion_is_stale() {
    let daemon = Daemon::start();
    daemon.remote(&["task", "add", "a long job", "--id", "t1", "--json"]).ok();
    let logs = tempfile::tempdir().expect("a temp dir");
    let pid_file = logs.path().join("command.pid");
    // The first worker's command records its pid and sleeps: it outlives its worker,
    // as an agent process would, and is cleaned up at the end.
    let mut doomed = agentmesh()
        .args(["--server", &daemon.url, "--token-file"])
        .arg(daemon.token_file())
        .args(["work", "--node", "n1", "--session", "wA", "--lease", "3", "--"])
        .args(["sh", "-c", r#"echo $$ > "$0"; exec sleep 120"#])
        .arg(&pid_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the first worker starts");
    let until = Instant::now() + DEADLINE;
    let claimed = loop {
        let shown = daemon.remote(&["task", "show", "t1", "--json"]).ok().json();
        if shown["status"] == "assigned" && pid_file.exists() {
            break shown;
        }
        assert!(Instant::now() < until, "the first worker never started t1: {shown}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(claimed["assignedSessionId"], "wA", "{claimed}");
    let stale_epoch = claimed["dispatchNonce"].as_u64().expect("a fencing epoch").to_string();

    signal(&doomed, "KILL");
    wait_exit(&mut doomed, "the killed worker");

    // The second worker is waiting for work before the lease runs out; the daemon's
    // reaper hands it the task once the dead worker's lease has expired.
    let mut rescuer = daemon.worker(logs.path(), "wB", &["sh", "-c", "echo finished by wB"]);
    let until = Instant::now() + DEADLINE;
    let done = loop {
        let shown = daemon.remote(&["task", "show", "t1", "--json"]).ok().json();
        if shown["status"] == "completed" {
            break shown;
        }
        assert!(Instant::now() < until, "t1 was never completed by the second worker: {shown}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(done["assignedSessionId"], "wB", "{done}");
    signal(&rescuer, "INT");
    assert!(wait_exit(&mut rescuer, "the second worker").success());

    let late = daemon.remote(&[
        "complete",
        "--session",
        "wA",
        "--task",
        "t1",
        "--epoch",
        &stale_epoch,
        "--summary",
        "too late",
        "--json",
    ]);
    assert_eq!(late.code, 2, "the late completion is refused: {} {}", late.stdout, late.stderr);
    assert_eq!(late.json()["error"]["code"], "stale_epoch", "{}", late.stdout);
    let after = daemon.remote(&["task", "show", "t1", "--json"]).ok().json();
    assert_eq!(after["status"], "completed", "{after}");
    assert_ne!(after["finalSummary"].as_str(), Some("too late"), "{after}");

    let kinds = |kind: &str| -> usize {
        daemon
            .remote(&["ledger", "tail", "--kind", kind, "--json"])
            .ok()
            .json()
            .as_array()
            .expect("entries")
            .len()
    };
    assert_eq!(kinds("task_reclaimed"), 1, "the reaper took the task back once");
    assert_eq!(kinds("completion_refused"), 1, "the stale completion is on the record");

    if let Ok(pid) = std::fs::read_to_string(&pid_file)
        && let Ok(pid) = pid.trim().parse()
    {
        let _ = agentmesh_test_support::signal(pid, "KILL");
    }
    daemon.stop();
}

#[test]
fn a_command_that_leaves_a_process_holding_its_output_is_completed_and_the_process_ended() {
    let dir = tempfile::tempdir().expect("a temp dir");
    run(dir.path(), &["task", "add", "leave something behind", "--id", "t1"]).ok();
    let pid_file = dir.path().join("background.pid");
    // The background sleep inherits stdout and would keep the worker's reader open.
    let script = r#"sleep 120 & echo $! > "$0"; echo done"#;
    let pid_path = pid_file.to_str().expect("UTF-8 temp path");
    let worked = run(
        dir.path(),
        &["work", "--node", "n1", "--session", "w1", "--once", "--json", "--", "sh", "-c", script, pid_path],
    )
    .ok();
    assert_eq!(worked.json()["completed"], 1, "{}", worked.stdout);
    let task = run(dir.path(), &["task", "show", "t1", "--json"]).ok().json();
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["finalSummary"], "done", "{task}");
    let pid = std::fs::read_to_string(&pid_file).expect("the command wrote its background pid");
    let pid = pid.trim();
    // Ended: gone, or a zombie waiting for whoever adopted it to reap it.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    let running = state.as_deref().is_some_and(|stat| {
        stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    });
    if running && let Ok(pid) = pid.parse() {
        let _ = agentmesh_test_support::signal(pid, "KILL");
    }
    assert!(!running, "the process left holding the output was ended with the task: {state:?}");
}

#[test]
fn a_waiting_worker_reports_itself_idle_and_removes_the_report_when_it_stops() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut worker = agentmesh()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["work", "--node", "n1", "--session", "w-idle", "--provider", "sh", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a worker starts");
    let until = Instant::now() + DEADLINE;
    let listed = loop {
        // Until the worker has created the database, the read is refused.
        let read = run(dir.path(), &["sessions", "--json"]);
        let sessions = if read.code == 0 { read.json() } else { serde_json::json!([]) };
        if sessions.as_array().is_some_and(|s| !s.is_empty()) {
            break sessions;
        }
        assert!(Instant::now() < until, "the waiting worker never reported itself idle: {sessions}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (&listed[0]["sessionId"], &listed[0]["providerType"]),
        (&Value::from("w-idle"), &Value::from("sh"))
    );
    signal(&worker, "TERM");
    assert!(wait_exit(&mut worker, "the worker").success());
    let after = run(dir.path(), &["sessions", "--json"]).ok().json();
    assert_eq!(after, serde_json::json!([]), "a worker that stopped leaves no idle report behind");
}

#[test]
fn the_records_around_the_queue_read_and_move_the_same_through_the_daemon() {
    let daemon = Daemon::start();
    let dir = daemon.data_dir();
    run(dir, &["events", "push", "--event", "agent:stopped", "--task", "t1", "--node", "n1"]).ok();
    run(dir, &["events", "drain", "--daemon", "mach_A", "--run", "run-1", "--enforce"]).ok();
    {
        use agentmesh_store::prelude::*;
        let store = agentmesh_sqlite::SqliteStore::open_data_dir(dir).expect("the store opens");
        let at = agentmesh_core::Timestamp::from_millis(1_735_689_600_000);
        let far = agentmesh_core::Timestamp::parse_iso("2999-01-01T00:00:00.000Z").expect("an instant");
        let delivery = agentmesh_core::NewSessionDelivery {
            id: "d1".into(),
            session_id: Some("s1".into()),
            kind: "message".into(),
            message: "rebase first".into(),
            ..Default::default()
        };
        store.insert_session_delivery("default", &delivery, at).unwrap();
        let dispatch = agentmesh_core::NewDirectDispatch {
            task_id: "t1".into(),
            session_id: Some("s1".into()),
            message: "do t1".into(),
            via: "api".into(),
            ..Default::default()
        };
        store.record_direct_dispatch("default", &dispatch, at).unwrap();
        let idle = agentmesh_core::IdleSession {
            mesh_id: "default".into(),
            node_id: "n1".into(),
            session_id: "s1".into(),
            provider_type: "sh".into(),
            expires_at_ms: far.millis(),
            metadata: None,
        };
        store.write_idle_session(agentmesh_store::IdleWrite::Report(&idle)).unwrap();
        let fp = "default::agent:stopped::t1::genuine";
        agentmesh_store::conformance::support::seed_fingerprint(&store, "default", fp, far);
        let call = agentmesh_store::ToolCall {
            mesh_id: "default".into(),
            tool: "list_tasks".into(),
            session_id: None,
            caller_role: Some("coordinator".into()),
        };
        store.record_tool_call(&call, agentmesh_core::RateGuard::default(), at).unwrap();
    }

    for args in [
        &["events", "held", "--task", "t1", "--json"][..],
        &["fingerprints", "--task", "t1", "--json"],
        &["conflicts", "--json"],
        &["deliveries", "show", "d1", "--json"],
        &["dispatches", "show", "t1", "--json"],
        &["tool-calls", "--within", "100000d", "--json"],
        &["sessions", "--json"],
    ] {
        let local = run(dir, args).ok();
        let remote = daemon.remote(args).ok();
        assert_eq!(local.stdout, remote.stdout, "{args:?} differs with --server");
    }
    let one = |args: &[&str]| daemon.remote(args).ok().json();
    assert_eq!(one(&["deliveries", "mark", "d1", "acked", "--json"])["changed"], true);
    assert_eq!(one(&["dispatches", "mark", "acked", "--task", "t1", "--json"])["changed"], 1);
    assert_eq!(one(&["dispatches", "mark-stale", "--older-than", "1s", "--json"])["markedStale"], 0);
    assert_eq!(one(&["dispatches", "remove", "t1", "--json"])["removed"], 1);
    assert_eq!(one(&["sessions", "remove", "--node", "n1", "--session", "s1", "--json"])["removed"], true);
    assert_eq!(one(&["events", "requeue-held", "--all", "--json"])["requeued"], 1);
    let refused = daemon.remote(&["events", "requeue-held", "--json"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_eq!(refused.json()["error"]["code"], "invalid_input");
    assert_eq!(run(dir, &["deliveries", "show", "d1", "--json"]).ok().json()["status"], "acked");
    assert_eq!(run(dir, &["events", "held", "--json"]).ok().json(), serde_json::json!([]));
    daemon.stop();
}

// ── agentmesh demo ──────────────────────────────────────────────────────────

/// The demo's tasks by ref, with the refs each depends on.
const DEMO_PLAN: [(&str, &[&str]); 5] = [
    ("plan", &[]),
    ("lexer", &["plan"]),
    ("parser", &["plan"]),
    ("tests", &["lexer", "parser"]),
    ("notes", &["tests"]),
];

#[test]
fn the_demo_runs_the_whole_job_and_the_coordinator_gets_each_completion_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data_dir = dir.path().join("mesh");
    let demo = run(&data_dir, &["demo", "--json"]).ok();
    let report = demo.json();

    let tasks = report["tasks"].as_array().expect("a tasks array");
    let refs: Vec<&str> = tasks.iter().map(|t| t["ref"].as_str().expect("a ref")).collect();
    assert_eq!(refs.len(), DEMO_PLAN.len(), "{report:#}");
    for (reference, deps) in DEMO_PLAN {
        let at =
            refs.iter().position(|r| *r == reference).unwrap_or_else(|| panic!("no {reference}: {report:#}"));
        for dep in deps {
            let dep_at = refs.iter().position(|r| r == dep).expect("every dependency completed");
            assert!(dep_at < at, "{reference} arrived before its dependency {dep}: {refs:?}");
        }
        let task = &tasks[at];
        assert!(["worker-1", "worker-2"].contains(&task["session"].as_str().unwrap_or_default()), "{task}");
        assert!(task["summary"].as_str().is_some_and(|s| s.starts_with("done: ")), "{task}");
    }
    assert_eq!(report["coordinator"]["completions"], 5, "{report:#}");
    assert_eq!(report["dataDirRemoved"], false, "{report:#}");
    let workers = report["workers"].as_array().expect("a workers array");
    assert_eq!(workers.len(), 2, "{report:#}");
    let completed: u64 = workers.iter().map(|w| w["completed"].as_u64().expect("a count")).sum();
    assert_eq!(completed, 5, "{report:#}");
    assert!(workers.iter().all(|w| w["failed"] == 0), "{report:#}");
    assert!(demo.stderr.contains("completed by worker-"), "progress goes to stderr:\n{}", demo.stderr);

    // The data stayed where --data-dir put it: five completed tasks of the mission,
    // each claimed and completed once.
    let listed = run(&data_dir, &["task", "list", "--json"]).ok().json();
    let listed = listed.as_array().expect("a task list");
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert!(listed.iter().all(|t| t["status"] == "completed" && t["missionId"] == "demo"), "{listed:?}");
    let ledger = run(&data_dir, &["ledger", "tail", "--limit", "100", "--json"]).ok().json();
    for task in listed {
        for kind in ["task_claimed", "task_completed"] {
            let count = ledger
                .as_array()
                .expect("ledger entries")
                .iter()
                .filter(|e| e["kind"] == kind && e["payload"]["taskId"] == task["id"])
                .count();
            assert_eq!(count, 1, "one {kind} for {} in {ledger:#}", task["id"]);
        }
    }
}

#[test]
fn the_demo_uses_a_temporary_dir_removes_it_and_ignores_agentmesh_home() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().join("home");
    let agentmesh_home = dir.path().join("agentmesh-home");
    let output = agentmesh()
        .arg("demo")
        .env("HOME", &home)
        .env("AGENTMESH_HOME", &agentmesh_home)
        .stdin(Stdio::null())
        .output()
        .expect("the demo runs");
    let demo = Run::from_output(output).ok();
    assert!(demo.stdout.starts_with("demo passed: 5 of 5 tasks completed"), "{}", demo.stdout);
    assert!(demo.stdout.contains("each task's exactly once"), "{}", demo.stdout);
    // `daemon       http://ADDR (data dir DIR, removed at exit)`
    let temporary = demo
        .stderr
        .lines()
        .find_map(|line| line.split_once("(data dir ")?.1.strip_suffix(", removed at exit)"))
        .unwrap_or_else(|| panic!("the demo names its temporary data dir:\n{}", demo.stderr));
    assert!(!Path::new(temporary).exists(), "{temporary} is removed at exit");
    assert!(!home.exists() && !agentmesh_home.exists(), "the demo wrote nothing to the everyday data dir");
}

#[test]
fn the_demo_fails_with_a_clear_message_when_it_cannot_run() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "a file where a data dir should be").expect("a file");
    let refused = run(&file, &["demo"]);
    assert_ne!(refused.code, 0, "{}\n{}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("is a file, not a directory"), "{}", refused.stderr);

    let server = run(dir.path(), &["demo", "--server", "http://127.0.0.1:9", "--json"]);
    assert_eq!(server.code, 2, "{}\n{}", server.stdout, server.stderr);
    assert_eq!(server.json()["error"]["code"], "invalid_input", "{}", server.stdout);
    assert!(server.stderr.contains("server"), "{}", server.stderr);
}
