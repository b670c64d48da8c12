//! Rules of the short-lived session records: idle worker sessions, completion
//! fingerprints (with their time to live) and completion conflicts, and the
//! coordinator tool-call rate guard. Every instant is injected; expiry is tested by
//! reading at a later `now`, never by waiting.

use crate::transfer::TransferStore;
use agentmesh_core::{CompletionConflict, IdleSession, RateGuard, RateVerdict, Timestamp};
use serde_json::json;

use super::support::*;
use crate::{IdleWrite, RuntimePrune, Store};

/// An idle session of mesh A is invisible in mesh B on the same node and session ids, and each mesh keeps its own.
pub fn idle_sessions_are_scoped_by_mesh(store: &dyn Store) {
    let in_a = idle_session(MESH, "node-1", "s1", at(100));
    set_idle(store, &in_a);
    assert_eq!(
        idle_sessions(store, MESH, at(0)),
        std::slice::from_ref(&in_a),
        "expected A's idle session listed in A"
    );
    assert!(idle_sessions(store, OTHER_MESH, at(0)).is_empty(), "expected A's idle session invisible from B");

    let in_b = IdleSession {
        provider_type: "codex-cli".into(),
        ..idle_session(OTHER_MESH, "node-1", "s1", at(200))
    };
    set_idle(store, &in_b);
    assert_eq!(
        idle_sessions(store, MESH, at(0)),
        std::slice::from_ref(&in_a),
        "expected B's report to leave A's as it was"
    );
    assert_eq!(idle_sessions(store, OTHER_MESH, at(0)), [in_b], "expected B's own idle session in B");

    assert!(
        ok(
            store.write_idle_session(IdleWrite::Forget {
                mesh_id: OTHER_MESH,
                node_id: "node-1",
                session_id: "s1"
            }),
            "delete_idle_session(B)"
        ),
        "expected B's idle session deleted"
    );
    assert_eq!(idle_sessions(store, MESH, at(0)), [in_a], "expected deleting B's session to keep A's");
}

/// Setting an idle session again refreshes its expiry, provider and metadata (a JSON round trip).
pub fn setting_an_idle_session_again_refreshes_it(store: &dyn Store) {
    let first = IdleSession {
        metadata: Some(json!({ "cwd": "/repo", "tags": ["os=linux"] })),
        ..idle_session(MESH, "node-1", "s1", at(60))
    };
    set_idle(store, &first);
    assert_eq!(idle_sessions(store, MESH, at(0)), [first], "expected the idle session with its metadata");

    let refreshed = IdleSession {
        provider_type: "gemini-cli".into(),
        metadata: Some(json!({ "cwd": "/repo/wt-2", "depth": 3, "nested": { "ok": true, "none": null } })),
        ..idle_session(MESH, "node-1", "s1", at(120))
    };
    set_idle(store, &refreshed);
    assert_eq!(
        idle_sessions(store, MESH, at(90)),
        [refreshed],
        "expected one idle session, refreshed: listed past its first expiry, with the new provider and metadata"
    );

    let bare = idle_session(MESH, "node-2", "s2", at(120));
    set_idle(store, &bare);
    let listed = idle_sessions(store, MESH, at(90));
    assert_eq!(listed.len(), 2, "expected two idle sessions, got {listed:?}");
    assert_eq!(listed[1], bare, "expected an idle session without metadata to read back without metadata");
}

/// Expired idle sessions are not listed at `now`; prune deletes them in every mesh, counts them, and keeps live ones.
pub fn expired_idle_sessions_are_hidden_and_pruned(store: &dyn Store) {
    set_idle(store, &idle_session(MESH, "node-1", "old", at(10)));
    set_idle(store, &idle_session(MESH, "node-1", "live", at(100)));
    set_idle(store, &idle_session(OTHER_MESH, "node-1", "old", at(10)));
    assert_eq!(
        idle_session_keys(store, MESH, at(5)),
        ["node-1/live", "node-1/old"],
        "expected both before 10s"
    );
    assert_eq!(
        idle_session_keys(store, MESH, at(50)),
        ["node-1/live"],
        "expected the expired session hidden"
    );

    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::IdleSessions(at(50))), "prune idle sessions"),
        2,
        "expected both expired sessions"
    );
    // Read before the old sessions' expiry: they are gone, not merely hidden.
    assert_eq!(
        idle_session_keys(store, MESH, at(5)),
        ["node-1/live"],
        "expected the expired session deleted"
    );
    assert!(idle_session_keys(store, OTHER_MESH, at(5)).is_empty(), "expected B's expired session deleted");
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::IdleSessions(at(50))), "prune again"),
        0,
        "expected nothing left to prune"
    );
    assert!(
        !ok(
            store.write_idle_session(IdleWrite::Forget {
                mesh_id: MESH,
                node_id: "node-1",
                session_id: "old"
            }),
            "delete_idle_session(old)"
        ),
        "expected the pruned session gone"
    );
}

/// Deleting an idle session says whether it was there, and deletes only that session.
pub fn delete_idle_session_reports_whether_it_existed(store: &dyn Store) {
    set_idle(store, &idle_session(MESH, "node-1", "s1", at(100)));
    set_idle(store, &idle_session(MESH, "node-1", "s2", at(100)));
    set_idle(store, &idle_session(MESH, "node-2", "s1", at(100)));
    let delete = |node: &str, session: &str| {
        ok(
            store.write_idle_session(IdleWrite::Forget { mesh_id: MESH, node_id: node, session_id: session }),
            "delete_idle_session",
        )
    };
    assert!(delete("node-1", "s1"), "expected node-1/s1 deleted");
    assert!(!delete("node-1", "s1"), "expected a second delete to find nothing");
    assert!(!delete("node-3", "s2"), "expected an unknown session to find nothing");
    assert_eq!(
        idle_session_keys(store, MESH, at(0)),
        ["node-1/s2", "node-2/s1"],
        "expected only node-1/s1 gone"
    );
}

/// An idle session with a blank mesh, node, session or provider is invalid input naming the field; nothing is stored.
pub fn idle_session_rejects_blank_fields_naming_them(store: &dyn Store) {
    let good = idle_session(MESH, "node-1", "s1", at(100));
    let cases = [
        ("meshId", IdleSession { mesh_id: " ".into(), ..good.clone() }),
        ("nodeId", IdleSession { node_id: String::new(), ..good.clone() }),
        ("sessionId", IdleSession { session_id: "\t".into(), ..good.clone() }),
        ("providerType", IdleSession { provider_type: String::new(), ..good.clone() }),
    ];
    for (field, bad) in cases {
        let what = format!("an idle report with a blank {field}");
        assert_invalid_input(store.write_idle_session(IdleWrite::Report(&bad)), field, &what);
        assert!(idle_sessions(store, MESH, at(0)).is_empty(), "expected {what} to store nothing");
    }
}

/// A fingerprint is in force in its mesh until it expires, and never in another mesh.
pub fn completion_fingerprint_is_found_until_its_ttl_passes(store: &dyn TransferStore) {
    let fp = "mesh-a::t1::done";
    let has = |mesh: &str, fingerprint: &str, now| fingerprint_in_force(store, mesh, fingerprint, now);
    assert!(!has(MESH, fp, at(0)), "expected an unrecorded fingerprint not found");
    seed_fingerprint(store, MESH, fp, at(60));
    assert!(has(MESH, fp, at(0)), "expected the fingerprint found right after recording");
    assert!(has(MESH, fp, at(59)), "expected the fingerprint found before its 60s TTL passed");
    assert!(!has(MESH, fp, at(61)), "expected the fingerprint not found after its TTL passed");
    assert!(!has(OTHER_MESH, fp, at(1)), "expected mesh A's fingerprint not found in mesh B");
    assert!(!has(MESH, "mesh-a::t2::done", at(1)), "expected another fingerprint not found");
}

/// A fingerprint in mesh B that mesh A holds too leaves A's fingerprint in force until its own expiry.
pub fn completion_fingerprint_in_another_mesh_leaves_the_first_mesh_alone(store: &dyn TransferStore) {
    let fp = "shared::t1::done";
    seed_fingerprint(store, MESH, fp, at(60));
    seed_fingerprint(store, OTHER_MESH, fp, at(6));
    let has = |mesh: &str, now| fingerprint_in_force(store, mesh, fp, now);
    assert!(has(OTHER_MESH, at(2)), "expected B's fingerprint found in B");
    assert!(has(MESH, at(2)), "expected A's fingerprint still found in A after B recorded the same string");
    assert!(has(MESH, at(30)), "expected A's fingerprint to keep its own 60s TTL, not B's 5s");
    assert!(!has(OTHER_MESH, at(30)), "expected B's fingerprint gone after its own TTL");
}

/// The sweep deletes expired fingerprints in every mesh, counts them, and keeps live ones.
pub fn completion_fingerprint_sweep_removes_only_expired_ones(store: &dyn TransferStore) {
    seed_fingerprint(store, MESH, "short", at(10));
    seed_fingerprint(store, MESH, "long", at(100));
    seed_fingerprint(store, OTHER_MESH, "short-b", at(10));
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::Fingerprints(at(50))), "sweep"),
        2,
        "expected both short ones swept"
    );
    let has = |mesh: &str, fp: &str, now| fingerprint_in_force(store, mesh, fp, now);
    // Asked at 5s, before the short TTL ran out: found only if still stored.
    assert!(!has(MESH, "short", at(5)), "expected the swept fingerprint deleted");
    assert!(!has(OTHER_MESH, "short-b", at(5)), "expected B's swept fingerprint deleted");
    assert!(has(MESH, "long", at(50)), "expected the live fingerprint kept");
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::Fingerprints(at(50))), "sweep again"),
        0,
        "expected nothing left to sweep"
    );
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::Fingerprints(at(150))), "sweep later"),
        1,
        "expected the long one swept"
    );
}

/// A conflict id is stored once: importing it again counts it as existing and keeps the first.
pub fn completion_conflict_is_recorded_once_per_id(store: &dyn TransferStore) {
    let first = completion_conflict(MESH, "c1", at(10));
    assert!(seed_conflict(store, &first), "expected a new conflict recorded");
    let again =
        CompletionConflict { fingerprint: "changed".into(), ..completion_conflict(MESH, "c1", at(20)) };
    assert!(!seed_conflict(store, &again), "expected the repeat left out");
    assert_eq!(
        ok(store.recent_completion_conflicts(MESH, None, at(30)), "recent_completion_conflicts"),
        [first],
        "expected the first record kept as it was"
    );
}

/// Recent conflicts are the mesh's within the window (one hour by default), newest first.
pub fn recent_completion_conflicts_are_newest_first_within_the_window(store: &dyn TransferStore) {
    // Recorded out of time order, so only createdAt orders them.
    for (id, secs) in [("c-5000", 5_000), ("c-100", 100), ("c-7000", 7_000), ("c-4000", 4_000)] {
        assert!(seed_conflict(store, &completion_conflict(MESH, id, at(secs))), "new {id}");
    }
    let elsewhere = completion_conflict(OTHER_MESH, "b-6000", at(6_000));
    assert!(seed_conflict(store, &elsewhere), "expected B's conflict recorded");

    let now = at(7_200);
    assert_eq!(
        recent_conflict_ids(store, MESH, None, now),
        ["c-7000", "c-5000", "c-4000"],
        "expected the last hour's conflicts of A, newest first"
    );
    assert_eq!(
        recent_conflict_ids(store, MESH, Some(25 * 60 * 1_000), now),
        ["c-7000"],
        "expected a 25 minute window to hold only the newest"
    );
    assert_eq!(
        recent_conflict_ids(store, MESH, Some(3 * 60 * 60 * 1_000), now),
        ["c-7000", "c-5000", "c-4000", "c-100"],
        "expected a three hour window to hold all of A's"
    );
    let recent_b =
        ok(store.recent_completion_conflicts(OTHER_MESH, None, now), "recent_completion_conflicts(B)");
    assert_eq!(recent_b, [elsewhere], "expected B's conflict, as recorded, and only it");
}

/// Recent conflicts return at most the 50 newest.
pub fn recent_completion_conflicts_are_capped_at_50(store: &dyn TransferStore) {
    // 7 and 60 are coprime, so i * 7 % 60 records every instant once, out of order.
    for i in 0..60 {
        let secs = (i * 7) % 60;
        let conflict = completion_conflict(MESH, &format!("c{secs:02}"), at(secs));
        assert!(seed_conflict(store, &conflict), "expected conflict {} new", conflict.id);
    }
    let expected: Vec<String> = (10..60).rev().map(|secs| format!("c{secs:02}")).collect();
    assert_eq!(
        recent_conflict_ids(store, MESH, None, at(120)),
        expected,
        "expected the 50 newest conflicts, newest first"
    );
}

/// Records one call of `tool` in `mesh` under the default guard at `now`.
#[track_caller]
fn call(store: &dyn Store, mesh: &str, tool: &str, now: Timestamp) -> RateVerdict {
    let what = format!("record_tool_call({mesh}, {tool}, {now})");
    ok(store.record_tool_call(&tool_call(mesh, tool), RateGuard::default(), now), &what)
}

/// Asserts a verdict that lets the call through with `calls` calls in the window.
#[track_caller]
fn assert_allowed(verdict: RateVerdict, calls: u64, what: &str) {
    let expected = RateVerdict { rate_limit_exceeded: false, calls_in_window: calls, advisory: None };
    assert_eq!(verdict, expected, "expected {what} allowed with {calls} calls in the window");
}

/// The sixth call of one tool within 10 s trips the guard with an advisory naming tool, count, window and mesh.
pub fn tool_call_rate_guard_trips_on_the_sixth_call_in_the_window(store: &dyn Store) {
    for i in 0..5 {
        assert_allowed(call(store, MESH, "mesh_status", at(i)), i as u64 + 1, &format!("call {}", i + 1));
    }
    let verdict = call(store, MESH, "mesh_status", at(5));
    assert!(verdict.rate_limit_exceeded, "expected the sixth call within 10s to trip the guard: {verdict:?}");
    assert_eq!(verdict.calls_in_window, 6, "expected six calls counted in the window");
    let advisory = verdict.advisory.clone().unwrap_or_default();
    for part in ["mesh_status", "6", "10s", MESH] {
        assert!(advisory.contains(part), "expected the advisory to name {part:?}, it reads {advisory:?}");
    }
    assert_eq!(
        verdict,
        RateGuard::default().verdict(MESH, "mesh_status", 6),
        "expected the verdict the core gives for six calls"
    );
    let seventh = call(store, MESH, "mesh_status", at(6));
    assert!(seventh.rate_limit_exceeded, "expected a seventh call to trip the guard as well");
    assert_eq!(seventh.calls_in_window, 7, "expected the tripped call itself counted");
}

/// Calls of another tool, or of the same tool in another mesh, do not count towards a tool's limit.
pub fn tool_call_rate_guard_counts_one_tool_in_one_mesh(store: &dyn Store) {
    for i in 0..5 {
        assert_allowed(call(store, MESH, "mesh_status", at(i)), i as u64 + 1, "a mesh_status call in A");
        assert_allowed(
            call(store, MESH, "mesh_list_tasks", at(i)),
            i as u64 + 1,
            "a mesh_list_tasks call in A",
        );
        assert_allowed(
            call(store, OTHER_MESH, "mesh_status", at(i)),
            i as u64 + 1,
            "a mesh_status call in B",
        );
    }
    let sixth = call(store, MESH, "mesh_status", at(5));
    assert!(sixth.rate_limit_exceeded, "expected A's sixth mesh_status call to trip");
    assert_eq!(sixth.calls_in_window, 6, "expected only A's mesh_status calls counted");
    let b_sixth = call(store, OTHER_MESH, "mesh_status", at(5));
    assert_eq!(b_sixth.calls_in_window, 6, "expected B's own calls counted, not A's");
    assert!(
        b_sixth.advisory.unwrap_or_default().contains(OTHER_MESH),
        "expected B's advisory to name mesh B"
    );
    assert_allowed(call(store, MESH, "mesh_ledger_tail", at(5)), 1, "the first call of a third tool");
}

/// Calls older than the window stop counting: after the window passed the next call does not trip.
pub fn tool_call_rate_guard_forgets_calls_outside_the_window(store: &dyn Store) {
    for i in 0..6 {
        call(store, MESH, "mesh_status", at(i));
    }
    assert_allowed(call(store, MESH, "mesh_status", at(16)), 1, "the first call 11s after the last one");
    for (n, secs) in (17..21).enumerate() {
        assert_allowed(call(store, MESH, "mesh_status", at(secs)), n as u64 + 2, "a call of the new window");
    }
    let tripped = call(store, MESH, "mesh_status", at(21));
    assert!(tripped.rate_limit_exceeded, "expected the sixth call of the new window to trip again");
    assert_eq!(tripped.calls_in_window, 6, "expected six calls counted in the new window");
}

/// Pruning deletes recorded calls before the cutoff in every mesh and counts them; later calls no longer see them.
pub fn prune_tool_calls_deletes_calls_before_the_cutoff(store: &dyn Store) {
    for i in 0..5 {
        call(store, MESH, "mesh_status", at(i));
    }
    call(store, OTHER_MESH, "mesh_status", at(1));
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::ToolCalls(at(3))), "prune tool calls"),
        4,
        "expected the calls at 0, 1, 2s and B's"
    );
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::ToolCalls(at(3))), "prune again"),
        0,
        "expected nothing left before 3s"
    );
    // Without the pruned calls this is the third call in the window, not the sixth.
    assert_allowed(call(store, MESH, "mesh_status", at(5)), 3, "a call after pruning");
    assert_allowed(call(store, OTHER_MESH, "mesh_status", at(5)), 1, "B's call after pruning");
    assert_eq!(
        ok(store.prune_runtime(RuntimePrune::ToolCalls(at(100))), "prune all"),
        4,
        "expected the four remaining calls pruned"
    );
}

/// The mesh's fingerprints in force are listed the latest expiry first, at most
/// `limit`; expired ones and another mesh's are left out.
pub fn completion_fingerprints_are_listed_latest_first_while_in_force(store: &dyn TransferStore) {
    let record = |mesh: &str, fp: &str, ttl_secs: i64| seed_fingerprint(store, mesh, fp, at(ttl_secs));
    record(MESH, "mesh-a::agent:stopped::t1::genuine", 60);
    record(MESH, "pending::mesh-a::agent:generating_completed::t2::genuine", 3_600);
    record(MESH, "mesh-a::agent:stopped::t3::weak", 10);
    record(OTHER_MESH, "mesh-b::agent:stopped::t9::genuine", 3_600);
    let listed = |now, limit| {
        ok(store.completion_fingerprints(MESH, now, limit), "completion_fingerprints")
            .into_iter()
            .map(|f| (f.fingerprint, f.expires_at_ms))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listed(at(1), 10),
        [
            ("pending::mesh-a::agent:generating_completed::t2::genuine".to_owned(), at(3_600).millis()),
            ("mesh-a::agent:stopped::t1::genuine".to_owned(), at(60).millis()),
            ("mesh-a::agent:stopped::t3::weak".to_owned(), at(10).millis()),
        ],
        "expected every fingerprint of the mesh in force, the latest expiry first"
    );
    assert_eq!(listed(at(1), 1).len(), 1, "expected at most the limit");
    assert_eq!(listed(at(30), 10).len(), 2, "expected the expired fingerprint left out");
}

/// Recorded tool calls are read back newest first with their session and caller
/// role, from `since` on, at most `limit`, one mesh only; a call that names no
/// role reads without one, and an unknown role is refused naming the field.
pub fn recent_tool_calls_are_read_newest_first_with_their_caller_role(store: &dyn Store) {
    let guard = RateGuard::default();
    let call = |mesh: &str, tool: &str, role: Option<&str>, secs| {
        let call = crate::ToolCall {
            caller_role: role.map(str::to_owned),
            session_id: Some(if role == Some("worker") { "w1" } else { "coord-1" }.to_owned()),
            ..tool_call(mesh, tool)
        };
        ok(store.record_tool_call(&call, guard, at(secs)), "record_tool_call");
    };
    call(MESH, "list_tasks", Some("coordinator"), 0);
    call(MESH, "claim_task", Some("worker"), 1);
    call(MESH, "mesh_status", None, 2);
    call(OTHER_MESH, "list_tasks", Some("coordinator"), 3);
    let read = |since, limit| ok(store.recent_tool_calls(MESH, at(since), limit), "recent_tool_calls");
    let all = read(0, 10);
    let seen: Vec<(&str, Option<&str>, Option<&str>, i64)> = all
        .iter()
        .map(|c| (c.tool.as_str(), c.caller_role.as_deref(), c.session_id.as_deref(), c.called_at_ms))
        .collect();
    assert_eq!(
        seen,
        [
            ("mesh_status", None, Some("coord-1"), at(2).millis()),
            ("claim_task", Some("worker"), Some("w1"), at(1).millis()),
            ("list_tasks", Some("coordinator"), Some("coord-1"), at(0).millis()),
        ],
        "expected the mesh's calls newest first, each with its role and session"
    );
    assert_eq!(read(1, 10).len(), 2, "expected calls before `since` left out");
    assert_eq!(read(0, 1).len(), 1, "expected at most the limit");
    let bad = crate::ToolCall { caller_role: Some("boss".into()), ..tool_call(MESH, "list_tasks") };
    assert_invalid_input(
        store.record_tool_call(&bad, guard, at(4)),
        "callerRole",
        "a call with an unknown role",
    );
    assert_eq!(read(0, 10).len(), 3, "expected the refused call not recorded");
}
