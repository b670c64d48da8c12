//! End-to-end tests of the `agentmesh` binary: each test runs the real executable
//! against its own temporary data dir and checks stdout, stderr and exit codes.
//!
//! The environment is scrubbed of `AGENTMESH_HOME` and `AGENTMESH_MESH` so a
//! developer's own mesh can never leak in. No test sleeps: time-dependent rules
//! are exercised with instants far in the future (or far in the past).
//!
//! Idle sessions, deliveries and dispatches are written by the daemon, not the
//! CLI; tests of their read views seed rows by opening the same data dir with
//! the SQLite store directly, then run the binary against it.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use agentmesh_core::{
    DeliveryStatus, DispatchStatus, IdleSession, NewDirectDispatch, NewSessionDelivery, Timestamp,
};
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::conformance::support::seed_tasks;
use agentmesh_store::prelude::*;
use agentmesh_store::{DeliveryUpdate, DispatchChange};
use serde_json::{Value, json};
use tempfile::TempDir;

/// 2025-01-01T00:00:00Z: when seeded rows were written.
const SEEDED_AT: Timestamp = Timestamp::from_millis(1_735_689_600_000);
/// An instant no test run reaches.
const FAR_FUTURE: &str = "2999-01-01T00:00:00.000Z";
/// An instant every test run is past.
const LONG_AGO: &str = "2000-01-01T00:00:00.000Z";
/// The environment switch of v2 enforce mode, scrubbed from every run.
const ENFORCE_ENV: &str = "MESH_PROTOCOL_V2_ENFORCE";

/// One isolated data dir and helpers to run the binary against it (the other
/// CLI suites of this binary use it too).
pub(super) struct Mesh {
    dir: TempDir,
}

/// What one run of the binary produced.
pub(super) struct Run {
    pub(super) code: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

impl Run {
    pub(super) fn from_output(output: Output) -> Run {
        Run {
            code: output.status.code().expect("the binary exited normally"),
            stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
        }
    }

    /// Stdout as the one JSON document it must be.
    #[track_caller]
    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|err| panic!("stdout is not one JSON document ({err}):\n{}", self.stdout))
    }

    #[track_caller]
    pub(super) fn assert_code(&self, expected: i32) -> &Run {
        assert_eq!(
            self.code, expected,
            "unexpected exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Runs `cmd` to its end.
    pub(super) fn of(cmd: &mut Command) -> Run {
        Run::from_output(cmd.output().expect("the binary runs"))
    }

    /// The run, once its exit code is `expected`.
    #[track_caller]
    pub(super) fn code(self, expected: i32) -> Run {
        self.assert_code(expected);
        self
    }

    /// The run, once it succeeded.
    #[track_caller]
    pub(super) fn ok(self) -> Run {
        self.code(0)
    }

    /// Asserts that stderr holds each of `parts`.
    #[track_caller]
    pub(super) fn says(&self, parts: &[&str]) -> &Run {
        for part in parts {
            assert!(self.stderr.contains(part), "stderr does not say {part:?}:\n{}", self.stderr);
        }
        self
    }

    /// The error message on stderr, without the `agentmesh: ` prefix.
    #[track_caller]
    pub(super) fn error(&self) -> &str {
        let line = self.stderr.lines().rfind(|l| l.starts_with("agentmesh: ")).unwrap_or_else(|| {
            panic!("no `agentmesh: ` error line on stderr:\n{}", self.stderr);
        });
        line.trim_start_matches("agentmesh: ")
    }

    /// Asserts that the error message ends with `fix`, and returns the run.
    #[track_caller]
    pub(super) fn ends_with_fix(self, fix: &str) -> Run {
        let error = self.error();
        assert!(error.ends_with(fix), "the error does not end with {fix:?}:\n{error}");
        self
    }
}

impl Mesh {
    pub(super) fn new() -> Mesh {
        // Private, as agentmesh makes a data dir it creates: one that other users
        // can read gets a warning on stderr.
        let mut builder = tempfile::Builder::new();
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
        let dir = builder.tempdir().expect("a temp dir");
        Mesh { dir }
    }

    pub(super) fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The binary with a scrubbed environment and no data dir chosen.
    pub(super) fn bare_command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentmesh"));
        for var in [
            "AGENTMESH_HOME",
            "AGENTMESH_DATABASE_URL",
            "AGENTMESH_MESH",
            "AGENTMESH_SERVER",
            "AGENTMESH_TOKEN",
            ENFORCE_ENV,
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// `agentmesh --data-dir <tmp> <args>`, not yet run.
    pub(super) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.bare_command();
        cmd.arg("--data-dir").arg(self.data_dir()).args(args);
        cmd
    }

    /// Runs `agentmesh --data-dir <tmp> <args>`.
    pub(super) fn run(&self, args: &[&str]) -> Run {
        Run::from_output(self.command(args).output().expect("the binary runs"))
    }

    /// Runs `agentmesh --data-dir <tmp> <args>`, requires exit 0 and returns the run.
    #[track_caller]
    pub(super) fn succeeds(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        run.assert_code(0);
        run
    }

    /// Runs `agentmesh --data-dir <tmp> <args>` with `input` on stdin.
    pub(super) fn run_with_stdin(&self, args: &[&str], input: &str) -> Run {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        child.stdin.take().expect("a stdin pipe").write_all(input.as_bytes()).expect("stdin is written");
        Run::from_output(child.wait_with_output().expect("the binary exits"))
    }

    /// Runs with `--json`, requires exit 0 and returns the document.
    #[track_caller]
    pub(super) fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        self.run(&all).assert_code(0).json()
    }

    /// Runs with `--json`, requires the given failing exit code and returns the
    /// error object's code (after checking its shape and the stderr report).
    #[track_caller]
    pub(super) fn json_error(&self, args: &[&str], exit_code: i32) -> String {
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

    pub(super) fn ledger_kinds(&self) -> Vec<String> {
        let entries = self.json(&["ledger", "tail", "--limit", "500"]);
        entries.as_array().expect("an array").iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
    }

    pub(super) fn task_ids(&self) -> Vec<String> {
        let tasks = self.json(&["task", "list"]);
        tasks.as_array().expect("an array").iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect()
    }

    /// Writes rows the way the daemon would: through the store, on the same data
    /// dir, closed again before the binary runs.
    pub(super) fn seed(&self, write: impl FnOnce(&SqliteStore)) {
        let store = SqliteStore::open_data_dir(self.data_dir()).expect("the store opens");
        write(&store);
    }
}

/// The values of `field` in a JSON array, as strings.
#[track_caller]
fn strings(doc: &Value, field: &str) -> Vec<String> {
    doc.as_array()
        .expect("an array")
        .iter()
        .map(|item| {
            item[field].as_str().unwrap_or_else(|| panic!("{field} is a string in {item}")).to_owned()
        })
        .collect()
}

fn far_future_ms() -> i64 {
    Timestamp::parse_iso(FAR_FUTURE).expect("a valid instant").millis()
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
    assert!(table.stdout.ends_with("\n1 task in mesh \"default\"\n"), "{}", table.stdout);

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
    assert_eq!(
        human.stdout.trim(),
        "nothing to claim: no pending task this session may take (no_pending_candidates)"
    );
}

#[test]
fn bad_input_exits_2_names_the_field_and_changes_nothing() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "kept", "--id", "kept"]);
    let cases: [(&[&str], &str); 9] = [
        (&["task", "add", "   "], "message"),
        (&["task", "add", "x", "--priority", "urgent"], "priority"),
        (&["task", "add", "x", "--mode", "refactor"], "taskMode"),
        (&["task", "add", "x", "--max-retries", "-1"], "maxRetries"),
        (&["task", "add", "x", "--not-before", "soon"], "notBefore"),
        (&["task", "list", "--status", "done"], "status"),
        (&["mission", "list", "--status", "Done!"], "status"),
        (&["ledger", "tail", "--since", "yesterday"], "since"),
        (&["ledger", "slice", "--since", "yesterday"], "since"),
    ];
    for (args, field) in cases {
        let run = mesh.run(args);
        run.assert_code(2);
        assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout);
        assert!(run.stderr.starts_with("agentmesh: "), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(&format!("invalid {field}")), "{args:?}: {}", run.stderr);
        assert_eq!(mesh.json_error(args, 2), "invalid_input", "{args:?}");
    }
    assert_eq!(mesh.task_ids(), ["kept"], "a refused request enqueued something");
    assert_eq!(mesh.ledger_kinds(), ["task_dispatched"], "a refused request wrote to the ledger");
}

#[test]
fn unknown_task_ids_are_refused() {
    let mesh = Mesh::new();
    mesh.json(&["--mesh", "other", "task", "add", "a database to look in"]);
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
fn complete_with_claim_next_reports_and_claims_in_one_call() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "write the parser", "--id", "a"]);
    mesh.json(&["task", "add", "test the parser", "--id", "b", "--depends-on", "a"]);
    let first = mesh.json(&["claim", "--node", "n1", "--session", "s1"]);
    assert_eq!(first["id"], "a");

    // b waits on a: the claim half sees the completion of the same transaction.
    let chained = mesh.json(&["complete", "--session", "s1", "--summary", "written", "--claim-next", "n1"]);
    assert_eq!(chained["completed"]["id"], "a", "{chained}");
    assert_eq!(chained["completed"]["status"], "completed", "{chained}");
    assert_eq!(chained["next"]["task"]["id"], "b", "{chained}");
    assert_eq!(chained["next"]["task"]["assignedSessionId"], "s1", "{chained}");

    let last = mesh.run(&["complete", "--session", "s1", "--claim-next", "n1"]);
    last.assert_code(0);
    assert_eq!(
        last.stdout,
        "completed b\nnothing to claim: no pending task this session may take (no_pending_candidates)\n"
    );

    // The next-claim flags need --claim-next; a blank node is named.
    assert_eq!(mesh.json_error(&["complete", "--session", "s1", "--tag", "os=linux"], 2), "invalid_input");
    assert_eq!(mesh.json_error(&["complete", "--session", "s1", "--claim-next", " "], 2), "invalid_input");
    let kinds = mesh.ledger_kinds();
    assert_eq!(kinds.iter().filter(|k| *k == "task_completed").count(), 2, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "task_claimed").count(), 2, "{kinds:?}");
}

#[test]
fn a_task_carries_the_difficulty_it_was_added_with_and_an_unknown_one_is_refused() {
    let mesh = Mesh::new();
    let added = mesh.json(&["task", "add", "port the parser", "--id", "a", "--difficulty", "difficult"]);
    assert_eq!(added["difficulty"], "difficult", "{added}");
    assert_eq!(mesh.json(&["task", "show", "a"])["difficulty"], "difficult");
    let refused = mesh.run(&["task", "add", "x", "--id", "b", "--difficulty", "hard", "--json"]);
    refused.assert_code(2);
    assert!(refused.stderr.contains("difficulty"), "{}", refused.stderr);
    assert_eq!(mesh.json(&["task", "list"]).as_array().map(Vec::len), Some(1), "nothing was added");
}

#[test]
fn a_claim_takes_only_the_difficulties_its_flags_name() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "port the parser", "--id", "a", "--difficulty", "difficult"]);
    let refused = mesh.run(&["claim", "--node", "n1", "--session", "s1", "--difficulty", "easy"]);
    refused.assert_code(0);
    assert!(refused.stdout.contains("difficulty_floor_unmet"), "{}", refused.stdout);
    assert!(refused.stdout.contains("difficulties this session does not take"), "{}", refused.stdout);
    let bad = mesh.run(&["claim", "--node", "n1", "--session", "s1", "--difficulty", "hard", "--json"]);
    bad.assert_code(2);
    assert!(bad.stderr.contains("allowedTaskDifficulties[0]"), "{}", bad.stderr);
    let claimed = mesh.json(&["claim", "--node", "n1", "--session", "s1", "--difficulty", "difficult"]);
    assert_eq!(claimed["id"], "a", "{claimed}");
}

#[test]
fn a_claim_stamps_the_transcript_profile_named_by_its_flags() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "write the parser", "--id", "a"]);
    let lone = mesh.run(&["claim", "--node", "n1", "--session", "s1", "--transcript-class", "pty", "--json"]);
    lone.assert_code(2);
    assert!(lone.stderr.contains("--transcript-timing"), "{}", lone.stderr);
    let claimed = mesh.json(&[
        "claim",
        "--node",
        "n1",
        "--session",
        "s1",
        "--transcript-class",
        "pty",
        "--transcript-timing",
        "live",
        "--emits-pty-turn-events",
    ]);
    let expected = serde_json::json!({ "class": "pty", "timing": "live", "emitsPtyTurnEvents": true });
    assert_eq!(claimed["assignedTranscriptProfile"], expected, "{claimed}");
    assert_eq!(mesh.json(&["task", "show", "a"])["assignedTranscriptProfile"], expected);
}

#[test]
fn a_completion_carries_the_workers_time_and_a_clock_far_behind_still_completes() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "write the parser", "--id", "a"]);
    mesh.json(&["claim", "--node", "n1", "--session", "s1"]);
    let refused = mesh.run(&["complete", "--session", "s1", "--occurred-at", "last tuesday", "--json"]);
    refused.assert_code(2);
    assert!(refused.stderr.contains("occurredAt"), "the field is named: {}", refused.stderr);
    assert_eq!(mesh.json(&["task", "show", "a"])["status"], "assigned", "nothing changed");

    let done = mesh.json(&["complete", "--session", "s1", "--occurred-at", "2000-01-01T00:00:00.000Z"]);
    assert_eq!((&done["id"], &done["status"]), (&serde_json::json!("a"), &serde_json::json!("completed")));
}

#[test]
fn list_json_is_an_array_and_filters_by_status() {
    let mesh = Mesh::new();
    mesh.json(&["--mesh", "other", "task", "add", "elsewhere"]);
    assert_eq!(mesh.json(&["task", "list"]), serde_json::json!([]));
    let empty = mesh.run(&["task", "list"]);
    empty.assert_code(0);
    assert_eq!(empty.stdout.trim(), "no tasks in mesh \"default\"");

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
    let commands: [&[&str]; 23] = [
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
        &["events"],
        &["events", "push"],
        &["events", "drain"],
        &["events", "peek"],
        &["events", "ack"],
        &["events", "retract"],
        &["mission", "add"],
        &["mission", "list"],
        &["mission", "show"],
        &["sessions"],
        &["deliveries"],
        &["dispatches"],
    ];
    for args in commands {
        let output = mesh.bare_command().args(args).arg("--help").output().unwrap();
        let run = Run::from_output(output);
        run.assert_code(0);
        assert!(run.stdout.contains("Usage: agentmesh"), "{args:?}: {}", run.stdout);
        assert!(run.stdout.contains("--data-dir"), "{args:?} lacks the global options");
    }
}

#[test]
fn missions_show_progress_derived_from_their_tasks() {
    let mesh = Mesh::new();
    let added =
        mesh.json(&["mission", "add", "m1", "--title", "Harden login", "--goal", "no flaky auth tests"]);
    assert_eq!(added["id"], "m1");
    assert_eq!(added["meshId"], "default");
    assert_eq!(added["title"], "Harden login");
    assert_eq!(added["goal"], "no flaky auth tests");
    assert_eq!(added["status"], "active");
    assert_eq!(
        added["progress"],
        json!({"total": 0, "pending": 0, "assigned": 0, "completed": 0, "failed": 0, "cancelled": 0, "percentComplete": 0})
    );
    let created_at = added["createdAt"].as_str().expect("createdAt").to_owned();

    mesh.json(&["task", "add", "fix the session timeout", "--id", "t1", "--mission", "m1"]);
    mesh.json(&["task", "add", "add a regression test", "--id", "t2", "--mission", "m1"]);
    mesh.json(&["task", "add", "unrelated", "--id", "t3"]);
    let shown = mesh.json(&["mission", "show", "m1"]);
    assert_eq!(shown["progress"]["total"], 2);
    assert_eq!(shown["progress"]["pending"], 2);
    assert_eq!(strings(&shown["tasks"], "id"), ["t1", "t2"], "only the mission's tasks, oldest first");

    mesh.json(&["claim", "--node", "n1", "--session", "s1"]);
    mesh.json(&["complete", "--session", "s1", "--summary", "fixed"]);
    let shown = mesh.json(&["mission", "show", "m1"]);
    assert_eq!(shown["progress"]["completed"], 1);
    assert_eq!(shown["progress"]["pending"], 1);
    assert_eq!(shown["progress"]["percentComplete"], 50);
    assert_eq!(strings(&shown["tasks"], "status"), ["completed", "pending"]);

    let listed = mesh.json(&["mission", "list"]);
    assert_eq!(strings(&listed, "id"), ["m1"]);
    assert_eq!(listed[0]["progress"]["completed"], 1);
    let table = mesh.run(&["mission", "list"]);
    table.assert_code(0);
    assert!(table.stdout.starts_with("ID "), "{}", table.stdout);
    assert!(table.stdout.contains("1/2 done (50%)"), "{}", table.stdout);
    let human = mesh.run(&["mission", "show", "m1"]);
    human.assert_code(0);
    for expected in ["Harden login", "no flaky auth tests", "1/2 done (50%)", "t1", "t2"] {
        assert!(human.stdout.contains(expected), "{expected:?} missing:\n{}", human.stdout);
    }
    assert!(!human.stdout.contains("t3"), "{}", human.stdout);

    mesh.json(&["mission", "add", "m2", "--title", "Later", "--status", "paused"]);
    assert_eq!(strings(&mesh.json(&["mission", "list", "--status", "paused"]), "id"), ["m2"]);
    assert_eq!(strings(&mesh.json(&["mission", "list", "--status", "active"]), "id"), ["m1"]);
    let both = mesh.json(&["mission", "list", "--status", "active", "--status", "paused"]);
    assert_eq!(both.as_array().map(Vec::len), Some(2));

    let closed = mesh.json(&["mission", "add", "m1", "--title", "Harden login", "--status", "closed"]);
    assert_eq!(closed["status"], "closed");
    assert_eq!(closed["createdAt"], created_at.as_str(), "an update keeps the creation time");
    assert_eq!(closed["goal"], "no flaky auth tests", "an update without --goal keeps the goal");
    assert_eq!(closed["progress"]["completed"], 1);
    assert_eq!(strings(&mesh.json(&["mission", "list"]), "id"), ["m1", "m2"], "most recently updated first");
    assert!(mesh.json(&["--mesh", "beta", "mission", "list"]).as_array().unwrap().is_empty());
}

#[test]
fn unknown_missions_are_not_found() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "a database to look in"]);
    let run = mesh.run(&["mission", "show", "nope"]);
    run.assert_code(2);
    assert!(run.stderr.contains("mission nope not found"), "{}", run.stderr);
    assert_eq!(mesh.json_error(&["mission", "show", "nope"], 2), "not_found");
    mesh.json(&["--mesh", "alpha", "mission", "add", "m1", "--title", "Only in alpha"]);
    assert_eq!(mesh.json_error(&["mission", "show", "m1"], 2), "not_found", "another mesh's mission");
    assert_eq!(
        mesh.json_error(&["mission", "add", "m1", "--title", "Taken"], 2),
        "id_in_other_mesh",
        "a mission id belongs to one mesh"
    );
    assert_eq!(mesh.json(&["--mesh", "alpha", "mission", "show", "m1"])["title"], "Only in alpha");
}

#[test]
fn bad_mission_input_exits_2_names_the_field_and_creates_nothing() {
    let mesh = Mesh::new();
    let cases: [(&[&str], &str); 4] = [
        (&["mission", "add", "m1", "--title", "T", "--status", "Done!"], "status"),
        (&["mission", "add", "  ", "--title", "T"], "id"),
        (&["mission", "add", "m1", "--title", " "], "title"),
        (&["mission", "list", "--status", "Done!"], "status"),
    ];
    for (args, field) in cases {
        let run = mesh.run(args);
        run.assert_code(2);
        assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout);
        assert!(run.stderr.contains(&format!("invalid {field}")), "{args:?}: {}", run.stderr);
        assert_eq!(mesh.json_error(args, 2), "invalid_input", "{args:?}");
    }
    assert!(!mesh.data_dir().join("mesh-runtime.db").exists(), "a refused request opened the database");
    assert_eq!(mesh.json_error(&["mission", "add", "m1"], 2), "invalid_input", "--title is required");
}

#[test]
fn sessions_lists_live_idle_sessions_of_this_mesh_only() {
    let mesh = Mesh::new();
    let idle =
        |mesh_id: &str, node: &str, session: &str, expires_at_ms: i64, metadata: Option<Value>| IdleSession {
            mesh_id: mesh_id.to_owned(),
            node_id: node.to_owned(),
            session_id: session.to_owned(),
            provider_type: "claude-cli".to_owned(),
            expires_at_ms,
            metadata,
        };
    let far = far_future_ms();
    let expired = Timestamp::parse_iso(LONG_AGO).unwrap().millis();
    mesh.seed(|store| {
        store
            .write_idle_session(agentmesh_store::IdleWrite::Report(&idle("default", "n2", "s2", far, None)))
            .unwrap();
        store
            .write_idle_session(agentmesh_store::IdleWrite::Report(&idle(
                "default",
                "n1",
                "s1",
                far,
                Some(json!({"workspace": "/repo"})),
            )))
            .unwrap();
        store
            .write_idle_session(agentmesh_store::IdleWrite::Report(&idle(
                "default",
                "n3",
                "s-expired",
                expired,
                None,
            )))
            .unwrap();
        store
            .write_idle_session(agentmesh_store::IdleWrite::Report(&idle("beta", "n1", "s-beta", far, None)))
            .unwrap();
    });

    let listed = mesh.json(&["sessions"]);
    assert_eq!(strings(&listed, "sessionId"), ["s1", "s2"]);
    assert_eq!(
        listed[0],
        json!({
            "meshId": "default",
            "nodeId": "n1",
            "sessionId": "s1",
            "providerType": "claude-cli",
            "expiresAt": far,
            "metadata": {"workspace": "/repo"},
        })
    );
    assert!(listed[1].get("metadata").is_none(), "no metadata reported, none printed: {}", listed[1]);
    assert_eq!(strings(&mesh.json(&["--mesh", "beta", "sessions"]), "sessionId"), ["s-beta"]);

    let table = mesh.run(&["sessions"]);
    table.assert_code(0);
    assert!(table.stdout.starts_with("NODE "), "{}", table.stdout);
    assert!(table.stdout.contains("EXPIRES IN") && table.stdout.contains("s1"), "{}", table.stdout);
    assert!(!table.stdout.contains("s-expired") && !table.stdout.contains("s-beta"), "{}", table.stdout);
    let empty = mesh.run(&["--mesh", "gamma", "sessions"]);
    empty.assert_code(0);
    assert_eq!(empty.stdout.trim(), "no idle sessions in mesh \"gamma\"");
    assert_eq!(mesh.json(&["--mesh", "gamma", "sessions"]), json!([]));
}

#[test]
fn holds_are_set_shown_listed_and_released() {
    let mesh = Mesh::new();
    let first = mesh.json(&["holds", "set", "t1", "--reason", "acked"]);
    assert_eq!((&first["taskId"], &first["holdReason"]), (&json!("t1"), &json!("acked")), "{first}");
    assert_eq!(first["firstIdleSinceAck"], Value::Null, "{first}");
    let args = [
        "holds",
        "set",
        "t1",
        "--reason",
        "idle_after_ack",
        "--first-idle-since-ack",
        "2025-01-01T00:00:00Z",
    ];
    let again = mesh.json(&[&args[..], &["--read-failures", "2"]].concat());
    assert_eq!(again["heldAt"], first["heldAt"], "the first heldAt is kept: {again}");
    assert_eq!(
        (&again["readFailureCount"], &again["firstIdleSinceAck"]),
        (&json!(2), &json!("2025-01-01T00:00:00.000Z"))
    );
    assert_eq!(mesh.json(&["holds", "show", "t1"]), again);
    assert_eq!(strings(&mesh.json(&["holds"]), "taskId"), ["t1"]);
    let bad = ["holds", "set", "t2", "--reason", "acked", "--first-idle-since-ack", "soon"];
    assert_eq!(mesh.json_error(&bad, 2), "invalid_input");
    assert_eq!(mesh.json(&["holds", "release", "t1"]), json!({ "released": true }));
    assert_eq!(mesh.json(&["holds", "release", "t1"]), json!({ "released": false }));
    assert_eq!(mesh.json(&["holds"]), json!([]));
    let empty = mesh.run(&["holds"]);
    empty.assert_code(0);
    assert_eq!(empty.stdout.trim(), "no in-flight holds in mesh \"default\"");
}

#[test]
fn a_direct_dispatch_is_recorded_once_and_its_delivery_confirmed() {
    let mesh = Mesh::new();
    let record =
        ["task", "record-dispatched", "t1", "--node", "n1", "--session", "s1", "--message", "fix it"];
    let recorded = mesh.json(&record);
    assert_eq!((&recorded["created"], &recorded["task"]["status"]), (&json!(true), &json!("assigned")));
    assert_eq!(mesh.json(&["task", "delivered", "t1"]), json!({ "taskId": "t1", "confirmed": true }));
    assert_eq!(mesh.json(&["task", "delivered", "t0"]), json!({ "taskId": "t0", "confirmed": false }));
    let again = mesh.json(&record);
    assert_eq!((&again["created"], &again["task"]), (&json!(false), &recorded["task"]));
    let bad = ["task", "record-dispatched", "t2", "--node", "n1", "--session", "s1", "--message", " "];
    assert_eq!(mesh.json_error(&bad, 2), "invalid_input");
    assert_eq!(strings(&mesh.json(&["task", "list"]), "id"), ["t1"]);
}

#[test]
fn events_are_deleted_by_id_and_a_mission_keeps_its_first_source() {
    let mesh = Mesh::new();
    let pushed = mesh.json(&["events", "push", "--event", "agent:ready", "--node", "n1"]);
    let id = pushed["id"].as_str().expect("the pushed event's id").to_owned();
    assert_eq!(mesh.json(&["events", "delete", &id, "no-such-event"]), json!({ "deleted": 1 }));
    assert_eq!(mesh.json(&["events", "delete", &id]), json!({ "deleted": 0 }));
    assert_eq!(mesh.json_error(&["events", "delete", " "], 2), "invalid_input");

    let first = mesh.json(&["mission", "add", "m1", "--title", "T", "--source", "coordinator"]);
    assert_eq!(first["source"], "coordinator", "{first}");
    let again = mesh.json(&["mission", "add", "m1", "--title", "T", "--source", "import"]);
    assert_eq!(again["source"], "coordinator", "a written source is kept: {again}");
}

#[test]
fn deliveries_lists_waiting_deliveries_of_this_mesh_only() {
    let mesh = Mesh::new();
    let delivery = |id: &str, session: &str, kind: &str, priority: i64| NewSessionDelivery {
        id: id.to_owned(),
        node_id: Some("n1".to_owned()),
        session_id: Some(session.to_owned()),
        kind: kind.to_owned(),
        priority,
        message: format!("message of {id}"),
        ..NewSessionDelivery::default()
    };
    mesh.seed(|store| {
        let d1 = NewSessionDelivery { task_id: Some("t1".to_owned()), ..delivery("d1", "s1", "task", 0) };
        store.insert_session_delivery("default", &d1, SEEDED_AT).unwrap();
        store.insert_session_delivery("default", &delivery("d2", "s2", "nudge", 5), SEEDED_AT).unwrap();
        let expired =
            NewSessionDelivery { expires_at: Some(LONG_AGO.to_owned()), ..delivery("d3", "s1", "task", 9) };
        store.insert_session_delivery("default", &expired, SEEDED_AT).unwrap();
        let delivered =
            NewSessionDelivery { status: Some(DeliveryStatus::Delivered), ..delivery("d4", "s1", "task", 9) };
        store.insert_session_delivery("default", &delivered, SEEDED_AT).unwrap();
        store.insert_session_delivery("beta", &delivery("d-beta", "s1", "task", 9), SEEDED_AT).unwrap();
        let retry = DeliveryUpdate { last_error: Some("pty busy".to_owned()), increment_attempt: true };
        assert!(
            store
                .set_session_delivery_status("default", "d1", DeliveryStatus::Queued, &retry, SEEDED_AT)
                .unwrap()
        );
    });

    let listed = mesh.json(&["deliveries"]);
    assert_eq!(
        strings(&listed, "id"),
        ["d2", "d1"],
        "highest priority first; expired and delivered left out"
    );
    let d1 = &listed[1];
    assert_eq!(d1["meshId"], "default");
    assert_eq!(d1["sessionId"], "s1");
    assert_eq!(d1["taskId"], "t1");
    assert_eq!(d1["kind"], "task");
    assert_eq!(d1["status"], "queued");
    assert_eq!(d1["attemptCount"], 1);
    assert_eq!(d1["lastError"], "pty busy");
    assert_eq!(d1["createdAt"], SEEDED_AT.iso());
    for field in [
        "providerType",
        "deliverAfter",
        "expiresAt",
        "sourceCoordinatorSessionId",
        "sourceCoordinatorDaemonId",
    ] {
        assert_eq!(d1[field], Value::Null, "{field} is null when unset, as in the original");
    }
    assert_eq!(strings(&mesh.json(&["deliveries", "--session", "s1"]), "id"), ["d1"]);
    assert_eq!(strings(&mesh.json(&["--mesh", "beta", "deliveries"]), "id"), ["d-beta"]);
    assert_eq!(mesh.json_error(&["deliveries", "--session", " "], 2), "invalid_input");

    let table = mesh.run(&["deliveries"]);
    table.assert_code(0);
    assert!(table.stdout.starts_with("ID "), "{}", table.stdout);
    assert!(table.stdout.contains("ATTEMPTS") && table.stdout.contains("message of d1"), "{}", table.stdout);
    assert!(!table.stdout.contains("d-beta") && !table.stdout.contains("d3"), "{}", table.stdout);
    let empty = mesh.run(&["--mesh", "gamma", "deliveries"]);
    empty.assert_code(0);
    assert_eq!(empty.stdout.trim(), "no active deliveries in mesh \"gamma\"");
}

#[test]
fn dispatches_lists_active_dispatches_of_this_mesh_only() {
    let mesh = Mesh::new();
    let dispatch = |task: &str, node: &str, session: &str, via: &str| NewDirectDispatch {
        task_id: task.to_owned(),
        node_id: Some(node.to_owned()),
        session_id: Some(session.to_owned()),
        message: format!("work of {task}"),
        via: via.to_owned(),
        ..NewDirectDispatch::default()
    };
    mesh.seed(|store| {
        let t1 = NewDirectDispatch {
            provider_type: Some("claude-cli".to_owned()),
            task_mode: Some("code_change".to_owned()),
            dispatched_to_idle_session: true,
            ..dispatch("t1", "n1", "s1", "pty")
        };
        store.record_direct_dispatch("default", &t1, SEEDED_AT).unwrap();
        store
            .record_direct_dispatch(
                "default",
                &dispatch("t2", "n2", "s2", "p2p"),
                SEEDED_AT.plus_millis(1_000),
            )
            .unwrap();
        store
            .record_direct_dispatch(
                "default",
                &dispatch("t3", "n3", "s3", "pty"),
                SEEDED_AT.plus_millis(2_000),
            )
            .unwrap();
        store.record_direct_dispatch("beta", &dispatch("t-beta", "n1", "s1", "pty"), SEEDED_AT).unwrap();
        let acked = store
            .change_direct_dispatches(
                "default",
                DispatchChange::Status {
                    session_id: None,
                    task_id: Some("t3"),
                    status: DispatchStatus::Acked,
                },
                SEEDED_AT,
            )
            .unwrap();
        let done = store
            .change_direct_dispatches(
                "default",
                DispatchChange::Status {
                    session_id: None,
                    task_id: Some("t2"),
                    status: DispatchStatus::Completed,
                },
                SEEDED_AT,
            )
            .unwrap();
        assert_eq!((acked, done), (1, 1));
    });

    let listed = mesh.json(&["dispatches"]);
    assert_eq!(strings(&listed, "taskId"), ["t1", "t3"], "oldest first; completed left out");
    assert_eq!(
        listed[0],
        json!({
            "taskId": "t1",
            "meshId": "default",
            "nodeId": "n1",
            "sessionId": "s1",
            "providerType": "claude-cli",
            "message": "work of t1",
            "taskMode": "code_change",
            "via": "pty",
            "status": "dispatched",
            "dispatchedToIdleSession": true,
            "dispatchedAt": SEEDED_AT.iso(),
            "updatedAt": SEEDED_AT.iso(),
        })
    );
    assert_eq!(listed[1]["status"], "acked");
    assert_eq!(listed[1]["providerType"], Value::Null);
    assert_eq!(strings(&mesh.json(&["--mesh", "beta", "dispatches"]), "taskId"), ["t-beta"]);

    let table = mesh.run(&["dispatches"]);
    table.assert_code(0);
    assert!(table.stdout.starts_with("TASK "), "{}", table.stdout);
    assert!(table.stdout.contains("work of t1") && table.stdout.contains("acked"), "{}", table.stdout);
    assert!(!table.stdout.contains("t2") && !table.stdout.contains("t-beta"), "{}", table.stdout);
    let empty = mesh.run(&["--mesh", "gamma", "dispatches"]);
    empty.assert_code(0);
    assert_eq!(empty.stdout.trim(), "no active dispatches in mesh \"gamma\"");
}

/// The drainer flags of coordinator A: machine `mach_A`, run `run-1`.
const COORDINATOR_A: [&str; 4] = ["--daemon", "mach_A", "--run", "run-1"];

impl Mesh {
    /// Runs `events <verb> <COORDINATOR_A> <more>` with `--json` and returns the
    /// document.
    #[track_caller]
    fn events_as_a(&self, verb: &str, more: &[&str]) -> Value {
        let mut args = vec!["events", verb];
        args.extend_from_slice(&COORDINATOR_A);
        args.extend_from_slice(more);
        self.json(&args)
    }

    /// Pushes an event built from flags and returns the queued row id.
    #[track_caller]
    fn push(&self, flags: &[&str]) -> String {
        let mut args = vec!["events", "push"];
        args.extend_from_slice(flags);
        let queued = self.json(&args);
        queued["id"].as_str().unwrap_or_else(|| panic!("a queued row id in {queued}")).to_owned()
    }

    /// The row ids coordinator A would be handed now.
    fn peek_ids_as_a(&self) -> Vec<String> {
        strings(&self.events_as_a("peek", &[]), "id")
    }
}

/// The delivered events of a drain document.
#[track_caller]
fn delivered(drain: &Value) -> &Vec<Value> {
    drain["events"].as_array().unwrap_or_else(|| panic!("an events array in {drain}"))
}

#[test]
fn a_completion_reaches_the_coordinator_that_enqueued_the_task_once() {
    let mesh = Mesh::new();
    mesh.json(&[
        "task",
        "add",
        "write the parser",
        "--id",
        "t1",
        "--coordinator-daemon",
        "mach_A",
        "--coordinator-run",
        "run-1",
    ]);
    mesh.json(&["claim", "--node", "n1", "--session", "w1"]);
    mesh.json(&["complete", "--session", "w1", "--summary", "parser written, 12 tests"]);

    let elsewhere = mesh.json(&["events", "drain", "--daemon", "mach_B", "--run", "run-1"]);
    assert!(delivered(&elsewhere).is_empty(), "another machine's coordinator gets nothing: {elsewhere}");

    let human = mesh.run(&["events", "peek", "--daemon", "mach_A", "--run", "run-1"]);
    human.assert_code(0);
    for expected in ["agent:generating_completed", "task t1", "parser written, 12 tests", "Node 'n1'"] {
        assert!(human.stdout.contains(expected), "{expected:?} missing:\n{}", human.stdout);
    }

    let drain = mesh.events_as_a("drain", &[]);
    let events = delivered(&drain);
    assert_eq!(events.len(), 1, "{drain}");
    let event = &events[0];
    assert_eq!(event["event"], "agent:generating_completed");
    assert_eq!(event["payload"]["meshId"], "default");
    assert_eq!(event["payload"]["metadataEvent"]["taskId"], "t1");
    assert_eq!(event["payload"]["metadataEvent"]["finalSummary"], "parser written, 12 tests");
    assert_eq!(event["payload"]["protocolVersion"], "2.0");
    assert_eq!(event["payload"]["scope"], "unicast");
    assert_eq!(event["payload"]["intendedFor"], json!({"daemonId": "mach_A", "coordinatorRunId": "run-1"}));
    assert!(event["queuedAt"].is_i64() && event["fingerprint"].is_string(), "{event}");
    let counters = drain["counters"].as_object().expect("a counters object");
    assert_eq!(counters.len(), 8, "the original's eight drain counters: {drain}");
    assert_eq!(counters["v2Delivered"], 1);
    assert_eq!(drain["quarantined"], json!([]));

    assert!(delivered(&mesh.events_as_a("drain", &[])).is_empty(), "delivered exactly once");
}

#[test]
fn push_peek_drain_and_the_second_drain_is_empty() {
    let mesh = Mesh::new();
    let flags = [
        "--event",
        "agent:generating_completed",
        "--task",
        "t1",
        "--summary",
        "done, tests green",
        "--node",
        "laptop",
        "--to-daemon",
        "mach_A",
        "--to-run",
        "run-1",
    ];
    let mut args = vec!["events", "push"];
    args.extend_from_slice(&flags);
    let queued = mesh.json(&args);
    let id = queued["id"].as_str().expect("a row id").to_owned();
    assert_eq!(queued["event"], "agent:generating_completed");
    let payload = &queued["payload"];
    assert_eq!(payload["protocolVersion"], "2.0");
    assert!(payload["eventId"].as_str().is_some_and(|e| !e.is_empty()), "{payload}");
    assert_eq!(payload["scope"], "unicast");
    assert_eq!(payload["nodeId"], "laptop");
    assert_eq!(payload["targetCoordinatorDaemonId"], "mach_A");
    assert!(payload["coordinatorMessage"].as_str().unwrap().contains("done, tests green"), "{payload}");

    assert_eq!(mesh.peek_ids_as_a(), [id.as_str()]);
    assert_eq!(mesh.peek_ids_as_a(), [id.as_str()], "a peek marks nothing");
    let drain = mesh.events_as_a("drain", &[]);
    assert_eq!(strings(&drain["events"], "id"), [id.as_str()]);
    assert_eq!(drain["events"][0]["payload"]["eventId"], payload["eventId"]);

    let again = mesh.events_as_a("drain", &[]);
    assert!(delivered(&again).is_empty(), "{again}");
    assert!(again["counters"].as_object().unwrap().values().all(|v| v == 0), "{again}");
    assert!(mesh.peek_ids_as_a().is_empty());
    let human = mesh.run(&["events", "drain", "--daemon", "mach_A", "--run", "run-1"]);
    human.assert_code(0);
    assert_eq!(human.stdout, "no events in mesh \"default\"\ndelivered 0, held back 0\n");

    let human = mesh.run(&["events", "push", "--event", "agent:ready", "--to-daemon", "mach_A"]);
    human.assert_code(0);
    assert!(human.stdout.starts_with("queued ") && human.stdout.contains("broadcast"), "{}", human.stdout);
}

#[test]
fn an_event_pushed_from_a_file_keeps_only_the_envelope_fields_that_are_well_formed() {
    let mesh = Mesh::new();
    let file = mesh.data_dir().join("event.json");
    let event = json!({
        "event": "agent:stopped",
        "metadataEvent": { "taskId": "t9" },
        "targetCoordinatorDaemonId": "mach_A",
        "protocolVersion": "2.1",
        "scope": "everyone",
        "dispatchedBy": { "daemonId": "", "coordinatorRunId": "run-1" },
        "intendedFor": "mach_A",
        "custom": [1, 2]
    });
    std::fs::write(&file, event.to_string()).unwrap();
    let queued = mesh.json(&["events", "push", "--file", file.to_str().unwrap()]);
    let drained = mesh.events_as_a("drain", &[]);
    assert_eq!(strings(&drained["events"], "id"), [queued["id"].as_str().unwrap()]);
    let stored = &drained["events"][0]["payload"];
    for key in ["protocolVersion", "scope", "dispatchedBy", "intendedFor"] {
        assert_ne!(stored.get(key), event.get(key), "{key} is not stored as it came: {stored}");
    }
    // What was malformed was dropped, and the event stamped as any v1 event is.
    assert_eq!(stored["protocolVersion"], "2.0", "{stored}");
    assert!(["unicast", "broadcast", "system"].contains(&stored["scope"].as_str().unwrap()), "{stored}");
    for identity in ["dispatchedBy", "intendedFor"] {
        let daemon = stored[identity]["daemonId"].as_str().unwrap_or_default();
        assert!(!daemon.is_empty(), "{identity} is a whole identity: {stored}");
    }
    assert_eq!(stored["custom"], json!([1, 2]), "the rest of the event is kept: {stored}");
    assert_eq!(stored["metadataEvent"]["taskId"], "t9");
}

#[test]
fn a_duplicate_push_is_an_answer_not_an_error() {
    let mesh = Mesh::new();
    let flags = ["--event", "agent:stopped", "--task", "t1", "--to-daemon", "mach_A", "--to-run", "run-1"];
    let first = mesh.push(&flags);
    let mut args = vec!["events", "push"];
    args.extend_from_slice(&flags);
    assert_eq!(mesh.json(&args), json!({"duplicate": "fingerprint"}));
    let human = mesh.run(&args);
    human.assert_code(0);
    assert_eq!(human.stdout, "duplicate: fingerprint\n");
    assert_eq!(mesh.peek_ids_as_a(), [first.as_str()], "nothing more was stored");
}

#[test]
fn only_drains_the_named_events_and_leaves_the_rest() {
    let mesh = Mesh::new();
    let ready = mesh.push(&["--event", "agent:ready", "--node", "n1", "--to-daemon", "mach_A"]);
    let stopped = mesh.push(&["--event", "agent:stopped", "--task", "t2", "--to-daemon", "mach_A"]);
    let blocked = mesh.push(&["--event", "mesh:dispatch_blocked", "--task", "t3", "--to-daemon", "mach_A"]);

    let peeked = mesh.events_as_a("peek", &["--only", "agent:stopped"]);
    assert_eq!(strings(&peeked, "id"), [stopped.as_str()]);
    let drain = mesh.events_as_a("drain", &["--only", "agent:stopped"]);
    assert_eq!(strings(&drain["events"], "id"), [stopped.as_str()]);
    assert_eq!(mesh.peek_ids_as_a().len(), 2, "the other events stay queued");

    let both = mesh.events_as_a("peek", &["--only", "agent:ready", "mesh:dispatch_blocked"]);
    assert_eq!(strings(&both, "id").len(), 2);
    let one = mesh.events_as_a("drain", &["--only", "mesh:dispatch_blocked", "--only", "agent:nothing"]);
    assert_eq!(strings(&one["events"], "id"), [blocked.as_str()]);
    assert_eq!(mesh.peek_ids_as_a(), [ready.as_str()]);
    assert_eq!(
        mesh.json_error(&["events", "peek", "--daemon", "mach_A", "--run", "r", "--only", " "], 2),
        "invalid_input"
    );
}

#[test]
fn enforce_mode_quarantines_unversioned_events_by_flag_or_environment() {
    let mesh = Mesh::new();
    // Without a coordinator or a machine id the event cannot be stamped: it stays v1.
    let human = mesh.run(&["events", "push", "--event", "agent:stopped", "--task", "t1"]);
    human.assert_code(0);
    assert!(human.stdout.contains("unversioned"), "{}", human.stdout);
    let first = strings(&mesh.events_as_a("peek", &[]), "id");
    assert_eq!(first.len(), 1, "accept mode delivers a v1 event as a broadcast");
    assert!(mesh.events_as_a("peek", &["--enforce"]).as_array().unwrap().is_empty());

    let drain = mesh.events_as_a("drain", &["--enforce"]);
    assert!(delivered(&drain).is_empty(), "{drain}");
    assert_eq!(drain["quarantined"], json!(first));
    assert_eq!(drain["counters"]["v1UnversionedQuarantined"], 1);
    let held = mesh.json(&["ledger", "tail", "--kind", "event_held"]);
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held[0]["payload"]["reason"], "v2_enforce_unversioned_quarantined");
    assert_eq!(held[0]["payload"]["taskId"], "t1");
    assert_eq!(held[0]["payload"]["recoverable"], true);

    mesh.push(&["--event", "agent:stopped", "--task", "t2"]);
    let output = mesh
        .command(&["--json", "events", "drain", "--daemon", "mach_A", "--run", "run-1"])
        .env(ENFORCE_ENV, "1")
        .output()
        .unwrap();
    let drain = Run::from_output(output).assert_code(0).json();
    assert!(delivered(&drain).is_empty(), "{drain}");
    assert_eq!(drain["counters"]["v1UnversionedQuarantined"], 1);
    assert_eq!(mesh.json(&["ledger", "tail", "--kind", "event_held"]).as_array().map(Vec::len), Some(2));

    mesh.push(&["--event", "agent:stopped", "--task", "t3"]);
    let output = mesh
        .command(&["--json", "events", "drain", "--daemon", "mach_A", "--run", "run-1"])
        .env(ENFORCE_ENV, "off")
        .output()
        .unwrap();
    let drain = Run::from_output(output).assert_code(0).json();
    assert_eq!(delivered(&drain).len(), 1, "any other value leaves enforce mode off: {drain}");
    assert_eq!(drain["counters"]["v1BroadcastAccepted"], 1);

    let human = mesh.run(&["events", "push", "--event", "agent:stopped", "--task", "t4"]);
    human.assert_code(0);
    let human = mesh.run(&["events", "drain", "--daemon", "mach_A", "--run", "run-1", "--enforce"]);
    human.assert_code(0);
    assert!(
        human.stdout.contains("held back 1") && human.stdout.contains("`agentmesh events held`"),
        "{}",
        human.stdout
    );
    assert!(human.stdout.contains("1 unversioned, held back"), "{}", human.stdout);
}

#[test]
fn retract_withdraws_a_tasks_undelivered_dispatch_blocked_events() {
    let mesh = Mesh::new();
    mesh.push(&["--event", "mesh:dispatch_blocked", "--task", "t9", "--to-daemon", "mach_A"]);
    let other = mesh.push(&["--event", "mesh:dispatch_blocked", "--task", "t8", "--to-daemon", "mach_A"]);
    assert_eq!(mesh.json(&["events", "retract", "--task", "t9"]), json!({"retracted": 1}));
    assert_eq!(mesh.peek_ids_as_a(), [other.as_str()]);
    let human = mesh.run(&["events", "retract", "--task", "t9"]);
    human.assert_code(0);
    assert!(human.stdout.starts_with("retracted 0 "), "{}", human.stdout);
    assert_eq!(mesh.json_error(&["events", "retract", "--task", " "], 2), "invalid_input");
}

#[test]
fn ack_marks_events_drained_by_id() {
    let mesh = Mesh::new();
    let id = mesh.push(&["--event", "agent:stopped", "--task", "t1", "--to-daemon", "mach_A"]);
    assert_eq!(mesh.json(&["events", "ack", &id, "no-such-id"]), json!({"acked": 1}));
    assert!(mesh.peek_ids_as_a().is_empty());
    let human = mesh.run(&["events", "ack", &id]);
    human.assert_code(0);
    assert_eq!(human.stdout, "acked 0 of 1 event(s)\n", "an acked event is not acked twice");
    assert_eq!(mesh.json_error(&["events", "ack"], 2), "invalid_input", "ack needs an id");
}

#[test]
fn push_reads_json_from_a_file_or_stdin_and_keeps_a_stamped_event_id() {
    let mesh = Mesh::new();
    let identity = json!({"daemonId": "mach_A", "coordinatorRunId": "run-1"});
    let relayed = json!({
        "event": "agent:generating_completed",
        "nodeLabel": "Node 'n7'",
        "nodeId": "n7",
        "metadataEvent": {"taskId": "t7", "finalSummary": "remote work done"},
        "queuedAt": SEEDED_AT.millis(),
        "targetCoordinatorDaemonId": "mach_A",
        "protocolVersion": "2.0",
        "eventId": "evt-remote-1",
        "scope": "unicast",
        "dispatchedBy": identity,
        "intendedFor": identity,
        "relayedFrom": "mach_R",
    });
    let path = mesh.data_dir().join("event.json");
    std::fs::write(&path, relayed.to_string()).unwrap();
    let queued = mesh.json(&["events", "push", "--file", path.to_str().unwrap()]);
    let payload = &queued["payload"];
    assert_eq!(payload["eventId"], "evt-remote-1", "a stamped event keeps its event id");
    assert_eq!(payload["meshId"], "default", "meshId defaults to --mesh");
    assert_eq!(payload["relayedFrom"], "mach_R", "unknown keys are kept");
    assert_eq!(queued["queuedAt"], SEEDED_AT.millis());

    let again = mesh.run_with_stdin(&["--json", "events", "push", "--file", "-"], &relayed.to_string());
    assert_eq!(again.assert_code(0).json(), json!({"duplicate": "fingerprint"}));

    let minimal = json!({"event": "agent:ready", "metadataEvent": {}, "targetCoordinatorDaemonId": "mach_A"});
    let from_stdin = mesh.run_with_stdin(&["--json", "events", "push", "--file", "-"], &minimal.to_string());
    let from_stdin = from_stdin.assert_code(0).json();
    assert_eq!(from_stdin["payload"]["scope"], "broadcast");
    assert!(from_stdin["queuedAt"].as_i64().unwrap() > SEEDED_AT.millis(), "queuedAt defaults to now");

    let drain = mesh.events_as_a("drain", &[]);
    assert_eq!(delivered(&drain).len(), 2, "{drain}");
    assert_eq!(drain["events"][0]["payload"]["eventId"], "evt-remote-1", "oldest first");
}

#[test]
fn a_bad_push_exits_2_names_the_field_and_stores_nothing() {
    let mesh = Mesh::new();
    let refused = mesh.run_with_stdin(&["events", "push", "--file", "-"], "{\"event\": ");
    refused.assert_code(2);
    assert!(refused.stderr.contains("invalid file") && refused.stderr.contains("JSON"), "{}", refused.stderr);
    assert!(!mesh.data_dir().join("mesh-runtime.db").exists(), "a refused push opened the database");

    let kept = mesh.push(&["--event", "agent:stopped", "--task", "t1", "--to-daemon", "mach_A"]);
    let cases: [(&str, &str); 6] = [
        ("{not json", "file"),
        ("[1, 2]", "pendingEvent"),
        (r#"{"event": "agent:ready", "metadataEvent": "done"}"#, "metadataEvent"),
        (r#"{"event": "agent:ready", "metadataEvent": {}, "queuedAt": "now"}"#, "queuedAt"),
        (r#"{"event": "agent:ready", "metadataEvent": {}, "meshId": "beta"}"#, "meshId"),
        (r#"{"event": ["agent:ready"], "metadataEvent": {}}"#, "event"),
    ];
    for (input, field) in cases {
        let run = mesh.run_with_stdin(&["events", "push", "--file", "-"], input);
        run.assert_code(2);
        assert!(run.stdout.is_empty(), "{input} printed {}", run.stdout);
        assert!(run.stderr.contains(&format!("invalid {field}")), "{input}: {}", run.stderr);
        let run = mesh.run_with_stdin(&["--json", "events", "push", "--file", "-"], input);
        run.assert_code(2);
        assert_eq!(run.json()["error"]["code"], "invalid_input", "{input}");
    }
    let missing = mesh.data_dir().join("missing.json");
    let flag_cases: [(&[&str], &str); 3] = [
        (&["events", "push", "--file", missing.to_str().unwrap()], "file"),
        (&["events", "push", "--event", "agent:ready", "--scope", "multicast"], "scope"),
        (&["events", "push", "--event", " "], "event"),
    ];
    for (args, field) in flag_cases {
        let run = mesh.run(args);
        run.assert_code(2);
        assert!(run.stderr.contains(&format!("invalid {field}")), "{args:?}: {}", run.stderr);
    }
    assert_eq!(mesh.json_error(&["events", "push"], 2), "invalid_input", "--file or --event is required");
    assert_eq!(
        mesh.json_error(&["events", "push", "--file", "-", "--task", "t1"], 2),
        "invalid_input",
        "--file does not mix with event flags"
    );
    assert_eq!(mesh.peek_ids_as_a(), [kept.as_str()], "a refused push stored nothing");
}

#[test]
fn the_drainer_identity_routes_by_session_and_other_known_ids() {
    let mesh = Mesh::new();
    // Without a real run id on either side, coordinators on one machine are told
    // apart by session.
    let mine = mesh.push(&[
        "--event",
        "agent:stopped",
        "--task",
        "t1",
        "--to-daemon",
        "mach_A",
        "--to-session",
        "c1",
    ]);
    let sibling = ["--daemon", "mach_A", "--run", "mach_A", "--session", "c2"];
    let mut args = vec!["events", "peek"];
    args.extend_from_slice(&sibling);
    assert_eq!(mesh.json(&args), json!([]), "a sibling session is not handed another session's event");
    let peeked =
        mesh.json(&["events", "peek", "--daemon", "daemon_mach_A", "--run", "mach_A", "--session", "c1"]);
    assert_eq!(strings(&peeked, "id"), [mine.as_str()], "any id form of the machine");

    // An event targeted at another id this daemon answers to passes the daemon scope
    // only when the drainer names that id.
    let status = mesh.push(&["--event", "agent:ready", "--to-daemon", "inst-7"]);
    assert!(!mesh.peek_ids_as_a().contains(&status));
    let peeked = mesh.events_as_a("peek", &["--also-known-as", "inst-7"]);
    assert!(strings(&peeked, "id").contains(&status), "{peeked}");
    assert_eq!(mesh.json_error(&["events", "peek", "--daemon", "mach_A", "--run", " "], 2), "invalid_input");
}

#[test]
fn the_database_is_the_only_copy_and_no_jsonl_mirror_is_written() {
    let mesh = Mesh::new();
    mesh.json(&["mission", "add", "m1", "--title", "Parser"]);
    mesh.json(&[
        "task",
        "add",
        "write the parser",
        "--id",
        "t1",
        "--mission",
        "m1",
        "--coordinator-daemon",
        "mach_A",
        "--coordinator-run",
        "run-1",
    ]);
    mesh.json(&["claim", "--node", "n1", "--session", "w1"]);
    mesh.json(&["complete", "--session", "w1", "--summary", "parser written"]);
    mesh.json(&["events", "push", "--event", "agent:ready", "--node", "n1"]);
    mesh.json(&["events", "drain", "--daemon", "mach_A", "--run", "run-1"]);
    mesh.json(&["ledger", "tail"]);

    let mut files: Vec<String> = std::fs::read_dir(mesh.data_dir())
        .expect("the data dir is readable")
        .map(|entry| entry.expect("a dir entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(
        files.iter().all(|name| name.starts_with(agentmesh_sqlite::DB_FILE_NAME)),
        "only the database and its WAL files are written, no ledger or inbox mirror: {files:?}"
    );
}

/// Runs with `--json`, requires exit code 2 and returns the error message.
#[track_caller]
fn refusal_message(mesh: &Mesh, args: &[&str]) -> String {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let run = mesh.run(&all);
    run.assert_code(2);
    run.json()["error"]["message"].as_str().expect("error.message is a string").to_owned()
}

#[test]
fn a_readonly_task_asking_for_a_forbidden_operation_is_refused_with_the_originals_reason() {
    let mesh = Mesh::new();
    let reason = "live_debug_readonly_guardrail_violation: forbidden operations";
    let message = refusal_message(
        &mesh,
        &["task", "add", "read the logs, then git commit -am wip", "--mode", "live_debug_readonly"],
    );
    assert!(message.contains(&format!("{reason} (git_mutation)")), "{message}");
    let message = refusal_message(
        &mesh,
        &["task", "add", "rm -rf build && npm publish", "--mode", "live_debug_readonly"],
    );
    assert!(message.contains(&format!("{reason} (deploy_or_version_bump, destructive_shell)")), "{message}");
    let message = refusal_message(&mesh, &["task", "add", "then kubectl delete pod api-0", "--readonly"]);
    assert!(message.contains(&format!("{reason} (container_mutation)")), "{message}");
    let run = mesh.run(&["task", "add", "rm -rf build && npm publish", "--mode", "live_debug_readonly"]);
    run.assert_code(2);
    assert!(run.stderr.contains(reason), "the reason reaches stderr: {}", run.stderr);
    assert_eq!(
        mesh.json_error(&["task", "list"], 1),
        "no_database",
        "a refused enqueue writes nothing, not even a database"
    );

    let writer = mesh.json(&["task", "add", "rm -rf build && npm publish", "--mode", "code_change"]);
    assert_eq!(writer["status"], "pending", "a task that may change things is accepted");
    let reader = mesh.json(&[
        "task",
        "add",
        "read the deploy logs and report why the release failed",
        "--mode",
        "live_debug_readonly",
    ]);
    assert_eq!(reader["taskMode"], "live_debug_readonly", "prose about deploys passes");
}

#[test]
fn also_known_as_widens_a_drain_to_that_ids_unicasts() {
    let mesh = Mesh::new();
    let for_alias = mesh.push(&["--event", "agent:stopped", "--task", "t1", "--to-daemon", "standalone_X"]);
    let as_alias = ["events", "peek", "--daemon", "standalone_X", "--run", "run-9"];
    assert_eq!(
        strings(&mesh.json(&as_alias), "id"),
        [for_alias.as_str()],
        "draining as standalone_X takes it"
    );
    assert!(mesh.peek_ids_as_a().is_empty(), "mach_A alone does not");
    let drained = mesh.events_as_a("drain", &["--also-known-as", "standalone_X"]);
    assert_eq!(strings(&drained["events"], "id"), [for_alias.as_str()], "{drained}");
    let again = mesh.events_as_a("drain", &["--also-known-as", "standalone_X"]);
    assert_eq!(again["events"], json!([]), "delivered once");
}

#[test]
fn a_task_id_held_by_another_mesh_is_refused_saying_where_it_is() {
    let mesh = Mesh::new();
    mesh.json(&["--mesh", "A", "task", "add", "first", "--id", "t1"]);
    let run = mesh.run(&["--json", "--mesh", "B", "task", "add", "second", "--id", "t1"]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    let message = run.json()["error"]["message"].as_str().expect("a message").to_owned();
    assert!(
        message.contains("task t1 already exists (task ids are unique per database; it is in mesh A)"),
        "{message}"
    );
    assert!(!message.contains("mesh B"), "the task is not in mesh B: {message}");
    let shown = mesh.run(&["--mesh", "B", "task", "show", "t1"]);
    assert_ne!(shown.code, 0, "t1 is not in mesh B");
    assert_eq!(mesh.json(&["--mesh", "A", "task", "show", "t1"])["message"], "first");
}

// ── Ids ─────────────────────────────────────────────────────────────────────

#[test]
fn every_id_flag_follows_the_one_id_rule_and_a_refused_one_changes_nothing() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "kept", "--id", "kept"]);
    let long = "x".repeat(201);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["task", "add", "x", "--id", "x\ny\nz"], "id"),
        (vec!["task", "add", "x", "--id", &long], "id"),
        (vec!["task", "add", "x", "--depends-on", "kept", "--depends-on", "a\rb"], "dependsOn[1]"),
        (vec!["task", "add", "x", "--target-node", "n\u{1b}[2J"], "targetNodeId"),
        (vec!["task", "add", "x", "--target-session", &long], "targetSessionId"),
        (vec!["task", "add", "x", "--mission", "m\n1"], "missionId"),
        (vec!["task", "add", "x", "--coordinator-run", "run\n1"], "coordinator.runId"),
        (vec!["task", "show", "kept\nforged"], "id"),
        (vec!["task", "cancel", "kept\nforged"], "id"),
        (vec!["task", "requeue", &long], "id"),
        (vec!["claim", "--node", "n\n1", "--session", "s1"], "nodeId"),
        (vec!["claim", "--node", "n1", "--session", &long], "sessionId"),
        (vec!["complete", "--session", "s\t1"], "sessionId"),
        (vec!["mission", "add", "m\n1", "--title", "T"], "id"),
        (vec!["mission", "show", &long], "id"),
        (vec!["events", "drain", "--daemon", "mach\nA", "--run", "run-1"], "daemonId"),
        (
            vec!["events", "push", "--event", "agent:ready", "--to-daemon", "mach\nA"],
            "targetCoordinatorDaemonId",
        ),
        (vec!["events", "ack", "e\n1"], "id"),
        (vec!["events", "retract", "--task", &long], "taskId"),
        (vec!["deliveries", "--session", "s\n1"], "sessionId"),
        (vec!["events", "held", "--task", "t\n1"], "taskId"),
        (vec!["events", "requeue-held", "e\n1"], "ids"),
        (vec!["events", "requeue-held", "--node", &long], "nodeId"),
        (vec!["fingerprints", "--session", "s\n1"], "sessionId"),
        (vec!["conflicts", "--task", &long], "taskId"),
        (vec!["deliveries", "show", "d\n1"], "id"),
        (vec!["deliveries", "mark", &long, "acked"], "id"),
        (vec!["dispatches", "show", "t\n1"], "taskId"),
        (vec!["dispatches", "mark", "acked", "--session", "s\n1"], "sessionId"),
        (vec!["dispatches", "remove", "kept", "t\n1"], "taskIds"),
        (vec!["sessions", "remove", "--node", "n\n1", "--session", "s1"], "nodeId"),
        (vec!["--mesh", "a\nb", "task", "list"], "mesh"),
        (vec!["--mesh", &long, "task", "add", "x"], "mesh"),
        (vec!["work", "--node", "n1", "--session", "s\n1", "--once", "--", "true"], "sessionId"),
    ];
    for (args, field) in &cases {
        let run = mesh.run(args);
        run.assert_code(2);
        assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout);
        assert!(run.stderr.contains(&format!("invalid {field}: ")), "{args:?}: {}", run.stderr);
        assert_eq!(mesh.json_error(args, 2), "invalid_input", "{args:?}");
    }
    assert_eq!(mesh.task_ids(), ["kept"], "a refused id enqueued something");
    assert_eq!(mesh.ledger_kinds(), ["task_dispatched"], "a refused id wrote to the ledger");
    assert!(mesh.json(&["mission", "list"]).as_array().unwrap().is_empty(), "a refused id made a mission");

    // On a fresh data dir a refused id creates no database either.
    let fresh = Mesh::new();
    fresh.run(&["task", "add", "x", "--id", "x\ny"]).assert_code(2);
    assert!(!fresh.data_dir().join("mesh-runtime.db").exists(), "a refused id opened the database");
}

#[test]
fn a_row_with_an_id_outside_the_rule_is_still_listed_one_line_per_row() {
    let mesh = Mesh::new();
    mesh.seed(|store| {
        for id in ["legacy\nforged  pending  normal", "plain"] {
            let task = agentmesh_core::Task::new(id, "default", "from the original", &SEEDED_AT.iso());
            seed_tasks(store, &[task]);
        }
    });
    let listed = mesh.json(&["task", "list"]);
    assert_eq!(
        strings(&listed, "id"),
        ["legacy\nforged  pending  normal", "plain"],
        "JSON keeps ids exactly"
    );
    let table = mesh.run(&["task", "list"]);
    table.assert_code(0);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "a header, one line per task and the count:\n{}", table.stdout);
    assert!(lines[1].starts_with("legacy\\nforged  pending  normal  pending"), "{}", table.stdout);
    assert!(lines[2].starts_with("plain "), "{}", table.stdout);
    assert_eq!(lines[3], "2 tasks in mesh \"default\"");
}

// ── Data dirs and meshes ────────────────────────────────────────────────────

/// The commands that only read, each with the flags it needs.
const READ_ONLY: [&[&str]; 19] = [
    &["status"],
    &["task", "list"],
    &["task", "show", "t1"],
    &["ledger", "tail"],
    &["ledger", "slice"],
    &["ledger", "export", "--output", "/dev/null"],
    &["events", "peek", "--daemon", "mach_A", "--run", "run-1"],
    &["sessions"],
    &["deliveries"],
    &["dispatches"],
    &["mission", "list"],
    &["mission", "show", "m1"],
    &["meshes"],
    &["events", "held"],
    &["fingerprints"],
    &["conflicts", "--within", "1d"],
    &["deliveries", "show", "d1"],
    &["dispatches", "show", "t1"],
    &["tool-calls"],
];

#[test]
fn a_read_only_command_on_a_data_dir_without_a_database_fails_and_creates_nothing() {
    let mesh = Mesh::new();
    let typo = mesh.data_dir().join("typo");
    let typo_arg = typo.to_str().expect("a UTF-8 path");
    for args in READ_ONLY {
        let mut all = vec!["--data-dir", typo_arg];
        all.extend_from_slice(args);
        let run = Run::from_output(mesh.bare_command().args(&all).output().expect("the binary runs"));
        run.assert_code(1);
        assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout);
        assert!(
            run.stderr.starts_with(&format!("agentmesh: no database in {typo_arg}: ")),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("mesh-runtime.db") && run.stderr.contains("--data-dir"),
            "{}",
            run.stderr
        );
        all.insert(0, "--json");
        let run = Run::from_output(mesh.bare_command().args(&all).output().expect("the binary runs"));
        run.assert_code(1);
        assert_eq!(run.json()["error"]["code"], "no_database", "{args:?}");
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
    }

    // A data dir that exists but holds no database is left as empty as it was.
    for args in READ_ONLY {
        mesh.run(args).assert_code(1);
    }
    assert_eq!(std::fs::read_dir(mesh.data_dir()).unwrap().count(), 0, "a read-only command created a file");

    // Bad input is still bad input (exit 2), named before the missing database.
    assert_eq!(mesh.json_error(&["task", "list", "--status", "done"], 2), "invalid_input");
    assert_eq!(mesh.json_error(&["ledger", "tail", "--since", "yesterday"], 2), "invalid_input");

    // A command that writes creates the database; then the reads answer.
    mesh.json(&["task", "add", "first", "--id", "t1"]);
    for args in READ_ONLY {
        let run = mesh.run(args);
        assert_ne!(run.code, 1, "{args:?}: {}", run.stderr);
    }
}

#[test]
fn meshes_lists_every_mesh_of_the_data_dir_with_its_counts() {
    let mesh = Mesh::new();
    assert_eq!(mesh.json(&["mission", "add", "m1", "--mesh", "beta", "--title", "Plan"])["created"], true);
    assert_eq!(mesh.json(&["meshes"]).as_array().map(Vec::len), Some(1));
    mesh.json(&["--mesh", "alpha", "task", "add", "one", "--id", "a1"]);
    mesh.json(&["--mesh", "alpha", "task", "add", "two", "--id", "a2"]);
    mesh.json(&["--mesh", "alpha", "claim", "--node", "n1", "--session", "s1"]);
    mesh.json(&["--mesh", "gamma", "events", "push", "--event", "agent:ready", "--to-daemon", "mach_A"]);

    let listed = mesh.json(&["meshes"]);
    assert_eq!(strings(&listed, "meshId"), ["alpha", "beta", "gamma"]);
    let alpha = &listed[0];
    assert_eq!(
        alpha["tasks"],
        json!({"pending": 1, "assigned": 1, "completed": 0, "failed": 0, "cancelled": 0}),
        "{alpha}"
    );
    assert_eq!(
        (alpha["pendingEvents"].as_u64(), alpha["ledgerEntries"].as_u64()),
        (Some(0), Some(3)),
        "{alpha}"
    );
    assert_eq!(listed[1]["missions"], 1, "{listed}");
    assert_eq!(listed[2]["pendingEvents"], 1, "{listed}");

    let table = mesh.run(&["meshes"]);
    table.assert_code(0);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines[0].starts_with("MESH ") && lines[0].contains("PENDING") && lines[0].contains("LEDGER"),
        "{}",
        table.stdout
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["alpha", "1", "1", "0", "0", "0", "0", "3", "0"]
    );
    assert_eq!(lines.len(), 4, "{}", table.stdout);

    // A mistyped mesh reads as what it is: named, and not among the meshes.
    let typo = mesh.run(&["--mesh", "alpah", "task", "list"]);
    typo.assert_code(0);
    assert_eq!(typo.stdout, "no tasks in mesh \"alpah\"\n");
}

/// `--database-url` (or `$AGENTMESH_DATABASE_URL`) names the database file; a
/// data dir given too must name the same file; a URL of no backend is refused
/// naming the flag, by every command, `serve` and `mcp` included, and nothing is
/// created anywhere.
#[test]
fn the_database_url_names_the_store_and_an_unknown_scheme_is_refused_naming_the_flag() {
    let mesh = Mesh::new();
    let home = Mesh::new();
    let file = mesh.data_dir().join("elsewhere").join("custom.db");
    let url = format!("sqlite://{}", file.display());
    assert!(url.starts_with("sqlite:///"), "{url}");
    let run = |cmd: &mut Command| Run::from_output(cmd.env("HOME", home.data_dir()).output().expect("runs"));

    let added = run(mesh.bare_command().args([
        "--json",
        "--database-url",
        &url,
        "task",
        "add",
        "first",
        "--id",
        "t1",
    ]));
    added.assert_code(0);
    assert!(file.is_file(), "the URL's file holds the database");
    assert!(!mesh.data_dir().join("mesh-runtime.db").exists());
    let listed =
        run(mesh.bare_command().env("AGENTMESH_DATABASE_URL", &url).args(["--json", "task", "list"]));
    assert_eq!(strings(&listed.assert_code(0).json(), "id"), ["t1"]);
    let path = file.to_str().expect("a UTF-8 path");
    let tail = run(mesh.bare_command().args(["--json", "--database-url", path, "ledger", "tail"]));
    assert_eq!(strings(&tail.assert_code(0).json(), "kind"), ["task_dispatched"], "a bare path is a URL too");

    // With a data dir too: they must agree.
    let dir = mesh.data_dir().to_str().expect("a UTF-8 path");
    let clash =
        run(mesh.bare_command().args(["--json", "--data-dir", dir, "--database-url", &url, "task", "list"]));
    clash.assert_code(2);
    let message = clash.json()["error"]["message"].as_str().expect("a message").to_owned();
    assert!(
        message.contains("databaseUrl") && message.contains("custom.db") && message.contains(dir),
        "{message}"
    );
    let own = format!("sqlite://{dir}/mesh-runtime.db");
    let agreed = run(mesh.bare_command().args([
        "--json",
        "--data-dir",
        dir,
        "--database-url",
        &own,
        "task",
        "add",
        "x",
    ]));
    agreed.assert_code(0);
    assert!(mesh.data_dir().join("mesh-runtime.db").is_file());

    // A read on a URL naming no file creates nothing.
    let missing = mesh.data_dir().join("missing").join("m.db");
    let missing_url = format!("sqlite://{}", missing.display());
    let read = run(mesh.bare_command().args(["--database-url", &missing_url, "task", "list"]));
    read.assert_code(1);
    assert!(
        read.stderr.contains("no database at") && read.stderr.contains("--database-url"),
        "{}",
        read.stderr
    );
    assert!(!missing.parent().expect("a parent").exists());

    // A scheme that is no backend.
    let fresh = Mesh::new();
    for args in [
        &["--json", "task", "add", "x"][..],
        &["--json", "task", "list"],
        &["serve", "--listen", "127.0.0.1:0"],
        &["mcp"],
    ] {
        let mut cmd = fresh.bare_command();
        cmd.current_dir(fresh.data_dir())
            .env("AGENTMESH_DATABASE_URL", "mysql://agent@localhost/mesh")
            .args(args);
        let refused = run(cmd.stdin(Stdio::null()));
        refused.assert_code(2);
        for needle in ["databaseUrl", "--database-url", "postgres://", "sqlite://", "mysql"] {
            assert!(refused.stderr.contains(needle), "{args:?}: {needle} in {}", refused.stderr);
        }
    }
    assert_eq!(std::fs::read_dir(fresh.data_dir()).unwrap().count(), 0, "the refusals created nothing");
    assert_eq!(std::fs::read_dir(home.data_dir()).unwrap().count(), 0, "nothing in the home dir either");
}

/// A malformed PostgreSQL URL or schema name is refused naming its flag's field,
/// before anything connects; a server that cannot be reached fails the command
/// naming where it looked (never its password). Nothing is created either way.
#[test]
fn a_bad_postgres_url_or_schema_is_refused_and_an_unreachable_server_named() {
    let mesh = Mesh::new();
    let run = |args: &[&str]| {
        let mut cmd = mesh.bare_command();
        cmd.current_dir(mesh.data_dir()).args(args);
        Run::from_output(cmd.stdin(Stdio::null()).output().expect("runs"))
    };
    let bad_url = run(&["--json", "--database-url", "postgres://u@h:notaport/db", "task", "list"]);
    bad_url.assert_code(2);
    let message = bad_url.json()["error"]["message"].as_str().expect("a message").to_owned();
    assert!(message.contains("invalid databaseUrl"), "{message}");
    let bad_schema = run(&[
        "--json",
        "--database-url",
        "postgres://postgres@127.0.0.1:5432/test",
        "--database-schema",
        "no-dashes",
        "task",
        "list",
    ]);
    bad_schema.assert_code(2);
    let message = bad_schema.json()["error"]["message"].as_str().expect("a message").to_owned();
    assert!(message.contains("invalid databaseSchema"), "{message}");
    // Port 1 on loopback: nothing listens there.
    // A fault of the environment: exit status 75, worth running again later.
    let unreachable = run(&["--database-url", "postgres://agent:s3cret@127.0.0.1:1/mesh", "task", "list"]);
    unreachable.assert_code(75);
    assert!(unreachable.stderr.contains("unavailable"), "{}", unreachable.stderr);
    assert!(unreachable.stderr.contains("127.0.0.1:1/mesh"), "{}", unreachable.stderr);
    assert!(!unreachable.stderr.contains("s3cret"), "the password is never printed: {}", unreachable.stderr);
    assert_eq!(std::fs::read_dir(mesh.data_dir()).unwrap().count(), 0, "the refusals created nothing");
}

#[test]
fn durability_is_chosen_by_flag_or_environment_and_shown_by_status() {
    let mesh = Mesh::new();
    mesh.json(&["task", "add", "kept", "--id", "kept"]);
    assert_eq!(mesh.json(&["status"])["durability"], "full", "the default syncs every write");
    let relaxed = mesh.json(&["--durability", "process-crash-only", "status"]);
    assert_eq!(relaxed["durability"], "process-crash-only");
    let by_env =
        mesh.command(&["status"]).env("AGENTMESH_DURABILITY", "process-crash-only").output().unwrap();
    let text = Run::from_output(by_env).assert_code(0).stdout.clone();
    assert!(
        text.contains("durability process-crash-only: an acknowledged write survives a process crash"),
        "{text}"
    );

    let refused = mesh.run(&["--durability", "normal", "task", "add", "not kept"]);
    refused.assert_code(2);
    assert!(
        refused.stderr.contains("--durability") && refused.stderr.contains("process-crash-only"),
        "{}",
        refused.stderr
    );
    assert_eq!(mesh.task_ids(), ["kept"], "a refused flag enqueued something");
}
