//! Webhooks end to end: a real receiver on loopback that fails, times out and
//! answers slowly at random, a daemon (or two on PostgreSQL) killed with
//! SIGKILL and started again while a client writes to the mesh. Every ledger
//! entry a subscription's filter takes must arrive, in ledger order, signed
//! with the subscription's secret (checked here with an HMAC of the test's
//! own, not the product's), duplicates only under an id already seen; after
//! dropping the ids it has seen, the receiver holds each entry exactly once.
//!
//! Also: a subscription whose receiver keeps failing turns failing after its
//! attempts, and `webhook resume` and `webhook skip` move it on, both in the
//! ledger.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

use super::agentmesh;
use crate::daemon_log::DaemonLog;

const MESH: &str = "hooks";
const DEADLINE: Duration = Duration::from_secs(120);

/// What the receiver does with the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// Takes it at once.
    Take,
    /// Takes it after a while (below the daemon's timeout).
    Slow,
    /// Answers 503.
    Fail,
    /// Answers only after the daemon's timeout.
    Hang,
}

/// One request the receiver read.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    path: String,
    body: Value,
    signed: bool,
    taken: bool,
    /// The request as it came: its three webhook headers and its body.
    headers: [String; 3],
    raw: Vec<u8>,
}

/// A webhook receiver on loopback (see the module docs). It checks each
/// request's signature against the secret of its path's subscription.
struct Receiver {
    url: String,
    secrets: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    received: Arc<Mutex<Vec<Received>>>,
    chaos: Arc<AtomicBool>,
}

impl Receiver {
    fn start(hang: Duration) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let secrets: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let chaos = Arc::new(AtomicBool::new(true));
        let seed = Arc::new(AtomicU64::new(
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8) | 1,
        ));
        eprintln!("webhook receiver seed {}", seed.load(Ordering::Relaxed));
        {
            let (secrets, received, chaos) =
                (Arc::clone(&secrets), Arc::clone(&received), Arc::clone(&chaos));
            std::thread::spawn(move || {
                for stream in listener.incoming().map_while(Result::ok) {
                    let (secrets, received, chaos, seed) =
                        (Arc::clone(&secrets), Arc::clone(&received), Arc::clone(&chaos), Arc::clone(&seed));
                    std::thread::spawn(move || serve(stream, &secrets, &received, &chaos, &seed, hang));
                }
            });
        }
        Receiver { url, secrets, received, chaos }
    }

    fn expect(&self, path: &str, secret: &str) {
        let key = base64::engine::general_purpose::STANDARD
            .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
            .expect("base64");
        self.secrets.lock().unwrap().insert(path.to_owned(), key);
    }

    fn received(&self, path: &str) -> Vec<Received> {
        self.received.lock().unwrap().iter().filter(|r| r.path == path).cloned().collect()
    }
}

fn next_random(seed: &AtomicU64) -> u64 {
    // xorshift64: the state moves on atomically, whatever thread draws.
    let mut x = seed.load(Ordering::Relaxed);
    loop {
        let mut y = x;
        y ^= y << 13;
        y ^= y >> 7;
        y ^= y << 17;
        match seed.compare_exchange(x, y, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return y,
            Err(now) => x = now,
        }
    }
}

fn serve(
    stream: TcpStream,
    secrets: &Mutex<HashMap<String, Vec<u8>>>,
    received: &Mutex<Vec<Received>>,
    chaos: &AtomicBool,
    seed: &AtomicU64,
    hang: Duration,
) {
    let mut writer = stream.try_clone().expect("clone the stream");
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_owned();
        let mut headers: HashMap<String, String> = HashMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let id = headers.get("webhook-id").cloned().unwrap_or_default();
        let timestamp = headers.get("webhook-timestamp").cloned().unwrap_or_default();
        let signature = headers.get("webhook-signature").cloned().unwrap_or_default();
        let signed = secrets.lock().unwrap().get(&path).is_some_and(|key| {
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("an HMAC key");
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(&body);
            let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
            signature.split(' ').any(|s| s == format!("v1,{expected}"))
        });
        let behaviour = if chaos.load(Ordering::Relaxed) {
            match next_random(seed) % 10 {
                0 | 1 => Behaviour::Fail,
                2 => Behaviour::Hang,
                3 => Behaviour::Slow,
                _ => Behaviour::Take,
            }
        } else {
            Behaviour::Take
        };
        let taken = matches!(behaviour, Behaviour::Take | Behaviour::Slow | Behaviour::Hang);
        received.lock().unwrap().push(Received {
            id: id.clone(),
            path,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            signed,
            taken,
            headers: [id, timestamp, signature],
            raw: body,
        });
        match behaviour {
            Behaviour::Slow => std::thread::sleep(hang / 4),
            Behaviour::Hang => std::thread::sleep(hang),
            _ => {}
        }
        let status = if behaviour == Behaviour::Fail { "503 Service Unavailable" } else { "204 No Content" };
        if writer.write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n").as_bytes()).is_err() {
            return;
        }
    }
}

/// A daemon process on a data dir (SQLite, or a PostgreSQL installation),
/// started again on the same data dir after a kill.
struct Daemon {
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    log: Option<DaemonLog>,
    url: String,
    token: String,
}

impl Daemon {
    fn start(dir: &Path, store_args: &[String]) -> Daemon {
        Daemon::start_with(dir, store_args, 10_000)
    }

    /// A daemon whose subscriptions turn failing after `attempts` failed
    /// requests in a row.
    fn start_with(dir: &Path, store_args: &[String], attempts: u32) -> Daemon {
        let mut args = store_args.to_vec();
        args.extend(
            [
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--webhook-timeout",
                "400ms",
                "--webhook-retry",
                "20ms",
                "--webhook-attempts",
            ]
            .map(str::to_owned),
        );
        args.push(attempts.to_string());
        let mut daemon = Daemon {
            dir: dir.to_owned(),
            args,
            child: None,
            log: None,
            url: String::new(),
            token: String::new(),
        };
        daemon.restart();
        daemon
    }

    fn restart(&mut self) {
        let (child, log) = DaemonLog::spawn(
            agentmesh()
                .env("RUST_LOG", "warn,agentmesh_postgres=info")
                .arg("--data-dir")
                .arg(&self.dir)
                .args(&self.args),
        );
        self.url = log.address(DEADLINE);
        self.token =
            std::fs::read_to_string(self.dir.join("daemon.token")).expect("the token").trim().to_owned();
        self.child = Some(child);
        self.log = Some(log);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the daemon");
            child.wait().expect("reap the daemon");
        }
    }

    fn leads(&self) -> bool {
        self.log
            .as_ref()
            .is_some_and(|log| log.logged(&["this daemon now runs the installation's upkeep"]).is_some())
    }

    fn endpoint(&self) -> (String, String) {
        (self.url.clone(), self.token.clone())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

/// A request to one of the daemons the test keeps (whichever answers),
/// tried again until one does. A write tried again after an answer was lost
/// may find itself done (409: a duplicate id, a task already completed): that
/// is its answer.
fn call(endpoints: &Mutex<Vec<(String, String)>>, method: &str, route: &str, body: Option<&Value>) -> Value {
    let client = http();
    let until = Instant::now() + DEADLINE;
    let mut retried = false;
    loop {
        let list = endpoints.lock().unwrap().clone();
        for (url, token) in list {
            let full = format!("{url}/v1/meshes/{MESH}/{route}");
            let request = match method {
                "GET" => client.get(&full),
                _ => client.post(&full).json(body.unwrap_or(&json!({}))),
            };
            if let Ok(answer) = request.bearer_auth(&token).send() {
                let status = answer.status().as_u16();
                let value: Value = answer.json().unwrap_or(Value::Null);
                if (200..300).contains(&status) || (retried && status == 409) {
                    return value;
                }
                assert!(status >= 500, "{method} {route} answered {status}: {value}");
            }
            retried = true;
        }
        assert!(Instant::now() < until, "{method} {route}: no daemon answered within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The mesh's whole ledger in commit order, with each entry's sequence.
fn ledger(endpoints: &Mutex<Vec<(String, String)>>) -> Vec<Value> {
    let mut after = 0u64;
    let mut entries = Vec::new();
    loop {
        let page = call(endpoints, "GET", &format!("ledger/slice?afterSeq={after}&limit=500"), None);
        entries.extend(page["entries"].as_array().cloned().unwrap_or_default());
        after = page["cursor"]["nextAfterSeq"].as_u64().expect("a page by sequence has nextAfterSeq");
        if !page["cursor"]["hasMore"].as_bool().unwrap_or(false) {
            return entries;
        }
    }
}

/// Runs the write load on `endpoints` while `kill_and_restart` kills and
/// restarts daemons, then checks what the receiver got for two subscriptions.
fn deliver_through_kills(
    endpoints: &Arc<Mutex<Vec<(String, String)>>>,
    mut kill_and_restart: impl FnMut(usize),
) {
    let receiver = Receiver::start(Duration::from_millis(600));
    let every = call(
        endpoints,
        "POST",
        "webhooks",
        Some(&json!({ "url": format!("{}/all", receiver.url), "kinds": ["task_*"] })),
    );
    receiver.expect("/all", every["secret"].as_str().unwrap());
    let ci = call(
        endpoints,
        "POST",
        "webhooks",
        Some(&json!({ "url": format!("{}/ci", receiver.url), "kinds": ["task_completed"], "tags": ["ci"] })),
    );
    receiver.expect("/ci", ci["secret"].as_str().unwrap());

    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (endpoints, writing) = (Arc::clone(endpoints), Arc::clone(&writing));
        std::thread::spawn(move || {
            let mut n = 0;
            while writing.load(Ordering::Relaxed) && n < 300 {
                let tags = if n % 3 == 0 { json!(["ci"]) } else { json!(["docs"]) };
                let id = format!("t{n}");
                call(
                    &endpoints,
                    "POST",
                    "tasks",
                    Some(&json!({ "id": id, "message": "work", "requiredTags": tags })),
                );
                if n % 2 == 0 {
                    let session = format!("s{n}");
                    let claim =
                        json!({ "nodeId": session, "sessionId": session, "capabilityTags": ["ci", "docs"] });
                    let claimed = call(&endpoints, "POST", "claims", Some(&claim));
                    if let (Some(task), Some(epoch)) =
                        (claimed["task"]["id"].as_str(), claimed["task"]["dispatchNonce"].as_u64())
                    {
                        let done =
                            json!({ "taskId": task, "epoch": epoch, "sessionId": session, "summary": "ok" });
                        call(&endpoints, "POST", "completions", Some(&done));
                    }
                }
                n += 1;
            }
        })
    };
    for round in 0..4 {
        std::thread::sleep(Duration::from_millis(700));
        kill_and_restart(round);
    }
    writing.store(false, Ordering::Relaxed);
    writer.join().expect("the writer");

    let entries = ledger(endpoints);
    let tags: HashMap<String, bool> = entries
        .iter()
        .filter(|e| e["kind"] == "task_dispatched")
        .filter_map(|e| Some((e["payload"]["taskId"].as_str()?.to_owned(), false)))
        .collect();
    let ci_tasks: HashSet<String> = (0..300).filter(|n| n % 3 == 0).map(|n| format!("t{n}")).collect();
    let wanted_all: Vec<String> = entries
        .iter()
        .filter(|e| e["kind"].as_str().is_some_and(|k| k.starts_with("task_")))
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    let wanted_ci: Vec<String> = entries
        .iter()
        .filter(|e| e["kind"] == "task_completed")
        .filter(|e| e["payload"]["taskId"].as_str().is_some_and(|t| ci_tasks.contains(t)))
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !tags.is_empty() && wanted_all.len() > 30 && !wanted_ci.is_empty(),
        "the load wrote too little: {} task entries, {} completions of ci tasks, ledger {}",
        wanted_all.len(),
        wanted_ci.len(),
        entries.len()
    );

    // The receiver stops failing: everything must arrive.
    receiver.chaos.store(false, Ordering::Relaxed);
    let until = Instant::now() + DEADLINE;
    let firsts = |path: &str| {
        let mut seen = HashSet::new();
        receiver
            .received(path)
            .into_iter()
            .filter(|r| r.taken && seen.insert(r.id.clone()))
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    while firsts("/all").len() < wanted_all.len() || firsts("/ci").len() < wanted_ci.len() {
        assert!(
            Instant::now() < until,
            "not everything arrived: /all {} of {}, /ci {} of {}",
            firsts("/all").len(),
            wanted_all.len(),
            firsts("/ci").len(),
            wanted_ci.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    for (path, wanted) in [("/all", &wanted_all), ("/ci", &wanted_ci)] {
        let got = receiver.received(path);
        let unsigned: Vec<&Received> = got.iter().filter(|r| !r.signed).collect();
        assert!(unsigned.is_empty(), "{path}: requests without a valid signature: {unsigned:?}");
        let by_id: HashMap<&str, &Value> = entries.iter().map(|e| (e["id"].as_str().unwrap(), e)).collect();
        for r in &got {
            let entry =
                by_id.get(r.id.as_str()).unwrap_or_else(|| panic!("{path}: {} is no ledger entry", r.id));
            assert_eq!(r.body["type"], entry["kind"], "{path}: the body of {} names another kind", r.id);
            assert_eq!(r.body["data"]["entryId"], entry["id"]);
        }
        assert_eq!(
            &firsts(path),
            wanted,
            "{path}: after dropping seen ids, every entry once, in ledger order"
        );
        let duplicates = got.iter().filter(|r| r.taken).count() - wanted.len();
        eprintln!("{path}: {} entries, {} requests, {duplicates} taken again", wanted.len(), got.len());
    }
}

#[test]
fn every_matching_entry_arrives_once_in_order_while_the_daemon_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Arc::new(Mutex::new(Daemon::start(dir.path(), &[])));
    let endpoints = Arc::new(Mutex::new(vec![daemon.lock().unwrap().endpoint()]));
    let (d, e) = (Arc::clone(&daemon), Arc::clone(&endpoints));
    deliver_through_kills(&endpoints, move |_| {
        let mut daemon = d.lock().unwrap();
        daemon.kill();
        std::thread::sleep(Duration::from_millis(100));
        daemon.restart();
        *e.lock().unwrap() = vec![daemon.endpoint()];
    });
}

#[test]
fn with_two_postgresql_daemons_the_leader_delivers_and_a_new_leader_goes_on() {
    let url = agentmesh_test_support::require_postgres!();
    let schema = agentmesh_test_support::postgres::Schema::fresh(&url, "am_webhooks");
    let store_args: Vec<String> =
        ["--database-url", schema.url(), "--database-schema", schema.name()].map(str::to_owned).to_vec();
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let daemons = Arc::new(Mutex::new(vec![Daemon::start(a_dir.path(), &store_args)]));
    // The first daemon takes the leadership before the second starts.
    let until = Instant::now() + DEADLINE;
    while !daemons.lock().unwrap()[0].leads() {
        assert!(Instant::now() < until, "the first daemon never took the upkeep");
        std::thread::sleep(Duration::from_millis(20));
    }
    daemons.lock().unwrap().push(Daemon::start(b_dir.path(), &store_args));
    let endpoints =
        Arc::new(Mutex::new(daemons.lock().unwrap().iter().map(Daemon::endpoint).collect::<Vec<_>>()));
    let (d, e) = (Arc::clone(&daemons), Arc::clone(&endpoints));
    deliver_through_kills(&endpoints, move |_| {
        let mut daemons = d.lock().unwrap();
        // Kill the leader mid-stream (the other takes over from the stored
        // cursors), then bring it back as a follower.
        let leader = daemons.iter().position(Daemon::leads).unwrap_or(0);
        daemons[leader].kill();
        *e.lock().unwrap() = daemons.iter().filter(|d| d.child.is_some()).map(Daemon::endpoint).collect();
        std::thread::sleep(Duration::from_millis(300));
        daemons[leader].restart();
        *e.lock().unwrap() = daemons.iter().map(Daemon::endpoint).collect();
    });
}

#[test]
fn a_receiver_that_keeps_failing_turns_its_subscription_failing_until_resumed_or_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with(dir.path(), &[], 3);
    let endpoints = Mutex::new(vec![daemon.endpoint()]);
    // A port nobody listens on: every request fails to connect.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/gone", listener.local_addr().unwrap())
    };
    let added = call(&endpoints, "POST", "webhooks", Some(&json!({ "url": closed, "kinds": ["task_*"] })));
    let id = added["webhook"]["id"].as_str().unwrap().to_owned();
    call(&endpoints, "POST", "tasks", Some(&json!({ "id": "first", "message": "one" })));
    let until = Instant::now() + DEADLINE;
    let show = |id: &str| call(&endpoints, "GET", &format!("webhooks/{id}"), None);
    let wait_failing = |what: &str| {
        while show(&id)["state"] != "failing" {
            assert!(Instant::now() < until, "{what}: {}", show(&id));
            std::thread::sleep(Duration::from_millis(50));
        }
        show(&id)
    };
    let failing = wait_failing("the subscription never turned failing");
    assert_eq!(failing["failures"], 3, "{failing}");
    assert_eq!(failing["stuckOn"]["kind"], "task_dispatched", "{failing}");
    assert_eq!(failing["log"].as_array().unwrap().len(), 3, "{failing}");
    assert!(failing["lastError"].as_str().unwrap().contains("connect"), "{failing}");
    // Later entries wait behind it: nothing is skipped while it is failing.
    call(&endpoints, "POST", "tasks", Some(&json!({ "id": "second", "message": "two" })));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(show(&id)["cursor"], failing["cursor"], "nothing may be skipped while failing");
    // Resume: it tries the same entry again (and fails again).
    let resumed = call(&endpoints, "POST", &format!("webhooks/{id}/resume"), None);
    assert_eq!((resumed["state"].as_str(), resumed["failures"].as_u64()), (Some("active"), Some(0)));
    let again = wait_failing("the resumed subscription never failed again");
    assert_eq!(again["stuckOn"]["entryId"], failing["stuckOn"]["entryId"], "{again}");
    // Skip: it passes the stuck entry and is stuck on the next one.
    let skipped = call(&endpoints, "POST", &format!("webhooks/{id}/skip"), None);
    assert!(skipped["cursor"].as_u64() > failing["cursor"].as_u64(), "{skipped}");
    let next = wait_failing("the skipping subscription never failed on the next entry");
    assert_ne!(next["stuckOn"]["entryId"], failing["stuckOn"]["entryId"], "{next}");
    let kinds: Vec<String> = ledger(&endpoints)
        .iter()
        .filter_map(|e| e["kind"].as_str().filter(|k| k.starts_with("webhook_")).map(str::to_owned))
        .collect();
    assert_eq!(
        kinds,
        [
            "webhook_added",
            "webhook_failing",
            "webhook_resumed",
            "webhook_failing",
            "webhook_skipped",
            "webhook_failing"
        ],
        "{kinds:?}"
    );
    let metrics = http()
        .get(format!("{}/metrics", daemon.url))
        .bearer_auth(&daemon.token)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let failed: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("agentmesh_webhook_attempts_total{result=\"failed\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(failed >= 9.0, "expected at least nine failed requests counted:\n{metrics}");
}

/// The receiver's check the README shows, run by Python as written there,
/// accepts the signed sample `agentmesh webhook test` sends, and refuses it
/// under another secret or with one byte of the body changed.
#[test]
fn the_readmes_receiver_check_accepts_the_sample_webhook_test_sends() {
    let python = agentmesh_test_support::require!(agentmesh_test_support::Tool::Python);
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let from = readme.find("A receiver checks a request").expect("the README's receiver example");
    let block = &readme[from..];
    let code = &block[block.find("```python\n").unwrap() + 10..];
    let code = &code[..code.find("```").unwrap()];

    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), &[]);
    let receiver = Receiver::start(Duration::from_millis(600));
    receiver.chaos.store(false, Ordering::Relaxed);
    let endpoints = Mutex::new(vec![daemon.endpoint()]);
    let added =
        call(&endpoints, "POST", "webhooks", Some(&json!({ "url": format!("{}/readme", receiver.url) })));
    let id = added["webhook"]["id"].as_str().unwrap();
    let secret = added["secret"].as_str().unwrap();
    receiver.expect("/readme", secret);
    let tested = agentmesh()
        .args(["--server", &daemon.url, "--token-file"])
        .arg(dir.path().join("daemon.token"))
        .args(["--mesh", MESH, "webhook", "test", id])
        .output()
        .unwrap();
    assert!(tested.status.success(), "{}", String::from_utf8_lossy(&tested.stderr));
    assert!(
        String::from_utf8_lossy(&tested.stdout).contains("HTTP 204"),
        "{}",
        String::from_utf8_lossy(&tested.stdout)
    );
    let sample = receiver
        .received("/readme")
        .into_iter()
        .find(|r| r.body["type"] == "webhook_test")
        .expect("the sample arrived");
    assert!(sample.signed, "the test's own HMAC accepts it too");

    let script = dir.path().join("check.py");
    let [wid, ts, sig] = &sample.headers;
    std::fs::write(
        &script,
        format!(
            "{code}\nimport sys\nheaders = {{'webhook-id': {wid:?}, 'webhook-timestamp': {ts:?}, 'webhook-signature': {sig:?}}}\n\
             body = open(sys.argv[2], 'rb').read()\nprint(verified(sys.argv[1], headers, body))\n"
        ),
    )
    .unwrap();
    let body = dir.path().join("body");
    let check = |secret: &str, body_bytes: &[u8]| {
        std::fs::write(&body, body_bytes).unwrap();
        let out = std::process::Command::new(&python).arg(&script).arg(secret).arg(&body).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    assert_eq!(check(secret, &sample.raw), "True");
    let other = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3";
    assert_eq!(check(other, &sample.raw), "False");
    let mut changed = sample.raw.clone();
    changed[0] ^= 1;
    assert_eq!(check(secret, &changed), "False");
}

/// The CLI on a data dir (no daemon): `add` prints the secret once, `list`
/// and `show` never; a receiver that is not allowed is refused naming `url`,
/// with exit code 2 and nothing added; `remove` ends it.
#[test]
fn the_cli_adds_lists_and_removes_subscriptions_and_shows_the_secret_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = agentmesh().arg("--data-dir").arg(dir.path()).args(args).output().unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let (code, stdout, stderr) =
        run(&["--json", "webhook", "add", "http://127.0.0.1:9/x", "--kind", "task_*"]);
    assert_eq!(code, Some(0), "{stderr}");
    let added: Value = serde_json::from_str(&stdout).unwrap();
    let (id, secret) = (added["webhook"]["id"].as_str().unwrap(), added["secret"].as_str().unwrap());
    let (_, listed, _) = run(&["--json", "webhook", "list"]);
    let (_, shown, _) = run(&["webhook", "show", id]);
    let (_, human, _) = run(&["webhook", "list"]);
    for text in [&listed, &shown, &human] {
        assert!(text.contains(id) && !text.contains(&secret[6..]), "{text}");
    }
    assert!(human.contains("active") && human.contains("task_*"), "{human}");
    let (code, _, stderr) = run(&["webhook", "add", "http://hooks.example.com/x"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("url") && stderr.contains("https"), "{stderr}");
    let (code, _, stderr) = run(&["webhook", "add", "https://example.com/x", "--secret", "nope"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("secret"), "{stderr}");
    let (_, listed, _) = run(&["--json", "webhook", "list"]);
    assert_eq!(serde_json::from_str::<Value>(&listed).unwrap()["webhooks"].as_array().unwrap().len(), 1);
    let (code, stdout, stderr) = run(&["webhook", "remove", id]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("removed"), "{stdout}");
    let (code, _, stderr) = run(&["webhook", "show", id]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("not found"), "{stderr}");
}
