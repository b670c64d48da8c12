//! The operations that run until the power goes, and what their answers said.
//!
//! Four threads share the store: a producer (enqueues tasks and queues inbox
//! events for the coordinator, keeping at most [`MAX_WAITING`] tasks waiting),
//! two workers (claim a task, complete it alone or together with the next
//! claim), and the coordinator (drains its inbox, follows the ledger by
//! sequence, reads the assigned tasks, and in every other stretch checkpoints
//! once, as the daemon's upkeep does). Each records every write the store
//! acknowledged and every epoch and ledger sequence number an answer carried.
//! A failure is expected once the power is off and stops its thread; one with
//! the power on is recorded as unexpected.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentmesh_core::events::CoordinatorIdentity;
use agentmesh_core::events::names::AGENT_GENERATING_COMPLETED;
use agentmesh_core::{Claimant, NewTask, SliceQuery, Task, TaskStatus, Timestamp};
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::conformance::support::{coordinator, drain_request, inbox_event, targeted_at};
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, QueueOutcome, StoreResult};

use agentmesh_powercut::Disk;

/// The mesh every operation works in.
pub(crate) const MESH: &str = "powerloss";
/// The clock the store is given starts here and follows the real one.
const T0: Timestamp = Timestamp::from_millis(1_780_000_000_000);
/// Tasks the producer lets wait for a worker before it queues events instead.
const MAX_WAITING: i64 = 40;

/// The workers' claims: a lease of a millisecond, so that after a cut every task
/// a stopped worker held has lapsed and is reclaimed.
const LEASE: ClaimOptions = ClaimOptions { lease_ms: Some(1) };
/// A ledger page of the follower.
const PAGE: u32 = 200;
/// How long into a stretch its checkpoint may come.
const CHECKPOINT_WITHIN_MS: u64 = 200;

/// A write the store acknowledged.
#[derive(Debug, Clone)]
pub(crate) enum Ack {
    Enqueued { task: String },
    Claimed { task: String, epoch: u64 },
    Completed { task: String, epoch: u64 },
    Reclaimed { task: String, epoch: u64 },
    Queued { event: String },
    Drained { event: String },
}

impl Ack {
    /// The task the write changed and the least progress it left the task at.
    pub(crate) fn progress(&self) -> Option<(&str, Progress)> {
        let (task, epoch, stage) = match self {
            Ack::Enqueued { task } => (task, 0, 0),
            Ack::Claimed { task, epoch } => (task, *epoch, 1),
            Ack::Completed { task, epoch } => (task, *epoch, 2),
            Ack::Reclaimed { task, epoch } => (task, *epoch, 0),
            Ack::Queued { .. } | Ack::Drained { .. } => return None,
        };
        Some((task.as_str(), Progress { epoch, stage }))
    }
}

/// How far a task got. Every change moves a task forward in this order: a
/// claim or a reclaim raises its epoch, a completion finishes it at its epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Progress {
    epoch: u64,
    /// Pending 0, assigned 1, finished 2.
    stage: u8,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = ["pending", "assigned", "finished"][usize::from(self.stage)];
        write!(f, "epoch {}, {stage}", self.epoch)
    }
}

impl Progress {
    pub(crate) fn of(task: &Task) -> Progress {
        let stage = match task.status {
            TaskStatus::Pending => 0,
            TaskStatus::Assigned => 1,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled => 2,
        };
        Progress { epoch: task.epoch(), stage }
    }
}

/// What the operations of one stretch between two power cuts acknowledged and
/// saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub acks: Vec<Ack>,
    /// The highest epoch any answer carried, by task.
    pub epochs: HashMap<String, u64>,
    /// The highest ledger sequence number any answer carried.
    pub max_seq: u64,
    /// Ledger entries the follower read.
    pub entries: Vec<String>,
    /// Checkpoints run.
    pub checkpoints: usize,
    /// Failures while the power was on.
    pub unexpected: Vec<String>,
}

impl Seen {
    /// Notes the epoch of a task an answer carried.
    pub(crate) fn task(&mut self, task: &Task) {
        let epoch = self.epochs.entry(task.id.clone()).or_default();
        *epoch = (*epoch).max(task.epoch());
    }

    pub(crate) fn claimed(&mut self, task: &Task) {
        self.task(task);
        self.acks.push(Ack::Claimed { task: task.id.clone(), epoch: task.epoch() });
    }

    pub(crate) fn completed(&mut self, task: &Task) {
        self.task(task);
        self.acks.push(Ack::Completed { task: task.id.clone(), epoch: task.epoch() });
    }

    pub(crate) fn reclaimed(&mut self, task: &Task) {
        self.task(task);
        self.acks.push(Ack::Reclaimed { task: task.id.clone(), epoch: task.epoch() });
    }

    pub(crate) fn merge(&mut self, other: Seen) {
        self.acks.extend(other.acks);
        for (task, epoch) in other.epochs {
            let mine = self.epochs.entry(task).or_default();
            *mine = (*mine).max(epoch);
        }
        self.max_seq = self.max_seq.max(other.max_seq);
        self.entries.extend(other.entries);
        self.checkpoints += other.checkpoints;
        self.unexpected.extend(other.unexpected);
    }

    /// `result`'s value, or `None` after a failure, kept as unexpected when the
    /// power was on.
    pub(crate) fn settle<T>(&mut self, result: StoreResult<T>, disk: &Disk, what: &str) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(err) => {
                if disk.is_on() {
                    self.unexpected.push(format!("{what} failed with the power on: {err}"));
                }
                None
            }
        }
    }
}

/// What the threads share besides the store.
struct Shared<'a> {
    store: &'a SqliteStore,
    disk: &'a Disk,
    clock: &'a Clock,
    stop: AtomicBool,
    /// Tasks enqueued and not claimed yet, roughly.
    waiting: AtomicI64,
}

/// Runs the threads, cuts the power `cut_after` from now, lets them run into
/// the dead disk and stop. The coordinator follows the ledger from sequence
/// number `cursor`; event labels start at `label`. Returns what the threads
/// acknowledged and saw, and the coordinator's ledger cursor.
pub(crate) fn run(
    store: &SqliteStore,
    disk: &Disk,
    clock: &Clock,
    rng: &mut Rng,
    cut_after: Duration,
    cursor: u64,
    label: u64,
) -> (Seen, u64) {
    let shared = Shared { store, disk, clock, stop: AtomicBool::new(false), waiting: AtomicI64::new(0) };
    let shared = &shared;
    let mut seen = Seen::default();
    let mut cursor = cursor;
    thread::scope(|s| {
        let mut producer_rng = rng.fork();
        let producer = s.spawn(move || produce(shared, &mut producer_rng, label));
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let mut worker_rng = rng.fork();
                let claimant =
                    Claimant { node_id: format!("n{w}"), session_id: format!("s{w}"), ..Claimant::default() };
                s.spawn(move || work(shared, &claimant, &mut worker_rng))
            })
            .collect();
        let mut follower_rng = rng.fork();
        let follower = s.spawn(move || coordinate(shared, &mut follower_rng, cursor));

        thread::sleep(cut_after);
        disk.cut();
        // Let the threads run into the dead disk before they stop.
        thread::sleep(Duration::from_millis(2));
        shared.stop.store(true, Ordering::Relaxed);

        seen.merge(producer.join().expect("the producer thread"));
        for worker in workers {
            seen.merge(worker.join().expect("a worker thread"));
        }
        let (follower_seen, follower_cursor) = follower.join().expect("the coordinator thread");
        seen.merge(follower_seen);
        cursor = follower_cursor;
    });
    (seen, cursor)
}

/// Enqueues tasks while few wait, and queues inbox events for the coordinator,
/// labelled from `label` on (each label makes its own fingerprint).
fn produce(shared: &Shared<'_>, rng: &mut Rng, mut label: u64) -> Seen {
    let Shared { store, disk, clock, .. } = *shared;
    let mut seen = Seen::default();
    let owner = owner();
    while !shared.stop.load(Ordering::Relaxed) {
        if rng.chance(0.7) && shared.waiting.load(Ordering::Relaxed) < MAX_WAITING {
            let new = NewTask { message: format!("task {label}"), ..NewTask::default() };
            let Some(task) = seen.settle(store.enqueue(MESH, &new, clock.now()), disk, "enqueue") else {
                break;
            };
            shared.waiting.fetch_add(1, Ordering::Relaxed);
            seen.acks.push(Ack::Enqueued { task: task.id });
        } else {
            let event = inbox_event(MESH, AGENT_GENERATING_COMPLETED, &format!("e{label}"), clock.now());
            let (event, hint) = targeted_at(event, &owner);
            let queued = store.queue_pending_event(MESH, &event, &hint, None, clock.now());
            match seen.settle(queued, disk, "queue_pending_event") {
                Some(QueueOutcome::Queued { id, .. }) => seen.acks.push(Ack::Queued { event: id }),
                Some(QueueOutcome::Duplicate(reason)) => {
                    seen.unexpected.push(format!("event e{label} refused as a duplicate ({reason:?})"));
                    break;
                }
                None => break,
            }
        }
        label += 1;
    }
    seen
}

/// Claims a task and completes it, alone or together with the next claim.
fn work(shared: &Shared<'_>, claimant: &Claimant, rng: &mut Rng) -> Seen {
    let Shared { store, disk, clock, .. } = *shared;
    let mut seen = Seen::default();
    let mut held: Option<Task> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(task) = held.take() else {
            let claim = store.claim_next(MESH, claimant, &LEASE, clock.now());
            match seen.settle(claim, disk, "claim") {
                Some(ClaimOutcome::Claimed(task)) => {
                    shared.waiting.fetch_sub(1, Ordering::Relaxed);
                    seen.claimed(&task);
                    held = Some(task);
                }
                Some(ClaimOutcome::Refused(_)) => thread::sleep(Duration::from_micros(200)),
                None => break,
            }
            continue;
        };
        let report = report(claimant, &task);
        if rng.chance(0.5) {
            let done = store.complete_task(MESH, &report, clock.now());
            let Some(done) = seen.settle(done, disk, "complete") else { break };
            seen.completed(&done);
        } else {
            let both = store.complete_and_claim(MESH, &report, claimant, &LEASE, clock.now());
            let Some((done, next)) = seen.settle(both, disk, "complete_and_claim") else { break };
            seen.completed(&done);
            if let ClaimOutcome::Claimed(next) = next {
                shared.waiting.fetch_sub(1, Ordering::Relaxed);
                seen.claimed(&next);
                held = Some(next);
            }
        }
    }
    seen
}

/// The coordinator: drains its inbox, follows the ledger by sequence from
/// `cursor`, reads the assigned tasks, checkpoints once in every other stretch.
/// Returns what it saw and its cursor.
fn coordinate(shared: &Shared<'_>, rng: &mut Rng, mut cursor: u64) -> (Seen, u64) {
    let Shared { store, disk, clock, .. } = *shared;
    let mut seen = Seen::default();
    let owner = owner();
    // Every other stretch checkpoints once, at a random moment.
    let started = Instant::now();
    let mut checkpoint_at =
        rng.chance(0.5).then(|| started + Duration::from_millis(rng.below(CHECKPOINT_WITHIN_MS)));
    while !shared.stop.load(Ordering::Relaxed) {
        if checkpoint_at.is_some_and(|at| Instant::now() >= at) {
            checkpoint_at = None;
            // The daemon's upkeep: a full checkpoint, which syncs the WAL, so
            // an unsynced mode keeps what was committed before it.
            let checkpointed = store.checkpoint_if_wal_exceeds(0);
            let Some(ran) = seen.settle(checkpointed, disk, "checkpoint") else { break };
            seen.checkpoints += usize::from(ran);
            continue;
        }
        match rng.below(10) {
            0..=3 => {
                let drained = store.drain_pending_events(MESH, &drain_request(&owner), clock.now());
                let Some(outcome) = seen.settle(drained, disk, "drain") else { break };
                for event in outcome.events {
                    seen.acks.push(Ack::Drained { event: event.id });
                }
            }
            4..=7 => {
                let query =
                    SliceQuery { after_seq: Some(cursor), limit: Some(PAGE), ..SliceQuery::default() };
                let Some(page) = seen.settle(store.ledger_slice(MESH, &query), disk, "ledger_slice") else {
                    break;
                };
                let numbers = [page.cursor.head_seq, page.cursor.next_after_seq];
                seen.max_seq = numbers.into_iter().flatten().fold(seen.max_seq, u64::max);
                seen.entries.extend(page.entries.into_iter().map(|e| e.id));
                cursor = page.cursor.next_after_seq.unwrap_or(cursor);
            }
            _ => {
                let assigned = store.queue_entries(MESH, &[TaskStatus::Assigned]);
                let Some(tasks) = seen.settle(assigned, disk, "queue_entries") else { break };
                for task in &tasks {
                    seen.task(task);
                }
            }
        }
    }
    (seen, cursor)
}

/// The coordinator the inbox events are for, and who drains them.
pub(crate) fn owner() -> CoordinatorIdentity {
    coordinator("powerloss-daemon", "run-1", Some("coord-1"))
}

/// `claimant`'s report that it completed `task`.
pub(crate) fn report(claimant: &Claimant, task: &Task) -> CompletionReport {
    CompletionReport {
        session_id: claimant.session_id.clone(),
        task_id: Some(task.id.clone()),
        epoch: Some(task.epoch()),
        occurred_at: None,
        outcome: Outcome::Completed { summary: Some("done".into()) },
    }
}

/// The store's clock: [`T0`] plus the real time since the run started.
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock(Instant::now())
    }

    pub(crate) fn now(&self) -> Timestamp {
        T0.plus_millis(i64::try_from(self.0.elapsed().as_millis()).unwrap_or(i64::MAX))
    }
}

/// SplitMix64: small and seedable, enough to pick moments and operations.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / ((1u64 << 53) as f64) < p
    }

    /// A generator of its own, for another thread.
    pub(crate) fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}
