//! `http-floor` (group `http`, ours only): what the HTTP round trips of a
//! claim+complete pair cost on this machine with no store behind them.
//!
//! The daemon first answers one real claim and one real completion; their JSON
//! answers are kept. Then a bare axum server on `127.0.0.1:0` answers the same two
//! routes by decoding the JSON body and encoding the kept answer, and `CLIENTS`
//! clients (the `http-claim-complete` clients: `http_client::HttpConn`, one
//! keep-alive connection each, the same runtime) post claim → completion pairs
//! until N pairs are done. One op is one pair; set beside `http-claim-complete` and
//! `store-claim-complete`, it says how much of a pair is HTTP and how much is the
//! store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentmesh_store::Store;
use anyhow::Context as _;
use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use super::http::{CLIENTS, Daemon, TOKEN, mesh_route, run_clients};
use super::http_client::HttpConn;
use crate::data::{MESH_ID, UuidGen, new_task};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// Runs the case.
pub(crate) fn run(h: &mut Harness, n: usize) {
    h.run_case(&format!("http-floor-{n}"), |h, case| http_floor(h, case, n));
}

fn http_floor(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let id = UuidGen::new(0xe200).take(1).remove(0);
    case.store().enqueue(MESH_ID, &new_task(&id, 0, None), crate::data::at(0))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the Tokio runtime")?;
    let served: Arc<dyn Store> = Arc::clone(case.sqlite()) as Arc<dyn Store>;
    let (pairs, wall) = runtime.block_on(async move {
        let answers = real_answers(served).await?;
        floor_load(answers, n).await
    })?;
    drop(runtime);
    let done = pairs.len();
    h.report("http-floor", n, done, &Timer::concurrent(pairs, wall));
    h.check(&format!("{}: every pair answered", case.label()), done == n, format!("{done} of {n}"));
    Ok(())
}

/// The daemon's answers to one claim and its completion, as JSON.
async fn real_answers(store: Arc<dyn Store>) -> anyhow::Result<(Value, Value)> {
    let daemon = Daemon::start(store).await?;
    let mut http = HttpConn::connect(daemon.addr, TOKEN).await?;
    let claimed = http
        .post_json(&mesh_route("claims"), &json!({ "nodeId": "node-0", "sessionId": "session-0" }))
        .await?;
    let task = &claimed["task"];
    let report = json!({
        "sessionId": "session-0",
        "taskId": task["id"],
        "epoch": task["dispatchNonce"],
        "summary": "done",
    });
    let completed = http.post_json(&mesh_route("completions"), &report).await?;
    anyhow::ensure!(completed["status"] == "completed", "the task was not completed: {completed}");
    daemon.stop().await?;
    Ok((claimed, completed))
}

/// Serves the kept answers from a bare server and runs the clients until `n` pairs
/// are done. Returns each pair's latency and the wall-clock time of the load.
async fn floor_load(
    (claimed, completed): (Value, Value),
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let (claimed, completed) = (Arc::new(claimed), Arc::new(completed));
    let app = axum::Router::new()
        .route(
            &mesh_route("claims"),
            post(move |Json(_body): Json<Value>| {
                let answer = Arc::clone(&claimed);
                async move { Json(answer) }
            }),
        )
        .route(
            &mesh_route("completions"),
            post(move |Json(_body): Json<Value>| {
                let answer = Arc::clone(&completed);
                async move { Json(answer) }
            }),
        );
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.context("failed to bind 127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await
    });

    let left = Arc::new(AtomicUsize::new(n));
    let (runs, wall) = run_clients(CLIENTS, |k, start| {
        let left = Arc::clone(&left);
        async move { client(k, addr, &start, &left).await }
    })
    .await?;
    shutdown.cancel();
    server.await.context("the floor server task failed")?.context("the floor server failed")?;
    Ok((runs.into_iter().flatten().collect(), wall))
}

/// One client: claim → completion pairs while any of the `left` pairs remain.
async fn client(
    k: usize,
    addr: SocketAddr,
    start: &Barrier,
    left: &AtomicUsize,
) -> anyhow::Result<Vec<Duration>> {
    let mut http = HttpConn::connect(addr, TOKEN).await?;
    let session = format!("session-{k}");
    let claim = json!({ "nodeId": format!("node-{k}"), "sessionId": session });
    let (claims, completions) = (mesh_route("claims"), mesh_route("completions"));
    let mut pairs = Vec::new();
    start.wait().await;
    while left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1)).is_ok() {
        let began = Instant::now();
        let claimed = http.post_json(&claims, &claim).await?;
        let id = claimed["task"]["id"].as_str().context("the kept claim answer has no task id")?;
        let report = json!({ "sessionId": session, "taskId": id, "epoch": claimed["task"]["dispatchNonce"], "summary": "done" });
        let done = http.post_json(&completions, &report).await?;
        anyhow::ensure!(done["status"] == "completed", "the kept completion answer changed: {done}");
        pairs.push(began.elapsed());
    }
    Ok(pairs)
}
