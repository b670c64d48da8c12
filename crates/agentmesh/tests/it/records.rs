//! End-to-end tests of the records around the queue, through the `agentmesh`
//! binary on a temporary data dir: held events, completion fingerprints and
//! conflicts, the lifecycle of deliveries and dispatches, idle reports and the
//! rate guard's tool-call log.
//!
//! Rows the daemon or the MCP tools write (deliveries, dispatches, idle reports,
//! fingerprints, conflicts, tool calls) are seeded by opening the same data dir
//! with the SQLite store; everything else goes through the binary. No test
//! sleeps: instants are fixed far in the past or the future.

use agentmesh_core::{
    CompletionConflict, IdleSession, NewDirectDispatch, NewSessionDelivery, RateGuard, Timestamp,
};
use agentmesh_store::ToolCall;
use agentmesh_store::conformance::support::{seed_conflict, seed_fingerprint};
use agentmesh_store::prelude::*;
use serde_json::{Value, json};

use super::cli::Mesh;

/// 2025-01-01T00:00:00Z: when seeded rows were written.
const SEEDED_AT: Timestamp = Timestamp::from_millis(1_735_689_600_000);
/// An instant no test run reaches.
const FAR_FUTURE: &str = "2999-01-01T00:00:00.000Z";

/// What the records suites add to the CLI suite's harness.
impl Mesh {
    /// Runs with `--json`, requires a failure (any exit code); returns the
    /// error's code and message.
    #[track_caller]
    fn refused(&self, args: &[&str]) -> (String, String) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let run = self.run(&all);
        assert_ne!(run.code, 0, "{args:?} succeeded: {}", run.stdout);
        let doc = run.json();
        let text = |key: &str| doc["error"][key].as_str().expect("an error field").to_owned();
        (text("code"), text("message"))
    }

    /// Quarantines one unversioned event about `task` on `node` through an
    /// enforce-mode drain; returns its held entry id.
    fn hold(&self, event: &str, task: &str, node: &str) -> String {
        self.json(&["events", "push", "--event", event, "--task", task, "--node", node]);
        let drain = self.json(&["events", "drain", "--daemon", "mach_A", "--run", "run-1", "--enforce"]);
        assert_eq!(drain["quarantined"].as_array().map(Vec::len), Some(1), "{drain}");
        let held = self.json(&["events", "held", "--task", task]);
        held[0]["heldEntryId"].as_str().expect("a held entry id").to_owned()
    }
}

/// The values of `field` in a JSON array, as strings.
#[track_caller]
fn strings(doc: &Value, field: &str) -> Vec<String> {
    doc.as_array()
        .expect("an array")
        .iter()
        .map(|item| item[field].as_str().unwrap_or_else(|| panic!("{field} in {item}")).to_owned())
        .collect()
}

fn far_future() -> Timestamp {
    Timestamp::parse_iso(FAR_FUTURE).expect("a valid instant")
}

#[test]
fn held_events_are_listed_by_filter_and_requeued_by_id_or_filter() {
    let mesh = Mesh::new();
    let t1 = mesh.hold("agent:stopped", "t1", "n1");
    let t2 = mesh.hold("agent:ready", "t2", "n2");

    let held = mesh.json(&["events", "held"]);
    assert_eq!(strings(&held, "heldEntryId"), [t1.as_str(), t2.as_str()], "oldest hold first");
    assert_eq!(held[0]["reason"], "v2_enforce_unversioned_quarantined");
    assert_eq!(
        (&held[0]["event"], &held[0]["taskId"], &held[0]["nodeId"]),
        (&json!("agent:stopped"), &json!("t1"), &json!("n1"))
    );
    assert_eq!(held[0]["heldEvent"]["event"], "agent:stopped", "the whole event, as it was held");
    for (filter, expected) in [
        (&["--event", "agent:ready"][..], vec![t2.as_str()]),
        (&["--node", "n1"], vec![t1.as_str()]),
        (&["--reason", "v2_enforce_unversioned_quarantined"], vec![t1.as_str(), t2.as_str()]),
        (&["--reason", "pending_retention_expired"], vec![]),
        (&["--older-than", "1d"], vec![]),
    ] {
        let mut args = vec!["events", "held"];
        args.extend_from_slice(filter);
        assert_eq!(strings(&mesh.json(&args), "heldEntryId"), expected, "{filter:?}");
    }
    let (code, message) = mesh.refused(&["events", "held", "--reason", "bored"]);
    assert_eq!(code, "invalid_input");
    assert!(message.contains("reason"), "{message}");

    // Naming nothing is refused, and so is an id that is not held; neither moves anything.
    let (code, message) = mesh.refused(&["events", "requeue-held"]);
    assert_eq!(code, "invalid_input");
    assert!(message.contains("all"), "{message}");
    let (code, _) = mesh.refused(&["events", "requeue-held", &t1, "nope"]);
    assert_eq!(code, "not_found");
    assert_eq!(mesh.json(&["events", "held"]).as_array().map(Vec::len), Some(2), "nothing was requeued");

    let requeued = mesh.json(&["events", "requeue-held", &t1]);
    assert_eq!(requeued["requeued"], 1, "{requeued}");
    assert_eq!(
        requeued["events"][0],
        json!({ "heldEntryId": t1, "event": "agent:stopped", "requeued": true })
    );
    assert_eq!(strings(&mesh.json(&["events", "held"]), "heldEntryId"), [t2.as_str()]);
    let drain = mesh.json(&["events", "drain", "--daemon", "mach_A", "--run", "run-1"]);
    assert_eq!(
        strings(&drain["events"], "event"),
        ["agent:stopped"],
        "the requeued event is delivered: {drain}"
    );

    let human = mesh.succeeds(&["events", "requeue-held", "--all"]);
    assert!(human.stdout.contains("requeued 1 of 1 held event(s)"), "{}", human.stdout);
    let empty = mesh.succeeds(&["events", "held"]);
    assert_eq!(empty.stdout.trim(), "no held events");
}

#[test]
fn held_entries_of_the_original_are_picked_by_task_and_an_unreadable_one_is_skipped() {
    let mesh = Mesh::new();
    let original = |id: &str, held_event: serde_json::Value| agentmesh_core::LedgerEntry {
        id: id.to_owned(),
        mesh_id: "default".to_owned(),
        timestamp: "2025-01-01T00:00:00.000Z".to_owned(),
        kind: "event_held".to_owned(),
        node_id: None,
        session_id: None,
        provider_type: None,
        // The original's quarantine entry: the task only inside the held event.
        payload: json!({ "event": "agent:stopped", "reason": "v2_enforce_unversioned_quarantined",
                         "recoverable": true, "heldEvent": held_event }),
    };
    let readable = json!({ "event": "agent:stopped", "meshId": "default", "nodeLabel": "Node 'n1'",
                           "metadataEvent": { "taskId": "t-orig" }, "queuedAt": 1_735_689_600_000_i64 });
    let unreadable = json!({ "event": "agent:stopped", "metadataEvent": { "taskId": "t-orig" } });
    mesh.seed(|store| {
        let entries = [original("held-a", readable), original("held-b", unreadable)];
        store.import_ledger(&entries).expect("the original's entries import");
    });

    let by_task = mesh.json(&["events", "held", "--task", "t-orig"]);
    assert_eq!(strings(&by_task, "heldEntryId"), ["held-a", "held-b"], "{by_task}");
    assert_eq!(strings(&by_task, "taskId"), ["t-orig", "t-orig"]);

    let requeued = mesh.json(&["events", "requeue-held", "--task", "t-orig"]);
    assert_eq!((&requeued["requeued"], &requeued["unrecoverable"]), (&json!(1), &json!(1)), "{requeued}");
    assert_eq!(requeued["events"][1]["unrecoverable"], true, "{requeued}");
    assert_eq!(
        strings(&mesh.json(&["events", "held"]), "heldEntryId"),
        ["held-b"],
        "the unreadable one stays held"
    );
    let human = mesh.succeeds(&["events", "requeue-held", "--all"]);
    assert!(human.stdout.contains("unrecoverable  held-b"), "{}", human.stdout);
    assert!(human.stdout.contains("requeued 0 of 1 held event(s); 1 unrecoverable"), "{}", human.stdout);
}

#[test]
fn events_the_retention_sweep_held_are_requeued_by_their_reason() {
    let mesh = Mesh::new();
    let event = json!({ "event": "agent:ready", "nodeId": "n1", "queuedAt": 946_684_800_000_i64,
                        "metadataEvent": { "taskId": "t-old" } });
    let file = mesh.data_dir().join("old.json");
    std::fs::write(&file, event.to_string()).expect("write the event");
    mesh.json(&["events", "push", "--file", file.to_str().expect("UTF-8 path")]);
    mesh.seed(|store| {
        let report = store.prune_pending_events(SEEDED_AT, SEEDED_AT, SEEDED_AT).expect("the sweep runs");
        assert_eq!(report.undrained_expired, 1);
    });

    let held = mesh.json(&["events", "held", "--reason", "pending_retention_expired", "--older-than", "1d"]);
    assert_eq!(strings(&held, "taskId"), ["t-old"], "{held}");
    assert_eq!(held[0]["queuedAt"], 946_684_800_000_i64);
    let table = mesh.succeeds(&["events", "held"]);
    assert!(
        table.stdout.starts_with("ID ") && table.stdout.contains("pending_retention_expired"),
        "{}",
        table.stdout
    );

    let requeued = mesh.json(&["events", "requeue-held", "--reason", "pending_retention_expired"]);
    assert_eq!(requeued["requeued"], 1, "{requeued}");
    let drain = mesh.json(&["events", "drain", "--daemon", "mach_A", "--run", "run-1"]);
    assert_eq!(strings(&drain["events"], "event"), ["agent:ready"], "{drain}");
    assert!(mesh.json(&["events", "held"]).as_array().is_some_and(Vec::is_empty));
}

#[test]
fn completion_fingerprints_and_conflicts_are_read_by_task_and_session() {
    let mesh = Mesh::new();
    mesh.seed(|store| {
        for fp in [
            "pending::default::agent:generating_completed::t1::genuine",
            "default::agent:stopped::t2::weak",
            "default::agent:ready::n1::s7::p1::t3::::42",
        ] {
            seed_fingerprint(store, "default", fp, far_future());
        }
        seed_fingerprint(store, "default", "default::agent:stopped::t9::genuine", SEEDED_AT.plus_millis(1));
        seed_fingerprint(store, "beta", "beta::agent:stopped::t1::genuine", far_future());
        let conflict = |id: &str, task: &str, session: &str, at: &str| CompletionConflict {
            id: id.to_owned(),
            mesh_id: "default".to_owned(),
            fingerprint: format!("default::agent:generating_completed::{task}::genuine"),
            conflicting_task_id: Some(format!("{task}-copy")),
            conflicting_session_id: Some(session.to_owned()),
            original_task_id: Some(task.to_owned()),
            original_session_id: Some("s-first".to_owned()),
            event: "agent:generating_completed".to_owned(),
            created_at: at.to_owned(),
        };
        seed_conflict(store, &conflict("c1", "t1", "s2", FAR_FUTURE));
        seed_conflict(store, &conflict("c2", "t5", "s3", &SEEDED_AT.iso()));
    });

    let all = mesh.json(&["fingerprints"]);
    assert_eq!(all.as_array().map(Vec::len), Some(3), "the expired one and mesh beta's are left out: {all}");
    let t1 = mesh.json(&["fingerprints", "--task", "t1"]);
    assert_eq!(strings(&t1, "fingerprint"), ["pending::default::agent:generating_completed::t1::genuine"]);
    assert_eq!((&t1[0]["durable"], &t1[0]["strength"]), (&json!(true), &json!("genuine")));
    assert_eq!(strings(&mesh.json(&["fingerprints", "--session", "s7"]), "taskId"), ["t3"]);
    assert_eq!(mesh.json(&["fingerprints", "--limit", "1"]).as_array().map(Vec::len), Some(1));
    assert_eq!(mesh.refused(&["fingerprints", "--limit", "0"]).0, "invalid_input");

    assert_eq!(strings(&mesh.json(&["conflicts"]), "id"), ["c1"], "one hour back by default");
    let long = mesh.json(&["conflicts", "--within", "100000d"]);
    assert_eq!(strings(&long, "id"), ["c1", "c2"], "newest first");
    assert_eq!(long[0]["conflictingSessionId"], "s2");
    let by_task = mesh.json(&["conflicts", "--within", "100000d", "--task", "t5"]);
    assert_eq!(strings(&by_task, "id"), ["c2"], "a task on either side");
    let by_session = mesh.json(&["conflicts", "--within", "100000d", "--session", "s-first"]);
    assert_eq!(strings(&by_session, "id"), ["c1", "c2"]);
    let table = mesh.succeeds(&["conflicts"]);
    assert!(table.stdout.contains("SUPPRESSED") && table.stdout.contains("t1-copy"), "{}", table.stdout);
    let none = mesh.succeeds(&["--mesh", "gamma", "fingerprints"]);
    assert_eq!(none.stdout.trim(), "no completion fingerprints");
}

#[test]
fn a_delivery_moves_through_its_lifecycle_and_is_read_whatever_its_status() {
    let mesh = Mesh::new();
    mesh.seed(|store| {
        let new = NewSessionDelivery {
            id: "d1".to_owned(),
            session_id: Some("s1".to_owned()),
            kind: "message".to_owned(),
            message: "rebase first".to_owned(),
            ..NewSessionDelivery::default()
        };
        store.insert_session_delivery("default", &new, SEEDED_AT).expect("inserted");
    });

    let retry = mesh.json(&["deliveries", "mark", "d1", "queued", "--attempt", "--error", "pty busy"]);
    assert_eq!(retry["changed"], true);
    assert_eq!(
        (&retry["delivery"]["attemptCount"], &retry["delivery"]["lastError"]),
        (&json!(1), &json!("pty busy"))
    );
    let delivered = mesh.json(&["deliveries", "mark", "d1", "delivered"]);
    assert_eq!(
        (&delivered["changed"], &delivered["delivery"]["status"]),
        (&json!(true), &json!("delivered"))
    );
    assert_eq!(delivered["delivery"]["lastError"], Value::Null, "a change without an error clears it");
    let back = mesh.json(&["deliveries", "mark", "d1", "queued"]);
    assert_eq!(
        (&back["changed"], &back["delivery"]["status"]),
        (&json!(false), &json!("delivered")),
        "never backwards"
    );
    let read = mesh.json(&["deliveries", "mark", "d1", "acked"]);
    assert_eq!(read["delivery"]["status"], "acked");

    assert!(mesh.json(&["deliveries"]).as_array().is_some_and(|d| d.len() == 1), "acked still waits");
    mesh.json(&["deliveries", "mark", "d1", "failed", "--error", "session gone"]);
    assert!(
        mesh.json(&["deliveries"]).as_array().is_some_and(Vec::is_empty),
        "a failed delivery is not active"
    );
    let shown = mesh.json(&["deliveries", "show", "d1"]);
    assert_eq!(
        (&shown["status"], &shown["lastError"], &shown["attemptCount"]),
        (&json!("failed"), &json!("session gone"), &json!(1))
    );
    let human = mesh.succeeds(&["deliveries", "show", "d1"]);
    assert!(human.stdout.contains("status") && human.stdout.contains("failed"), "{}", human.stdout);

    assert_eq!(mesh.refused(&["deliveries", "mark", "d1", "read"]).0, "invalid_input");
    assert_eq!(mesh.refused(&["deliveries", "show", "nope"]).0, "not_found");
    assert_eq!(mesh.refused(&["--mesh", "beta", "deliveries", "show", "d1"]).0, "not_found");
}

#[test]
fn dispatches_are_shown_marked_made_stale_and_removed() {
    let mesh = Mesh::new();
    mesh.seed(|store| {
        for (task, session) in [("t1", "s1"), ("t2", "s1"), ("t3", "s2")] {
            let new = NewDirectDispatch {
                task_id: task.to_owned(),
                session_id: Some(session.to_owned()),
                message: format!("work of {task}"),
                via: "api".to_owned(),
                ..NewDirectDispatch::default()
            };
            store.record_direct_dispatch("default", &new, SEEDED_AT).expect("recorded");
        }
    });

    assert_eq!(mesh.json(&["dispatches", "mark", "acked", "--session", "s1"])["changed"], 2);
    assert_eq!(mesh.json(&["dispatches", "mark", "completed", "--task", "t1"])["changed"], 1);
    assert_eq!(
        mesh.json(&["dispatches", "mark", "dispatched", "--task", "t1"])["changed"],
        0,
        "completed is final"
    );
    assert_eq!(mesh.json(&["dispatches", "show", "t1"])["status"], "completed");
    assert_eq!(strings(&mesh.json(&["dispatches"]), "taskId"), ["t2", "t3"]);

    assert_eq!(mesh.json(&["dispatches", "mark-stale", "--older-than", "100000d"])["markedStale"], 0);
    assert_eq!(
        mesh.json(&["dispatches", "mark-stale", "--older-than", "1h"])["markedStale"],
        1,
        "only t3 was still dispatched"
    );
    assert_eq!(mesh.json(&["dispatches", "show", "t3"])["status"], "stale");
    assert_eq!(strings(&mesh.json(&["dispatches"]), "taskId"), ["t2"]);

    assert_eq!(mesh.json(&["dispatches", "remove", "t1", "t3", "nope"])["removed"], 2);
    assert_eq!(mesh.refused(&["dispatches", "show", "t1"]).0, "not_found");
    assert_eq!(mesh.refused(&["dispatches", "mark", "done", "--task", "t2"]).0, "invalid_input");
    assert_eq!(mesh.refused(&["dispatches", "mark", "acked"]).0, "invalid_input", "a task or a session");
    assert_eq!(mesh.refused(&["dispatches", "remove", " "]).0, "invalid_input");
    assert_eq!(
        mesh.json(&["dispatches", "show", "t2"])["status"],
        "acked",
        "refused requests changed nothing"
    );
    let human = mesh.succeeds(&["dispatches", "remove", "t2"]);
    assert_eq!(human.stdout.trim(), "1 dispatch(es) removed");
}

#[test]
fn sessions_remove_forgets_an_idle_report() {
    let mesh = Mesh::new();
    mesh.seed(|store| {
        for session in ["s1", "s2"] {
            let idle = IdleSession {
                mesh_id: "default".to_owned(),
                node_id: "n1".to_owned(),
                session_id: session.to_owned(),
                provider_type: "claude-cli".to_owned(),
                expires_at_ms: far_future().millis(),
                metadata: None,
            };
            store.write_idle_session(agentmesh_store::IdleWrite::Report(&idle)).expect("reported");
        }
    });
    assert_eq!(
        mesh.json(&["sessions", "remove", "--node", "n1", "--session", "s1"]),
        json!({ "removed": true })
    );
    assert_eq!(
        mesh.json(&["sessions", "remove", "--node", "n1", "--session", "s1"]),
        json!({ "removed": false })
    );
    assert_eq!(strings(&mesh.json(&["sessions"]), "sessionId"), ["s2"]);
    assert_eq!(mesh.refused(&["sessions", "remove", "--node", " ", "--session", "s2"]).0, "invalid_input");
    let human = mesh.succeeds(&["sessions", "remove", "--node", "n1", "--session", "s2"]);
    assert!(human.stdout.contains("removed the idle report of s2 on n1"), "{}", human.stdout);
}

#[test]
fn tool_calls_are_counted_per_caller_role() {
    let mesh = Mesh::new();
    mesh.seed(|store| {
        let calls = [
            ("list_tasks", Some("coordinator"), 0),
            ("list_tasks", Some("coordinator"), 1),
            ("mesh_status", Some("coordinator"), 2),
            ("claim_task", Some("worker"), 3),
            ("ledger_tail", None, 4),
        ];
        for (tool, role, secs) in calls {
            let call = ToolCall {
                mesh_id: "default".to_owned(),
                tool: tool.to_owned(),
                session_id: Some("s1".to_owned()),
                caller_role: role.map(str::to_owned),
            };
            store.record_tool_call(&call, RateGuard::default(), SEEDED_AT.plus_millis(secs * 1000)).unwrap();
        }
    });

    let log = mesh.json(&["tool-calls", "--within", "100000d"]);
    assert_eq!(
        log["byRole"],
        json!([
            { "callerRole": "coordinator", "calls": 3,
              "byTool": [{ "tool": "list_tasks", "calls": 2 }, { "tool": "mesh_status", "calls": 1 }] },
            { "callerRole": "unknown", "calls": 1, "byTool": [{ "tool": "ledger_tail", "calls": 1 }] },
            { "callerRole": "worker", "calls": 1, "byTool": [{ "tool": "claim_task", "calls": 1 }] },
        ])
    );
    assert_eq!(strings(&log["calls"], "tool")[..2], ["ledger_tail", "claim_task"], "newest first");
    let workers = mesh.json(&["tool-calls", "--within", "100000d", "--role", "worker"]);
    assert_eq!(strings(&workers["calls"], "tool"), ["claim_task"]);
    assert_eq!(
        mesh.json(&["tool-calls", "--within", "100000d", "--limit", "2"])["calls"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(mesh.json(&["tool-calls"])["calls"], json!([]), "the default window is the log's last 100 s");
    assert_eq!(mesh.refused(&["tool-calls", "--role", "boss"]).0, "invalid_input");
    let human = mesh.succeeds(&["tool-calls", "--within", "100000d"]);
    assert!(
        human.stdout.starts_with("coordinator: 3 call(s) (list_tasks 2, mesh_status 1)"),
        "{}",
        human.stdout
    );
    let none = mesh.succeeds(&["tool-calls"]);
    assert_eq!(none.stdout.trim(), "no recent tool calls");
}

#[test]
fn help_reads_for_every_new_command() {
    let mesh = Mesh::new();
    for args in [
        &["events", "held"][..],
        &["events", "requeue-held"],
        &["fingerprints"],
        &["conflicts"],
        &["deliveries", "show"],
        &["deliveries", "mark"],
        &["dispatches", "show"],
        &["dispatches", "mark"],
        &["dispatches", "mark-stale"],
        &["dispatches", "remove"],
        &["sessions", "remove"],
        &["tool-calls"],
    ] {
        let mut all = args.to_vec();
        all.push("--help");
        let run = mesh.succeeds(&all);
        assert!(run.stdout.contains("Usage: agentmesh"), "{args:?}: {}", run.stdout);
    }
}
