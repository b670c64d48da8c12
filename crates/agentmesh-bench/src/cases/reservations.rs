//! Group `reservations` (ours only): path reservations at scale. A scope holds
//! `n` active reservations (10,000 at full size), each of another session,
//! spread over 100 top-level directories (`area-07/module-1234/**`); then:
//!
//! - `reservation-check`: the read a commit guard and `check_paths` make, for
//!   one path (`reservations` near the path and the core's `covering`), alternating a
//!   path under a reservation and one that is free;
//! - `reservation-grant`: a grant of a free path, in its own transaction;
//! - `reservation-denied`: a request that overlaps one reservation, denied
//!   and recorded.
//!
//! The floor is `floor`'s bare commit of the same run. Group `pg-reservations`
//! runs the same cases on a PostgreSQL installation (`pg-reservation-*`), to be
//! read against `pg-floor`'s `pg-select-floor` and `pg-insert-floor`.

use agentmesh_core::reservation::{self, NewReservation, PathPattern};
use agentmesh_store::Reserved;

use crate::data::{MESH_ID, at};
use crate::harness::Harness;
use crate::timing::Timer;

const SCOPE: &str = "/bench/repo";

/// Runs group `reservations`.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    let calls = h.opts().scale(2_000).max(100);
    h.run_case(&format!("reservations-{n}"), |h, case| {
        reservations(h, case.store(), "", n, calls, || Ok(()))
    });
}

/// Runs group `pg-reservations`.
pub(crate) fn run_pg(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    let calls = h.opts().scale(2_000).max(100);
    crate::pg::run_case(h, &format!("pg-reservations-{n}"), |h, case| {
        let store = case.open_store(4)?;
        reservations(h, &store, "pg-", n, calls, || case.vacuum_analyze())
    });
}

fn request(session: String, pattern: String) -> NewReservation {
    NewReservation {
        scope: SCOPE.to_owned(),
        session_id: session,
        node_id: "bench-node".to_owned(),
        patterns: vec![pattern],
        exclusive: true,
        ttl_ms: Some(reservation::MAX_TTL_MS),
        ..NewReservation::default()
    }
}

fn reservations(
    h: &mut Harness,
    store: &dyn agentmesh_store::Store,
    prefix: &str,
    n: usize,
    calls: usize,
    settle: impl Fn() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for i in 0..n {
        let granted = store.reserve(
            MESH_ID,
            &request(format!("s{i}"), format!("area-{:02}/module-{i}/**", i % 100)),
            at(0),
        )?;
        anyhow::ensure!(matches!(granted, Reserved::Granted(_)), "seed reservation {i} denied");
    }
    // The server's planner statistics of the seeded tables, as autovacuum keeps them.
    settle()?;
    let now = at(1);

    let mut timer = Timer::default();
    let mut blocked = 0;
    for c in 0..calls {
        let i = (c * 7919) % n;
        let path = if c % 2 == 0 {
            format!("area-{:02}/module-{i}/src/lib.rs", i % 100)
        } else {
            format!("area-{:02}/free-{c}/x.rs", i % 100)
        };
        let path = PathPattern::parse("path", &path)?;
        let found = timer.time(|| -> anyhow::Result<usize> {
            let near = store.reservations(
                MESH_ID,
                agentmesh_store::ReservationQuery::Near {
                    scope: SCOPE,
                    patterns: std::slice::from_ref(&path),
                },
                now,
            )?;
            Ok(reservation::covering(&path, Some("checker"), false, &near, now).len())
        })?;
        blocked += usize::from(found > 0);
    }
    h.report(&format!("{prefix}reservation-check"), n, calls, &timer);
    h.check(
        "reservation-check finds the reserved paths and only them",
        blocked == calls.div_ceil(2),
        format!("{blocked} of {calls}"),
    );

    let mut timer = Timer::default();
    for c in 0..calls {
        let req = request(format!("g{c}"), format!("area-{:02}/grant-{c}/**", c % 100));
        let got = timer.time(|| store.reserve(MESH_ID, &req, now))?;
        anyhow::ensure!(matches!(got, Reserved::Granted(_)), "a free path was denied");
    }
    h.report(&format!("{prefix}reservation-grant"), n, calls, &timer);

    let mut timer = Timer::default();
    for c in 0..calls {
        let i = (c * 7919) % n;
        let req = request(format!("d{c}"), format!("area-{:02}/module-{i}/src", i % 100));
        let got = timer.time(|| store.reserve(MESH_ID, &req, now))?;
        anyhow::ensure!(
            matches!(got, Reserved::Denied(ref c) if c.len() == 1),
            "an overlapping request: {got:?}"
        );
    }
    h.report(&format!("{prefix}reservation-denied"), n, calls, &timer);
    Ok(())
}
