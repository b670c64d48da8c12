//! Group `enqueue`: one task per `enqueue` call (each its own transaction with its
//! ledger entry), and, ours only, `enqueue_batch` in batches of 1,000.

use agentmesh_core::TaskStatus;

use super::enqueue_in_batches;
use crate::data::{MESH_ID, UuidGen, at, message, new_task};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// Tasks per `enqueue_batch` call in the `enqueue-batch` case.
const BATCH: usize = 1_000;

/// Runs the group.
pub(crate) fn run(h: &mut Harness) {
    for n in [1_000, 10_000, 100_000] {
        let n = h.opts().scale(n);
        h.run_case(&format!("enqueue-{n}"), |h, case| enqueue(h, case, n));
    }
    let n = h.opts().scale(100_000);
    h.run_case(&format!("enqueue-batch-{n}"), |h, case| enqueue_batch(h, case, n));
}

/// `enqueue`: N calls of `Store::enqueue`, timed one by one.
fn enqueue(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let store = case.store();
    let ids = UuidGen::new(0xa000 + n as u32).take(n);
    let mut timer = Timer::default();
    for (i, id) in ids.iter().enumerate() {
        let task = new_task(id, i, None);
        timer.time(|| store.enqueue(MESH_ID, &task, at(i)))?;
    }
    h.report("enqueue", n, n, &timer);
    check_enqueued(h, case, &ids, 1)
}

/// `enqueue-batch`: N tasks through `Store::enqueue_batch`, timed per batch.
fn enqueue_batch(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let ids = UuidGen::new(0xa800 + n as u32).take(n);
    let mut timer = Timer::default();
    enqueue_in_batches(case.store(), n, BATCH, &mut timer, |i| new_task(&ids[i], i, None))?;
    h.report("enqueue-batch", n, n, &timer);
    check_enqueued(h, case, &ids, BATCH)
}

/// Checks after enqueueing `ids` as items `0..`, `batch` per call: all pending, one
/// ledger entry each, and the middle task reads back as it was enqueued.
fn check_enqueued(h: &mut Harness, case: &CaseStore, ids: &[String], batch: usize) -> anyhow::Result<()> {
    let (store, label, n) = (case.store(), case.label(), ids.len());
    let pending = crate::harness::pending_count(store, MESH_ID)?;
    h.check(&format!("{label}: pending count"), pending == n as u64, format!("pending={pending}"));
    let entries = crate::harness::ledger_count(store, MESH_ID)?;
    h.check(
        &format!("{label}: one ledger entry per task"),
        entries == n as u64,
        format!("entries={entries}"),
    );
    let probe = n / 2;
    let found = store.find_task(MESH_ID, &ids[probe])?;
    let round_trips = found.as_ref().is_some_and(|t| {
        t.id == ids[probe]
            && t.status == TaskStatus::Pending
            && t.message == message(probe).trim()
            && t.created_at == at(probe / batch * batch).iso()
    });
    h.check(
        &format!("{label}: entry round-trips"),
        round_trips,
        found.map_or_else(
            || "not found".to_owned(),
            |t| format!("status={} createdAt={}", t.status, t.created_at),
        ),
    );
    Ok(())
}
