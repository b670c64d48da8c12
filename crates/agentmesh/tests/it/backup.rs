//! `agentmesh backup` and `agentmesh restore` end to end, with real processes
//! and files: a backup taken by the binary while a daemon serves a load of
//! enqueues, claims and completions from several threads is one consistent
//! snapshot; restored into a fresh data dir, a daemon serves it. A restore is
//! refused while a daemon serves the data dir, and for a file that is not a
//! usable agentmesh database, leaving the data dir as it was; a backup never
//! replaces a file unless given `--force`; a PostgreSQL installation is pointed
//! to PostgreSQL's own tools.

use super::agentmesh;
use super::cli::Run;
use crate::daemon_log::DaemonLog;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentmesh_test_support::incompressible;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};

/// How long any wait may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(60);
/// The mesh the load runs in.
const MESH: &str = "load";

/// Runs the binary on `data_dir` with `args`.
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

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

/// `agentmesh serve` on `data_dir`, on a loopback port of its own.
struct Daemon {
    child: Child,
    api: Arc<Api>,
    _log: DaemonLog,
}

/// A daemon's HTTP API, shared by the threads that load it.
struct Api {
    url: String,
    token: String,
    http: reqwest::blocking::Client,
}

impl Daemon {
    fn start(data_dir: &Path) -> Daemon {
        let (child, log) = DaemonLog::spawn(agentmesh().arg("--data-dir").arg(data_dir).args([
            "serve",
            "--listen",
            "127.0.0.1:0",
        ]));
        let url = log.address(DEADLINE);
        let token = std::fs::read_to_string(data_dir.join("daemon.token")).expect("the token file");
        let http = reqwest::blocking::Client::builder().timeout(DEADLINE).build().expect("an HTTP client");
        let api = Arc::new(Api { url, token: token.trim().to_owned(), http });
        Daemon { child, api, _log: log }
    }

    /// Stops the daemon with SIGTERM and waits for it to exit.
    fn stop(mut self) {
        agentmesh_test_support::signal(self.child.id(), "TERM").expect("kill -TERM");
        let until = Instant::now() + DEADLINE;
        while self.child.try_wait().expect("try_wait").is_none() {
            assert!(Instant::now() < until, "the daemon did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Api {
    /// A request to the API; the status and the body.
    fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().unwrap_or_else(|err| panic!("{path}: no answer: {err}"));
        let status = response.status().as_u16();
        let text = response.text().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    #[track_caller]
    fn post(&self, route: &str, body: &Value) -> Value {
        let (status, answer) =
            self.call(reqwest::Method::POST, &format!("/v1/meshes/{MESH}/{route}"), Some(body));
        assert!(matches!(status, 200 | 201), "POST {route}: {status} {answer}");
        answer
    }

    /// The tasks of the mesh, by id.
    fn tasks(&self) -> BTreeMap<String, Value> {
        let (status, answer) = self.call(reqwest::Method::GET, &format!("/v1/meshes/{MESH}/tasks"), None);
        assert_eq!(status, 200, "{answer}");
        let list = answer.as_array().or(answer["tasks"].as_array()).cloned().unwrap_or_default();
        list.into_iter().map(|t| (t["id"].as_str().expect("a task id").to_owned(), t)).collect()
    }

    /// Enqueues a task for a coordinator, claims the next one as `session` and
    /// completes it; whether a task was claimed.
    fn enqueue_claim_complete(&self, id: &str, session: &str) -> bool {
        let coordinator = json!({ "daemonId": "mach_backup", "runId": "run-1" });
        self.post("tasks", &json!({ "id": id, "message": format!("task {id}"), "coordinator": coordinator }));
        let claim =
            self.post("claims", &json!({ "nodeId": format!("node-{session}"), "sessionId": session }));
        let Some(task) = claim["task"].as_object() else { return false };
        let report = json!({
            "sessionId": session,
            "taskId": task["id"],
            "epoch": task["dispatchNonce"],
            "summary": format!("done by {session}"),
        });
        self.post("completions", &report);
        true
    }
}

/// One number from the database file at `path`.
fn count(path: &Path, sql: &str) -> i64 {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("the file opens");
    conn.query_row(sql, [], |r| r.get(0)).unwrap_or_else(|err| panic!("{sql}: {err}"))
}

/// Every file of `dir` with its size and a digest of its content, for "nothing
/// changed". With `served`, a daemon has the database open: the content of its
/// `-wal` and `-shm` is the daemon's to change (readers mark the `-shm`, the
/// upkeep may commit), and only their names count.
fn listing(dir: &Path, served: bool) -> BTreeMap<String, (u64, u64)> {
    use std::hash::{Hash, Hasher};
    std::fs::read_dir(dir)
        .expect("the dir lists")
        .map(|entry| {
            let path = entry.expect("an entry").path();
            let name = path.file_name().expect("a name").to_string_lossy().into_owned();
            let volatile = served && (name.ends_with("-wal") || name.ends_with("-shm"));
            let bytes = if path.is_file() && !volatile {
                std::fs::read(&path).expect("readable")
            } else {
                Vec::new()
            };
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut hasher);
            (name, (bytes.len() as u64, hasher.finish()))
        })
        .collect()
}

#[test]
fn a_backup_taken_under_load_is_one_snapshot_and_restores_into_a_serving_daemon() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    let daemon = Daemon::start(&data);
    // Some bulk first, so the copy takes more than one step.
    let tasks: Vec<Value> = (0..5_000)
        .map(|i| json!({ "id": format!("seed-{i}"), "message": incompressible(1_000, i) }))
        .collect();
    for batch in tasks.chunks(500) {
        daemon.api.post("tasks/batch", &json!({ "tasks": batch }));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (api, stop, done) = (Arc::clone(&daemon.api), Arc::clone(&stop), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    if api.enqueue_claim_complete(&format!("w{w}-{n}"), &format!("s{w}")) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let until = Instant::now() + DEADLINE;
    while done.load(Ordering::Relaxed) < 20 {
        assert!(Instant::now() < until, "the load never got going");
        std::thread::sleep(Duration::from_millis(10));
    }

    let dest = tmp.path().join("backup.db");
    let before = done.load(Ordering::Relaxed);
    let began = Instant::now();
    let backup = run(&data, &["--json", "backup", path_str(&dest)]);
    backup.assert_code(0);
    let took = began.elapsed();
    let during = done.load(Ordering::Relaxed) - before;
    // The load goes on a while after the copy, so the live database moves past it.
    let after_backup = done.load(Ordering::Relaxed);
    while done.load(Ordering::Relaxed) < after_backup + 10 {
        assert!(Instant::now() < until, "the load stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("a worker thread");
    }
    let summary = backup.json();
    eprintln!(
        "backup under load: {} bytes, {} pages, {} ms (the process: {:?}), {} completions during it; totals {}",
        summary["bytes"], summary["pages"], summary["elapsedMs"], took, during, summary["totals"]
    );

    // The copy: sound, one self-contained file, and one moment of the database.
    assert_eq!(summary["path"], path_str(&dest));
    assert_eq!(summary["integrity"], "ok");
    assert_eq!(summary["schemaVersion"], agentmesh_sqlite::SCHEMA_VERSION);
    let conn = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "delete");
    drop(conn);
    let completed = count(&dest, "SELECT COUNT(*) FROM mesh_queue WHERE status = 'completed'");
    assert!(completed > 0, "the copy holds completed tasks");
    // Each completion committed with its ledger entry and its coordinator's
    // event: the copy has either all three or none.
    let without_entry = count(
        &dest,
        "SELECT COUNT(*) FROM mesh_queue q WHERE q.status = 'completed' AND NOT EXISTS (
             SELECT 1 FROM mesh_event_ledger l WHERE l.mesh_id = q.mesh_id AND l.kind = 'task_completed'
                AND json_extract(l.payload, '$.taskId') = q.id)",
    );
    assert_eq!(without_entry, 0, "a completed task without its ledger entry");
    let entries_without_task = count(
        &dest,
        "SELECT COUNT(*) FROM mesh_event_ledger l WHERE l.kind = 'task_completed' AND NOT EXISTS (
             SELECT 1 FROM mesh_queue q WHERE q.mesh_id = l.mesh_id AND q.status = 'completed'
                AND q.id = json_extract(l.payload, '$.taskId'))",
    );
    assert_eq!(entries_without_task, 0, "a completion entry whose task is not completed");
    // Event payloads may be stored deflated, so they are read through the store's codec.
    let conn = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let about: std::collections::HashSet<(String, String)> = conn
        .prepare("SELECT mesh_id, payload FROM mesh_pending_events")
        .unwrap()
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, rusqlite::types::Value>(1)?)))
        .unwrap()
        .map(|row| {
            let (mesh, stored) = row.unwrap();
            let bytes = match stored {
                rusqlite::types::Value::Text(text) => text.into_bytes(),
                rusqlite::types::Value::Blob(bytes) => bytes,
                other => panic!("an event payload stored as {other:?}"),
            };
            let json: serde_json::Value =
                serde_json::from_str(&agentmesh_store::packed::unpack(&bytes).unwrap()).unwrap();
            (mesh, json["taskId"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let finished_by_workers: Vec<(String, String)> = conn
        .prepare("SELECT mesh_id, id FROM mesh_queue WHERE status = 'completed' AND id LIKE 'w%'")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let without_event: Vec<_> = finished_by_workers.iter().filter(|t| !about.contains(t)).collect();
    assert!(
        without_event.is_empty(),
        "completed tasks whose coordinator event is missing: {without_event:?}"
    );
    // The printed counts are the copy's.
    let mesh = summary["meshes"].as_array().unwrap().iter().find(|m| m["meshId"] == MESH).expect("the mesh");
    assert_eq!(mesh["tasks"]["completed"], completed);
    assert_eq!(mesh["ledgerEntries"], count(&dest, "SELECT COUNT(*) FROM mesh_event_ledger"));
    assert_eq!(mesh["inboxEvents"], count(&dest, "SELECT COUNT(*) FROM mesh_pending_events"));
    let live = daemon.api.tasks();
    let copied = summary["totals"]["tasks"].as_u64().unwrap();
    assert!(live.len() as u64 > copied, "the live database went on past the snapshot");

    // Stop the daemon, restore into a fresh data dir, serve it.
    daemon.stop();
    let fresh = tmp.path().join("fresh");
    let restored = run(&fresh, &["--json", "restore", path_str(&dest)]).assert_code(0).json();
    assert_eq!(restored["restored"]["path"], path_str(&fresh.join("mesh-runtime.db")));
    assert_eq!(restored["restored"]["totals"], summary["totals"]);
    assert_eq!(restored["previous"], Value::Null);
    let daemon = Daemon::start(&fresh);
    let tasks = daemon.api.tasks();
    assert_eq!(tasks.len() as u64, copied);
    let completed_there = tasks.values().filter(|t| t["status"] == "completed").count();
    assert_eq!(completed_there as i64, completed);
    assert_eq!(tasks["seed-0"]["message"], incompressible(1_000, 0));
    // It takes new work.
    assert!(daemon.api.enqueue_claim_complete("after-restore", "s9"));
    assert_eq!(daemon.api.tasks().len() as u64, copied + 1);
    daemon.stop();
}

#[test]
fn a_restore_is_refused_while_a_daemon_serves_the_data_dir_and_changes_nothing() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    run(&data, &["task", "add", "kept", "--id", "kept", "--mesh", MESH]).assert_code(0);
    let dest = tmp.path().join("backup.db");
    run(&data, &["backup", path_str(&dest)]).assert_code(0);
    let daemon = Daemon::start(&data);
    daemon.api.post("tasks", &json!({ "id": "live", "message": "after the backup" }));
    let before = listing(&data, true);
    let tasks_before: Vec<String> = daemon.api.tasks().into_keys().collect();

    let refused = run(&data, &["restore", path_str(&dest)]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    for needle in ["refusing to restore", "agentmesh daemon", "pid", "listening on", "stop it first"] {
        assert!(refused.stderr.contains(needle), "{needle:?} in\n{}", refused.stderr);
    }
    let json = run(&data, &["--json", "restore", path_str(&dest)]);
    assert_eq!(json.code, 1);
    assert_eq!(json.json()["error"]["code"], "database_in_use");
    assert_eq!(listing(&data, true), before, "the data dir is as it was");
    let tasks_after: Vec<String> = daemon.api.tasks().into_keys().collect();
    assert_eq!(tasks_after, tasks_before, "the daemon still serves its database");
    assert!(tasks_after.contains(&String::from("live")));
    daemon.stop();
}

#[test]
fn archive_compact_waits_for_the_daemon_to_stop_then_gives_pages_back() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    for i in 0..60 {
        let message = format!("{i} {}", "padding ".repeat(400));
        run(&data, &["task", "add", &message, "--id", &format!("t{i}"), "--mesh", MESH]).assert_code(0);
    }
    let daemon = Daemon::start(&data);
    let refused = run(&data, &["--json", "archive", "compact"]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert_eq!(refused.json()["error"]["code"], "database_in_use");
    daemon.stop();
    for i in 1..60 {
        run(&data, &["task", "cancel", &format!("t{i}"), "--mesh", MESH]).assert_code(0);
    }
    run(&data, &["archive", "run", "--retain-tasks", "1ms", "--retain-ledger", "1ms"]).assert_code(0);

    let done = run(&data, &["--json", "archive", "compact"]);
    assert_eq!(done.code, 0, "{}", done.stderr);
    let files = done.json()["files"].as_array().cloned().expect("the files");
    assert_eq!(files.len(), 2, "the database and its archive: {files:?}");
    let db = &files[0];
    assert_eq!(db["path"], path_str(&data.join("mesh-runtime.db")));
    assert_eq!(db["rewritten"], false, "made with incremental vacuum: {db}");
    assert!(db["bytesAfter"].as_u64() <= db["bytesBefore"].as_u64(), "{db}");
    run(&data, &["task", "show", "t0", "--mesh", MESH]).assert_code(0);
}

#[test]
fn a_restore_refuses_files_that_are_not_usable_agentmesh_databases() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    for i in 0..3 {
        run(&data, &["task", "add", &incompressible(3000, i), "--id", &format!("big-{i}")]).assert_code(0);
    }

    let text = tmp.path().join("notes.txt");
    std::fs::write(&text, "not a database at all\n".repeat(200)).unwrap();
    let other = tmp.path().join("other.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE things (x); INSERT INTO things VALUES (1)")
        .unwrap();
    let damaged = tmp.path().join("damaged.db");
    run(&data, &["backup", path_str(&damaged)]).assert_code(0);
    let mut bytes = std::fs::read(&damaged).unwrap();
    let pages = bytes.len() / 4096;
    assert!(pages > 4, "{pages} pages");
    // Every page but the header's and the schema's, overwritten.
    for b in &mut bytes[2 * 4096..] {
        *b = 0xa5;
    }
    std::fs::write(&damaged, bytes).unwrap();
    let before = listing(&data, false);

    for (file, code, needles) in [
        (&text, 2, &["refusing to restore", "notes.txt", "is not a SQLite database"][..]),
        (&other, 2, &["other.db", "not an agentmesh one", "mesh_queue"][..]),
        (&damaged, 1, &["damaged.db", "integrity check"][..]),
        (&tmp.path().join("missing.db"), 2, &["there is no file", "missing.db"][..]),
    ] {
        let refused = run(&data, &["restore", path_str(file)]);
        assert_eq!(refused.code, code, "{}: {}", file.display(), refused.stderr);
        for needle in needles {
            assert!(refused.stderr.contains(needle), "{needle:?} in\n{}", refused.stderr);
        }
        assert_eq!(listing(&data, false), before, "{}: the data dir is as it was", file.display());
    }
    let json = run(&data, &["--json", "restore", path_str(&other)]).json();
    assert_eq!(json["error"]["code"], "not_an_agentmesh_database");
    let json = run(&data, &["--json", "restore", "--dry-run", path_str(&damaged)]).json();
    assert_eq!(json["error"]["code"], "integrity_check_failed");
}

#[test]
fn a_backup_never_replaces_a_file_without_force() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    run(&data, &["task", "add", "one", "--id", "one"]).assert_code(0);
    let dest = tmp.path().join("backup.db");
    std::fs::write(&dest, "an older backup").unwrap();

    let refused = run(&data, &["backup", path_str(&dest)]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("exists already") && refused.stderr.contains("--force"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "an older backup");
    let leftovers: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(".tmp")))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let replaced = run(&data, &["--json", "backup", "--force", path_str(&dest)]).assert_code(0).json();
    assert_eq!(replaced["totals"]["tasks"], 1);
    let checked = run(&data, &["--json", "restore", "--dry-run", path_str(&dest)]).assert_code(0).json();
    assert_eq!(checked["dryRun"], true);
    assert_eq!(checked["backup"]["totals"]["tasks"], 1);
}

#[test]
fn postgres_installations_and_daemons_are_pointed_elsewhere_and_nothing_is_written() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let url = "postgres://agentmesh@127.0.0.1:1/mesh";
    let dest = tmp.path().join("backup.db");
    for (args, tool) in [
        (vec!["backup", path_str(&dest)], "pg_dump -n agentmesh"),
        (vec!["restore", path_str(&dest)], "pg_restore"),
        (vec!["archive", "compact"], "VACUUM FULL"),
    ] {
        let mut all = vec!["--database-url", url];
        all.extend(args);
        let refused = run(tmp.path(), &all);
        assert_eq!(refused.code, 2, "{}", refused.stderr);
        let pointers: &[&str] = if tool == "VACUUM FULL" {
            &["autovacuum"]
        } else {
            &["point-in-time recovery", "agentmesh migrate"]
        };
        for needle in [tool, "invalid databaseUrl"].iter().chain(pointers) {
            assert!(refused.stderr.contains(needle), "{needle:?} in\n{}", refused.stderr);
        }
    }
    assert!(!dest.exists());
    for command in [vec!["backup", path_str(&dest)], vec!["archive", "compact"]] {
        let mut all = vec!["--server", "http://127.0.0.1:1"];
        all.extend(command);
        let refused = run(tmp.path(), &all);
        assert_eq!(refused.code, 2, "{}", refused.stderr);
        assert!(refused.stderr.contains("without --server"), "{}", refused.stderr);
    }
    let entries = std::fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(entries, 0, "nothing was written");
}
