//! `agentmesh migrate` end to end: a SQLite data dir filled through the CLI is
//! copied into a fresh PostgreSQL schema (the server of
//! `AGENTMESH_TEST_DATABASE_URL`; skipped without it), read back
//! there through the CLI, copied again (nothing new), and copied back into a
//! fresh SQLite data dir, whose every record is compared with the original's.

use std::path::Path;
use std::process::{Command, Stdio};

use agentmesh_sqlite::SqliteStore;
use agentmesh_store::conformance::transfer::snapshot;
use agentmesh_store::prelude::*;
use serde_json::Value;

use agentmesh_test_support::postgres::{Schema, database_url};
use agentmesh_test_support::require_postgres;

/// Runs the binary; returns the exit code, stdout and stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agentmesh"))
        .env_remove("AGENTMESH_HOME")
        .env_remove("AGENTMESH_MESH")
        .env_remove("AGENTMESH_SERVER")
        .env_remove("AGENTMESH_DATABASE_URL")
        .env_remove("AGENTMESH_DATABASE_SCHEMA")
        .env("RUST_LOG", "error")
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
fn ok(args: &[&str]) -> String {
    let (code, stdout, stderr) = run(args);
    assert_eq!(code, 0, "{args:?} failed:\n{stderr}");
    stdout
}

#[track_caller]
fn json(args: &[&str]) -> Value {
    let stdout = ok(args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("one JSON document ({e}):\n{stdout}"))
}

/// Fills `dir` through the CLI: dependent tasks, a claim, a completion (whose
/// event a coordinator drains), an undrained event, a mission, a second mesh,
/// and a task with fields agentmesh does not know, inserted as stored.
fn fill(dir: &str) {
    let m1 = |args: &[&str]| {
        let mut all = vec!["--data-dir", dir, "--mesh", "m1"];
        all.extend_from_slice(args);
        ok(&all);
    };
    m1(&["mission", "add", "auth", "--title", "Harden login", "--goal", "no flaky tests"]);
    m1(&["task", "add", "first", "--id", "a", "--mission", "auth"]);
    m1(&["task", "add", "second", "--id", "b", "--depends-on", "a", "--priority", "high"]);
    m1(&["task", "add", "third", "--id", "c", "--depends-on", "b", "--tag", "os=linux"]);
    m1(&["claim", "--node", "n1", "--session", "s1"]);
    m1(&["complete", "--session", "s1", "--summary", "done"]);
    m1(&["events", "drain", "--daemon", "d1", "--run", "r1"]);
    m1(&["claim", "--node", "n2", "--session", "s2"]);
    m1(&[
        "events",
        "push",
        "--event",
        "agent:generating_completed",
        "--task",
        "b",
        "--summary",
        "hi",
        "--node",
        "n2",
    ]);
    ok(&["--data-dir", dir, "--mesh", "m2", "task", "add", "elsewhere", "--id", "z"]);
    let store = SqliteStore::open_data_dir(dir).unwrap();
    let legacy = agentmesh_core::Task::from_json(
        r#"{"id":"legacy-1","meshId":"m1","message":"from an older writer","status":"pending",
            "createdAt":"2024-06-01T00:00:00.000Z","updatedAt":"2024-06-01T00:00:00.000Z",
            "futureField":{"nested":[1,"two",null]},"zeta":true}"#,
    )
    .unwrap();
    agentmesh_store::conformance::support::seed_tasks(&store, &[legacy]);
}

#[test]
fn a_sqlite_data_dir_goes_to_postgres_and_back_losing_nothing() {
    let url = require_postgres!();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let back = tmp.path().join("back");
    let (src, back) = (src.to_str().unwrap(), back.to_str().unwrap());
    fill(src);
    let schema = Schema::fresh(&url, "am_migrate");

    // SQLite to PostgreSQL.
    let (code, stdout, stderr) =
        run(&["--json", "migrate", "--from", src, "--to", &url, "--to-schema", schema.name()]);
    assert_eq!(code, 0, "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    let totals = &summary["totals"];
    assert_eq!(totals["meshes"], 2);
    assert_eq!(totals["conflicts"], 0);
    assert_eq!(totals["existing"], 0);
    assert_eq!(totals["copied"], totals["read"]);
    let m1 = &summary["meshes"][0];
    assert_eq!(m1["meshId"], "m1");
    assert_eq!(m1["kinds"]["tasks"]["copied"], 4);
    assert_eq!(m1["kinds"]["missions"]["copied"], 1);
    assert_eq!(m1["kinds"]["inboxEvents"]["copied"], 2);
    assert!(stderr.contains("mesh m1 (1/2): ledger entries:"), "{stderr}");
    assert!(stderr.contains("mesh m2 (2/2): tasks: 1 copied"), "{stderr}");

    // The CLI on PostgreSQL reads what it read on SQLite.
    let pg = ["--database-url", url.as_str(), "--database-schema", schema.name()];
    let on = |base: &[&str], mesh: &str, args: &[&str]| -> Value {
        let mut all: Vec<&str> = base.to_vec();
        all.extend_from_slice(&["--mesh", mesh, "--json"]);
        all.extend_from_slice(args);
        json(&all)
    };
    let sqlite = ["--data-dir", src];
    for (mesh, args) in [
        ("m1", &["task", "list"][..]),
        ("m1", &["mission", "list"][..]),
        ("m1", &["mission", "show", "auth"][..]),
        ("m1", &["events", "peek", "--daemon", "d9", "--run", "r9"][..]),
        ("m1", &["ledger", "slice", "--limit", "500"][..]),
        ("m2", &["task", "list"][..]),
    ] {
        let (a, b) = (on(&sqlite, mesh, args), on(&pg, mesh, args));
        if args[0] == "ledger" {
            // The pages name their origin database and its sequence numbers.
            assert_eq!(a["entries"], b["entries"], "{args:?}");
        } else {
            assert_eq!(a, b, "{args:?}");
        }
    }
    let ledger = |base: &[&str]| {
        let mut all: Vec<&str> = base.to_vec();
        all.extend_from_slice(&["--mesh", "m1", "ledger", "export"]);
        ok(&all)
    };
    assert_eq!(ledger(&pg), ledger(&sqlite), "the ledger in the same order");
    let status = on(&pg, "m1", &["status"]);
    assert_eq!(status, on(&sqlite, "m1", &["status"]));
    assert_eq!(on(&pg, "m1", &["meshes"]), on(&sqlite, "m1", &["meshes"]));

    // Again: nothing is copied, nothing changes.
    let again = json(&["--json", "migrate", "--from", src, "--to", &url, "--to-schema", schema.name()]);
    assert_eq!(again["totals"]["copied"], 0);
    assert_eq!(again["totals"]["existing"], totals["read"]);
    assert_eq!(ledger(&pg), ledger(&sqlite));

    // Back into a fresh SQLite data dir, through the global --database-schema.
    let home = json(&["--database-schema", schema.name(), "--json", "migrate", "--from", &url, "--to", back]);
    assert_eq!(home["totals"]["copied"], totals["read"]);
    let original = SqliteStore::open_data_dir(src).unwrap();
    let copy = SqliteStore::open_data_dir(back).unwrap();
    assert_eq!(copy.transfer_meshes().unwrap(), original.transfer_meshes().unwrap());
    for mesh in ["m1", "m2"] {
        assert_eq!(snapshot(&copy, mesh), snapshot(&original, mesh), "every record of {mesh}");
        assert_eq!(
            copy.read_ledger_ordered(mesh, &Default::default()).unwrap(),
            original.read_ledger_ordered(mesh, &Default::default()).unwrap(),
        );
        assert_eq!(copy.queue_entries(mesh, &[]).unwrap(), original.queue_entries(mesh, &[]).unwrap());
    }
    let legacy = copy.find_task("m1", "legacy-1").unwrap().unwrap();
    assert_eq!(legacy.extra["futureField"], serde_json::json!({"nested": [1, "two", null]}));
    assert_eq!(copy.pending_event_count("m1").unwrap(), 1);
}

#[test]
fn bad_sides_are_refused_naming_the_flag_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let src = src.to_str().unwrap();
    ok(&["--data-dir", src, "task", "add", "x"]);
    let missing = tmp.path().join("missing");
    let missing = missing.to_str().unwrap();
    let file = format!("sqlite://{src}/mesh-runtime.db");
    // Refused before anything connects: no server listens on port 1.
    let unreached = "postgres://postgres@127.0.0.1:1/test";
    let mut cases = vec![
        (vec!["migrate", "--from", src, "--to", src], "to"),
        (vec!["migrate", "--from", src, "--to", file.as_str()], "to"),
        (vec!["migrate", "--from", missing, "--to", src], "from"),
        (vec!["migrate", "--from", src, "--to", "mysql://h/db"], "to"),
        (vec!["migrate", "--from", src, "--from-schema", "s", "--to", unreached], "fromSchema"),
        (vec!["migrate", "--from", src, "--to", unreached, "--to-schema", "1bad"], "toSchema"),
    ];
    // A schema the server does not hold: checked only where there is a server.
    let server = database_url();
    if let Some(url) = &server {
        cases.push((
            vec!["migrate", "--from", url, "--from-schema", "am_never_made", "--to", missing],
            "from",
        ));
    }
    for (args, field) in cases {
        let mut all = vec!["--json"];
        all.extend_from_slice(&args);
        let (code, stdout, stderr) = run(&all);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        let error: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(error["error"]["code"], "invalid_input", "{args:?}: {stdout}");
        assert!(stderr.contains(&format!("invalid {field}:")), "{args:?}: {stderr}");
    }
    assert!(!Path::new(missing).exists(), "a refused migrate creates nothing");
}
