//! Group `webhooks`, ours only: does webhook delivery keep up with the ledger?
//!
//! `webhook-delivery`: a real daemon (in this process, as in group `http`) with
//! one subscription to every ledger kind, sending to a receiver on loopback (an
//! axum server in this process that answers 204). [`CLIENTS`] HTTP clients each
//! run a mixed loop (enqueue a task, claim one, complete it: three ledger
//! entries) until N tasks are done. One op is one entry delivered: `ops_per_s`
//! is entries delivered per second, from the release of the clients to the
//! last delivery, and the percentiles are the entries' lag (from an entry's
//! ledger timestamp to its arrival at the receiver, in whole milliseconds).
//! `webhook-ledger-append` is the ledger's append rate under the same load
//! (the same entries over the load's own wall-clock time; its percentiles are
//! those of one loop of a client). Delivery keeps up when its rate is at least
//! the append rate; the check says whether it did. `webhook-unsubscribed-append`
//! is the append rate of the same load with no subscription: what delivering
//! costs the load when both share the machine's cores. `webhook-backlog` then
//! adds a subscription from the ledger's start to that store and times the
//! delivery of the whole ledger with nothing else running; `webhook-floor` is
//! one client posting as many bodies of a delivery's size to the same
//! receiver, one at a time, with the same client library (reqwest): the floor
//! of one subscription's in-order delivery on this machine.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentmesh_store::Store;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use super::http::{CLIENTS, Daemon, TOKEN, claimed_task, mesh_route, run_clients};
use super::http_client::HttpConn;
use crate::data::MESH_ID;
use crate::harness::{CaseStore, Harness, ledger_count};
use crate::timing::Timer;

/// How long the deliveries may trail the load before the case gives up.
const CATCH_UP: Duration = Duration::from_secs(120);

/// Runs group `webhooks`.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    h.run_case(&format!("webhook-delivery-{n}"), |h, store| delivery(h, store, n));
    h.run_case(&format!("webhook-unsubscribed-{n}"), |h, store| unsubscribed(h, store, n));
}

/// `webhook-unsubscribed`: the same load with no subscription, for what
/// delivering costs the load on the same machine.
fn unsubscribed(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let store: Arc<dyn Store> = Arc::clone(case.sqlite()) as Arc<dyn Store>;
    let m = runtime.block_on(measure(Arc::clone(&store), n, false))?;
    h.report("webhook-unsubscribed-append", n, m.entries, &Timer::concurrent(m.loops, m.load_wall));
    let (sent, backlog) = runtime.block_on(backlog(store))?;
    h.report("webhook-backlog", n, sent, &Timer::concurrent(Vec::new(), backlog));
    let floor = runtime.block_on(floor(sent))?;
    h.report("webhook-floor", n, sent, &Timer::concurrent(Vec::new(), floor));
    drop(runtime);
    eprintln!(
        "  {}: a backlog of {sent} entries delivered at {:.0}/s alone; one client posting as many \
         bodies to the same receiver, one at a time: {:.0}/s",
        case.label(),
        sent as f64 / backlog.as_secs_f64(),
        sent as f64 / floor.as_secs_f64()
    );
    Ok(())
}

/// `webhook-backlog`: a subscription added with `fromStart` after the load,
/// with nothing else running: entries delivered per second alone (the time
/// from the subscription to the last arrival).
async fn backlog(store: Arc<dyn Store>) -> anyhow::Result<(usize, Duration)> {
    let daemon = Daemon::start(Arc::clone(&store)).await?;
    let (hook, arrivals) = receiver().await?;
    let mut admin = HttpConn::connect(daemon.addr, TOKEN).await?;
    let began = Instant::now();
    let body = json!({ "url": format!("http://{hook}/hook"), "fromStart": true });
    let added = admin.post_json(&mesh_route("webhooks"), &body).await?;
    anyhow::ensure!(added["webhook"]["id"].is_string(), "the subscription was refused: {added}");
    let entries = usize::try_from(ledger_count(store.as_ref(), MESH_ID)?)?;
    while arrivals.lock().unwrap().len() < entries {
        anyhow::ensure!(began.elapsed() < CATCH_UP, "the backlog was not delivered");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let last = arrivals.lock().unwrap().iter().map(|(at, _, _)| *at).max().unwrap_or(began);
    daemon.stop().await?;
    Ok((entries, last.duration_since(began)))
}

/// `webhook-floor`: one client posting `n` bodies of a delivery's size to the
/// same receiver, one at a time, with the same HTTP client library: the
/// floor of one subscription's sequential delivery on this machine.
async fn floor(n: usize) -> anyhow::Result<Duration> {
    let (hook, arrivals) = receiver().await?;
    let client = reqwest::Client::builder().build()?;
    let entry = agentmesh_core::LedgerEntry {
        id: "01a24e62-f0a3-7000-81ec-522d72e92743".into(),
        mesh_id: MESH_ID.into(),
        timestamp: "2026-12-07T02:43:56.707Z".into(),
        kind: "task_completed".into(),
        node_id: Some("node-1".into()),
        session_id: Some("session-1".into()),
        provider_type: None,
        payload: json!({ "taskId": "w1-1", "summary": "done", "epoch": 1 }),
    };
    let body = serde_json::to_vec(&agentmesh_core::webhook::body(&entry, Some(7)))?;
    let url = format!("http://{hook}/hook");
    let began = Instant::now();
    for _ in 0..n {
        let answer = client.post(&url).body(body.clone()).send().await?;
        anyhow::ensure!(answer.status().is_success(), "the receiver answered {}", answer.status());
    }
    let took = began.elapsed();
    anyhow::ensure!(arrivals.lock().unwrap().len() == n, "the receiver missed requests");
    Ok(took)
}

/// Each request's arrival (an instant and the wall clock in milliseconds) and
/// the timestamp of the entry it carried.
type Arrivals = Arc<Mutex<Vec<(Instant, i64, Option<i64>)>>>;

/// The daemon's clock, in milliseconds: what ledger timestamps are read from.
fn wall_ms() -> i64 {
    agentmesh_daemon::now().millis()
}

/// A receiver on loopback answering 204 to every request.
async fn receiver() -> anyhow::Result<(SocketAddr, Arrivals)> {
    let seen: Arrivals = Arc::default();
    let kept = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let (at, ms) = (Instant::now(), wall_ms());
                let stamp = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v["timestamp"].as_str().and_then(agentmesh_core::Timestamp::parse_iso))
                    .map(|t| t.millis());
                kept.lock().unwrap().push((at, ms, stamp));
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, seen))
}

/// What one run measured.
struct Measured {
    entries: usize,
    load_wall: Duration,
    delivered_wall: Duration,
    lags: Vec<Duration>,
    loops: Vec<Duration>,
}

fn delivery(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let store: Arc<dyn Store> = Arc::clone(case.sqlite()) as Arc<dyn Store>;
    let m = runtime.block_on(measure(store, n, true))?;
    drop(runtime);
    h.report("webhook-delivery", n, m.entries, &Timer::concurrent(m.lags, m.delivered_wall));
    h.report("webhook-ledger-append", n, m.entries, &Timer::concurrent(m.loops, m.load_wall));
    let (delivered, appended) =
        (m.entries as f64 / m.delivered_wall.as_secs_f64(), m.entries as f64 / m.load_wall.as_secs_f64());
    eprintln!(
        "  {}: {} entries appended in {:.2} s ({appended:.0}/s), delivered by {:.2} s ({delivered:.0}/s): {:.2}x",
        case.label(),
        m.entries,
        m.load_wall.as_secs_f64(),
        m.delivered_wall.as_secs_f64(),
        delivered / appended
    );
    h.check(
        &format!("{}: delivery kept up with the ledger", case.label()),
        delivered >= appended * 0.95,
        format!("{delivered:.0} delivered/s against {appended:.0} appended/s"),
    );
    Ok(())
}

async fn measure(store: Arc<dyn Store>, n: usize, subscribe: bool) -> anyhow::Result<Measured> {
    let daemon = Daemon::start(Arc::clone(&store)).await?;
    let (hook, arrivals) = receiver().await?;
    if subscribe {
        let mut admin = HttpConn::connect(daemon.addr, TOKEN).await?;
        let body = json!({ "url": format!("http://{hook}/hook") });
        let added = admin.post_json(&mesh_route("webhooks"), &body).await?;
        anyhow::ensure!(added["webhook"]["id"].is_string(), "the subscription was refused: {added}");
    }
    let before = ledger_count(store.as_ref(), MESH_ID)?;
    let (addr, per_client) = (daemon.addr, n / CLIENTS);
    let began = Instant::now();
    let (runs, load_wall) =
        run_clients(CLIENTS, move |k, start| async move { mixed(k, addr, per_client, &start).await }).await?;
    let entries = usize::try_from(ledger_count(store.as_ref(), MESH_ID)? - before)?;
    let at_load_end = arrivals.lock().unwrap().len();
    loop {
        if !subscribe || arrivals.lock().unwrap().len() >= entries {
            break;
        }
        anyhow::ensure!(began.elapsed() < load_wall + CATCH_UP, "the deliveries did not catch up");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    daemon.stop().await?;
    let tail = began.elapsed().saturating_sub(load_wall);
    if subscribe {
        eprintln!(
            "  {at_load_end} of {entries} delivered when the load ended; the rest at {:.0}/s alone",
            (entries - at_load_end) as f64 / tail.as_secs_f64().max(1e-9)
        );
    }
    let seen = arrivals.lock().unwrap().clone();
    let last = seen.iter().map(|(at, _, _)| *at).max().unwrap_or(began);
    let lags = seen
        .iter()
        .filter_map(|(_, ms, stamp)| stamp.map(|s| Duration::from_millis(u64::try_from(ms - s).unwrap_or(0))))
        .collect();
    Ok(Measured {
        entries,
        load_wall,
        delivered_wall: last.duration_since(began),
        lags,
        loops: runs.into_iter().flatten().collect(),
    })
}

/// One client: enqueue, claim, complete, `tasks` times; each loop's time.
async fn mixed(k: usize, addr: SocketAddr, tasks: usize, start: &Barrier) -> anyhow::Result<Vec<Duration>> {
    let mut http = HttpConn::connect(addr, TOKEN).await?;
    let session = format!("session-{k}");
    let claim = json!({ "nodeId": format!("node-{k}"), "sessionId": session });
    let (enqueue, claims, completions) =
        (mesh_route("tasks"), mesh_route("claims"), mesh_route("completions"));
    let mut loops = Vec::with_capacity(tasks);
    start.wait().await;
    for i in 0..tasks {
        let began = Instant::now();
        let task = json!({ "id": format!("w{k}-{i}"), "message": "mixed load" });
        let queued = http.post_json(&enqueue, &task).await?;
        anyhow::ensure!(
            queued["status"] == "pending" || queued["task"].is_object(),
            "not enqueued: {queued}"
        );
        let Some((id, epoch)) = claimed_task(&http.post_json(&claims, &claim).await?)? else {
            anyhow::bail!("client {k} found nothing to claim");
        };
        let report = json!({ "sessionId": session, "taskId": id, "epoch": epoch, "summary": "done" });
        let done = http.post_json(&completions, &report).await?;
        anyhow::ensure!(done["status"] == "completed", "task {id} not completed: {done}");
        loops.push(began.elapsed());
    }
    Ok(loops)
}
