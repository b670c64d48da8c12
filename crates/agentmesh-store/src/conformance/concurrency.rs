//! The isolation contract of [`Store`], raced: each rule runs one
//! racing pair (or trio) of operations on threads released together, many rounds
//! over, and checks after every round the invariant the contract promises.
//!
//! The rules take [`Racers`]: one handle that every thread of a round may share,
//! and further handles on the same database, as separate processes or daemons
//! would hold them. Even rounds race threads on the shared handle; odd rounds
//! give every racer but the first a handle of its own. Each round works in a mesh
//! of its own, so rounds never see each other's rows.
//!
//! The racers retry contention as callers must ([`crate::retry`]); any other
//! error is an outcome the rule judges.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use agentmesh_core::events::names::AGENT_GENERATING_COMPLETED;
use agentmesh_core::{ClaimRefusal, Claimant, NewTask, Task, TaskStatus};

use super::support::*;
use crate::retry::retrying;
use crate::{ClaimOutcome, DrainRequest, ReservationQuery, Store, StoreError, StoreResult};

/// How many rounds each rule races.
pub const ROUNDS: usize = 200;

/// Handles on one database, for the racing rules.
pub trait Racers {
    /// The handle that threads of one process share.
    fn shared(&self) -> Arc<dyn Store>;
    /// A new handle of its own on the same database: what another process or
    /// daemon would hold.
    fn open(&self) -> Arc<dyn Store>;
}

/// The handles of one rule: the shared one and `n` of their own.
struct Arena {
    shared: Arc<dyn Store>,
    own: Vec<Arc<dyn Store>>,
}

impl Arena {
    fn new(racers: &dyn Racers, n: usize) -> Arena {
        Arena { shared: racers.shared(), own: (0..n).map(|_| racers.open()).collect() }
    }

    /// The handle racer `i` uses in `round`.
    fn handle(&self, round: usize, i: usize) -> Arc<dyn Store> {
        if round.is_multiple_of(2) || i == 0 {
            Arc::clone(&self.shared)
        } else {
            Arc::clone(&self.own[(i - 1) % self.own.len()])
        }
    }

    /// Runs `op(i, store)` for each racer `i` in `0..n` on its own thread, all
    /// released at once; returns the results in racer order.
    fn race<T: Send>(&self, round: usize, n: usize, op: impl Fn(usize, &dyn Store) -> T + Sync) -> Vec<T> {
        let gate = Barrier::new(n);
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..n)
                .map(|i| {
                    let (store, gate, op) = (self.handle(round, i), &gate, &op);
                    scope.spawn(move || {
                        gate.wait();
                        op(i, store.as_ref())
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().expect("a racer panicked")).collect()
        })
    }
}

/// The mesh of one round.
fn round_mesh(rule: &str, round: usize) -> String {
    format!("race-{rule}-{round}")
}

/// A task id unique to one round (unique in the database, so in the mesh on every backend).
fn round_id(mesh: &str, name: &str) -> String {
    format!("{mesh}-{name}")
}

/// The ids of the claimed tasks among `outcomes`.
fn claimed_ids(outcomes: &[StoreResult<ClaimOutcome>]) -> Vec<String> {
    outcomes.iter().filter_map(|o| o.as_ref().ok()?.task().map(|t| t.id.clone())).collect()
}

/// Two claims by one session, at once, take at most one task: the
/// session-holds-a-task gate and the assignment are one step. With two tasks
/// pending, exactly one claim wins and the other is refused as
/// `SessionAlreadyAssigned`.
pub fn race_two_claims_by_one_session_take_one_task(racers: &dyn Racers) {
    let arena = Arena::new(racers, 1);
    for round in 0..ROUNDS {
        let mesh = round_mesh("session", round);
        // Read-only tasks: the node-busy gate lets both through, so only the
        // session's own gate stands between the two claims.
        for name in ["a", "b"] {
            enqueue(arena.shared.as_ref(), &mesh, readonly_task(&round_id(&mesh, name)), at(1));
        }
        let me = worker("node-1", "s1");
        let outcomes =
            arena.race(round, 2, |_, store| retrying(|| store.claim_next(&mesh, &me, &lease(), at(2))));
        let won = claimed_ids(&outcomes);
        assert_eq!(
            won.len(),
            1,
            "round {round}: expected one of two claims by one session to win, {won:?} won"
        );
        for outcome in &outcomes {
            match outcome {
                Ok(ClaimOutcome::Claimed(_)) => {}
                Ok(ClaimOutcome::Refused(r)) => assert_eq!(
                    *r,
                    ClaimRefusal::SessionAlreadyAssigned,
                    "round {round}: expected the losing claim to be refused as SessionAlreadyAssigned"
                ),
                Err(err) => panic!("round {round}: a claim failed: {err:?}"),
            }
        }
        let assigned = queue_ids(arena.shared.as_ref(), &mesh, &[TaskStatus::Assigned]);
        assert_eq!(assigned, won, "round {round}: expected exactly the won task to be assigned");
    }
}

/// Two claims for one node by different sessions, at once, stay within the
/// node's gates: with write tasks the node-busy gate lets one through; with
/// read-only tasks and a per-(node, provider) cap of one, the cap does.
pub fn race_two_claims_for_one_node_stay_within_its_gates(racers: &dyn Racers) {
    let arena = Arena::new(racers, 1);
    for round in 0..ROUNDS {
        let mesh = round_mesh("node", round);
        let capped = round % 4 >= 2;
        for name in ["a", "b"] {
            let id = round_id(&mesh, name);
            let task = if capped { readonly_task(&id) } else { new_task(&id) };
            enqueue(arena.shared.as_ref(), &mesh, task, at(1));
        }
        let claimant = |i: usize| Claimant {
            provider_max_parallel: capped.then_some(1),
            ..worker("mach_X", &format!("s{i}"))
        };
        let outcomes = arena.race(round, 2, |i, store| {
            let me = claimant(i);
            retrying(|| store.claim_next(&mesh, &me, &lease(), at(2)))
        });
        let won = claimed_ids(&outcomes);
        let expected_refusal = if capped {
            ClaimRefusal::ParallelCapReached
        } else {
            ClaimRefusal::NodeBusyWithActiveAssignment
        };
        assert_eq!(won.len(), 1, "round {round}: expected one of two claims on one node to win, {won:?} won");
        for outcome in &outcomes {
            match outcome {
                Ok(ClaimOutcome::Claimed(_)) => {}
                Ok(ClaimOutcome::Refused(r)) => {
                    assert_eq!(*r, expected_refusal, "round {round}: the losing claim's refusal")
                }
                Err(err) => panic!("round {round}: a claim failed: {err:?}"),
            }
        }
        let assigned = queue_ids(arena.shared.as_ref(), &mesh, &[TaskStatus::Assigned]);
        assert_eq!(assigned.len(), 1, "round {round}: expected the node to run one task, got {assigned:?}");
    }
}

/// An enqueue racing the completion of the task it depends on leaves the
/// dependent claimable exactly once: never stuck waiting for a dependency that
/// is done, never handed out twice.
pub fn race_enqueue_and_completion_of_its_dependency_leave_the_dependent_claimable_once(racers: &dyn Racers) {
    let arena = Arena::new(racers, 1);
    for round in 0..ROUNDS {
        let mesh = round_mesh("dependency", round);
        let (dep_id, child_id) = (round_id(&mesh, "dep"), round_id(&mesh, "child"));
        let shared = arena.shared.as_ref();
        enqueue(shared, &mesh, new_task(&dep_id), at(1));
        let dep = claim_ok(shared, &mesh, &worker("node-1", "s1"), at(2), &dep_id);
        let results = arena.race(round, 2, |i, store| {
            if i == 0 {
                retrying(|| store.complete_task(&mesh, &report(&dep, done("dep done")), at(3))).map(|_| ())
            } else {
                retrying(|| store.enqueue(&mesh, &dependent_task(&child_id, &[&dep_id]), at(3))).map(|_| ())
            }
        });
        for (i, r) in results.iter().enumerate() {
            assert!(r.is_ok(), "round {round}: racer {i} failed: {r:?}");
        }
        let other = worker("node-2", "s2");
        let first = ok(shared.claim_next(&mesh, &other, &lease(), at(4)), "claim of the dependent");
        assert_eq!(
            first.task().map(|t| t.id.as_str()),
            Some(child_id.as_str()),
            "round {round}: expected the dependent to be claimable once its dependency completed, got {first:?}"
        );
        let second = ok(shared.claim_next(&mesh, &worker("node-3", "s3"), &lease(), at(5)), "a second claim");
        assert!(second.task().is_none(), "round {round}: the dependent was handed out twice: {second:?}");
    }
}

/// A→B and B→A enqueued at once (each naming the other as its dependency):
/// at most one succeeds, the other is refused as a cycle, and no cycle is ever
/// stored.
pub fn race_opposite_dependencies_never_store_a_cycle(racers: &dyn Racers) {
    let arena = Arena::new(racers, 1);
    for round in 0..ROUNDS {
        let mesh = round_mesh("cycle", round);
        let (a, b) = (round_id(&mesh, "a"), round_id(&mesh, "b"));
        let results = arena.race(round, 2, |i, store| {
            let task: NewTask = if i == 0 { dependent_task(&a, &[&b]) } else { dependent_task(&b, &[&a]) };
            retrying(|| store.enqueue(&mesh, &task, at(1)))
        });
        let stored: Vec<&Task> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert!(stored.len() <= 1, "round {round}: both halves of a cycle were stored: {stored:?}");
        for r in &results {
            if let Err(err) = r {
                assert!(
                    matches!(err, StoreError::DependencyCycle { .. }),
                    "round {round}: expected the refused enqueue to be a DependencyCycle, got {err:?}"
                );
            }
        }
        let queued = queue_ids(arena.shared.as_ref(), &mesh, &[]);
        assert_eq!(queued.len(), 1, "round {round}: expected exactly one of the pair stored, got {queued:?}");
    }
}

/// Two drains by one coordinator at once hand out each event exactly once:
/// together with a drain afterwards, every queued event is delivered, and none
/// twice.
pub fn race_two_drains_by_one_coordinator_deliver_each_event_once(racers: &dyn Racers) {
    let arena = Arena::new(racers, 1);
    let me = coordinator("mach_A", "run_1", None);
    let request = DrainRequest { limit: Some(3), ..drain_request(&me) };
    for round in 0..ROUNDS {
        let mesh = round_mesh("drain", round);
        let shared = arena.shared.as_ref();
        let mut queued = BTreeSet::new();
        for i in 0..5_i64 {
            let event = inbox_event(&mesh, AGENT_GENERATING_COMPLETED, &format!("e{i}"), at(i));
            queued.insert(queue_event(shared, &mesh, targeted_at(event, &me), at(i)).0);
        }
        let drains =
            arena.race(round, 2, |_, store| retrying(|| store.drain_pending_events(&mesh, &request, at(10))));
        let mut delivered = Vec::new();
        for d in drains {
            delivered.extend(ok(d, "a racing drain").events.into_iter().map(|e| e.id));
        }
        delivered.extend(drain(shared, &mesh, &request, at(11)).events.into_iter().map(|e| e.id));
        let unique: BTreeSet<String> = delivered.iter().cloned().collect();
        assert_eq!(
            unique.len(),
            delivered.len(),
            "round {round}: an event was delivered twice: {delivered:?}"
        );
        assert_eq!(unique, queued, "round {round}: expected every queued event delivered");
    }
}

/// Concurrent upserts of one new mission: exactly one is told it created the
/// mission, and one mission is stored.
pub fn race_concurrent_upserts_of_one_mission_create_it_once(racers: &dyn Racers) {
    let arena = Arena::new(racers, 2);
    for round in 0..ROUNDS {
        let mesh = round_mesh("mission", round);
        let id = round_id(&mesh, "m");
        let results = arena.race(round, 3, |i, store| {
            let mission = new_mission(&id, &format!("title {i}"));
            retrying(|| store.upsert_mission(&mesh, &mission, at(1)))
        });
        let mut created = 0;
        for r in &results {
            match r {
                Ok(upserted) => created += usize::from(upserted.created),
                Err(err) => panic!("round {round}: a racing upsert failed: {err:?}"),
            }
        }
        assert_eq!(created, 1, "round {round}: expected exactly one upsert to say created, got {results:?}");
        assert_eq!(
            mission_ids(arena.shared.as_ref(), &mesh, &[]),
            vec![id],
            "round {round}: one mission stored"
        );
    }
}

/// A worker's completion racing the lease reaper's reclaim of the same task:
/// exactly one wins. When the completion wins the task is completed; when the
/// reclaim wins the task is pending again with a newer epoch, the completion is
/// refused, and a report at the old epoch stays refused after the task is
/// claimed again (epoch fencing).
pub fn race_completion_and_reclaim_one_wins(racers: &dyn Racers) {
    let arena = Arena::new(racers, 1);
    for round in 0..ROUNDS {
        let mesh = round_mesh("reclaim", round);
        let id = round_id(&mesh, "t");
        let shared = arena.shared.as_ref();
        enqueue(shared, &mesh, new_task(&id), at(0));
        let held = claim_ok(shared, &mesh, &worker("node-1", "s1"), at(1), &id);
        // Past the lease: the reaper may reclaim, and the worker still reports.
        let late = at(1 + LEASE_MS / 1_000 + 1);
        let results = arena.race(round, 2, |i, store| {
            if i == 0 {
                retrying(|| store.complete_task(&mesh, &report(&held, done("finished")), late)).map(Some)
            } else {
                retrying(|| store.reclaim_if_lease_expired(&mesh, &id, late))
            }
        });
        let completed = results[0].is_ok();
        let reclaimed = matches!(results[1], Ok(Some(_)));
        assert!(
            completed != reclaimed,
            "round {round}: expected exactly one of completion and reclaim to win, got {results:?}"
        );
        let now = find(shared, &mesh, &id);
        if completed {
            assert_eq!(now.status, TaskStatus::Completed, "round {round}: the completion won");
            assert!(matches!(results[1], Ok(None)), "round {round}: the losing reclaim: {:?}", results[1]);
        } else {
            assert_eq!(now.status, TaskStatus::Pending, "round {round}: the reclaim won");
            assert!(
                matches!(
                    results[0],
                    Err(StoreError::StaleEpoch { .. }
                        | StoreError::NotAssignedToSession { .. }
                        | StoreError::InvalidTransition(_))
                ),
                "round {round}: expected the losing completion refused, got {:?}",
                results[0]
            );
            let again = claim_ok(shared, &mesh, &worker("node-2", "s2"), at(200), &id);
            assert!(again.epoch() > held.epoch(), "round {round}: expected a newer epoch after the reclaim");
            let refused = shared.complete_task(&mesh, &report(&held, done("late")), at(201));
            assert!(refused.is_err(), "round {round}: a report at the old epoch was accepted: {refused:?}");
            assert_status(shared, &mesh, &id, TaskStatus::Assigned);
        }
    }
}

/// Four sessions reserving overlapping patterns exclusively at once: exactly
/// one is granted, and each denial names the granted holder, never another
/// loser.
pub fn race_overlapping_exclusive_reservations_grant_one(racers: &dyn Racers) {
    let arena = Arena::new(racers, 3);
    let patterns = [["src/**"], ["src/lib.rs"], ["src/*.rs"], ["src"]];
    for round in 0..ROUNDS / 4 {
        let mesh = round_mesh("reserve", round);
        let outcomes = arena.race(round, 4, |i, store| {
            let request = agentmesh_core::NewReservation {
                scope: "repo".into(),
                session_id: format!("s{i}"),
                node_id: format!("n{i}"),
                patterns: patterns[i].iter().map(|p| (*p).to_owned()).collect(),
                exclusive: true,
                ..agentmesh_core::NewReservation::default()
            };
            retrying(|| store.reserve(&mesh, &request, at(1)))
        });
        let mut winners = Vec::new();
        for outcome in &outcomes {
            match outcome {
                Ok(crate::Reserved::Granted(r)) => winners.push(r.session_id.clone()),
                Ok(crate::Reserved::Denied(_)) => {}
                Err(err) => panic!("round {round}: a reservation failed: {err:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: expected one of four overlapping grants, {winners:?}");
        for outcome in &outcomes {
            if let Ok(crate::Reserved::Denied(conflicts)) = outcome {
                let holders: Vec<&str> = conflicts.iter().map(|c| c.session_id.as_str()).collect();
                assert_eq!(holders, [winners[0].as_str()], "round {round}: a denial names the one holder");
            }
        }
        let held = ok(arena.shared.reservations(&mesh, ReservationQuery::All(None), at(2)), "reservations");
        assert_eq!(held.len(), 1, "round {round}: one reservation stored");
    }
}

/// Two sessions on two nodes claiming at once, with two tasks that declare
/// overlapping paths: at most one is handed out, and one reservation stored.
pub fn race_claims_of_tasks_over_one_path_take_one(racers: &dyn Racers) {
    let arena = Arena::new(racers, 1);
    for round in 0..ROUNDS / 4 {
        let mesh = round_mesh("paths", round);
        for (name, path) in [("a", "src/**"), ("b", "src/lib.rs")] {
            let task = NewTask {
                paths: vec![path.to_owned()],
                paths_scope: Some("repo".into()),
                ..new_task(&round_id(&mesh, name))
            };
            enqueue(arena.shared.as_ref(), &mesh, task, at(1));
        }
        let outcomes = arena.race(round, 2, |i, store| {
            let me = worker(&format!("node-{i}"), &format!("s{i}"));
            retrying(|| store.claim_next(&mesh, &me, &lease(), at(2)))
        });
        let won = claimed_ids(&outcomes);
        assert_eq!(won.len(), 1, "round {round}: expected one of two claims over one path, {won:?} won");
        for outcome in &outcomes {
            if let Ok(ClaimOutcome::Refused(r)) = outcome {
                assert_eq!(*r, ClaimRefusal::PathsReserved, "round {round}");
            }
        }
        let held = ok(arena.shared.reservations(&mesh, ReservationQuery::All(None), at(3)), "reservations");
        assert_eq!(held.len(), 1, "round {round}: {held:?}");
    }
}
