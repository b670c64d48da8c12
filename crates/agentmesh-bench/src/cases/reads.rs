//! Group `reads` (ours only): claims of 8 threads on a deep queue, alone, beside
//! a reader that keeps asking for the mesh's status and the whole pending list,
//! and beside a thread that only spins on the CPU. Reads run on connections of
//! their own, so no claim waits for a read (stderr prints the longest claim of
//! each case); what the reader still takes from the claims is CPU time, and the
//! spinning thread, which takes as much and touches no lock, is the floor of
//! that: the claims' p99 beside the reader is to be read against it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentmesh_core::TaskStatus;
use agentmesh_store::{ClaimOptions, ClaimOutcome};

use super::{claimant, enqueue_in_batches};
use crate::data::{MESH_ID, UuidGen, at, new_task};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// Claiming threads.
const CLIENTS: usize = 8;
/// Tasks per `enqueue_batch` call when filling the queue.
const PREFILL_BATCH: usize = 5_000;

/// What runs beside the claims.
#[derive(Clone, Copy, PartialEq)]
enum Beside {
    /// Nothing: `claims-without-reader`.
    Nothing,
    /// A thread looping over `status` and the pending list: `claims-beside-reader`.
    Reader,
    /// A thread that only spins on the CPU: `claims-beside-spinner`.
    Spinner,
}

impl Beside {
    fn case(self) -> &'static str {
        match self {
            Beside::Nothing => "claims-without-reader",
            Beside::Reader => "claims-beside-reader",
            Beside::Spinner => "claims-beside-spinner",
        }
    }
}

/// Runs group `reads`.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(100_000);
    let claims = h.opts().claims() * 5;
    for beside in [Beside::Nothing, Beside::Reader, Beside::Spinner] {
        h.run_case(&format!("{}-{n}", beside.case()), |h, case| claims_beside(h, case, n, claims, beside));
    }
}

/// Each of [`CLIENTS`] threads claims `claims` times, each claim by a session of
/// its own; returns every thread's latencies.
fn claim_in_threads(
    store: &dyn agentmesh_store::Store,
    claims: usize,
    now: agentmesh_core::Timestamp,
) -> anyhow::Result<Vec<Vec<Duration>>> {
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..CLIENTS)
            .map(|k| {
                s.spawn(move || -> anyhow::Result<Vec<Duration>> {
                    let mut latencies = Vec::with_capacity(claims);
                    for c in 0..claims {
                        let who = claimant(format!("node-{k}-{c}"), format!("session-{k}-{c}"));
                        let call = Instant::now();
                        let outcome = store.claim_next(MESH_ID, &who, &ClaimOptions::default(), now)?;
                        latencies.push(call.elapsed());
                        anyhow::ensure!(
                            matches!(outcome, ClaimOutcome::Claimed(_)),
                            "claim refused: {outcome:?}"
                        );
                    }
                    Ok(latencies)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a claiming thread panicked")).collect()
    })
}

/// `claims` claims by each of [`CLIENTS`] threads (each claim by a session of its
/// own, so none is refused) on a queue of `n` pending tasks, with `beside`
/// running meanwhile: nothing, a thread looping over `status` (counts by status)
/// and `task list` (every pending task, decoded), or a thread that only spins on
/// the CPU, touching no lock and no file. Reports the claims under
/// [`Beside::case`], and the reader's calls as `status-and-list`.
fn claims_beside(
    h: &mut Harness,
    case: &CaseStore,
    n: usize,
    claims: usize,
    beside: Beside,
) -> anyhow::Result<()> {
    let store = case.store();
    let ids = UuidGen::new(0xf000 + n as u32).take(n);
    enqueue_in_batches(store, n, PREFILL_BATCH, &mut Timer::default(), |i| new_task(&ids[i], i, None))?;
    let now = at(n);
    let done = AtomicBool::new(false);
    let began = Instant::now();
    let (claim_latencies, reads) = std::thread::scope(|s| {
        let companion = (beside != Beside::Nothing).then(|| {
            s.spawn(|| -> anyhow::Result<Vec<Duration>> {
                let mut calls = Vec::new();
                let mut x = 0u64;
                while !done.load(Ordering::Relaxed) {
                    if beside == Beside::Spinner {
                        for i in 0..10_000u64 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i),
                            );
                        }
                        continue;
                    }
                    let call = Instant::now();
                    store.stats_by_status(MESH_ID)?;
                    let listed = store.queue_entries(MESH_ID, &[TaskStatus::Pending])?;
                    anyhow::ensure!(
                        listed.len() + CLIENTS * claims >= n,
                        "the list lost tasks: {}",
                        listed.len()
                    );
                    calls.push(call.elapsed());
                }
                Ok(calls)
            })
        });
        let claimed = claim_in_threads(store, claims, now);
        done.store(true, Ordering::Relaxed);
        let reads = companion.map(|r| r.join().expect("the thread beside the claims panicked")).transpose();
        (claimed, reads)
    });
    let wall = began.elapsed();
    let claim_latencies: Vec<Duration> = claim_latencies?.into_iter().flatten().collect();
    let ops = claim_latencies.len();
    let name = beside.case();
    // A read that held up the claims shows as a few very slow claims, too few
    // to move the p99: the longest one is printed beside it.
    let longest = claim_latencies.iter().max().copied().unwrap_or_default();
    eprintln!("longest {name}-{n}: {:.1} ms", longest.as_secs_f64() * 1e3);
    h.report(name, n, ops, &Timer::concurrent(claim_latencies, wall));
    if let Some(reads) = reads?.filter(|_| beside == Beside::Reader) {
        h.check(
            &format!("{}: the reader was answered while claims ran", case.label()),
            !reads.is_empty(),
            "",
        );
        let calls = reads.len();
        h.report("status-and-list", n, calls, &Timer::concurrent(reads, wall));
    }
    let assigned = store
        .stats_by_status(MESH_ID)?
        .iter()
        .find(|s| s.status == TaskStatus::Assigned)
        .map_or(0, |s| s.count);
    h.check(
        &format!("{}: every claim assigned a task", case.label()),
        assigned == ops as u64,
        format!("assigned={assigned} claims={ops}"),
    );
    Ok(())
}
