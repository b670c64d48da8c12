//! Several daemons on one PostgreSQL installation, as real processes: two
//! `agentmesh serve` with data dirs of their own on one fresh schema (dropped at
//! the end), with workers as `agentmesh work` processes or HTTP clients.
//!
//! - Sixteen worker processes, eight per daemon, take every task exactly once.
//! - A coordinator's watch waiting on one daemon is answered within 100 ms of a
//!   completion written through the other (the commit's NOTIFY wakes it; the
//!   fallback poll is a second).
//! - Sixteen clients on the two daemons reserve overlapping paths at once: the
//!   ledger never shows two overlapping holders where either is exclusive.
//! - The daemon the clients use is killed with SIGKILL under load: the clients go
//!   on through the other, no acknowledged write is lost, no task has two
//!   holders, and the survivor takes the upkeep over and reclaims the leases the
//!   dead daemon's sessions left.
//!
//! The server is `$AGENTMESH_TEST_DATABASE_URL`; without it the tests are
//! skipped (see `agentmesh_test_support`). The measured numbers are printed
//! (run with `--nocapture` to see them).

use super::agentmesh;
use crate::daemon_log::DaemonLog;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

/// How long any wait may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(120);
/// The mesh every test works in.
const MESH: &str = "ha";
/// The daemon's lease reaper interval (`UpkeepConfig::default`).
const REAPER_EVERY: Duration = Duration::from_secs(5);
/// What a daemon logs when it takes the upkeep leadership.
const LEADS: &str = "this daemon now runs the installation's upkeep";

use agentmesh_test_support::postgres::Schema;
use agentmesh_test_support::require_postgres;

/// A fresh installation on the server at a URL: a schema no other test uses,
/// dropped when this drops (after the daemons, which the tests drop first).
struct Installation {
    schema: Schema,
}

impl Installation {
    fn new(url: &str) -> Installation {
        Installation { schema: Schema::fresh(url, "am_daemons") }
    }

    fn url(&self) -> &str {
        self.schema.url()
    }

    fn name(&self) -> &str {
        self.schema.name()
    }

    fn client(&self) -> postgres::Client {
        postgres::Client::connect(self.url(), postgres::NoTls).expect("the test database")
    }

    /// Every task of the mesh: id → status.
    fn statuses(&self) -> HashMap<String, String> {
        let sql = format!("SELECT id, status FROM \"{}\".mesh_queue WHERE mesh_id = $1", self.name());
        self.client()
            .query(&sql, &[&MESH])
            .expect("read the queue")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    fn completed(&self) -> i64 {
        let sql = format!(
            "SELECT count(*) FROM \"{}\".mesh_queue WHERE mesh_id = $1 AND status = 'completed'",
            self.name()
        );
        self.client().query_one(&sql, &[&MESH]).expect("count").get(0)
    }

    /// The mesh's task entries in commit order: (kind, task id, payload).
    fn ledger(&self) -> Vec<(String, String, Value)> {
        let sql = format!(
            "SELECT kind, payload FROM \"{}\".mesh_event_ledger WHERE mesh_id = $1 ORDER BY seq",
            self.name()
        );
        self.client()
            .query(&sql, &[&MESH])
            .expect("read the ledger")
            .iter()
            .filter_map(|row| {
                let payload: Value = serde_json::from_str(row.get::<_, &str>(1)).expect("a JSON payload");
                let task = payload["taskId"].as_str()?.to_owned();
                Some((row.get(0), task, payload))
            })
            .collect()
    }
}

/// Where a daemon answers, and its token.
#[derive(Clone)]
struct Endpoint {
    url: String,
    token: String,
}

impl Endpoint {
    /// `POST /v1/meshes/MESH/{route}`: the status and the JSON answer, or why
    /// no answer came.
    fn post(
        &self,
        http: &reqwest::blocking::Client,
        route: &str,
        body: &Value,
    ) -> Result<(u16, Value), String> {
        let answer = http
            .post(format!("{}/v1/meshes/{MESH}/{route}", self.url))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .map_err(|err| err.to_string())?;
        let status = answer.status().as_u16();
        let text = answer.text().map_err(|err| err.to_string())?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    /// Like [`Endpoint::post`], expecting a 2xx.
    #[track_caller]
    fn ok(&self, http: &reqwest::blocking::Client, route: &str, body: &Value) -> Value {
        let (status, answer) =
            self.post(http, route, body).unwrap_or_else(|err| panic!("POST {route}: {err}"));
        assert!((200..300).contains(&status), "POST {route} answered {status}: {answer}");
        answer
    }

    /// A sample of `/metrics`.
    fn metric(&self, http: &reqwest::blocking::Client, name: &str) -> Option<f64> {
        let text =
            http.get(format!("{}/metrics", self.url)).bearer_auth(&self.token).send().ok()?.text().ok()?;
        text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }
}

fn http_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client")
}

/// `agentmesh serve` on the installation, on a loopback port and a data dir
/// of its own; keeps every stderr line with the instant it was read.
struct Daemon {
    dir: TempDir,
    child: Child,
    endpoint: Endpoint,
    log: DaemonLog,
}

impl Daemon {
    fn start(installation: &Installation) -> Daemon {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (child, log) = DaemonLog::spawn(
            agentmesh()
                // The leadership and the reaper's reclaims are logged at info.
                .env("RUST_LOG", "warn,agentmesh_postgres=info,agentmesh_daemon::upkeep=info")
                .arg("--database-url")
                .arg(installation.url())
                .args(["--database-schema", installation.name(), "--data-dir"])
                .arg(dir.path())
                .args(["serve", "--listen", "127.0.0.1:0"]),
        );
        let url = log.address(DEADLINE);
        let token = std::fs::read_to_string(dir.path().join("daemon.token")).expect("the token file");
        Daemon { dir, child, endpoint: Endpoint { url, token: token.trim().to_owned() }, log }
    }

    fn token_file(&self) -> PathBuf {
        self.dir.path().join("daemon.token")
    }

    /// When the daemon first logged a line holding every one of `needles`.
    fn logged(&self, needles: &[&str]) -> Option<Instant> {
        self.log.logged(needles)
    }

    /// Waits until [`Daemon::logged`] finds a line, up to `until`.
    fn wait_logged(&self, needles: &[&str], until: Instant) -> Option<Instant> {
        loop {
            if let Some(at) = self.logged(needles) {
                return Some(at);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn log_text(&self) -> String {
        self.log.text()
    }

    /// SIGKILL: no shutdown, no ROLLBACK; the connections just drop.
    fn kill(&mut self) -> Instant {
        self.child.kill().expect("kill the daemon");
        let at = Instant::now();
        self.child.wait().expect("reap the daemon");
        at
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends SIGINT to a process.
fn interrupt(child: &Child) {
    agentmesh_test_support::signal(child.id(), "INT")
        .unwrap_or_else(|err| panic!("kill -INT {}: {err}", child.id()));
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < until, "{what} did not happen within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
fn sixteen_worker_processes_on_two_daemons_take_each_task_exactly_once() {
    let url = require_postgres!();
    const TASKS: usize = 480;
    const WORKERS: usize = 16;
    let installation = Installation::new(&url);
    let daemons = [Daemon::start(&installation), Daemon::start(&installation)];
    let http = http_client();
    // Enqueued through both daemons, a batch at a time.
    for chunk in 0..4 {
        let tasks: Vec<Value> =
            (0..TASKS / 4).map(|i| json!({ "message": format!("task {chunk}.{i}") })).collect();
        daemons[chunk % 2].endpoint.ok(&http, "tasks/batch", &json!({ "tasks": tasks }));
    }

    let logs = tempfile::tempdir().expect("a temp dir");
    let began = Instant::now();
    let mut workers: Vec<(usize, Child)> = (0..WORKERS)
        .map(|k| {
            let daemon = &daemons[k % 2];
            let out = std::fs::File::create(logs.path().join(format!("w{k}.out"))).expect("log file");
            let err = std::fs::File::create(logs.path().join(format!("w{k}.err"))).expect("log file");
            let child = agentmesh()
                .args(["--server", &daemon.endpoint.url, "--mesh", MESH, "--token-file"])
                .arg(daemon.token_file())
                .args(["work", "--node", &format!("node-{k}"), "--session", &format!("worker-{k}"), "--json"])
                .args(["--", "true"])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("a worker starts");
            (k, child)
        })
        .collect();
    wait_until("every task completed", || installation.completed() == TASKS as i64);
    let took = began.elapsed();
    for (_, worker) in &workers {
        interrupt(worker);
    }

    let mut taken: HashMap<String, usize> = HashMap::new();
    let mut per_daemon = [0_usize; 2];
    for (k, worker) in &mut workers {
        let status = worker.wait().expect("wait for a worker");
        let err = std::fs::read_to_string(logs.path().join(format!("w{k}.err"))).unwrap_or_default();
        assert!(status.success(), "worker {k} exited with {status}:\n{err}");
        let out = std::fs::read_to_string(logs.path().join(format!("w{k}.out"))).expect("worker output");
        let summary: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("worker {k} printed {out:?}: {e}"));
        for task in summary["tasks"].as_array().expect("the worker's tasks") {
            assert_eq!(task["status"], "completed", "worker {k}: {task}");
            *taken.entry(task["id"].as_str().expect("a task id").to_owned()).or_default() += 1;
            per_daemon[*k % 2] += 1;
        }
    }
    let twice: Vec<_> = taken.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "tasks that two workers ran: {twice:?}");
    assert_eq!(taken.len(), TASKS, "every task ran once");
    assert!(per_daemon.iter().all(|n| *n > 0), "both daemons' workers took work: {per_daemon:?}");

    let statuses = installation.statuses();
    assert_eq!(statuses.len(), TASKS);
    assert!(statuses.values().all(|s| s == "completed"), "every task completed");
    let mut entries: HashMap<(String, String), usize> = HashMap::new();
    for (kind, task, _) in installation.ledger() {
        *entries.entry((kind, task)).or_default() += 1;
    }
    for id in statuses.keys() {
        for kind in ["task_dispatched", "task_claimed", "task_completed"] {
            let n = entries.get(&(kind.to_owned(), id.clone())).copied().unwrap_or(0);
            assert_eq!(n, 1, "{kind} entries of task {id}");
        }
    }
    let refused = entries.keys().filter(|(kind, _)| kind.ends_with("_refused")).count();
    assert_eq!(refused, 0, "no report was refused");
    println!(
        "{TASKS} tasks by {WORKERS} worker processes on two daemons in {:.2} s ({:.0} tasks/s; {} through A, {} through B)",
        took.as_secs_f64(),
        TASKS as f64 / took.as_secs_f64(),
        per_daemon[0],
        per_daemon[1]
    );
}

#[test]
fn a_watch_on_one_daemon_wakes_within_100ms_of_a_completion_through_the_other() {
    let url = require_postgres!();
    const TRIES: usize = 9;
    let installation = Installation::new(&url);
    let (a, b) = (Daemon::start(&installation), Daemon::start(&installation));
    let http = http_client();
    let coordinator = json!({ "daemonId": "mach_X", "runId": "run-1" });
    let mut latencies = Vec::new();
    let mut after_ack = Vec::new();
    for i in 0..TRIES {
        let task = b.endpoint.ok(
            &http,
            "tasks",
            &json!({ "message": format!("wake {i}"), "coordinator": coordinator }),
        );
        let id = task["id"].as_str().expect("the task's id").to_owned();
        let claim = b.endpoint.ok(&http, "claims", &json!({ "nodeId": "n1", "sessionId": "w1" }));
        assert_eq!(claim["task"]["id"], id.as_str(), "the one pending task is claimed");
        let epoch = claim["task"]["dispatchNonce"].as_u64().expect("an epoch");
        // Nothing else waits in the inbox: the watch can only answer with the completion.
        a.endpoint.ok(&http, "events/drain", &coordinator);

        let endpoint = a.endpoint.clone();
        let watch_body = coordinator.clone();
        let watcher = std::thread::spawn(move || {
            let answer = endpoint.ok(&http_client(), "events/watch?timeoutSecs=30", &watch_body);
            (Instant::now(), answer)
        });
        // The watch has drained once, found nothing and waits.
        wait_until("the watch waits", || {
            a.endpoint.metric(&http, "agentmesh_watches_waiting").is_some_and(|n| n >= 1.0)
        });
        let sent = Instant::now();
        let done =
            b.endpoint.ok(&http, "completions", &json!({ "sessionId": "w1", "taskId": id, "epoch": epoch }));
        let acked = Instant::now();
        assert_eq!(done["status"], "completed");
        let (answered, view) = watcher.join().expect("the watch thread");
        let events = view["events"].as_array().expect("the watch's events");
        assert!(
            events.iter().any(|e| e["payload"].to_string().contains(&id)),
            "the watch answered with the completion of {id}: {view}"
        );
        latencies.push(answered.saturating_duration_since(sent));
        after_ack.push(answered.saturating_duration_since(acked));
    }
    let mut sorted = latencies.clone();
    sorted.sort();
    let median = sorted[TRIES / 2];
    println!(
        "watch on A answered after a completion through B (from the request sent): {:?} ms; median {:.1} ms; \
         after the completion's answer: {:?} ms",
        latencies.iter().map(|d| millis(*d).round()).collect::<Vec<_>>(),
        millis(median),
        after_ack.iter().map(|d| millis(*d).round()).collect::<Vec<_>>()
    );
    assert!(median < Duration::from_millis(100), "median wake-up {median:?} (all: {latencies:?})");
    assert!(sorted[TRIES - 2] < Duration::from_millis(250), "more than one slow wake-up: {latencies:?}");
}

/// What one HTTP client of the failover test did.
#[derive(Default)]
struct ClientRun {
    /// Task ids whose enqueue was answered 2xx.
    enqueued: Vec<String>,
    /// Task ids whose completion was answered 2xx.
    completed: Vec<String>,
    /// Every claim answered with a task: (task id, epoch).
    claims: Vec<(String, u64)>,
    /// Claims whose answer was lost with the daemon (their task may be held by
    /// the session named).
    lost_claims: Vec<String>,
    /// Completions answered 2xx by the first daemon, then by the second.
    through: [u64; 2],
}

/// The client side of the failover: the daemon to use, moving to the second
/// for good once the first fails to answer.
struct Failover {
    endpoints: [Endpoint; 2],
    on: usize,
}

impl Failover {
    /// Sends `body`; `Err` when the first daemon gave no answer (the client has
    /// moved to the second and the caller decides what to resend). The second
    /// is retried on a failure of its own, up to a deadline.
    fn post(
        &mut self,
        http: &reqwest::blocking::Client,
        route: &str,
        body: &Value,
    ) -> Result<(u16, Value), ()> {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            match self.endpoints[self.on].post(http, route, body) {
                Ok((status, answer)) if status < 500 => return Ok((status, answer)),
                _ if self.on == 0 => {
                    self.on = 1;
                    return Err(());
                }
                failure => {
                    assert!(Instant::now() < until, "the second daemon keeps failing {route}: {failure:?}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
}

/// One client: enqueue a task, claim one, complete it; again until `stop`.
fn failover_client(
    k: usize,
    endpoints: [Endpoint; 2],
    lease_ms: u64,
    stop: &AtomicBool,
    done_on_a: &AtomicU64,
) -> ClientRun {
    let http = http_client();
    let mut daemon = Failover { endpoints, on: 0 };
    let mut run = ClientRun::default();
    let mut session = format!("client-{k}");
    for i in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // A client-chosen id: a resent enqueue whose first answer was lost
        // cannot make a second task.
        let id = format!("c{k}-{i}");
        let body = json!({ "id": id, "message": format!("client {k} task {i}") });
        let sent = daemon.post(&http, "tasks", &body).or_else(|()| daemon.post(&http, "tasks", &body));
        if let Ok((status, _)) = sent
            && (200..300).contains(&status)
        {
            run.enqueued.push(id);
        }

        let claim = json!({ "nodeId": format!("node-c{k}"), "sessionId": session, "leaseMs": lease_ms });
        let (status, answer) = match daemon.post(&http, "claims", &claim) {
            Ok(answered) => answered,
            Err(()) => {
                // The claim may have landed: its task is the lost session's
                // until the reaper takes it back. Go on as a new session.
                run.lost_claims.push(std::mem::replace(&mut session, format!("client-{k}-after-{i}")));
                continue;
            }
        };
        assert_eq!(status, 200, "claim answered {status}: {answer}");
        let task = &answer["task"];
        if task.is_null() {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let task_id = task["id"].as_str().expect("a task id").to_owned();
        let epoch = task["dispatchNonce"].as_u64().expect("an epoch");
        run.claims.push((task_id.clone(), epoch));

        let report = json!({ "sessionId": session, "taskId": task_id, "epoch": epoch, "summary": "done" });
        let on = daemon.on;
        let outcome = match daemon.post(&http, "completions", &report) {
            Ok(answered) => Some((on, answered)),
            // Resent as it was: if the first landed, this one is refused.
            Err(()) => daemon.post(&http, "completions", &report).ok().map(|answered| (1, answered)),
        };
        if let Some((on, (status, answer))) = outcome
            && (200..300).contains(&status)
        {
            assert_eq!(answer["status"], "completed", "{answer}");
            run.completed.push(task_id);
            run.through[on] += 1;
            if on == 0 {
                done_on_a.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    run
}

#[test]
fn killing_a_daemon_under_load_loses_no_acknowledged_write_and_the_other_takes_over_the_upkeep() {
    let url = require_postgres!();
    const CLIENTS: usize = 8;
    const STRANDED: usize = 4;
    const LEASE: Duration = Duration::from_secs(3);
    let installation = Installation::new(&url);
    let mut a = Daemon::start(&installation);
    // A started first and leads the upkeep; B waits for the lock.
    a.wait_logged(&[LEADS], Instant::now() + DEADLINE).expect("the first daemon leads the upkeep");
    let b = Daemon::start(&installation);
    let http = http_client();
    let tasks: Vec<Value> = (0..400).map(|i| json!({ "message": format!("prefilled {i}") })).collect();
    b.endpoint.ok(&http, "tasks/batch", &json!({ "tasks": tasks }));
    assert!(
        b.logged(&[LEADS]).is_none(),
        "the second daemon does not lead while the first lives:\n{}",
        b.log_text()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let done_on_a = Arc::new(AtomicU64::new(0));
    let lease_ms = u64::try_from(LEASE.as_millis()).unwrap();
    let load_began = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let endpoints = [a.endpoint.clone(), b.endpoint.clone()];
            let (stop, done_on_a) = (Arc::clone(&stop), Arc::clone(&done_on_a));
            std::thread::spawn(move || failover_client(k, endpoints, lease_ms, &stop, &done_on_a))
        })
        .collect();
    wait_until("150 completions through the first daemon", || done_on_a.load(Ordering::Relaxed) >= 150);

    // Sessions that claim through A with a short lease and never report.
    let stranded: Vec<String> = (0..STRANDED)
        .map(|j| {
            let claim = json!({ "nodeId": format!("node-s{j}"), "sessionId": format!("stranded-{j}"), "leaseMs": lease_ms });
            let answer = a.endpoint.ok(&http, "claims", &claim);
            answer["task"]["id"].as_str().expect("a stranded claim gets a task").to_owned()
        })
        .collect();
    let killed = a.kill();
    let on_a_for = killed.duration_since(load_began);

    let until = killed + DEADLINE;
    let leads = b
        .wait_logged(&[LEADS], until)
        .unwrap_or_else(|| panic!("B never took the upkeep over:\n{}", b.log_text()));
    let takeover = leads.saturating_duration_since(killed);
    let mut reclaims = Vec::new();
    for id in &stranded {
        let at = b
            .wait_logged(&["task back to pending", &format!("task={id}")], until)
            .unwrap_or_else(|| panic!("B never reclaimed stranded task {id}:\n{}", b.log_text()));
        reclaims.push(at.saturating_duration_since(killed));
    }
    // The clients go on through B a while longer.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let runs: Vec<ClientRun> = clients
        .into_iter()
        .map(|c| {
            c.join().unwrap_or_else(|_| panic!("a client failed; the second daemon's log:\n{}", b.log_text()))
        })
        .collect();
    let load_took = load_began.elapsed();

    // No acknowledged write lost.
    let statuses = installation.statuses();
    let (mut enqueued, mut completed, mut lost_claims) = (0, 0, 0);
    let mut through = [0, 0];
    let mut claims: HashSet<(String, u64)> = HashSet::new();
    for run in &runs {
        for id in &run.enqueued {
            assert!(statuses.contains_key(id), "acknowledged enqueue of {id} lost");
        }
        for id in &run.completed {
            assert_eq!(
                statuses.get(id).map(String::as_str),
                Some("completed"),
                "acknowledged completion of {id} lost"
            );
        }
        for claim in &run.claims {
            assert!(
                claims.insert(claim.clone()),
                "two claims answered with task {} at epoch {}",
                claim.0,
                claim.1
            );
        }
        enqueued += run.enqueued.len();
        completed += run.completed.len();
        lost_claims += run.lost_claims.len();
        through[0] += run.through[0];
        through[1] += run.through[1];
    }
    assert!(through[1] > 0, "the clients completed tasks through the second daemon");

    // No task had two holders: in commit order, a task is claimed only while
    // nobody holds it, and never twice at one epoch.
    let ledger = installation.ledger();
    let mut held: HashMap<&str, bool> = HashMap::new();
    let mut epochs: HashSet<(&str, u64)> = HashSet::new();
    let mut reclaimed: HashSet<&str> = HashSet::new();
    for (kind, task, payload) in &ledger {
        let holder = held.entry(task.as_str()).or_default();
        match kind.as_str() {
            "task_claimed" => {
                assert!(!*holder, "task {task} claimed while held: {payload}");
                let epoch = payload["epoch"].as_u64().expect("a claim's epoch");
                assert!(epochs.insert((task.as_str(), epoch)), "task {task} claimed twice at epoch {epoch}");
                *holder = true;
            }
            "task_reclaimed" => {
                reclaimed.insert(task.as_str());
                *holder = false;
            }
            "task_completed" | "task_failed" | "task_cancelled" | "task_requeued" => *holder = false,
            _ => {}
        }
    }
    for id in &stranded {
        assert!(reclaimed.contains(id.as_str()), "stranded task {id} has its task_reclaimed entry");
    }
    let bound = LEASE + REAPER_EVERY + Duration::from_millis(1_500);
    let slowest = reclaims.iter().max().copied().unwrap_or_default();
    println!(
        "failover: {CLIENTS} clients; {} completions through A in {:.2} s ({:.0}/s), then A killed; \
         B led the upkeep {:.0} ms after the kill; stranded leases ({} ms) back to pending after {:?} ms; \
         {} completions through B ({:.0}/s over the whole run of {:.2} s); {enqueued} enqueues and {completed} \
         completions acknowledged, {} claims, {lost_claims} claim answers lost with A",
        through[0],
        on_a_for.as_secs_f64(),
        through[0] as f64 / on_a_for.as_secs_f64(),
        millis(takeover),
        LEASE.as_millis(),
        reclaims.iter().map(|d| millis(*d).round()).collect::<Vec<_>>(),
        through[1],
        (through[0] + through[1]) as f64 / load_took.as_secs_f64(),
        load_took.as_secs_f64(),
        claims.len(),
    );
    assert!(
        takeover <= REAPER_EVERY + Duration::from_millis(1_500),
        "B took the upkeep over after {takeover:?}"
    );
    assert!(
        slowest <= bound,
        "a stranded lease went back to pending {slowest:?} after the kill (bound {bound:?})"
    );
}

/// Sixteen HTTP clients, eight per daemon, reserve overlapping paths of one
/// repository at once and release what they got on their next turn: the
/// ledger, replayed in commit order, never shows two overlapping holders where
/// either is exclusive, and every denial names a reservation held then.
#[test]
fn sixteen_clients_on_two_daemons_never_hold_overlapping_paths_at_once() {
    let url = require_postgres!();
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 25;
    const PATTERNS: [&str; 5] = ["src/**", "src/a.rs", "src/*.rs", "src/deep", "**/*.rs"];
    let installation = Installation::new(&url);
    let daemons = [Daemon::start(&installation), Daemon::start(&installation)];
    let answers: Vec<(u64, u64)> = std::thread::scope(|s| {
        let racers: Vec<_> = (0..CLIENTS)
            .map(|n| {
                let endpoint = daemons[n % 2].endpoint.clone();
                s.spawn(move || {
                    let http = http_client();
                    let session = format!("racer-{n}");
                    let (mut granted, mut denied) = (0, 0);
                    let mut held: Option<(String, u64)> = None;
                    for round in 0..ROUNDS {
                        if let Some((id, epoch)) = held.take() {
                            let fence = json!({ "sessionId": session, "epoch": epoch });
                            endpoint.ok(&http, &format!("reservations/{id}/release"), &fence);
                        }
                        let body = json!({
                            "scope": "repo", "sessionId": session, "nodeId": format!("node-{n}"),
                            "patterns": [PATTERNS[(n * 7 + round * 3) % PATTERNS.len()]],
                            "exclusive": !(n + round).is_multiple_of(4),
                        });
                        let answer = endpoint.ok(&http, "reservations", &body);
                        if answer["granted"] == true {
                            granted += 1;
                            let r = &answer["reservation"];
                            held = Some((r["id"].as_str().unwrap().to_owned(), r["epoch"].as_u64().unwrap()));
                        } else {
                            denied += 1;
                        }
                    }
                    if let Some((id, epoch)) = held {
                        endpoint.ok(
                            &http,
                            &format!("reservations/{id}/release"),
                            &json!({ "sessionId": session, "epoch": epoch }),
                        );
                    }
                    (granted, denied)
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().expect("a racer")).collect()
    });
    let granted: u64 = answers.iter().map(|a| a.0).sum();
    let denied: u64 = answers.iter().map(|a| a.1).sum();
    assert!(granted > 0 && denied > 0, "the race needs grants and denials: {granted} {denied}");

    let mut options = agentmesh_postgres::PgOptions::new(installation.url()).schema(installation.name());
    options.max_connections = 2;
    let store = agentmesh_postgres::PgStore::open(&options).expect("the installation");
    let seen = agentmesh_store::conformance::reservation_race::check_reservation_ledger(&store, MESH)
        .unwrap_or_else(|problem| panic!("the reservation ledger breaks the invariant: {problem}"));
    assert_eq!((seen.granted, seen.denied), (granted, denied), "the ledger records every answer");
    println!("two daemons, {CLIENTS} clients: {granted} granted, {denied} denied, never overlapping");
}
