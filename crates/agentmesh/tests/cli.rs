//! End-to-end tests of the `agentmesh` binary: each test runs the real executable
//! against its own temporary data dir and checks stdout, stderr and exit codes.
//!
//! The environment is scrubbed of `AGENTMESH_HOME` and `AGENTMESH_MESH` so a
//! developer's own mesh can never leak in. No test sleeps: time-dependent rules
//! are exercised with instants far in the future.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tempfile::TempDir;

/// One isolated data dir and helpers to run the binary against it.
struct Mesh {
    dir: TempDir,
}

/// What one run of the binary produced.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn from_output(output: Output) -> Run {
        Run {
            code: output.status.code().expect("the binary exited normally"),
            stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
        }
    }

    /// Stdout as the one JSON document it must be.
    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|err| panic!("stdout is not one JSON document ({err}):\n{}", self.stdout))
    }

    #[track_caller]
    fn assert_code(&self, expected: i32) -> &Run {
        assert_eq!(
            self.code, expected,
            "unexpected exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

impl Mesh {
    fn new() -> Mesh {
        Mesh { dir: tempfile::tempdir().expect("a temp dir") }
    }

    fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The binary with a scrubbed environment and no data dir chosen.
    fn bare_command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentmesh"));
        cmd.env_remove("AGENTMESH_HOME").env_remove("AGENTMESH_MESH");
        cmd
    }

    /// Runs `agentmesh --data-dir <tmp> <args>`.
    fn run(&self, args: &[&str]) -> Run {
        let output = self
            .bare_command()
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(args)
            .output()
            .expect("the binary runs");
        Run::from_output(output)
    }

    /// Runs with `--json`, requires exit 0 and returns the document.
    #[track_caller]
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        self.run(&all).assert_code(0).json()
    }

    /// Runs with `--json`, requires the given failing exit code and returns the
    /// error object's code (after checking its shape and the stderr report).
    #[track_caller]
    fn json_error(&self, args: &[&str], exit_code: i32) -> String {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let run = self.run(&all);
        run.assert_code(exit_code);
        assert!(run.stderr.starts_with("agentmesh: ") || run.stderr.starts_with("error: "), "{}", run.stderr);
        let doc = run.json();
        let message = doc["error"]["message"].as_str().expect("error.message is a string");
        assert!(!message.is_empty());
        doc["error"]["code"].as_str().expect("error.code is a string").to_owned()
    }

    fn ledger_kinds(&self) -> Vec<String> {
        let entries = self.json(&["ledger", "tail", "--limit", "500"]);
        entries.as_array().expect("an array").iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
    }

    fn task_ids(&self) -> Vec<String> {
        let tasks = self.json(&["task", "list"]);
        tasks.as_array().expect("an array").iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect()
    }
}

#[test]
fn add_list_claim_complete_show() {
    let mesh = Mesh::new();
    let added = mesh.json(&["task", "add", "fix the login test", "--tag", "os=linux", "--priority", "high"]);
    let id = added["id"].as_str().expect("a generated id").to_owned();
    assert_eq!(added["status"], "pending");
    assert_eq!(added["meshId"], "default");
    assert_eq!(added["requiredTags"], serde_json::json!(["os=linux"]));
    assert_eq!(added["priority"], "high");

    let listed = mesh.json(&["task", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["id"], id.as_str());
    let table = mesh.run(&["task", "list"]);
    table.assert_code(0);
    assert!(table.stdout.starts_with("ID "), "{}", table.stdout);
    assert!(table.stdout.contains(&id) && table.stdout.contains("fix the login test"), "{}", table.stdout);

    let claimed = mesh.json(&["claim", "--node", "n1", "--session", "s1", "--tag", "os=linux"]);
    assert_eq!(claimed["id"], id.as_str());
    assert_eq!(claimed["status"], "assigned");
    assert_eq!(claimed["assignedSessionId"], "s1");
    let epoch = claimed["dispatchNonce"].as_u64().expect("an epoch").to_string();

    let done = mesh.json(&[
        "complete",
        "--session",
        "s1",
        "--task",
        &id,
        "--epoch",
        &epoch,
        "--summary",
        "fixed the race",
    ]);
    assert_eq!(done["status"], "completed");

    let shown = mesh.json(&["task", "show", &id]);
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["finalSummary"], "fixed the race");
    let human = mesh.run(&["task", "show", &id]);
    human.assert_code(0);
    assert!(
        human.stdout.contains("finalSummary") && human.stdout.contains("fixed the race"),
        "{}",
        human.stdout
    );
}

#[test]
fn ledger_tail_shows_the_lifecycle_in_order() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "work", "--id", "t1"]);
    mesh.json(&["claim", "--node", "n1", "--session", "s1"]);
    mesh.json(&["complete", "--session", "s1"]);
    assert_eq!(mesh.ledger_kinds(), ["task_dispatched", "task_claimed", "task_completed"]);

    let entries = mesh.json(&["ledger", "tail"]);
    assert!(entries.as_array().unwrap().iter().all(|e| e["payload"]["taskId"] == "t1"));
    let newest = mesh.json(&["ledger", "tail", "--limit", "2"]);
    let kinds: Vec<&str> = newest.as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["task_claimed", "task_completed"], "the newest two, oldest first");
    let claims = mesh.json(&["ledger", "tail", "--kind", "task_claimed"]);
    assert_eq!(claims.as_array().map(Vec::len), Some(1));

    let human = mesh.run(&["ledger", "tail"]);
    human.assert_code(0);
    let d = human.stdout.find("task_dispatched").expect("dispatched listed");
    let c = human.stdout.find("task_claimed").expect("claimed listed");
    let f = human.stdout.find("task_completed").expect("completed listed");
    assert!(d < c && c < f, "{}", human.stdout);
}

#[test]
fn ledger_slice_pages_through_every_entry() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "one"]);
    mesh.json(&["task", "add", "two"]);
    mesh.json(&["task", "add", "three"]);
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["ledger", "slice", "--limit", "2"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let page = mesh.json(&args);
        assert_eq!(page["protocol"], "adhdev.mesh.ledger.slice.v1");
        for entry in page["entries"].as_array().unwrap() {
            seen.push(entry["payload"]["message"].as_str().unwrap().to_owned());
        }
        if page["cursor"]["hasMore"] != true {
            break;
        }
        after = Some(page["cursor"]["nextAfterId"].as_str().unwrap().to_owned());
    }
    assert_eq!(seen, ["one", "two", "three"]);
}

#[test]
fn nothing_to_claim_is_null_and_exit_0() {
    let mesh = Mesh::new();
    let run = mesh.run(&["claim", "--node", "n1", "--session", "s1", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json(), Value::Null);
    assert!(run.stderr.contains("no_pending_candidates"), "{}", run.stderr);

    let human = mesh.run(&["claim", "--node", "n1", "--session", "s1"]);
    human.assert_code(0);
    assert_eq!(human.stdout.trim(), "nothing to claim: no_pending_candidates");
}

#[test]
fn bad_input_exits_2_names_the_field_and_changes_nothing() {
    let mesh = Mesh::new();
    let cases: [(&[&str], &str); 6] = [
        (&["task", "add", "   "], "message"),
        (&["task", "add", "x", "--priority", "urgent"], "priority"),
        (&["task", "add", "x", "--mode", "refactor"], "taskMode"),
        (&["task", "add", "x", "--max-retries", "-1"], "maxRetries"),
        (&["task", "add", "x", "--not-before", "soon"], "notBefore"),
        (&["task", "list", "--status", "done"], "status"),
    ];
    for (args, field) in cases {
        let run = mesh.run(args);
        run.assert_code(2);
        assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout);
        assert!(run.stderr.starts_with("agentmesh: "), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(&format!("invalid {field}")), "{args:?}: {}", run.stderr);
        assert_eq!(mesh.json_error(args, 2), "invalid_input", "{args:?}");
    }
    assert!(mesh.task_ids().is_empty(), "a refused request enqueued something");
    assert!(mesh.ledger_kinds().is_empty(), "a refused request wrote to the ledger");
}

#[test]
fn unknown_task_ids_are_refused() {
    let mesh = Mesh::new();
    for args in [&["task", "show", "nope"][..], &["task", "cancel", "nope"], &["task", "requeue", "nope"]] {
        let run = mesh.run(args);
        assert_ne!(run.code, 0, "{args:?}");
        assert!(run.stderr.contains("nope"), "{args:?}: {}", run.stderr);
        assert_eq!(mesh.json_error(args, run.code), "task_not_found", "{args:?}");
    }
    assert!(mesh.ledger_kinds().is_empty());
}

#[test]
fn usage_errors_exit_2_with_a_json_error() {
    let mesh = Mesh::new();
    assert_eq!(mesh.json_error(&["claim", "--node", "n1"], 2), "invalid_input", "missing --session");
    assert_eq!(mesh.json_error(&["frobnicate"], 2), "invalid_input");
    assert_eq!(mesh.json_error(&["complete", "--session", "s", "--reason", "r"], 2), "invalid_input");
    let run = mesh.run(&["task", "add"]);
    run.assert_code(2);
    assert!(run.stdout.is_empty());
}

#[test]
fn a_dependency_is_claimed_before_its_dependent() {
    let mesh = Mesh::new();
    // The dependent comes first, with a higher priority, and names a task that does
    // not exist yet: only the dependency rule keeps it from being claimed first.
    mesh.json(&["task", "add", "test the parser", "--id", "b", "--depends-on", "a", "--priority", "high"]);
    mesh.json(&["task", "add", "write the parser", "--id", "a"]);

    let first = mesh.json(&["claim", "--node", "n1", "--session", "s1"]);
    assert_eq!(first["id"], "a");
    let blocked = mesh.run(&["claim", "--node", "n2", "--session", "s2", "--json"]);
    blocked.assert_code(0);
    assert_eq!(blocked.json(), Value::Null);
    assert!(blocked.stderr.contains("dependencies_unsatisfied"), "{}", blocked.stderr);

    mesh.json(&["complete", "--session", "s1", "--summary", "written"]);
    let second = mesh.json(&["claim", "--node", "n2", "--session", "s2"]);
    assert_eq!(second["id"], "b");
}

#[test]
fn list_json_is_an_array_and_filters_by_status() {
    let mesh = Mesh::new();
    assert_eq!(mesh.json(&["task", "list"]), serde_json::json!([]));
    let empty = mesh.run(&["task", "list"]);
    empty.assert_code(0);
    assert_eq!(empty.stdout.trim(), "no tasks");

    mesh.json(&["task", "add", "one", "--id", "t1"]);
    mesh.json(&["task", "add", "two", "--id", "t2"]);
    mesh.json(&["claim", "--node", "n1", "--session", "s1"]);
    assert_eq!(mesh.task_ids(), ["t1", "t2"]);
    let pending = mesh.json(&["task", "list", "--status", "pending"]);
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["id"], "t2");
    let both = mesh.json(&["task", "list", "--status", "pending", "--status", "assigned"]);
    assert_eq!(both.as_array().unwrap().len(), 2);
}

#[test]
fn cancel_then_requeue_until_the_budget_is_spent() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "flaky", "--id", "t1"]);
    let cancelled = mesh.json(&["task", "cancel", "t1", "--reason", "wrong approach"]);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["cancelReason"], "wrong approach");
    assert_eq!(mesh.json_error(&["task", "cancel", "t1"], 2), "invalid_transition");

    let back = mesh.json(&["task", "requeue", "t1", "--reason", "try again"]);
    assert_eq!(back["status"], "pending");
    assert_eq!(back["requeueCount"], 1);
    mesh.json(&["task", "cancel", "t1"]);
    let human = mesh.run(&["task", "requeue", "t1"]);
    human.assert_code(0);
    assert!(human.stdout.contains("out of retries"), "{}", human.stdout);
    assert_eq!(mesh.json(&["task", "show", "t1"])["status"], "failed");

    let forced = mesh.json(&["task", "requeue", "t1", "--force"]);
    assert_eq!(forced["status"], "pending");
}

#[test]
fn failed_completion_and_stale_epoch() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "risky", "--id", "t1"]);
    let claimed = mesh.json(&["claim", "--node", "n1", "--session", "s1"]);
    let stale = (claimed["dispatchNonce"].as_u64().unwrap() + 5).to_string();
    assert_eq!(mesh.json_error(&["complete", "--session", "s1", "--epoch", &stale], 2), "stale_epoch");
    assert_eq!(mesh.json(&["task", "show", "t1"])["status"], "assigned", "a stale report changes nothing");

    let failed = mesh.json(&["complete", "--session", "s1", "--failed"]);
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failureReason"], "worker reported failure");
    assert_eq!(mesh.json_error(&["complete", "--session", "s1"], 2), "no_assigned_task");
}

#[test]
fn future_not_before_delays_the_claim() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "later", "--not-before", "2999-01-01T00:00:00Z"]);
    let run = mesh.run(&["claim", "--node", "n1", "--session", "s1", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json(), Value::Null);
    assert!(run.stderr.contains("not_before_delayed"), "{}", run.stderr);
    let offset = mesh.json(&["task", "add", "in an hour", "--not-before", "3600000"]);
    assert!(offset["notBefore"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn meshes_are_isolated_and_the_environment_is_honoured() {
    let mesh = Mesh::new();
    mesh.json(&["--mesh", "alpha", "task", "add", "only in alpha", "--id", "t1"]);
    assert!(mesh.json(&["task", "list", "--mesh", "beta"]).as_array().unwrap().is_empty());

    // The data dir and the mesh from the environment, global flags after the subcommand.
    let output = mesh
        .bare_command()
        .env("AGENTMESH_HOME", mesh.data_dir())
        .env("AGENTMESH_MESH", "alpha")
        .args(["task", "list", "--json"])
        .output()
        .unwrap();
    let run = Run::from_output(output);
    run.assert_code(0);
    assert_eq!(run.json()[0]["id"], "t1");
    assert_eq!(run.json()[0]["meshId"], "alpha");
    assert!(mesh.data_dir().join("mesh-runtime.db").exists());
}

#[test]
fn help_reads_for_every_command() {
    let mesh = Mesh::new();
    let commands: [&[&str]; 11] = [
        &[],
        &["task"],
        &["task", "add"],
        &["task", "list"],
        &["task", "show"],
        &["task", "cancel"],
        &["task", "requeue"],
        &["claim"],
        &["complete"],
        &["ledger", "tail"],
        &["ledger", "slice"],
    ];
    for args in commands {
        let output = mesh.bare_command().args(args).arg("--help").output().unwrap();
        let run = Run::from_output(output);
        run.assert_code(0);
        assert!(run.stdout.contains("Usage: agentmesh"), "{args:?}: {}", run.stdout);
        assert!(run.stdout.contains("--data-dir"), "{args:?} lacks the global options");
    }
}
