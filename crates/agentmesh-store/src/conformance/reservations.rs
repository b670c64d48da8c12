//! Rules of path reservations: a conflicting request is denied naming every
//! conflict once, shared beside shared is granted, a holder never conflicts
//! with itself, renew and release are fenced by the holder's session and
//! epoch, releasing one reservation leaves the holder's others, lapsed ones
//! conflict with nothing and are swept with their ledger entries, scopes and
//! meshes are apart, and bad input changes nothing.

use agentmesh_core::reservation::DEFAULT_TTL_MS;
use agentmesh_core::{NewReservation, Reservation};

use super::support::*;
use crate::{Fence, ReservationCommand, ReservationQuery, Reserved, Store, StoreError};

fn request(session: &str, patterns: &[&str], exclusive: bool) -> NewReservation {
    NewReservation {
        scope: "repo".into(),
        session_id: session.into(),
        node_id: format!("node-of-{session}"),
        patterns: patterns.iter().map(|p| (*p).to_owned()).collect(),
        exclusive,
        reason: Some(format!("{session} edits")),
        ..NewReservation::default()
    }
}

fn reserve(store: &dyn Store, mesh: &str, req: &NewReservation, secs: i64) -> Reserved {
    ok(store.reserve(mesh, req, at(secs)), &format!("reserve({mesh}, {:?})", req.patterns))
}

fn granted(store: &dyn Store, mesh: &str, req: &NewReservation, secs: i64) -> Reservation {
    match reserve(store, mesh, req, secs) {
        Reserved::Granted(r) => r,
        Reserved::Denied(c) => {
            panic!("expected {:?} by {} to be granted, denied: {c:?}", req.patterns, req.session_id)
        }
    }
}

fn fence(r: &Reservation) -> Fence {
    Fence { session_id: r.session_id.clone(), epoch: r.epoch }
}

fn kinds(store: &dyn Store, mesh: &str) -> Vec<String> {
    ledger_kinds(store, mesh).into_iter().filter(|k| k.starts_with("reservation_")).collect()
}

fn in_force(store: &dyn Store, mesh: &str, secs: i64) -> Vec<String> {
    let all = ok(store.reservations(mesh, ReservationQuery::All(Some("repo")), at(secs)), "reservations");
    all.into_iter().map(|r| r.id).collect()
}

/// A grant is stored as asked and listed; an overlapping exclusive request by
/// another session is denied naming the holder, its pattern and expiry once,
/// recorded as `reservation_denied`, and nothing more is stored.
pub fn reservation_conflict_is_denied_naming_each_holder_once(store: &dyn Store) {
    let first = granted(store, MESH, &request("s1", &["src/parser", "src/*.rs"], true), 10);
    assert_eq!(first.patterns.len(), 2);
    assert_eq!(first.expires_at, Some(at(10).plus_millis(DEFAULT_TTL_MS as i64).iso()));
    assert_eq!((first.session_id.as_str(), first.epoch, first.task_id.as_deref()), ("s1", 1, None));
    let Reserved::Denied(conflicts) =
        reserve(store, MESH, &request("s2", &["src/parser/mod.rs", "src/lib.rs"], true), 11)
    else {
        panic!("an overlapping exclusive request must be denied");
    };
    assert_eq!(
        conflicts.len(),
        1,
        "one conflict per reservation, however many patterns overlap: {conflicts:?}"
    );
    let c = &conflicts[0];
    assert_eq!(
        (c.reservation_id.as_str(), c.session_id.as_str(), c.node_id.as_str()),
        (first.id.as_str(), "s1", "node-of-s1")
    );
    let theirs: Vec<&str> = c.patterns.iter().map(|p| p.as_str()).collect();
    assert_eq!(theirs, ["src/parser", "src/*.rs"]);
    assert_eq!(c.expires_at, first.expires_at);
    assert_eq!(in_force(store, MESH, 12), [first.id.as_str()], "the denied request stored nothing");
    // The reservations near a pattern: those whose patterns may overlap it.
    let near = |patterns: &[&str]| {
        let patterns: Vec<agentmesh_core::PathPattern> =
            patterns.iter().map(|p| agentmesh_core::PathPattern::parse("p", p).unwrap()).collect();
        ok(
            store.reservations(MESH, ReservationQuery::Near { scope: "repo", patterns: &patterns }, at(12)),
            "reservations near",
        )
        .len()
    };
    assert_eq!(near(&["src/parser/deep/x.rs"]), 1, "under a reserved directory");
    assert_eq!(near(&["src"]), 1, "above a reserved directory");
    assert_eq!(near(&["docs/x.md"]), 0, "elsewhere");
    assert_eq!(near(&["**/*.md"]), 1, "a pattern starting with a wildcard reaches everything");
    assert_eq!(kinds(store, MESH), ["reservation_granted", "reservation_denied"]);

    // Elsewhere in the tree, and in another scope, it is granted.
    granted(store, MESH, &request("s2", &["docs/**"], true), 13);
    granted(
        store,
        MESH,
        &NewReservation { scope: "other-repo".into(), ..request("s2", &["src/lib.rs"], true) },
        14,
    );
}

/// Shared beside shared is granted; exclusive over shared is denied, and so
/// is shared over exclusive. A holder's own reservations never deny it.
pub fn reservation_shared_and_exclusive_combine_as_documented(store: &dyn Store) {
    granted(store, MESH, &request("s1", &["README.md"], false), 10);
    granted(store, MESH, &request("s2", &["README.md"], false), 11);
    let Reserved::Denied(c) = reserve(store, MESH, &request("s3", &["README.md"], true), 12) else {
        panic!("exclusive over two shared holders must be denied");
    };
    assert_eq!(c.len(), 2, "both shared holders are named: {c:?}");
    granted(store, MESH, &request("s3", &["src/**"], true), 13);
    assert!(matches!(reserve(store, MESH, &request("s4", &["src/a.rs"], false), 14), Reserved::Denied(_)));
    granted(store, MESH, &request("s3", &["src/a.rs"], true), 15);
}

/// Renew and release carry the holder's session and epoch: a wrong one is
/// refused and changes nothing; releasing one reservation leaves the holder's
/// others; an unknown id is not found.
pub fn reservation_renew_and_release_are_fenced(store: &dyn Store) {
    let a = granted(store, MESH, &request("s1", &["a"], true), 10);
    let b = granted(store, MESH, &request("s1", &["b"], true), 10);
    let stranger = Fence { session_id: "s2".into(), epoch: 1 };
    let stale = Fence { session_id: "s1".into(), epoch: 7 };
    for bad in [&stranger, &stale] {
        let err = store
            .reservation_command(MESH, &a.id, bad, ReservationCommand::Release, at(11))
            .expect_err("a fenced release");
        assert!(matches!(err, StoreError::ReservationFenced { .. }), "{err:?}");
        let err = store
            .reservation_command(MESH, &a.id, bad, ReservationCommand::Renew { ttl_ms: Some(1_000) }, at(11))
            .expect_err("a fenced renew");
        assert!(matches!(err, StoreError::ReservationFenced { .. }), "{err:?}");
    }
    assert_eq!(in_force(store, MESH, 11), [a.id.clone(), b.id.clone()], "refusals changed nothing");

    let renewed = ok(
        store.reservation_command(
            MESH,
            &a.id,
            &fence(&a),
            ReservationCommand::Renew { ttl_ms: Some(5_000) },
            at(20),
        ),
        "renew",
    );
    assert_eq!(renewed.expires_at, Some(at(20).plus_millis(5_000).iso()));
    assert_eq!(renewed.renewed_at, at(20).iso());
    let released = ok(
        store.reservation_command(MESH, &a.id, &fence(&a), ReservationCommand::Release, at(21)),
        "release",
    );
    assert_eq!(released.id, a.id);
    assert_eq!(in_force(store, MESH, 21), [b.id.as_str()], "the holder's other reservation stays");
    let err = store
        .reservation_command(MESH, &a.id, &fence(&a), ReservationCommand::Release, at(22))
        .expect_err("a second release");
    assert!(matches!(err, StoreError::NotFound { kind: "reservation", .. }), "{err:?}");
    // Released, its paths are free for another holder.
    granted(store, MESH, &request("s2", &["a"], true), 23);
    assert_eq!(
        kinds(store, MESH),
        [
            "reservation_granted",
            "reservation_granted",
            "reservation_renewed",
            "reservation_released",
            "reservation_granted"
        ]
    );
}

/// A reservation past its time to live conflicts with nothing, is not listed,
/// cannot be renewed, and the sweep removes it with `reservation_expired`.
pub fn reservation_lapses_at_its_time_to_live(store: &dyn Store) {
    let short =
        granted(store, MESH, &NewReservation { ttl_ms: Some(5_000), ..request("s1", &["src"], true) }, 10);
    assert!(matches!(reserve(store, MESH, &request("s2", &["src/x"], true), 14), Reserved::Denied(_)));
    assert!(in_force(store, MESH, 15).is_empty(), "lapsed at 15 s");
    let err = store
        .reservation_command(
            MESH,
            &short.id,
            &fence(&short),
            ReservationCommand::Renew { ttl_ms: None },
            at(15),
        )
        .expect_err("a lapsed renew");
    assert!(matches!(err, StoreError::ReservationFenced { .. }), "{err:?}");
    let taken = granted(store, MESH, &request("s2", &["src/x"], true), 15);
    assert_eq!(
        ok(store.expire_reservations(at(16)), "expire"),
        1,
        "the lapsed one is swept, the new one is not"
    );
    assert_eq!(ok(store.expire_reservations(at(16)), "expire again"), 0);
    assert_eq!(in_force(store, MESH, 16), [taken.id]);
    let k = kinds(store, MESH);
    assert_eq!(k.last().map(String::as_str), Some("reservation_expired"), "{k:?}");
}

/// Reservations of one mesh never deny or list in another.
pub fn reservations_are_apart_per_mesh(store: &dyn Store) {
    granted(store, MESH, &request("s1", &["src"], true), 10);
    granted(store, OTHER_MESH, &request("s2", &["src"], true), 10);
    assert_eq!(in_force(store, OTHER_MESH, 11).len(), 1);
    assert_eq!(in_force(store, MESH, 11).len(), 1);
}

/// A request with a bad field is refused naming it, and nothing is stored or
/// recorded.
pub fn reservation_rejects_bad_input_naming_the_field(store: &dyn Store) {
    let cases: [(NewReservation, &str); 5] = [
        (NewReservation { scope: " ".into(), ..request("s1", &["a"], true) }, "scope"),
        (request("s1", &[], true), "patterns"),
        (request("s1", &["a", "/etc/passwd"], true), "patterns[1]"),
        (request("s1", &["../x"], true), "patterns[0]"),
        (NewReservation { ttl_ms: Some(0), ..request("s1", &["a"], true) }, "ttlMs"),
    ];
    for (bad, field) in cases {
        match store.reserve(MESH, &bad, at(10)) {
            Err(StoreError::InvalidInput(e)) => assert_eq!(e.field, field, "{bad:?}"),
            other => panic!("expected invalid {field}, got {other:?}"),
        }
    }
    assert!(in_force(store, MESH, 10).is_empty());
    assert!(kinds(store, MESH).is_empty());
}

fn task_with_paths(id: &str, paths: &[&str]) -> agentmesh_core::NewTask {
    agentmesh_core::NewTask {
        paths: paths.iter().map(|p| (*p).to_owned()).collect(),
        paths_scope: Some("repo".into()),
        ..new_task(id)
    }
}

/// A task that declares paths is claimed with an exclusive reservation of
/// them, held by the claiming session for as long as it holds the task; a
/// claim of a task whose paths another holder has reserved steps over it
/// (refused `paths_reserved` when nothing else is left, the denial recorded
/// naming the holder); the reservation ends with the task (completion, lease
/// reclaim), and the task stepped over is then claimed.
pub fn claim_reserves_a_tasks_paths_and_skips_a_task_over_reserved_ones(store: &dyn Store) {
    use agentmesh_core::ClaimRefusal;
    enqueue(store, MESH, task_with_paths("t1", &["src/**"]), at(1));
    enqueue(store, MESH, task_with_paths("t2", &["src/lib.rs", "docs"]), at(2));
    let (a, b) = (worker("node-a", "sa"), worker("node-b", "sb"));
    let t1 = claim_briefly(store, MESH, &a, at(3), "t1");
    let held = ok(store.reservations(MESH, ReservationQuery::All(Some("repo")), at(3)), "reservations");
    assert_eq!(held.len(), 1, "{held:?}");
    let r = &held[0];
    assert_eq!(
        (r.task_id.as_deref(), r.session_id.as_str(), r.node_id.as_str()),
        (Some("t1"), "sa", "node-a")
    );
    assert_eq!((r.epoch, r.exclusive, r.expires_at.as_deref()), (t1.epoch(), true, None));

    // Another session: t2 overlaps t1's paths and is stepped over.
    assert_refused(claim(store, MESH, &b, at(4)), ClaimRefusal::PathsReserved);
    assert_status(store, MESH, "t2", agentmesh_core::TaskStatus::Pending);
    let denied = ledger_entries(store, MESH)
        .into_iter()
        .filter(|e| e.kind == "reservation_denied")
        .collect::<Vec<_>>();
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0].task_id(), Some("t2"));
    assert_eq!(denied[0].payload["conflicts"][0]["sessionId"], "sa");
    assert_eq!(denied[0].payload["conflicts"][0]["taskId"], "t1");
    // A free-standing request meets the task's reservation too.
    let Reserved::Denied(c) = reserve(store, MESH, &request("sc", &["src/main.rs"], true), 4) else {
        panic!("a task's reservation denies an overlapping request");
    };
    assert_eq!(c[0].task_id.as_deref(), Some("t1"));
    // It cannot be renewed as a free-standing one.
    let err = store
        .reservation_command(MESH, &r.id, &fence(r), ReservationCommand::Renew { ttl_ms: Some(1_000) }, at(4))
        .expect_err("renew");
    assert!(matches!(err, StoreError::ReservationFenced { .. }), "{err:?}");

    // The lease lapses and the task is reclaimed: its reservation ends.
    reclaim_lapsed(store, MESH, "t1", at(10));
    assert!(ok(store.reservations(MESH, ReservationQuery::All(None), at(10)), "reservations").is_empty());
    // Now sb takes t2 (t1 went back to pending behind it? t1 is older: it comes first).
    let next = claim_briefly(store, MESH, &b, at(11), "t1");
    assert_eq!(next.assigned_session_id.as_deref(), Some("sb"));
    assert_refused(claim(store, MESH, &a, at(12)), ClaimRefusal::PathsReserved);
    complete(store, MESH, &next, at(13));
    assert!(
        ok(store.reservations(MESH, ReservationQuery::All(None), at(13)), "reservations").is_empty(),
        "ended with the task"
    );
    let t2 = claim_briefly(store, MESH, &a, at(14), "t2");
    let held = ok(store.reservations(MESH, ReservationQuery::All(None), at(14)), "reservations");
    assert_eq!(held.iter().map(|r| r.task_id.as_deref()).collect::<Vec<_>>(), [Some("t2")]);
    let ended: Vec<String> = ledger_entries(store, MESH)
        .into_iter()
        .filter(|e| e.kind == "reservation_released")
        .map(|e| e.payload["by"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ended, ["task_ended", "task_ended"]);
    assert_eq!(t2.epoch(), held[0].epoch);
}

/// A task's paths are checked on enqueue: a bad pattern, or paths without
/// their scope, is refused naming the field and nothing is stored.
pub fn enqueue_refuses_bad_paths_naming_the_field(store: &dyn Store) {
    let bad = task_with_paths("t1", &["src", "/abs"]);
    assert_invalid_input(store.enqueue(MESH, &bad, at(1)), "paths[1]", "enqueue with an absolute path");
    let unscoped = agentmesh_core::NewTask { paths_scope: None, ..task_with_paths("t1", &["src"]) };
    assert_invalid_input(store.enqueue(MESH, &unscoped, at(1)), "pathsScope", "enqueue without a scope");
    assert!(queue_ids(store, MESH, &[]).is_empty());
}
