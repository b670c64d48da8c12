//! `agentmesh import-adhdev` on a copy of the original's ledger directory fixture
//! (the one the SQLite backend's tests use), checked against the counts its
//! `manifest.json` records, then imported again to check that nothing is
//! imported twice.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use tempfile::TempDir;

/// The fixture: an original ledger directory written by the original runtime.
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentmesh-sqlite/tests/fixtures/original-ledger-dir")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixture().join("manifest.json")).expect("the fixture's manifest");
    serde_json::from_str(&text).expect("the manifest is JSON")
}

/// A writable copy of the fixture's `legacy/` folder (the import removes the
/// inbox files it imported).
fn ledger_copy() -> TempDir {
    let copy = tempfile::tempdir().expect("a temp dir");
    for entry in std::fs::read_dir(fixture().join("legacy")).expect("the legacy folder") {
        let entry = entry.expect("a directory entry");
        let to = copy.path().join(entry.file_name());
        std::fs::copy(entry.path(), &to).expect("copy a fixture file");
        let mut perms = std::fs::metadata(&to).expect("metadata").permissions();
        #[allow(clippy::permissions_set_readonly_false)] // A private temp copy.
        perms.set_readonly(false);
        std::fs::set_permissions(&to, perms).expect("make the copy writable");
    }
    copy
}

/// Runs the binary on `data_dir`; returns the exit code, stdout and stderr.
fn run(data_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agentmesh"))
        .env_remove("AGENTMESH_HOME")
        .env_remove("AGENTMESH_MESH")
        .env_remove("AGENTMESH_SERVER")
        .env("RUST_LOG", "error")
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    (
        output.status.code().expect("exited normally"),
        String::from_utf8(output.stdout).expect("UTF-8"),
        String::from_utf8(output.stderr).expect("UTF-8"),
    )
}

#[track_caller]
fn json(data_dir: &Path, args: &[&str]) -> Value {
    let (code, stdout, stderr) = run(data_dir, args);
    assert_eq!(code, 0, "{args:?} failed:\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("one JSON document ({e}):\n{stdout}"))
}

/// The database line for `what` (`tasks`, `ledger entries`, ...) of an import.
#[track_caller]
fn table<'a>(summary: &'a Value, what: &str) -> &'a Value {
    summary["databases"][0]["tables"]
        .as_array()
        .expect("a tables array")
        .iter()
        .find(|t| t["what"] == what)
        .unwrap_or_else(|| panic!("no {what} line in {summary:#}"))
}

fn u(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("{value} is not a count"))
}

#[test]
fn an_original_ledger_dir_is_imported_once_with_the_manifests_counts() {
    let manifest = manifest();
    let ledger = ledger_copy();
    let data = tempfile::tempdir().expect("a temp dir");
    let dir = ledger.path().to_str().expect("UTF-8 path");

    let first = json(data.path(), &["import-adhdev", dir, "--json"]);
    let db_tasks =
        u(&manifest["meshes"]["mesh-alpha"]["tasks"]) + u(&manifest["meshes"]["mesh-beta"]["tasks"]);
    assert_eq!(
        first["databases"].as_array().map(Vec::len),
        Some(1),
        "beads.db is the one database: {first:#}"
    );
    assert_eq!(first["databases"][0]["meshes"], serde_json::json!(["mesh-alpha", "mesh-beta"]));
    assert_eq!(u(&table(&first, "tasks")["imported"]), db_tasks);
    assert_eq!(u(&table(&first, "ledger entries")["imported"]), u(&manifest["ledger"]["total"]));
    assert_eq!(u(&table(&first, "pending events")["imported"]), u(&manifest["pendingEvents"]["total"]));
    assert_eq!(u(&table(&first, "missions")["imported"]), 2);
    let queue = &first["queueFiles"][0];
    assert_eq!(queue["meshId"], "mesh-gamma");
    assert_eq!(u(&queue["imported"]), u(&manifest["meshes"]["mesh-gamma"]["legacyQueueTasks"]));
    let events = &first["pendingEvents"];
    assert_eq!(u(&events["eventsImported"]), u(&manifest["legacyJsonl"]["validEvents"]));
    assert_eq!(u(&events["linesSkipped"]), u(&manifest["legacyJsonl"]["badLines"]), "bad lines are counted");

    // What was imported reads back through the ordinary commands.
    for (mesh, expected) in [("mesh-alpha", 9), ("mesh-beta", 1), ("mesh-gamma", 3)] {
        let tasks = json(data.path(), &["task", "list", "--mesh", mesh, "--json"]);
        assert_eq!(tasks.as_array().map(Vec::len), Some(expected), "tasks of {mesh}");
    }
    for (id, expected) in manifest["tasks"].as_object().expect("tasks") {
        let mesh = expected["meshId"].as_str().expect("a mesh id");
        let task = json(data.path(), &["task", "show", id, "--mesh", mesh, "--json"]);
        assert_eq!(task["status"], expected["status"], "{id}");
        assert_eq!(task["message"], expected["message"], "{id}");
    }
    let unknown = &manifest["taskWithUnknownFields"];
    let task = json(
        data.path(),
        &["task", "show", unknown["id"].as_str().unwrap(), "--mesh", "mesh-alpha", "--json"],
    );
    assert_eq!(task["model"], unknown["model"], "fields the core does not model survive");
    assert_eq!(task["autoLaunch"]["status"], unknown["autoLaunchStatus"], "nested ones too");
    let alpha = json(data.path(), &["ledger", "tail", "--mesh", "mesh-alpha", "--limit", "1000", "--json"]);
    assert_eq!(alpha.as_array().map(Vec::len), Some(36));
    // Imported entries are numbered by this database as they are copied: paging
    // by sequence reads each of them once.
    let by_seq = json(
        data.path(),
        &["ledger", "slice", "--mesh", "mesh-alpha", "--after-seq", "0", "--limit", "500", "--json"],
    );
    let ids = |entries: &Value| -> std::collections::BTreeSet<String> {
        entries
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["id"].as_str().expect("an id").to_owned())
            .collect()
    };
    assert_eq!(ids(&by_seq["entries"]), ids(&alpha), "{by_seq:#}");
    assert_eq!(by_seq["cursor"]["hasMore"], false);
    let db = rusqlite::Connection::open(data.path().join("mesh-runtime.db")).expect("the database opens");
    let (numbered, distinct, all): (i64, i64, i64) = db
        .query_row("SELECT COUNT(seq), COUNT(DISTINCT seq), COUNT(*) FROM mesh_event_ledger", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .expect("counts");
    assert_eq!((numbered, distinct), (all, all), "every entry has a number of its own");
    let (low, high): (i64, i64) = db
        .query_row("SELECT MIN(seq), MAX(seq) FROM mesh_event_ledger", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("range");
    assert_eq!((low, high), (1, all), "numbered from 1 with no gap");
    let missions = json(data.path(), &["mission", "list", "--mesh", "mesh-alpha", "--json"]);
    let mut ids: Vec<&str> = missions.as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["mission-1", "mission-2"]);

    // Again: everything is already there.
    let second = json(data.path(), &["import-adhdev", dir, "--json"]);
    for line in second["databases"][0]["tables"].as_array().expect("tables") {
        assert_eq!(line["imported"], 0, "nothing twice: {line}");
    }
    assert_eq!(u(&table(&second, "tasks")["skipped"]), db_tasks);
    assert_eq!(second["queueFiles"][0]["imported"], 0);
    assert_eq!(u(&second["queueFiles"][0]["skipped"]), 3);
    assert_eq!(second["pendingEvents"]["eventsImported"], 0);
    let tasks = json(data.path(), &["task", "list", "--mesh", "mesh-alpha", "--json"]);
    assert_eq!(tasks.as_array().map(Vec::len), Some(9), "no task doubled");

    let (code, stdout, _) = run(data.path(), &["import-adhdev", dir]);
    assert_eq!(code, 0);
    for expected in ["tasks", "imported 0, already present 10", "mesh-gamma", "pending-events files"] {
        assert!(stdout.contains(expected), "{expected:?} missing from:\n{stdout}");
    }
}

#[test]
fn import_is_local_only_and_refuses_server() {
    let ledger = ledger_copy();
    let data = tempfile::tempdir().expect("a temp dir");
    let dir = ledger.path().to_str().expect("UTF-8 path");
    let (code, stdout, stderr) =
        run(data.path(), &["--server", "http://127.0.0.1:9", "import-adhdev", dir, "--json"]);
    assert_eq!(code, 2, "{stderr}");
    let error: Value = serde_json::from_str(&stdout).expect("a JSON error");
    assert_eq!(error["error"]["code"], "invalid_input");
    assert!(stderr.contains("server"), "{stderr}");
    assert!(ledger.path().join("mesh-alpha.pending-events.jsonl").exists(), "nothing was touched");

    let (code, _, stderr) = run(data.path(), &["import-adhdev", "/no/such/ledger-dir"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("ledgerDir"), "{stderr}");
}

/// Every file of a directory by name, with its bytes.
fn files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("the directory is listed")
        .map(|entry| {
            let entry = entry.expect("a directory entry");
            let name = entry.file_name().into_string().expect("a UTF-8 name");
            (name, std::fs::read(entry.path()).expect("the file is read"))
        })
        .collect()
}

#[test]
fn the_source_directory_is_left_as_it_was_but_for_the_consumed_inbox_files() {
    let ledger = ledger_copy();
    // A WAL-mode beads.db whose last write is still only in its -wal, as a daemon
    // that has not checkpointed leaves it (the copy is taken while it is open).
    let writer_dir = tempfile::tempdir().expect("a temp dir");
    let live = writer_dir.path().join("beads.db");
    std::fs::copy(ledger.path().join("beads.db"), &live).expect("a copy to write to");
    let conn = rusqlite::Connection::open(&live).expect("the copy opens");
    conn.pragma_update(None, "wal_autocheckpoint", 0).expect("no checkpoints");
    conn.execute(
        "INSERT INTO mesh_missions (id, mesh_id, title, goal, status, created_at, updated_at)
         VALUES ('mission-3', 'mesh-alpha', 'From the WAL', '', 'active',
                 '2026-11-29T18:30:31.272Z', '2026-11-29T18:30:31.272Z')",
        [],
    )
    .expect("a mission is written");
    std::fs::copy(&live, ledger.path().join("beads.db")).expect("the database is copied");
    std::fs::copy(writer_dir.path().join("beads.db-wal"), ledger.path().join("beads.db-wal"))
        .expect("its WAL is copied");
    drop(conn);

    let before = files(ledger.path());
    assert!(before.contains_key("beads.db-wal"), "{:?}", before.keys());
    assert!(!before.contains_key("beads.db-shm"), "{:?}", before.keys());
    let data = tempfile::tempdir().expect("a temp dir");
    let dir = ledger.path().to_str().expect("UTF-8 path");
    let summary = json(data.path(), &["import-adhdev", dir, "--json"]);
    assert_eq!(
        u(&table(&summary, "missions")["imported"]),
        3,
        "the mission only in the WAL too: {summary:#}"
    );

    let after = files(ledger.path());
    let kept: Vec<&String> = before.keys().filter(|name| !name.ends_with(".pending-events.jsonl")).collect();
    assert_eq!(after.keys().collect::<Vec<_>>(), kept, "only the consumed inbox files are gone");
    for (name, bytes) in &after {
        assert!(before[name] == *bytes, "{name} was changed by the import");
    }
    let missions = json(data.path(), &["mission", "list", "--mesh", "mesh-alpha", "--json"]);
    let mut ids: Vec<&str> = missions.as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["mission-1", "mission-2", "mission-3"]);
}
