//! `agentmesh reserve`, `release` and `reservations`, and tasks that declare
//! their paths, driven through the binary against a data dir of their own.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::cli::Mesh;

/// A git repository in a temp dir, for the default scope.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    let status = Command::new("git").arg("init").arg("-q").arg(dir.path()).status().expect("git runs");
    assert!(status.success());
    dir
}

#[test]
fn without_git_the_default_scope_is_refused_saying_to_install_it_or_name_a_scope() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "work", "--id", "t1"]);
    let before = mesh.json(&["ledger", "tail"]);
    let nothing = tempfile::tempdir().expect("a temp dir");
    let out = mesh
        .command(&["reserve", "src/parser", "--session", "w1", "--node", "n1"])
        .current_dir(nothing.path())
        .env("PATH", nothing.path())
        .output()
        .expect("the binary runs");
    let refused = crate::cli::Run::from_output(out);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("git is not installed"), "{}", refused.stderr);
    assert!(refused.stderr.contains("install git, or name one with --scope"), "{}", refused.stderr);
    assert_eq!(mesh.json(&["ledger", "tail"]), before, "nothing written");
}

#[test]
fn a_conflicting_reservation_is_denied_naming_its_holder_and_released_paths_are_free() {
    let mesh = Mesh::new();
    let scope = ["--scope", "app"];
    let mine = mesh.json(
        &[
            &["reserve", "src/parser", "tests/**/*.rs", "--session", "w1", "--node", "n1"][..],
            &scope,
            &["--reason", "parser rewrite"],
        ]
        .concat(),
    );
    assert_eq!(mine["granted"], true, "{mine}");
    let id = mine["reservation"]["id"].as_str().expect("an id").to_owned();
    assert_eq!(mine["reservation"]["epoch"], 1);

    // Another session: denied, exit 1, the holder and its pattern named once.
    let denied =
        mesh.run(
            &[
                &[
                    "--json",
                    "reserve",
                    "src/parser/lex.rs",
                    "tests/a/b.rs",
                    "--session",
                    "w2",
                    "--node",
                    "n2",
                ][..],
                &scope,
            ]
            .concat(),
        );
    denied.assert_code(1);
    let doc = denied.json();
    assert_eq!(doc["granted"], false);
    assert_eq!(doc["conflicts"].as_array().map(Vec::len), Some(1), "{doc}");
    assert_eq!(doc["conflicts"][0]["sessionId"], "w1");
    let text = mesh
        .run(&[&["reserve", "src/parser/lex.rs", "--session", "w2", "--node", "n2"][..], &scope].concat());
    text.assert_code(1);
    assert!(text.stdout.contains("held by session w1 on node n1"), "{}", text.stdout);
    assert!(text.stderr.is_empty(), "a denial is an answer, not an error: {}", text.stderr);

    // Shared beside shared elsewhere is fine; the listing shows both holders.
    mesh.json(&[&["reserve", "docs", "--shared", "--session", "w2", "--node", "n2"][..], &scope].concat());
    let listed = mesh.json(&[&["reservations"][..], &scope].concat());
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    let check = mesh.run(
        &[&["reservations", "check", "src/parser/x.rs", "README.md", "--session", "w2"][..], &scope].concat(),
    );
    check.assert_code(1);
    assert!(check.stdout.contains("src/parser/x.rs is reserved"), "{}", check.stdout);
    mesh.succeeds(&[&["reservations", "check", "README.md", "--session", "w2"][..], &scope].concat());

    // A stranger's or a stale epoch's release is refused and changes nothing.
    assert_eq!(
        mesh.json_error(&["release", &id, "--session", "w2", "--epoch", "1"], 2),
        "reservation_fenced"
    );
    assert_eq!(
        mesh.json_error(&["release", &id, "--session", "w1", "--epoch", "9"], 2),
        "reservation_fenced"
    );
    let renewed =
        mesh.json(&["reservations", "renew", &id, "--session", "w1", "--epoch", "1", "--ttl", "2h"]);
    assert_eq!(renewed["id"], id.as_str());
    mesh.json(&["release", &id, "--session", "w1", "--epoch", "1"]);
    let again = mesh
        .json(&[&["reserve", "src/parser/lex.rs", "--session", "w2", "--node", "n2"][..], &scope].concat());
    assert_eq!(again["granted"], true, "released paths are free: {again}");
}

#[test]
fn a_waiting_reservation_is_granted_once_the_holder_releases() {
    let mesh = Mesh::new();
    let held = mesh.json(&["reserve", "src", "--scope", "app", "--session", "w1", "--node", "n1"]);
    let id = held["reservation"]["id"].as_str().expect("an id").to_owned();
    let started = Instant::now();
    let waiter = mesh
        .command(&[
            "--json",
            "reserve",
            "src/lib.rs",
            "--scope",
            "app",
            "--session",
            "w2",
            "--node",
            "n2",
            "--wait",
            "60s",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the waiter starts");
    std::thread::sleep(Duration::from_millis(500));
    mesh.json(&["release", &id, "--session", "w1", "--epoch", "1"]);
    let out = waiter.wait_with_output().expect("the waiter ends");
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["granted"], true, "{doc}");
    assert!(started.elapsed() < Duration::from_secs(30), "granted long before the wait ran out");
}

#[test]
fn a_task_declaring_paths_is_claimed_with_them_reserved_and_another_over_them_waits() {
    agentmesh_test_support::require!(agentmesh_test_support::Tool::Git);
    let mesh = Mesh::new();
    let repo = repo();
    let run_in_repo = |args: &[&str]| {
        let out = mesh.command(args).current_dir(repo.path()).output().expect("the binary runs");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("one JSON document")
    };
    let first =
        run_in_repo(&["--json", "task", "add", "rewrite the parser", "--id", "p1", "--path", "src/parser"]);
    let top = std::fs::canonicalize(repo.path()).expect("the repo path");
    assert_eq!(first["pathsScope"], top.to_string_lossy().as_ref(), "the git top level is the default scope");
    run_in_repo(&["--json", "task", "add", "fix the lexer", "--id", "p2", "--path", "src/parser/lex.rs"]);
    let claimed = mesh.json(&["claim", "--node", "a", "--session", "w1"]);
    assert_eq!(claimed["id"], "p1");
    let refused = mesh.run(&["claim", "--node", "b", "--session", "w2"]);
    refused.assert_code(0);
    assert!(refused.stdout.contains("paths_reserved"), "{}", refused.stdout);
    assert!(
        refused.stdout.contains("held by session w1 on node a for task p1"),
        "the holder is named: {}",
        refused.stdout
    );
    let held = mesh.json(&["reservations", "--all-scopes"]);
    assert_eq!(held[0]["taskId"], "p1", "{held}");
    let epoch = claimed["epoch"].to_string();
    mesh.json(&["complete", "--session", "w1", "--task", "p1", "--epoch", &epoch, "--summary", "done"]);
    assert_eq!(mesh.json(&["reservations", "--all-scopes"]), serde_json::json!([]), "it ends with the task");
    assert_eq!(mesh.json(&["claim", "--node", "b", "--session", "w2"])["id"], "p2");

    // Outside a repository, --path needs its scope, named in the refusal.
    let outside = tempfile::tempdir().expect("a temp dir");
    let out = mesh
        .command(&["--json", "task", "add", "x", "--path", "src"])
        .current_dir(outside.path())
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("pathsScope"));
}
