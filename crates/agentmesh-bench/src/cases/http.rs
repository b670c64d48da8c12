//! Group `http`: the daemon under load, ours only (the seed harness has no daemon).
//!
//! `http-claim-complete`: a real daemon (`agentmesh_daemon::serve` on `127.0.0.1:0`)
//! serves the case's store; N tasks are enqueued before the clock starts; then
//! `CLIENTS` concurrent HTTP clients, each one worker session with its own
//! keep-alive connection, loop claim → complete with the bearer token until a claim
//! finds the queue empty. One op is one claim+complete pair: `ops_per_s` is pairs
//! per second over the wall-clock time of the whole run, and the percentiles are
//! those of one pair as its client saw it (both requests, bodies decoded).
//! `http-claim-complete-unbatched` is the same with the store's group commit off,
//! every write committing on its own.
//!
//! `http-complete-and-claim` is the same work done the way a worker that chains
//! its tasks does it: after one first claim, each client sends one
//! `POST …/complete-and-claim` per task, which completes it and claims the next in
//! one transaction. One op is one task
//! claimed and completed, as above; its latency is that of the request that
//! completed it (the first task's also counts the first claim).
//!
//! `store-claim-complete` is the same load without HTTP: `CLIENTS` OS threads call
//! the store directly, one worker session each. It is the ceiling the daemon's
//! store sets on the HTTP case, and it shows what group commit gives writers that
//! arrive together.
//!
//! `http-claim-complete-32-clients` and `store-claim-complete-32-clients` are
//! `http-claim-complete` and `store-claim-complete` with [`MANY_CLIENTS`] clients
//! (threads) instead of `CLIENTS`. With `--durability=full` every commit is synced,
//! so these four cases say how much of the flush group commit hides when more
//! writers arrive together: read their throughput against the same cases of a
//! `--durability=process-crash-only` run.
//!
//! Clients and daemon share one Tokio runtime (a worker thread per core) and the
//! machine, as a daemon and its local workers would; the daemon submits claims and
//! completions to the store's combiner thread without holding a thread while they
//! wait, as it always does.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_core::{Claimant, TaskStatus};
use agentmesh_daemon::{ApiToken, AppState};
use agentmesh_sqlite::WriteStats;
use agentmesh_store::prelude::*;
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome, Store};
use anyhow::Context as _;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use super::http_client::HttpConn;
use super::{count_of, enqueue_in_batches, show_stats};
use crate::data::{MESH_ID, UuidGen, at, new_task};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// Concurrent HTTP clients (worker sessions).
pub(super) const CLIENTS: usize = 8;
/// Concurrent clients of the `-32-clients` cases.
const MANY_CLIENTS: usize = 32;
/// The daemon's token, for this run only.
pub(super) const TOKEN: &str = "bench0000000000000000000000000000000000000000000000000000000000";
/// Tasks per `enqueue_batch` call when filling the queue before the clock starts.
const PREFILL_BATCH: usize = 5_000;

/// Runs group `http`: the same load with group commit on, then off, then on the
/// store without HTTP, then over HTTP without the store (`http-floor`), then the
/// HTTP and store loads with [`MANY_CLIENTS`] clients.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(20_000);
    for (case, group_commit) in [("http-claim-complete", true), ("http-claim-complete-unbatched", false)] {
        h.run_case(&format!("{case}-{n}"), |h, store| {
            claim_complete(h, store, case, n, CLIENTS, group_commit, Loop::Pairs)
        });
    }
    let case = "http-complete-and-claim";
    h.run_case(&format!("{case}-{n}"), |h, store| {
        claim_complete(h, store, case, n, CLIENTS, true, Loop::Chained)
    });
    let case = "store-claim-complete";
    h.run_case(&format!("{case}-{n}"), |h, store| store_claim_complete(h, store, case, n, CLIENTS));
    super::http_floor::run(h, n);
    let case = "http-claim-complete-32-clients";
    h.run_case(&format!("{case}-{n}"), |h, store| {
        claim_complete(h, store, case, n, MANY_CLIENTS, true, Loop::Pairs)
    });
    let case = "store-claim-complete-32-clients";
    h.run_case(&format!("{case}-{n}"), |h, store| store_claim_complete(h, store, case, n, MANY_CLIENTS));
}

/// `store-claim-complete`: `clients` threads claim and complete on the store
/// directly until a claim finds the queue empty.
fn store_claim_complete(
    h: &mut Harness,
    case: &CaseStore,
    name: &'static str,
    n: usize,
    clients: usize,
) -> anyhow::Result<()> {
    let store = case.sqlite();
    let ids = UuidGen::new(0xe100 + n as u32).take(n);
    enqueue_in_batches(case.store(), n, PREFILL_BATCH, &mut Timer::default(), |i| {
        new_task(&ids[i], i, None)
    })?;
    let before = store.write_stats();
    let now = at(n);
    let began = Instant::now();
    let runs = std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|k| {
                s.spawn(move || -> anyhow::Result<ClientRun> {
                    let who = Claimant {
                        node_id: format!("node-{k}"),
                        session_id: format!("session-{k}"),
                        ..Claimant::default()
                    };
                    let mut run = ClientRun::default();
                    loop {
                        let pair = Instant::now();
                        let task = match store.claim_next(MESH_ID, &who, &ClaimOptions::default(), now)? {
                            ClaimOutcome::Claimed(task) => task,
                            ClaimOutcome::Refused(_) => return Ok(run),
                        };
                        let report = CompletionReport {
                            session_id: who.session_id.clone(),
                            task_id: Some(task.id.clone()),
                            epoch: Some(task.epoch()),
                            occurred_at: None,
                            outcome: Outcome::Completed { summary: Some("done".to_owned()) },
                        };
                        let done = store.complete_task(MESH_ID, &report, now)?;
                        anyhow::ensure!(
                            done.status == TaskStatus::Completed,
                            "task {} not completed",
                            task.id
                        );
                        run.pairs.push(pair.elapsed());
                        run.completed.push(task.id);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker thread panicked"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let wall = began.elapsed();
    let load = Load { name, who: "threads", clients, group_commit: true, runs, wall, before };
    finish(h, case, n, load)
}

/// What one client did: the tasks it completed and how long each pair took.
#[derive(Default)]
pub(super) struct ClientRun {
    pub(super) completed: Vec<String>,
    pub(super) pairs: Vec<Duration>,
}

/// How a client goes through its tasks.
#[derive(Clone, Copy)]
pub(super) enum Loop {
    /// A claim, then a completion: two requests per task.
    Pairs,
    /// One claim, then `complete-and-claim` per task: each request completes one
    /// task and claims the next.
    Chained,
}

fn claim_complete(
    h: &mut Harness,
    case: &CaseStore,
    name: &'static str,
    n: usize,
    clients: usize,
    group_commit: bool,
    shape: Loop,
) -> anyhow::Result<()> {
    let store = case.sqlite();
    store.set_group_commit(group_commit);
    let ids = UuidGen::new(0xe000 + n as u32).take(n);
    enqueue_in_batches(case.store(), n, PREFILL_BATCH, &mut Timer::default(), |i| {
        new_task(&ids[i], i, None)
    })?;
    let before = store.write_stats();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the Tokio runtime")?;
    let served: Arc<dyn Store> = Arc::clone(store) as Arc<dyn Store>;
    let (runs, wall) = runtime.block_on(load(served, shape, clients))?;
    drop(runtime);

    finish(h, case, n, Load { name, who: "clients", clients, group_commit, runs, wall, before })
}

/// A load run to the end: which case, what its workers did, and the store's write
/// counts before it.
struct Load {
    name: &'static str,
    /// What the workers are ("clients", "threads").
    who: &'static str,
    /// How many there are.
    clients: usize,
    group_commit: bool,
    runs: Vec<ClientRun>,
    wall: Duration,
    before: WriteStats,
}

/// Reports a load's pairs and checks that every task was claimed and completed
/// once and that commits were shared (or not) as group commit says.
fn finish(h: &mut Harness, case: &CaseStore, n: usize, load: Load) -> anyhow::Result<()> {
    let label = case.label();
    let stats = case.sqlite().write_stats();
    let (writes, commits) = (stats.writes - load.before.writes, stats.commits - load.before.commits);
    let mut latencies = Vec::with_capacity(n);
    let mut completed = Vec::with_capacity(n);
    for run in load.runs {
        latencies.extend(run.pairs);
        completed.extend(run.completed);
    }
    let pairs = completed.len();
    h.report(load.name, n, pairs, &Timer::concurrent(latencies, load.wall));
    eprintln!(
        "  {label}: {} {}, group commit {}; {writes} writes in {commits} commits ({:.2} writes per commit)",
        load.clients,
        load.who,
        if load.group_commit { "on" } else { "off" },
        writes as f64 / commits.max(1) as f64,
    );
    let distinct = completed.iter().collect::<HashSet<_>>().len();
    h.check(
        &format!("{label}: every task claimed and completed once"),
        pairs == n && distinct == n,
        format!("{pairs} pairs, {distinct} distinct, of {n}"),
    );
    let stats = case.store().stats_by_status(MESH_ID)?;
    h.check(
        &format!("{label}: queue drained, every task completed"),
        count_of(&stats, TaskStatus::Completed) == n as u64 && count_of(&stats, TaskStatus::Pending) == 0,
        show_stats(&stats),
    );
    if load.group_commit {
        h.check(&format!("{label}: concurrent writes shared commits"), commits < writes, "");
    } else {
        h.check(&format!("{label}: every write committed on its own"), commits == writes, "");
    }
    Ok(())
}

/// Serves `store` on `127.0.0.1:0` and runs `clients` clients against it until the
/// queue is empty. Returns what each client did and the wall-clock time of the load.
pub(super) async fn load(
    store: Arc<dyn Store>,
    shape: Loop,
    clients: usize,
) -> anyhow::Result<(Vec<ClientRun>, Duration)> {
    let daemon = Daemon::start(store).await?;
    let addr = daemon.addr;
    let (runs, wall) = run_clients(clients, |k, start| async move {
        match shape {
            Loop::Pairs => client(k, addr, &start).await,
            Loop::Chained => chained_client(k, addr, &start).await,
        }
    })
    .await?;
    daemon.stop().await?;
    Ok((runs, wall))
}

/// The path of a route of mesh `MESH_ID`: `/v1/meshes/MESH_ID/{route}`.
pub(super) fn mesh_route(route: &str) -> String {
    format!("/v1/meshes/{MESH_ID}/{route}")
}

/// A daemon serving a store on `127.0.0.1:0` in a task.
pub(super) struct Daemon {
    /// Where it listens.
    pub(super) addr: SocketAddr,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Daemon {
    pub(super) async fn start(store: Arc<dyn Store>) -> anyhow::Result<Daemon> {
        let state = AppState::new(store, ApiToken::new(TOKEN)?);
        let listener =
            tokio::net::TcpListener::bind("127.0.0.1:0").await.context("failed to bind 127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(agentmesh_daemon::serve(listener, state, shutdown.clone()));
        Ok(Daemon { addr, shutdown, server })
    }

    /// Shuts the daemon down and waits for it.
    pub(super) async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.server.await.context("the daemon task failed")?.context("the daemon failed")
    }
}

/// Spawns `clients` client tasks (`client(k, start)`), releases them together once
/// all are ready, and waits for every one. Returns their results and the
/// wall-clock time from the release to the end of the last.
pub(super) async fn run_clients<T, Client, Run>(
    clients: usize,
    client: Client,
) -> anyhow::Result<(Vec<T>, Duration)>
where
    T: Send + 'static,
    Client: Fn(usize, Arc<Barrier>) -> Run,
    Run: Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let start = Arc::new(Barrier::new(clients + 1));
    let tasks: Vec<_> = (0..clients).map(|k| tokio::spawn(client(k, Arc::clone(&start)))).collect();
    start.wait().await;
    let began = Instant::now();
    let mut results = Vec::with_capacity(clients);
    for client in tasks {
        results.push(client.await.context("a client task failed")??);
    }
    Ok((results, began.elapsed()))
}

/// One worker session: claim → complete until a claim returns no task.
async fn client(k: usize, addr: SocketAddr, start: &Barrier) -> anyhow::Result<ClientRun> {
    let mut http = HttpConn::connect(addr, TOKEN).await?;
    let session = format!("session-{k}");
    let claim = json!({ "nodeId": format!("node-{k}"), "sessionId": session });
    let (claims, completions) = (mesh_route("claims"), mesh_route("completions"));
    let mut run = ClientRun::default();
    start.wait().await;
    loop {
        let began = Instant::now();
        let Some((id, epoch)) = claimed_task(&http.post_json(&claims, &claim).await?)? else {
            return Ok(run);
        };
        let report = json!({ "sessionId": session, "taskId": id, "epoch": epoch, "summary": "done" });
        let done = http.post_json(&completions, &report).await?;
        anyhow::ensure!(done["status"] == "completed", "task {id} not completed: {done}");
        run.pairs.push(began.elapsed());
        run.completed.push(id);
    }
}

/// One worker session that chains its tasks: a first claim, then one
/// `complete-and-claim` per task until the claim half finds the queue empty. A
/// task's time is that of the request that completed it (the first task's also
/// counts the first claim).
async fn chained_client(k: usize, addr: SocketAddr, start: &Barrier) -> anyhow::Result<ClientRun> {
    let mut http = HttpConn::connect(addr, TOKEN).await?;
    let session = format!("session-{k}");
    let claim = json!({ "nodeId": format!("node-{k}"), "sessionId": session });
    let path = mesh_route("complete-and-claim");
    let mut run = ClientRun::default();
    start.wait().await;
    let began = Instant::now();
    let mut next = http.post_json(&mesh_route("claims"), &claim).await?;
    let mut first_claim = began.elapsed();
    while let Some((id, epoch)) = claimed_task(&next)? {
        let body = json!({
            "completion": { "sessionId": session, "taskId": id, "epoch": epoch, "summary": "done" },
            "claim": claim,
        });
        let began = Instant::now();
        let mut answer = http.post_json(&path, &body).await?;
        let took = began.elapsed();
        anyhow::ensure!(answer["completed"]["status"] == "completed", "task {id} not completed: {answer}");
        run.pairs.push(std::mem::take(&mut first_claim) + took);
        run.completed.push(id);
        next = answer["next"].take();
    }
    Ok(run)
}

/// The id and epoch of the task a claim answer hands out, or `None` when it names
/// why there is none.
pub(super) fn claimed_task(answer: &Value) -> anyhow::Result<Option<(String, u64)>> {
    let task = &answer["task"];
    if task.is_null() {
        anyhow::ensure!(answer["refusal"].is_string(), "a claim without a task gave no reason: {answer}");
        return Ok(None);
    }
    let id = task["id"].as_str().context("a claimed task without an id")?.to_owned();
    let epoch = task["dispatchNonce"].as_u64().context("a claimed task without an epoch")?;
    Ok(Some((id, epoch)))
}
