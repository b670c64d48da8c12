//! Group `retention`: a soak of the mixed load under a short retention
//! policy. Tasks are enqueued by a coordinator, claimed, completed, and their
//! events drained; the retention upkeep moves what outlived the policy to the
//! archive after every block of tasks. The clock is the bench's own (each
//! task 10 ms after the one before), so a run of 100,000 tasks covers 1,000
//! simulated seconds and the windows (60 s of tasks, 120 s of ledger, 60 s of
//! drained events) keep a few thousand tasks hot.
//!
//! The product's goals: the hot database's size levels off instead of growing
//! with the tasks done, every task is found exactly once (hot or archived),
//! and the claim's p50 at the end is that of the start. Each block's line on
//! stderr gives the tasks so far, the hot file, the archive file and the
//! block's claim p50.

use agentmesh_core::events::{CoordinatorIdentity, Drainer};
use agentmesh_core::retention::{RetentionPolicy, Window};
use agentmesh_core::{NewTask, Timestamp};
use agentmesh_store::{ArchivedTasks, CompletionReport, DrainRequest, Outcome};

use crate::data::{MESH_ID, message};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// The coordinator that enqueues every task and drains its events.
const COORDINATOR: &str = "mach_soak";

/// Simulated milliseconds from one task to the next.
const STEP_MS: i64 = 10;

/// Tasks enqueued per batch, and drained per drain.
const BATCH: usize = 100;

/// Runs the group.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(100_000);
    h.run_case(&format!("retention-soak-{n}"), |h, case| soak(h, case, n));
}

/// The soak's policy: a minute of finished tasks, two of ledger, a minute of
/// drained events.
fn policy() -> RetentionPolicy {
    RetentionPolicy {
        tasks: Window::After(60_000),
        ledger: Window::After(120_000),
        events: Window::After(60_000),
    }
}

/// The instant of task `i`.
fn at(i: usize) -> Timestamp {
    crate::data::at(0).plus_millis(i as i64 * STEP_MS)
}

fn task(i: usize) -> NewTask {
    NewTask {
        id: Some(format!("soak-{i:07}")),
        message: message(i),
        source_coordinator_daemon_id: Some(COORDINATOR.to_owned()),
        source_coordinator_session_id: Some("coordinator-session".to_owned()),
        ..NewTask::default()
    }
}

fn file_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn soak(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let (store, label) = (case.store(), case.label());
    let db = case.sqlite().path().to_owned();
    let archive = {
        let mut name = db.clone().into_os_string();
        name.push("-archive");
        std::path::PathBuf::from(name)
    };
    let wal = {
        let mut name = db.clone().into_os_string();
        name.push("-wal");
        std::path::PathBuf::from(name)
    };
    let drain = DrainRequest {
        drainer: Drainer::new(
            CoordinatorIdentity::from_emit_fields(Some(COORDINATOR), None, Some("coordinator-session"))
                .expect("a coordinator identity"),
            &[],
        ),
        only_events: None,
        enforce: false,
        limit: None,
    };
    let block = (n / 10).max(BATCH);
    let worker = super::claimant("node-1".to_owned(), "worker-1".to_owned());
    let mut blocks: Vec<(usize, u64, u64, f64)> = Vec::new();
    let (mut first, mut last) = (Timer::default(), Timer::default());
    let mut drained = 0;
    let mut archived = agentmesh_store::archive::ArchiveReport::default();
    let mut i = 0;
    while i < n {
        let end = (i + block).min(n);
        let mut claims = Timer::default();
        for start in (i..end).step_by(BATCH) {
            let stop = (start + BATCH).min(end);
            let batch: Vec<NewTask> = (start..stop).map(task).collect();
            store.enqueue_batch(MESH_ID, &batch, at(start))?;
            for k in start..stop {
                let claimed =
                    claims.time(|| store.claim_next(MESH_ID, &worker, &Default::default(), at(k)))?;
                let task = match claimed {
                    agentmesh_store::ClaimOutcome::Claimed(task) => task,
                    other => anyhow::bail!("task {k} was not claimed: {other:?}"),
                };
                let report = CompletionReport {
                    session_id: worker.session_id.clone(),
                    task_id: Some(task.id.clone()),
                    epoch: Some(task.epoch()),
                    outcome: Outcome::Completed {
                        summary: Some(format!("done: {} files changed, tests pass", k % 7 + 1)),
                    },
                    occurred_at: None,
                };
                store.complete_task(MESH_ID, &report, at(k))?;
            }
            drained += store.drain_pending_events(MESH_ID, &drain, at(stop))?.events.len();
        }
        let now = at(end);
        loop {
            let step = store.archive_expired(&policy(), now, 500)?;
            archived.add(step);
            if !step.more {
                break;
            }
        }
        let events_cutoff = policy().events.cutoff(now).unwrap_or(now);
        store.prune_pending_events(events_cutoff, Timestamp::from_millis(0), now)?;
        case.sqlite().checkpoint_if_wal_exceeds(0)?;
        let (hot, cold) = (file_size(&db) + file_size(&wal), file_size(&archive));
        let p50 = claims.percentile_us(0.5);
        eprintln!(
            "  {end} tasks: hot {:.1} MB, archive {:.1} MB, claim p50 {p50:.0} us",
            hot as f64 / 1e6,
            cold as f64 / 1e6,
        );
        blocks.push((end, hot, cold, p50));
        if i == 0 {
            first = claims;
        } else if end == n {
            last = claims;
        }
        i = end;
    }
    h.report("retention-soak-claim-first-block", n, first.calls(), &first);
    h.report("retention-soak-claim-last-block", n, last.calls(), &last);
    let hot: Vec<u64> = blocks.iter().map(|b| b.1).collect();
    let half = hot[hot.len() / 2];
    let end = *hot.last().expect("blocks");
    println!(
        "{}",
        serde_json::json!({
            "case": "retention-soak-hot-bytes", "n": n,
            "hot_bytes_half_way": half, "hot_bytes_end": end,
            "archive_bytes_end": blocks.last().map(|b| b.2),
            "hot_bytes_per_block": hot,
        })
    );
    h.check(
        &format!("{label}: the hot file levels off (its size at the end within 25% of half way)"),
        end as f64 <= half as f64 * 1.25,
        format!("half way {half} B, end {end} B"),
    );
    h.check(
        &format!("{label}: every completion's event was drained"),
        drained == n,
        format!("drained {drained} of {n}"),
    );
    let (p_first, p_last) = (first.percentile_us(0.5), last.percentile_us(0.5));
    h.check(
        &format!("{label}: claim p50 at the end within noise of the start (at most 1.5x)"),
        p_last <= p_first * 1.5,
        format!("first {p_first:.0} us, last {p_last:.0} us"),
    );
    let (mut hot_found, mut archived_found, mut twice, mut missing) = (0, 0, 0, 0);
    for k in 0..n {
        let id = format!("soak-{k:07}");
        match (store.find_task(MESH_ID, &id)?, store.archived_tasks(MESH_ID, ArchivedTasks::Id(&id))?.pop()) {
            (Some(_), None) => hot_found += 1,
            (None, Some(_)) => archived_found += 1,
            (Some(_), Some(_)) => twice += 1,
            (None, None) => missing += 1,
        }
    }
    h.check(
        &format!("{label}: every task found exactly once, hot or archived"),
        twice == 0 && missing == 0,
        format!("hot {hot_found}, archived {archived_found}, both {twice}, neither {missing}"),
    );
    h.check(
        &format!("{label}: the archive holds what retention moved"),
        archived_found as u64 == archived.tasks,
        format!("archived {archived_found}, moved {}", archived.tasks),
    );
    Ok(())
}
