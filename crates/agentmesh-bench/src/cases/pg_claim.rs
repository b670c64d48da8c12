//! Groups `pg-claim-depth` and `pg-throughput`: the PostgreSQL store under the
//! loop the peers of `bench/peers` run (a task is enqueued, claimed by exactly one
//! worker, and completed), with their case names and sizes so the lines join.
//!
//! `pg-claim-depth`, at depths N = 100, 10k, 100k and 1M (`--quick` stops at 100k):
//! the queue is filled with N tasks by `enqueue_batch`, 10,000 a call (the store's
//! own enqueue, every task with its ledger entry, so the fill costs what
//! production enqueues cost), then `VACUUM (ANALYZE)`d, as the peers do. Then one
//! worker session claims and completes one task at a time: 20 warm-up pairs, then
//! up to 1,000 timed pairs (200 under `--quick`) within 30 s (8 s), at least 5.
//! After each pair one more task is enqueued outside the clock, so every claim
//! sees N pending tasks. Three lines per depth:
//!
//! - `pg-claim-depth`: one claim + complete pair (joins the peers' fetch +
//!   complete sample);
//! - `pg-claim-depth-claim-only`: the `claim_next` call of the pair;
//! - `pg-claim-depth-complete-only`: the `complete_task` call of the pair.
//!
//! `pg-throughput`: N tasks (10,000; 5,000 under `--quick`, the peers' sizes) are
//! enqueued and the schema vacuumed; then K = 8 and 32 OS threads, one worker
//! session and node each, loop claim → complete until a claim finds no pending
//! task. `ops_per_s` is tasks per second over the wall-clock time of the whole
//! run, the percentiles are those of one pair. The loads:
//!
//! - `pg-claim-complete-K-clients`: one `PgStore` shared by the K threads, with a
//!   pool of K + 2 connections (one process, as the peers run their clients);
//! - `pg-claim-complete-K-clients-own-store`: every thread opens its own `PgStore`
//!   (its own pool, of which it uses one connection), as K daemons would;
//! - `pg-complete-and-claim-K-clients`: one shared `PgStore`, with the worker
//!   loop of this product (`POST .../complete-and-claim`): one claim, then one
//!   `complete_and_claim` per task, which reports the task done and claims the
//!   next in one transaction, until it claims nothing;
//! - `pg-claim-complete-K-meshes-1-client-each`: one shared `PgStore`, every
//!   thread on a mesh of its own holding N / K of the tasks (no write of one
//!   mesh waits for another's).
//!
//! `pg-http-claim-complete`: the `http` group's load (8 HTTP clients, claim then
//! complete over keep-alive connections) against a daemon serving one `PgStore`
//! with the default pool.
//!
//! `pg-task-writes-floor-K-clients`: the server's floor for the rows the loop
//! must write (see [`task_writes_floor`]), on the store's own schema, in the same
//! run: two transactions a task (a claim, a completion), `SKIP LOCKED` picking,
//! with 8 and 32 clients.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_core::{ClaimRefusal, TaskStatus};
use agentmesh_postgres::PgStore;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, Store};
use anyhow::Context as _;

use super::http::{self, ClientRun, Loop};
use super::{claimant, count_of, show_stats};
use crate::data::{MESH_ID, UuidGen, at, new_task};
use crate::harness::Harness;
use crate::pg::{self, PgCase};
use crate::timing::{Timer, released_together};

/// Tasks per `enqueue_batch` call when filling a queue (the peers fill 10,000 a call).
const FILL_BATCH: usize = 10_000;
/// Untimed pairs before the timed ones of a depth.
const WARMUP: usize = 20;
/// Timed pairs at least, whatever the time budget.
const MIN_SAMPLES: usize = 5;

/// Runs group `pg-claim-depth`.
pub(crate) fn run_depth(h: &mut Harness) {
    let quick = h.opts().quick;
    let depths = match &h.opts().pg_depths {
        Some(depths) => depths.clone(),
        None if quick => vec![100, 10_000, 100_000],
        None => vec![100, 10_000, 100_000, 1_000_000],
    };
    let (samples, budget) =
        if quick { (200, Duration::from_secs(8)) } else { (1_000, Duration::from_secs(30)) };
    for n in depths {
        pg::run_case(h, &format!("pg-claim-depth-{n}"), |h, case| claim_depth(h, case, n, samples, budget));
    }
}

/// Runs group `pg-throughput`.
pub(crate) fn run_throughput(h: &mut Harness) {
    let n = h.opts().pg_tasks.unwrap_or(if h.opts().quick { 5_000 } else { 10_000 });
    for clients in [8, 32] {
        for shape in [Shape::Shared, Shape::OwnStores, Shape::Combined, Shape::Meshes] {
            let name = shape.name(clients);
            pg::run_case(h, &format!("{name}-{n}"), |h, case| throughput(h, case, &name, n, clients, shape));
        }
    }
    pg::run_case(h, &format!("pg-http-claim-complete-{n}"), |h, case| http_claim_complete(h, case, n));
    for clients in [8, 32] {
        let name = format!("pg-task-writes-floor-{clients}-clients");
        pg::run_case(h, &format!("{name}-{n}"), |h, case| task_writes_floor(h, case, &name, n, clients));
    }
}

/// Fills the case's mesh with `n` untargeted tasks by `enqueue_batch`, then
/// vacuums the schema. Returns their ids in enqueue order.
fn fill(case: &PgCase, store: &dyn Store, ids: &mut UuidGen, n: usize) -> anyhow::Result<Vec<String>> {
    let created = ids.take(n);
    let began = Instant::now();
    let mut timer = Timer::default();
    super::enqueue_in_batches(store, n, FILL_BATCH, &mut timer, |i| new_task(&created[i], i, None))?;
    let took = began.elapsed().as_secs_f64();
    eprintln!(
        "  {}: filled {n} tasks in {took:.1}s ({:.0} tasks/s) with enqueue_batch, {FILL_BATCH} a call",
        case.label(),
        n as f64 / took.max(1e-9),
    );
    case.vacuum_analyze()?;
    Ok(created)
}

/// A completion of `task` by `session`.
fn report_for(session: &str, task: &agentmesh_core::Task) -> CompletionReport {
    CompletionReport {
        session_id: session.to_owned(),
        task_id: Some(task.id.clone()),
        epoch: Some(task.epoch()),
        occurred_at: None,
        outcome: Outcome::Completed { summary: Some("done".to_owned()) },
    }
}

fn claim_depth(
    h: &mut Harness,
    case: &PgCase,
    n: usize,
    samples: usize,
    budget: Duration,
) -> anyhow::Result<()> {
    let label = case.label();
    let store = case.open_store(2)?;
    let mut ids = UuidGen::new(0xd000 + n as u32);
    let mut created = fill(case, &store, &mut ids, n)?;

    let who = claimant("node-0".to_owned(), "session-0".to_owned());
    let (mut claims, mut completions, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
    let mut claimed = Vec::new();
    let mut refusals = Vec::new();
    let mut not_completed = 0;
    let mut seq = n;
    let began = Instant::now();
    let mut k = 0;
    while k < WARMUP + samples && (k < WARMUP + MIN_SAMPLES || began.elapsed() < budget) {
        let timed = k >= WARMUP;
        let claim_began = Instant::now();
        let outcome = store.claim_next(MESH_ID, &who, &ClaimOptions::default(), at(seq))?;
        let claim_took = claim_began.elapsed();
        let task = match outcome {
            ClaimOutcome::Claimed(task) => task,
            ClaimOutcome::Refused(reason) => {
                refusals.push(reason);
                break;
            }
        };
        let complete_began = Instant::now();
        let done = store.complete_task(MESH_ID, &report_for(&who.session_id, &task), at(seq + 1))?;
        let complete_took = complete_began.elapsed();
        if done.status != TaskStatus::Completed {
            not_completed += 1;
        }
        if timed {
            claims.push(claim_took);
            completions.push(complete_took);
            pairs.push(claim_took + complete_took);
        }
        claimed.push(task.id);
        let id = ids.next_id();
        store.enqueue(MESH_ID, &new_task(&id, seq, None), at(seq))?;
        created.push(id);
        seq += 2;
        k += 1;
    }
    let timed = pairs.len();
    if timed < samples {
        eprintln!("  {label}: the {}s budget cut the samples to {timed} of {samples}", budget.as_secs());
    }
    for (name, latencies) in [
        ("pg-claim-depth", pairs),
        ("pg-claim-depth-claim-only", claims),
        ("pg-claim-depth-complete-only", completions),
    ] {
        h.report(name, n, timed, &sequential(latencies));
    }

    h.check(
        &format!("{label}: every claim returned a task"),
        refusals.is_empty(),
        format!("refusals={refusals:?}"),
    );
    h.check(
        &format!("{label}: every completion completed its task"),
        not_completed == 0,
        format!("not completed={not_completed}"),
    );
    let distinct = claimed.iter().collect::<HashSet<_>>().len();
    h.check(
        &format!("{label}: claimed ids distinct"),
        distinct == claimed.len(),
        format!("{distinct} distinct of {}", claimed.len()),
    );
    let out_of_order = claimed.iter().zip(&created).filter(|(got, want)| got != want).count();
    h.check(
        &format!("{label}: FIFO by createdAt"),
        out_of_order == 0,
        format!("out-of-order={out_of_order}"),
    );
    let stats = store.stats_by_status(MESH_ID)?;
    let held = count_of(&stats, TaskStatus::Pending) == n as u64
        && count_of(&stats, TaskStatus::Completed) == claimed.len() as u64
        && count_of(&stats, TaskStatus::Assigned) == 0;
    h.check(&format!("{label}: depth held at N, every claim completed"), held, show_stats(&stats));
    Ok(())
}

/// A timer of calls made one after another: their time is their sum.
fn sequential(latencies: Vec<Duration>) -> Timer {
    let total = latencies.iter().sum();
    Timer::concurrent(latencies, total)
}

/// What one worker thread did: the tasks it completed and each pair's time.
type WorkerRun = ClientRun;

/// How a throughput load holds its stores and meshes.
#[derive(Clone, Copy)]
enum Shape {
    /// K threads on one store, claim then complete.
    Shared,
    /// K threads with a store each (K daemons), claim then complete.
    OwnStores,
    /// K threads on one store, the worker loop's `complete_and_claim`.
    Combined,
    /// K threads on one store, each on a mesh of its own, claim then complete.
    Meshes,
}

impl Shape {
    fn name(self, clients: usize) -> String {
        match self {
            Shape::Shared => format!("pg-claim-complete-{clients}-clients"),
            Shape::OwnStores => format!("pg-claim-complete-{clients}-clients-own-store"),
            Shape::Combined => format!("pg-complete-and-claim-{clients}-clients"),
            Shape::Meshes => format!("pg-claim-complete-{clients}-meshes-1-client-each"),
        }
    }
}

/// The mesh worker `k` of a `shape` load works in.
fn mesh_of(shape: Shape, k: usize) -> String {
    match shape {
        Shape::Meshes => format!("{MESH_ID}-{k}"),
        _ => MESH_ID.to_owned(),
    }
}

fn throughput(
    h: &mut Harness,
    case: &PgCase,
    name: &str,
    n: usize,
    clients: usize,
    shape: Shape,
) -> anyhow::Result<()> {
    let store = case.open_store(clients + 2)?;
    if let Shape::Meshes = shape {
        fill_meshes(case, &store, &mut UuidGen::new(0xd500 + n as u32), n, clients)?;
    } else {
        fill(case, &store, &mut UuidGen::new(0xd100 + n as u32), n)?;
    }
    // Every store is open (and its first connection made) before the clock starts.
    let own: Vec<PgStore> = match shape {
        Shape::OwnStores => (0..clients)
            .map(|_| {
                let store = case.open_store(agentmesh_postgres::DEFAULT_MAX_CONNECTIONS)?;
                store.probe_write()?;
                Ok(store)
            })
            .collect::<anyhow::Result<_>>()?,
        _ => Vec::new(),
    };
    let now = at(n);
    let stores: Vec<&PgStore> = (0..clients).map(|k| own.get(k).unwrap_or(&store)).collect();
    let (runs, wall) = released_together(stores, |k, store| match shape {
        Shape::Combined => combined_worker(store, k, now),
        _ => worker(store, &mesh_of(shape, k), k, now),
    });
    let what = match shape {
        Shape::OwnStores => format!("{clients} threads, each on its own store"),
        Shape::Meshes => {
            format!("{clients} threads on one store with a pool of {}, a mesh each", clients + 2)
        }
        _ => format!("{clients} threads on one store with a pool of {}", clients + 2),
    };
    let meshes: Vec<String> = match shape {
        Shape::Meshes => (0..clients).map(|k| mesh_of(shape, k)).collect(),
        _ => vec![MESH_ID.to_owned()],
    };
    finish(h, case, &store, &meshes, name, n, runs?, wall, &what)
}

/// Fills `meshes` meshes (`MESH_ID-0`, ...) with `n` untargeted tasks between
/// them, then vacuums the schema.
fn fill_meshes(
    case: &PgCase,
    store: &dyn Store,
    ids: &mut UuidGen,
    n: usize,
    meshes: usize,
) -> anyhow::Result<()> {
    let created = ids.take(n);
    for (k, chunk) in created.chunks(n.div_ceil(meshes)).enumerate() {
        let mesh = format!("{MESH_ID}-{k}");
        for (b, ids) in chunk.chunks(FILL_BATCH).enumerate() {
            let tasks: Vec<_> =
                ids.iter().enumerate().map(|(i, id)| new_task(id, b * FILL_BATCH + i, None)).collect();
            store.enqueue_batch(&mesh, &tasks, at(b * FILL_BATCH))?;
        }
    }
    case.vacuum_analyze()?;
    Ok(())
}

/// One worker session in `mesh`: claim → complete until a claim finds no
/// pending task.
fn worker(
    store: &PgStore,
    mesh: &str,
    k: usize,
    now: agentmesh_core::Timestamp,
) -> anyhow::Result<WorkerRun> {
    let who = claimant(format!("node-{k}"), format!("session-{k}"));
    let mut run = WorkerRun::default();
    loop {
        let began = Instant::now();
        let Some(task) = claimed(store.claim_next(mesh, &who, &ClaimOptions::default(), now)?, k)? else {
            return Ok(run);
        };
        let done = store.complete_task(mesh, &report_for(&who.session_id, &task), now)?;
        anyhow::ensure!(done.status == TaskStatus::Completed, "task {} not completed", task.id);
        run.pairs.push(began.elapsed());
        run.completed.push(task.id);
    }
}

/// One worker session: claim once, then complete → claim in one call until it
/// claims nothing. A pair's time is the call that completes its task (and
/// claims the next), plus the first claim for the first task.
fn combined_worker(store: &PgStore, k: usize, now: agentmesh_core::Timestamp) -> anyhow::Result<WorkerRun> {
    let who = claimant(format!("node-{k}"), format!("session-{k}"));
    let mut run = WorkerRun::default();
    let mut began = Instant::now();
    let mut next = store.claim_next(MESH_ID, &who, &ClaimOptions::default(), now)?;
    while let Some(task) = claimed(next, k)? {
        let report = report_for(&who.session_id, &task);
        let (done, outcome) =
            store.complete_and_claim(MESH_ID, &report, &who, &ClaimOptions::default(), now)?;
        anyhow::ensure!(done.status == TaskStatus::Completed, "task {} not completed", task.id);
        run.pairs.push(began.elapsed());
        run.completed.push(task.id);
        began = Instant::now();
        next = outcome;
    }
    Ok(run)
}

/// The task worker `k`'s claim got; `None` once no task is pending, and any
/// other refusal an error (each worker has a session and a node of its own).
fn claimed(outcome: ClaimOutcome, k: usize) -> anyhow::Result<Option<agentmesh_core::Task>> {
    match outcome {
        ClaimOutcome::Claimed(task) => Ok(Some(task)),
        ClaimOutcome::Refused(ClaimRefusal::NoPendingCandidates) => Ok(None),
        ClaimOutcome::Refused(other) => anyhow::bail!("session-{k}: claim refused: {other}"),
    }
}

/// Reports a load's pairs and checks that every task was claimed and completed
/// once and the queues of `meshes` are drained.
#[allow(clippy::too_many_arguments)]
fn finish(
    h: &mut Harness,
    case: &PgCase,
    store: &PgStore,
    meshes: &[String],
    name: &str,
    n: usize,
    runs: Vec<WorkerRun>,
    wall: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let label = case.label();
    let mut latencies = Vec::with_capacity(n);
    let mut completed = Vec::with_capacity(n);
    for run in runs {
        latencies.extend(run.pairs);
        completed.extend(run.completed);
    }
    let pairs = completed.len();
    h.report(name, n, pairs, &Timer::concurrent(latencies, wall));
    eprintln!("  {label}: {what}");
    let distinct = completed.iter().collect::<HashSet<_>>().len();
    h.check(
        &format!("{label}: every task claimed and completed once"),
        pairs == n && distinct == n,
        format!("{pairs} pairs, {distinct} distinct, of {n}"),
    );
    let mut stats = Vec::new();
    for mesh in meshes {
        stats.extend(store.stats_by_status(mesh)?);
    }
    let (done, pending) = stats.iter().fold((0, 0), |(d, p), s| match s.status {
        TaskStatus::Completed => (d + s.count, p),
        TaskStatus::Pending => (d, p + s.count),
        _ => (d, p),
    });
    h.check(
        &format!("{label}: queue drained, every task completed"),
        done == n as u64 && pending == 0,
        show_stats(&stats),
    );
    Ok(())
}

/// The claim of the write floor, in one statement: the first `{limit}` open pending
/// tasks taken with `SKIP LOCKED` (no mesh lock, no gate, no decision), their
/// rows rewritten as a claim rewrites one, and a `task_claimed` ledger entry
/// each. `$1` mesh, `$2` session, `$3` node, `$4` now, `$5` lease expiry, `$6`
/// the rewritten payload as stored (an open task's: its text), `$7` the ledger
/// entry's payload. Returns the tasks' ids. The limit is written out, not a
/// parameter: with it a parameter the server plans the statement anew for every
/// call (see the store's claim survey).
const FLOOR_CLAIM: &str = "WITH picked AS (
       SELECT mesh_id, id FROM mesh_queue
        WHERE mesh_id = $1 AND status = 'pending' AND hold = 0
          AND target_session_id IS NULL AND target_node_id IS NULL
        ORDER BY priority_rank DESC, created_at, row_id LIMIT {limit} FOR UPDATE SKIP LOCKED),
     taken AS (
       UPDATE mesh_queue q SET status = 'assigned', assigned_session_id = $2, assigned_node_id = $3,
              updated_at = $4, dispatch_ts = $4, epoch = q.epoch + 1, lease_expires_ms = $5, payload = $6
         FROM picked WHERE q.mesh_id = picked.mesh_id AND q.id = picked.id
       RETURNING q.id),
     entries AS (
       INSERT INTO mesh_event_ledger (mesh_id, id, timestamp, kind, node_id, session_id, payload)
       SELECT $1, gen_random_uuid()::text, $4, 'task_claimed', $3, $2, $7 FROM taken)
     SELECT id FROM taken";

/// The completion of the write floor, in one statement: the rows of the tasks
/// `$2` rewritten as a completion rewrites one, a `task_completed` ledger entry
/// each, and each one's coordinator event with its inbox queue entry. `$1`
/// mesh, `$3` session, `$4` now, `$5` the rewritten payload as stored (a
/// finished task's: packed), `$6` the event's payload as stored (packed when
/// that is shorter), `$7` the ledger entry's payload. Returns how many inbox
/// entries it wrote.
const FLOOR_COMPLETE: &str = "WITH done AS (
       UPDATE mesh_queue SET status = 'completed', updated_at = $4, lease_expires_ms = NULL, payload = $5
        WHERE mesh_id = $1 AND id = ANY($2) RETURNING id),
     entries AS (
       INSERT INTO mesh_event_ledger (mesh_id, id, timestamp, kind, session_id, payload)
       SELECT $1, gen_random_uuid()::text, $4, 'task_completed', $3, $7 FROM done),
     events AS (
       INSERT INTO mesh_pending_events (id, mesh_id, event, payload, queued_at, event_id, lane)
       SELECT gen_random_uuid()::text, $1, 'task_completed', $6, 0, gen_random_uuid()::text, ''
         FROM done
       RETURNING mesh_id, lane, queued_at, id, event, row_id)
     INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, event, event_row_id)
     SELECT mesh_id, lane, queued_at, id, event, row_id FROM events";

/// A store on the case's schema whose mesh holds `n` filled tasks (ids from
/// `seed`), with the payload a floor writes into a task row (one filled task's)
/// and the event it queues for a completion.
fn floor_queue(case: &PgCase, n: usize, seed: u32) -> anyhow::Result<(PgStore, String, String)> {
    let store = case.open_store(2)?;
    let created = fill(case, &store, &mut UuidGen::new(seed + n as u32), n)?;
    let sample = store.find_task(MESH_ID, &created[0])?.context("a filled task")?;
    let payload = serde_json::to_string(&sample)?;
    let event = format!("{{\"event\":\"task_completed\",\"taskId\":{:?},\"summary\":\"done\"}}", sample.id);
    Ok((store, payload, event))
}

/// `pg-task-writes-floor-K-clients`: the rows the store's claim + complete pair
/// writes for one task (the task row twice, two ledger entries, the event and
/// its inbox entry), on the store's own schema and indexes, by K threads with a
/// connection each. Each step is one autocommit statement: one round trip and
/// one durable commit, with none of the rules (no gates, no decision, no
/// advisory lock; the server's `SKIP LOCKED` alone keeps two workers off one
/// task). What this server allows for the store's writes done in two
/// transactions a task.
fn task_writes_floor(
    h: &mut Harness,
    case: &PgCase,
    name: &str,
    n: usize,
    clients: usize,
) -> anyhow::Result<()> {
    let per_statement = 1;
    let (store, payload, event) = floor_queue(case, n, 0xd300)?;
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut client = case.client()?;
        let claim = client.prepare(&FLOOR_CLAIM.replace("{limit}", &per_statement.to_string()))?;
        let complete = client.prepare(FLOOR_COMPLETE)?;
        conns.push((client, claim, complete));
    }
    // The payloads as the store keeps them: an open task's as its text, a
    // finished task's and an event's packed (see `agentmesh_store::packed`).
    let open: Vec<u8> = payload.as_bytes().to_vec();
    let finished = agentmesh_store::packed::pack(&payload).into_vec();
    let event = agentmesh_store::packed::pack(&event).into_vec();
    let (runs, wall) = released_together(conns, |k, (mut client, claim, complete)| {
        let (session, node) = (format!("session-{k}"), format!("node-{k}"));
        let (now, lease) = ("2026-01-01T00:00:00.000Z", 1_800_000_000_000i64);
        let mut run = WorkerRun::default();
        loop {
            let began = Instant::now();
            let ids: Vec<String> = client
                .query(&claim, &[&MESH_ID, &session, &node, &now, &lease, &open, &payload])?
                .iter()
                .map(|row| row.get(0))
                .collect();
            if ids.is_empty() {
                return Ok(run);
            }
            let done =
                client.execute(&complete, &[&MESH_ID, &ids, &session, &now, &finished, &event, &payload])?;
            anyhow::ensure!(done == ids.len() as u64, "{} tasks completed with {done} events", ids.len());
            let took = began.elapsed();
            run.pairs.extend(std::iter::repeat_n(took, ids.len()));
            run.completed.extend(ids);
        }
    });
    let what = format!(
        "{clients} threads, a connection each, two transactions a task: the store's writes without its rules"
    );
    finish(h, case, &store, &[MESH_ID.to_owned()], name, n, runs?, wall, &what)
}

fn http_claim_complete(h: &mut Harness, case: &PgCase, n: usize) -> anyhow::Result<()> {
    let store = Arc::new(case.open_store(agentmesh_postgres::DEFAULT_MAX_CONNECTIONS)?);
    fill(case, store.as_ref(), &mut UuidGen::new(0xd200 + n as u32), n)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the Tokio runtime")?;
    let served: Arc<dyn Store> = Arc::clone(&store) as Arc<dyn Store>;
    let (runs, wall) = runtime.block_on(http::load(served, Loop::Pairs, http::CLIENTS))?;
    drop(runtime);
    let what = format!(
        "{} HTTP clients against a daemon on one store with a pool of {}",
        http::CLIENTS,
        agentmesh_postgres::DEFAULT_MAX_CONNECTIONS
    );
    finish(h, case, &store, &[MESH_ID.to_owned()], "pg-http-claim-complete", n, runs, wall, &what)
}
