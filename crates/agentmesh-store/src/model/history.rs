//! The concurrent history check: several stores on one database (threads with a
//! store each, or processes) run random work on one mesh at once while a
//! follower pages the ledger by sequence the whole time; then what happened is
//! checked against the rules that must hold however the writes interleave.
//!
//! A backend's test calls [`seed`] once, runs [`worker`] on every store at once
//! and [`follow`] beside them, then [`settle`] and [`check`]. Workers report
//! what they were told as [`Record`]s (serializable, so a worker may be another
//! process that prints them).
//!
//! Checked, from the records, the final rows and the whole ledger in commit
//! order (its sequence):
//! - no task is held by two claimants at once, and a task is claimed only while
//!   pending;
//! - the per-(node, provider) cap is never exceeded, and a task that writes is
//!   never claimed on a node that runs another task;
//! - each task's fencing epochs strictly increase;
//! - every acknowledged write is there: an enqueued task, a claim and a
//!   completion with their entries at the epoch the worker was given;
//! - every task that ended (completed or failed) has its coordinator event
//!   delivered exactly once, and no event is delivered twice;
//! - the follower saw every committed entry exactly once, in sequence order,
//!   none skipped by a commit that landed behind its cursor.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::Drainer;
use agentmesh_core::{Claimant, LedgerEntry, NewTask, SliceQuery, Task, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ops::{COORDINATORS, coordinator};
use crate::{
    ClaimOptions, ClaimOutcome, CompletionReport, DrainRequest, Heartbeat, Outcome, Store, StoreError,
    StoreResult, TaskCommand,
};

/// What a run does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// The mesh every worker works in.
    pub mesh: String,
    /// How many workers run at once.
    pub workers: usize,
    /// Operations per worker.
    pub steps: usize,
    /// The run's seed (each worker's random choices derive from it).
    pub seed: u64,
    /// Lease of every claim, in milliseconds (short: some lapse and are reclaimed).
    pub lease_ms: i64,
    /// Every claimant's per-(node, provider) cap.
    pub cap: u32,
    /// Tasks enqueued before the workers start.
    pub initial_tasks: usize,
}

impl Plan {
    /// A plan for `workers` workers of `steps` operations each.
    pub fn new(mesh: &str, workers: usize, steps: usize, seed: u64) -> Plan {
        Plan { mesh: mesh.to_owned(), workers, steps, seed, lease_ms: 250, cap: 2, initial_tasks: 40 }
    }
}

/// An event a drain handed out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The row id.
    pub id: String,
    /// The event's name.
    pub name: String,
    /// The task its metadata names.
    pub task_id: Option<String>,
}

/// One operation as its worker saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The worker (`plan.workers` for the settling drains).
    pub worker: usize,
    /// `enqueue`, `claim`, `complete`, `fail`, `complete_and_claim`, `heartbeat`,
    /// `drain`, `reclaim` or `cancel`.
    pub op: String,
    /// Whether the store said it succeeded.
    pub ok: bool,
    /// The task it was about (for a completion that claimed: the completed one).
    pub task: Option<String>,
    /// The epoch the worker presented or was given.
    pub epoch: Option<u64>,
    /// A task claimed by it (a claim, or the claim of a completion that claimed).
    pub claimed: Option<(String, u64)>,
    /// Events a drain handed out.
    pub delivered: Vec<Delivered>,
    /// The error, when it failed.
    pub error: Option<String>,
}

impl Record {
    fn new(worker: usize, op: &str) -> Record {
        Record {
            worker,
            op: op.to_owned(),
            ok: false,
            task: None,
            epoch: None,
            claimed: None,
            delivered: Vec::new(),
            error: None,
        }
    }

    fn result<T>(mut self, result: &StoreResult<T>) -> Record {
        match result {
            Ok(_) => self.ok = true,
            Err(err) => self.error = Some(err.to_string()),
        }
        self
    }
}

/// A small, seedable random source (xorshift64*), so a run can be replayed
/// from its seed without a dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The wall clock, as the daemon's operations take it: workers on several
/// stores share real time, as daemons do.
#[allow(clippy::disallowed_methods, reason = "concurrent workers share real time, as daemons do")]
pub fn wall_clock() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_millis(ms)
}

/// The nodes workers run on: two forms of one machine and another machine.
const NODES: [&str; 3] = ["mach_A", "daemon_mach_A", "mach_B"];

fn claimant(plan: &Plan, worker: usize) -> Claimant {
    Claimant {
        node_id: NODES[worker % NODES.len()].to_owned(),
        session_id: format!("w{worker}"),
        capability_tags: Vec::new(),
        provider_type: Some("claude".to_owned()),
        provider_max_parallel: Some(plan.cap),
        node_is_worktree: false,
        transcript_profile: None,
        allowed_difficulties: None,
    }
}

fn new_task(id: String, deps: Vec<String>, coordinator_index: Option<usize>, readonly: bool) -> NewTask {
    let c = coordinator_index.map(|i| COORDINATORS[i]);
    NewTask {
        message: format!("work on {id}"),
        id: Some(id),
        depends_on: deps,
        readonly: readonly.then_some(true),
        source_coordinator_daemon_id: c.map(|c| c.0.to_owned()),
        source_coordinator_run_id: c.map(|c| c.1.to_owned()),
        source_coordinator_session_id: c.and_then(|c| c.2.map(str::to_owned)),
        ..NewTask::default()
    }
}

/// The ids of the tasks [`seed`] enqueues.
pub fn seeded_ids(plan: &Plan) -> Vec<String> {
    (0..plan.initial_tasks).map(|i| format!("s{i}")).collect()
}

/// Enqueues the plan's first tasks: some read-only, some depending on earlier
/// ones, most with a coordinator.
pub fn seed<S: Store + ?Sized>(store: &S, plan: &Plan) -> StoreResult<()> {
    let mut rng = Rng::new(plan.seed);
    let ids = seeded_ids(plan);
    let new: Vec<NewTask> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let deps = if i > 0 && rng.chance(30) {
                vec![ids[rng.below(i as u64) as usize].clone()]
            } else {
                Vec::new()
            };
            let c = rng.below(4) as usize;
            new_task(id.clone(), deps, (c < COORDINATORS.len()).then_some(c), rng.chance(20))
        })
        .collect();
    store.enqueue_batch(&plan.mesh, &new, wall_clock()).map(drop)
}

fn completion(worker: usize, task: &str, epoch: u64, failed: bool) -> CompletionReport {
    CompletionReport {
        session_id: format!("w{worker}"),
        task_id: Some(task.to_owned()),
        epoch: Some(epoch),
        occurred_at: None,
        outcome: if failed {
            Outcome::Failed { reason: "it broke".to_owned(), summary: None }
        } else {
            Outcome::Completed { summary: Some(format!("done by w{worker}")) }
        },
    }
}

fn delivered(events: &[crate::InboxEvent]) -> Vec<Delivered> {
    events
        .iter()
        .map(|e| Delivered {
            id: e.id.clone(),
            name: e.name.clone(),
            task_id: e
                .event
                .parse()
                .get("metadataEvent")
                .and_then(|m| m.get("taskId"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
        .collect()
}

fn drain_request(c: usize, limit: u32) -> DrainRequest {
    DrainRequest {
        drainer: Drainer::new(coordinator(c), &[]),
        only_events: None,
        enforce: false,
        limit: Some(limit),
    }
}

/// One worker's run: claims, completes (or fails, heartbeats, abandons) what it
/// holds, enqueues, drains as a coordinator, reaps lapsed leases and cancels,
/// chosen at random from the plan's seed. Returns what it was told.
pub fn worker<S: Store + ?Sized>(store: &S, plan: &Plan, index: usize) -> Vec<Record> {
    let mut rng = Rng::new(plan.seed ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let me = claimant(plan, index);
    let opts = ClaimOptions { lease_ms: Some(plan.lease_ms) };
    let mesh = plan.mesh.as_str();
    let mut known = seeded_ids(plan);
    let mut held: Option<(String, u64)> = None;
    let mut records = Vec::with_capacity(plan.steps);
    for step in 0..plan.steps {
        let now = wall_clock();
        let record = if let Some((task, epoch)) = held.clone() {
            let roll = rng.below(100);
            if roll < 55 {
                held = None;
                let mut r = Record::new(index, "complete");
                r.task = Some(task.clone());
                r.epoch = Some(epoch);
                r.result(&store.complete_task(mesh, &completion(index, &task, epoch, false), now))
            } else if roll < 75 {
                held = None;
                let mut r = Record::new(index, "complete_and_claim");
                r.task = Some(task.clone());
                r.epoch = Some(epoch);
                let result =
                    store.complete_and_claim(mesh, &completion(index, &task, epoch, false), &me, &opts, now);
                if let Ok((_, ClaimOutcome::Claimed(next))) = &result {
                    held = Some((next.id.clone(), next.epoch()));
                    r.claimed = held.clone();
                }
                r.result(&result)
            } else if roll < 85 {
                held = None;
                let mut r = Record::new(index, "fail");
                r.task = Some(task.clone());
                r.epoch = Some(epoch);
                r.result(&store.complete_task(mesh, &completion(index, &task, epoch, true), now))
            } else if roll < 95 {
                let mut r = Record::new(index, "heartbeat");
                r.task = Some(task.clone());
                r.epoch = Some(epoch);
                r.result(&store.heartbeat(
                    mesh,
                    &Heartbeat::new(&task, &me.session_id, epoch, plan.lease_ms),
                    now,
                ))
            } else {
                // Walk away: the lease lapses and a reaper takes the task back.
                held = None;
                continue;
            }
        } else {
            let roll = rng.below(100);
            if roll < 55 {
                let mut r = Record::new(index, "claim");
                let result = store.claim_next(mesh, &me, &opts, now);
                if let Ok(ClaimOutcome::Claimed(t)) = &result {
                    held = Some((t.id.clone(), t.epoch()));
                    r.claimed = held.clone();
                    r.task = Some(t.id.clone());
                    r.epoch = Some(t.epoch());
                }
                r.result(&result)
            } else if roll < 68 {
                let id = format!("w{index}-{step}");
                let deps = if rng.chance(40) {
                    vec![known[rng.below(known.len() as u64) as usize].clone()]
                } else {
                    Vec::new()
                };
                let c = rng.below(4) as usize;
                let mut r = Record::new(index, "enqueue");
                r.task = Some(id.clone());
                let result = store.enqueue(
                    mesh,
                    &new_task(id.clone(), deps, (c < COORDINATORS.len()).then_some(c), rng.chance(20)),
                    now,
                );
                if result.is_ok() {
                    known.push(id);
                }
                r.result(&result)
            } else if roll < 85 {
                let mut r = Record::new(index, "drain");
                let result = store.drain_pending_events(
                    mesh,
                    &drain_request(index % COORDINATORS.len(), 1 + rng.below(4) as u32),
                    now,
                );
                if let Ok(out) = &result {
                    r.delivered = delivered(&out.events);
                }
                r.result(&result)
            } else if roll < 97 {
                match store.expired_leases(now) {
                    Ok(expired) => {
                        for (m, task) in expired.into_iter().filter(|(m, _)| m == mesh) {
                            let mut r = Record::new(index, "reclaim");
                            let result = store.reclaim_if_lease_expired(&m, &task, now);
                            r.task = Some(task);
                            r.ok = matches!(result, Ok(Some(_)));
                            r.error = result.err().map(|e| e.to_string());
                            records.push(r);
                        }
                        continue;
                    }
                    Err(err) => Record { error: Some(err.to_string()), ..Record::new(index, "reap") },
                }
            } else {
                let task = known[rng.below(known.len() as u64) as usize].clone();
                let mut r = Record::new(index, "cancel");
                r.task = Some(task.clone());
                r.result(&store.task_command(
                    mesh,
                    &task,
                    TaskCommand::Cancel { reason: Some("changed plans") },
                    now,
                ))
            }
        };
        records.push(record);
        if rng.chance(30) {
            std::thread::sleep(std::time::Duration::from_micros(200 + rng.below(800)));
        }
    }
    records
}

/// The settling drains after the workers stopped: each coordinator drains until
/// nothing is left for it.
pub fn settle<S: Store + ?Sized>(store: &S, plan: &Plan) -> Vec<Record> {
    let mut records = Vec::new();
    // A coordinator's drain can leave events for another that it takes over
    // later (re-attribution), so the coordinators drain in turn, three times.
    for _ in 0..3 {
        for c in 0..COORDINATORS.len() {
            loop {
                let mut r = Record::new(plan.workers, "drain");
                let result = store.drain_pending_events(&plan.mesh, &drain_request(c, 100), wall_clock());
                let empty = result.as_ref().map_or(true, |out| out.events.is_empty());
                if let Ok(out) = &result {
                    r.delivered = delivered(&out.events);
                }
                records.push(r.result(&result));
                if empty {
                    break;
                }
            }
        }
    }
    records
}

/// Pages the mesh's ledger by sequence until `stop` is set and a page after it
/// came back with nothing more: every entry it was handed, in order.
pub fn follow<S: Store + ?Sized>(
    store: &S,
    mesh: &str,
    stop: &AtomicBool,
) -> Result<Vec<LedgerEntry>, String> {
    let mut seen = Vec::new();
    let mut seq = 0u64;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let page = read_page(store, mesh, seq)?;
        seen.extend(page.entries.iter().cloned());
        // The cursor is a place in the page order, handed back as it came: with
        // writers not in one order it need not grow as a number.
        seq = page.cursor.next_after_seq.ok_or("a page by sequence without nextAfterSeq")?;
        if !page.cursor.has_more {
            if stopping {
                return Ok(seen);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

fn read_page<S: Store + ?Sized>(
    store: &S,
    mesh: &str,
    seq: u64,
) -> Result<agentmesh_core::LedgerSlice, String> {
    let query = SliceQuery { after_seq: Some(seq), limit: Some(37), ..SliceQuery::default() };
    for _ in 0..100 {
        match store.ledger_slice(mesh, &query) {
            Ok(page) => return Ok(page),
            Err(StoreError::Busy) => std::thread::sleep(std::time::Duration::from_millis(2)),
            Err(err) => return Err(format!("a ledger page failed: {err}")),
        }
    }
    Err("the ledger stayed busy".to_owned())
}

/// What a checked run did, for the test's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records of operations the store acknowledged.
    pub acknowledged: usize,
    /// Claims acknowledged.
    pub claims: usize,
    /// Tasks that ended completed or failed.
    pub ended: usize,
    /// Events delivered.
    pub delivered: usize,
    /// Ledger entries.
    pub entries: usize,
    /// Entries the follower saw while the workers ran (before they stopped).
    pub followed: usize,
}

/// Checks a run (see the module's list). `followed` is what [`follow`] saw.
pub fn check<S: Store + ?Sized>(
    store: &S,
    plan: &Plan,
    records: &[Record],
    followed: &[LedgerEntry],
) -> Result<Summary, String> {
    let mesh = plan.mesh.as_str();
    let never = AtomicBool::new(true);
    let ledger = follow(store, mesh, &never)?;
    let tasks: BTreeMap<String, Task> = store
        .queue_entries(mesh, &[])
        .map_err(|e| format!("the tasks could not be read: {e}"))?
        .into_iter()
        .map(|t| (t.id.clone(), t))
        .collect();
    let mut errors = Vec::new();

    // The follower saw exactly the committed ledger, in sequence order.
    let ids = |list: &[LedgerEntry]| list.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
    let (saw, all) = (ids(followed), ids(&ledger));
    if saw != all {
        let seen: BTreeSet<&String> = saw.iter().collect();
        let missing: Vec<&String> = all.iter().filter(|id| !seen.contains(id)).take(5).collect();
        errors.push(format!(
            "the follower saw {} entries, the ledger holds {}; missing (first 5): {missing:?}; same order: {}",
            saw.len(),
            all.len(),
            saw.iter().filter(|id| all.contains(id)).eq(all.iter().filter(|id| seen.contains(id)))
        ));
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    if distinct.len() != all.len() {
        errors.push("the ledger paged by sequence hands out an entry twice".to_owned());
    }

    replay(&ledger, &tasks, plan, &mut errors);
    acknowledged(records, &ledger, &tasks, &mut errors);
    let ended = events(records, &ledger, &mut errors);

    if errors.is_empty() {
        Ok(Summary {
            acknowledged: records.iter().filter(|r| r.ok).count(),
            claims: records.iter().filter(|r| r.ok && r.claimed.is_some()).count(),
            ended,
            delivered: records.iter().map(|r| r.delivered.len()).sum(),
            entries: ledger.len(),
            followed: followed.len(),
        })
    } else {
        errors.truncate(20);
        Err(errors.join("\n"))
    }
}

fn payload_epoch(e: &LedgerEntry) -> Option<u64> {
    e.payload.get("epoch").and_then(Value::as_u64)
}

fn task_of(e: &LedgerEntry) -> Option<&str> {
    e.payload.get("taskId").and_then(Value::as_str)
}

fn node_key(node: &str) -> String {
    machine_core(node).unwrap_or(node).to_owned()
}

/// Replays the ledger in commit order: holders, caps, busy nodes, epochs.
fn replay(ledger: &[LedgerEntry], tasks: &BTreeMap<String, Task>, plan: &Plan, errors: &mut Vec<String>) {
    use agentmesh_core::ledger::kinds;
    // task -> (node key, provider) of its holder
    let mut holder: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
    let mut epochs: BTreeMap<String, u64> = BTreeMap::new();
    for (seq, e) in ledger.iter().enumerate() {
        let Some(task) = task_of(e).map(str::to_owned) else { continue };
        match e.kind.as_str() {
            kinds::TASK_CLAIMED => {
                if let Some(h) = holder.get(&task) {
                    errors.push(format!("entry {seq}: {task} claimed while {h:?} holds it"));
                }
                let epoch = payload_epoch(e).unwrap_or(0);
                let last = epochs.get(&task).copied().unwrap_or(0);
                if epoch <= last {
                    errors.push(format!("entry {seq}: {task} claimed at epoch {epoch} after epoch {last}"));
                }
                epochs.insert(task.clone(), epoch);
                let node = node_key(e.node_id.as_deref().unwrap_or(""));
                let provider = e.provider_type.clone();
                let on_node: Vec<&String> =
                    holder.iter().filter(|(_, (n, _))| *n == node).map(|(t, _)| t).collect();
                let writes = tasks.get(&task).is_none_or(|t| !t.is_readonly());
                if writes && !on_node.is_empty() {
                    errors.push(format!(
                        "entry {seq}: {task} (writes) claimed on busy node {node} running {on_node:?}"
                    ));
                }
                let same_provider = holder.values().filter(|(n, p)| *n == node && *p == provider).count();
                if provider.is_some() && same_provider + 1 > plan.cap as usize {
                    errors.push(format!("entry {seq}: {task} claimed past the cap {} on {node}", plan.cap));
                }
                holder.insert(task, (node, provider));
            }
            kinds::TASK_COMPLETED | kinds::TASK_FAILED => {
                let via_requeue = !holder.contains_key(&task);
                if !via_requeue && payload_epoch(e) != epochs.get(&task).copied() {
                    errors.push(format!(
                        "entry {seq}: {task} ended at epoch {:?}, held at {:?}",
                        payload_epoch(e),
                        epochs.get(&task)
                    ));
                }
                holder.remove(&task);
            }
            kinds::TASK_RECLAIMED | kinds::TASK_CANCELLED | kinds::TASK_REQUEUED => {
                holder.remove(&task);
            }
            _ => {}
        }
    }
}

/// Every acknowledged write is in the ledger (and the rows).
fn acknowledged(
    records: &[Record],
    ledger: &[LedgerEntry],
    tasks: &BTreeMap<String, Task>,
    errors: &mut Vec<String>,
) {
    use agentmesh_core::ledger::kinds;
    let has = |kind: &str, task: &str, epoch: Option<u64>| {
        ledger.iter().any(|e| {
            e.kind == kind && task_of(e) == Some(task) && (epoch.is_none() || payload_epoch(e) == epoch)
        })
    };
    let mut claims = BTreeSet::new();
    for r in records.iter().filter(|r| r.ok) {
        let task = r.task.as_deref().unwrap_or("");
        match r.op.as_str() {
            "enqueue" if !tasks.contains_key(task) || !has(kinds::TASK_DISPATCHED, task, None) => {
                errors.push(format!("acknowledged enqueue of {task} is missing"));
            }
            "complete" | "complete_and_claim" if !has(kinds::TASK_COMPLETED, task, r.epoch) => {
                errors.push(format!("acknowledged completion of {task} at epoch {:?} is missing", r.epoch));
            }
            "fail" if !has(kinds::TASK_FAILED, task, r.epoch) => {
                errors.push(format!("acknowledged failure of {task} at epoch {:?} is missing", r.epoch));
            }
            "reclaim" if !has(kinds::TASK_RECLAIMED, task, None) => {
                errors.push(format!("acknowledged reclaim of {task} is missing"));
            }
            _ => {}
        }
        if let Some((task, epoch)) = &r.claimed {
            if !claims.insert((task.clone(), *epoch)) {
                errors.push(format!("{task} at epoch {epoch} was handed to two claims"));
            }
            let session = format!("w{}", r.worker);
            let recorded = ledger.iter().any(|e| {
                e.kind == kinds::TASK_CLAIMED
                    && task_of(e) == Some(task)
                    && payload_epoch(e) == Some(*epoch)
                    && e.session_id.as_deref() == Some(session.as_str())
            });
            if !recorded {
                errors.push(format!("acknowledged claim of {task} at epoch {epoch} by {session} is missing"));
            }
        }
    }
}

/// Every ended task's event delivered exactly once; no event twice. Returns how
/// many tasks ended.
fn events(records: &[Record], ledger: &[LedgerEntry], errors: &mut Vec<String>) -> usize {
    use agentmesh_core::ledger::kinds;
    let mut ended: BTreeMap<String, usize> = BTreeMap::new();
    for e in ledger {
        let failed_for_good = e.kind == kinds::TASK_RECLAIMED
            && e.payload.get("outcome").and_then(Value::as_str) == Some("failed");
        if e.kind == kinds::TASK_COMPLETED || e.kind == kinds::TASK_FAILED || failed_for_good {
            *ended.entry(task_of(e).unwrap_or("").to_owned()).or_default() += 1;
        }
    }
    let mut rows = BTreeSet::new();
    let mut per_task: BTreeMap<String, usize> = BTreeMap::new();
    for d in records.iter().flat_map(|r| &r.delivered) {
        if !rows.insert(d.id.clone()) {
            errors.push(format!("event {} ({}) was delivered twice", d.id, d.name));
        }
        if let Some(task) = &d.task_id {
            *per_task.entry(task.clone()).or_default() += 1;
        }
    }
    for (task, n) in &ended {
        if *n != 1 {
            errors.push(format!("{task} ended {n} times"));
        }
        match per_task.get(task).copied().unwrap_or(0) {
            1 => {}
            k => errors.push(format!("the end of {task} was delivered {k} times")),
        }
    }
    for task in per_task.keys() {
        if !ended.contains_key(task) {
            errors.push(format!("an event about {task} was delivered, but it never ended"));
        }
    }
    ended.len()
}
