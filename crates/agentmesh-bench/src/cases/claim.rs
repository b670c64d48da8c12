//! Groups `claim-depth` and `claim-with-deps`: `claim_next` against a deep queue of
//! claimable tasks, and along a dependency chain where only the head is claimable.

use std::collections::{BTreeMap, HashSet};

use agentmesh_core::{ClaimRefusal, TaskStatus};
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome};

use super::{claimant, count_of, enqueue_in_batches, show_stats};
use crate::data::{MESH_ID, UuidGen, at, new_task};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// Tasks per `enqueue_batch` call when filling a queue before the clock starts.
const PREFILL_BATCH: usize = 5_000;

/// Runs group `claim-depth`. The 1M depth is ours only; the seed stops at 50k.
pub(crate) fn run_depth(h: &mut Harness) {
    let claims = h.opts().claims();
    for n in [100, 1_000, 10_000, 50_000, 1_000_000] {
        let n = h.opts().scale(n);
        h.run_case(&format!("claim-depth-{n}"), |h, case| claim_depth(h, case, n, claims));
    }
}

/// Runs group `claim-with-deps`.
pub(crate) fn run_with_deps(h: &mut Harness) {
    let (n, claims) = (h.opts().scale(10_000), h.opts().claims());
    h.run_case(&format!("claim-with-deps-{n}"), |h, case| claim_with_deps(h, case, n, claims));
}

/// `claim-depth`: `claims` claims, claim k by `node-k`/`session-k`, with N pending
/// untargeted tasks. Each successful claim is followed (untimed) by enqueueing one
/// more task, so every claim sees exactly N pending.
fn claim_depth(h: &mut Harness, case: &CaseStore, n: usize, claims: usize) -> anyhow::Result<()> {
    let (store, label) = (case.store(), case.label());
    let mut ids = UuidGen::new(0xb000 + n as u32);
    let mut created = ids.take(n);
    enqueue_in_batches(store, n, PREFILL_BATCH, &mut Timer::default(), |i| new_task(&created[i], i, None))?;

    let mut seq = n;
    let mut timer = Timer::default();
    let mut claimed = Vec::new();
    let mut refusals = Vec::new();
    let mut out_of_order = 0;
    for k in 0..claims {
        let who = claimant(format!("node-{k}"), format!("session-{k}"));
        let outcome = timer.time(|| store.claim_next(MESH_ID, &who, &ClaimOptions::default(), at(seq)))?;
        let task = match outcome {
            ClaimOutcome::Claimed(task) => task,
            ClaimOutcome::Refused(reason) => {
                refusals.push(reason);
                continue;
            }
        };
        if task.id != created[k] {
            out_of_order += 1;
        }
        claimed.push(task.id);
        let id = ids.next_id();
        store.enqueue(MESH_ID, &new_task(&id, seq, None), at(seq))?;
        created.push(id);
        seq += 1;
    }
    h.report("claim-depth", n, claimed.len(), &timer);

    h.check(&format!("{label}: every claim returned a task"), refusals.is_empty(), tally(claims, &refusals));
    check_distinct(h, label, &claimed);
    h.check(
        &format!("{label}: FIFO by createdAt"),
        out_of_order == 0,
        format!("out-of-order={out_of_order}"),
    );
    let stats = store.stats_by_status(MESH_ID)?;
    let held = count_of(&stats, TaskStatus::Pending) == n as u64
        && count_of(&stats, TaskStatus::Assigned) == claimed.len() as u64;
    h.check(&format!("{label}: depth held at N, claims assigned"), held, show_stats(&stats));
    if let Some(first) = claimed.first() {
        let task = store.find_task(MESH_ID, first)?;
        let persisted = task.as_ref().is_some_and(|t| {
            t.status == TaskStatus::Assigned
                && t.assigned_node_id.as_deref() == Some("node-0")
                && t.assigned_session_id.as_deref() == Some("session-0")
        });
        h.check(&format!("{label}: claim persisted"), persisted, "");
    }
    let busy = claimant("node-fresh".to_owned(), "session-0".to_owned());
    let again = store.claim_next(MESH_ID, &busy, &ClaimOptions::default(), at(seq))?;
    h.check(
        &format!("{label}: busy session cannot claim twice"),
        again == ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned),
        show_outcome(&again),
    );
    Ok(())
}

/// `claim-with-deps` and `claim-with-deps-blocked`: task i depends on task i-1.
/// Each timed claim is followed (untimed) by completing the claimed task with its
/// session and epoch, which unblocks the next. Every 10th step a claim by another
/// session, while the next task's dependency is still assigned, is timed on its own
/// and must be refused.
fn claim_with_deps(h: &mut Harness, case: &CaseStore, n: usize, claims: usize) -> anyhow::Result<()> {
    let (store, label) = (case.store(), case.label());
    let ids = UuidGen::new(0xc000 + n as u32).take(n);
    enqueue_in_batches(store, n, PREFILL_BATCH, &mut Timer::default(), |i| {
        new_task(&ids[i], i, i.checked_sub(1).map(|prev| ids[prev].as_str()))
    })?;

    let mut seq = n;
    let mut timer = Timer::default();
    let mut blocked_timer = Timer::default();
    let mut claimed = Vec::new();
    let mut refusals = Vec::new();
    let mut off_chain = 0;
    let mut leaked = 0;
    let mut blocked_reasons = Vec::new();
    for (k, expected) in ids.iter().enumerate().take(claims) {
        let session = format!("session-{k}");
        let who = claimant(format!("node-{k}"), session.clone());
        let task = match timer.time(|| store.claim_next(MESH_ID, &who, &ClaimOptions::default(), at(seq)))? {
            ClaimOutcome::Claimed(task) => task,
            ClaimOutcome::Refused(reason) => {
                refusals.push(reason);
                break;
            }
        };
        seq += 1;
        if task.id != *expected {
            off_chain += 1;
        }
        if k % 10 == 0 {
            let probe = claimant(format!("probe-node-{k}"), format!("probe-session-{k}"));
            match blocked_timer
                .time(|| store.claim_next(MESH_ID, &probe, &ClaimOptions::default(), at(seq)))?
            {
                ClaimOutcome::Claimed(_) => leaked += 1,
                ClaimOutcome::Refused(reason) => blocked_reasons.push(reason),
            }
            seq += 1;
        }
        let report = CompletionReport {
            session_id: session,
            task_id: Some(task.id.clone()),
            epoch: Some(task.epoch()),
            occurred_at: None,
            outcome: Outcome::Completed { summary: None },
        };
        store.complete_task(MESH_ID, &report, at(seq))?;
        seq += 1;
        claimed.push(task.id);
    }
    h.report("claim-with-deps", n, claimed.len(), &timer);
    h.report("claim-with-deps-blocked", n, blocked_timer.calls(), &blocked_timer);

    h.check(&format!("{label}: every claim returned a task"), refusals.is_empty(), tally(claims, &refusals));
    h.check(
        &format!("{label}: claims follow the dependency chain"),
        off_chain == 0,
        format!("off-chain={off_chain}"),
    );
    check_distinct(h, label, &claimed);
    let refused_right = blocked_reasons.iter().all(|r| *r == ClaimRefusal::DependenciesUnsatisfied);
    h.check(
        &format!("{label}: unmet dependency blocks claim (dependencies_unsatisfied)"),
        leaked == 0 && refused_right,
        format!("leaked={leaked}; {}", tally(blocked_timer.calls(), &blocked_reasons)),
    );
    Ok(())
}

/// Checks that no task was claimed twice.
fn check_distinct(h: &mut Harness, label: &str, claimed: &[String]) {
    let distinct = claimed.iter().collect::<HashSet<_>>().len();
    h.check(
        &format!("{label}: claimed ids distinct"),
        distinct == claimed.len(),
        format!("{distinct} distinct of {}", claimed.len()),
    );
}

/// `refused=r/calls`, followed by the count of each reason.
fn tally(calls: usize, refusals: &[ClaimRefusal]) -> String {
    let mut by_reason = BTreeMap::new();
    for reason in refusals {
        *by_reason.entry(reason.as_str()).or_insert(0) += 1;
    }
    let reasons: Vec<String> = by_reason.iter().map(|(r, c)| format!(" {r}={c}")).collect();
    format!("refused={}/{calls}{}", refusals.len(), reasons.concat())
}

/// A claim outcome for check details: the refusal reason or the claimed id.
fn show_outcome(outcome: &ClaimOutcome) -> String {
    match outcome {
        ClaimOutcome::Claimed(task) => format!("claimed {}", task.id),
        ClaimOutcome::Refused(reason) => format!("refused {reason}"),
    }
}
