//! `/metrics`: the daemon's counters in the Prometheus text exposition format.
//!
//! [`Metrics`] is a small registry written for exactly the series the daemon
//! exports; no metrics crate is pulled in for a dozen series. Counters are
//! incremented where the thing happens: [`track`] (a middleware around every
//! route) counts HTTP requests and times them, the claim, completion, heartbeat,
//! drain and watch handlers count their outcomes, the upkeep loops count their
//! reclaims and passes, and their supervisor its restarts. The queue depth and the age of the oldest pending
//! task are not counted but read from the store at scrape time, for every mesh
//! this daemon has answered a request for (and its own MCP mesh from the start);
//! the `process_*` figures are read from `/proc` then too (`process.rs`).
//!
//! Every label value the daemon knows in advance (claim outcomes, task statuses,
//! fencing codes, drain kinds, reclaim outcomes, the upkeep jobs it runs) is
//! exported at zero from the start, so a rate or an alert over a series works
//! before its first increment. Only the HTTP series, keyed by route, method and
//! status, appear with their first request.
//!
//! The names follow Prometheus's conventions as `promtool check metrics` checks
//! them: counters end in `_total`, no name carries its type or an abbreviated
//! unit, and every family has its `# HELP` and `# TYPE` lines.
//!
//! Every map sits behind a `std::sync::Mutex`: each critical section is a map
//! update of a few nanoseconds, never held across an `.await`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use agentmesh_core::events::{DrainCounter, DrainCounters};
use agentmesh_core::{ClaimRefusal, TaskStatus, Timestamp};
use agentmesh_store::Durability;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;
use crate::process::ProcessStats;

/// Upper bounds (seconds) of the request-latency histogram's buckets. The top
/// ones are there for watches, which wait by design.
const LATENCY_BUCKETS: [f64; 14] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// At most this many meshes are remembered for the queue-depth gauges and the
/// per-mesh sweeps; later ones are served but not tracked.
const MAX_TRACKED_MESHES: usize = 10_000;

/// The route label of a request no route matched.
const UNMATCHED_ROUTE: &str = "unmatched";

/// The claim outcome of a claim that got a task; the others are refusal reasons.
const CLAIMED: &str = "claimed";

/// The operations whose fencing refusals are counted.
const FENCED_OPERATIONS: [&str; 2] = ["completion", "heartbeat"];

/// The codes of the store errors counted as fencing refusals (the ones the API's
/// completion and heartbeat handlers pass to [`Metrics::fencing_refusal`]).
const FENCING_CODES: [&str; 3] = ["stale_epoch", "not_assigned_to_session", "invalid_transition"];

/// The kinds of drain requests counted.
const DRAIN_KINDS: [&str; 2] = ["drain", "watch"];

/// What a lease reclaim does to its task.
const RECLAIM_OUTCOMES: [&str; 2] = ["requeued", "failed"];

/// The kinds of rows `agentmesh_archived_total` counts, each from zero.
const ARCHIVED_KINDS: [&str; 2] = ["tasks", "ledger_entries"];

/// The outcomes `agentmesh_reservations_total` counts, each from zero.
const RESERVATION_OUTCOMES: [&str; 2] = ["granted", "denied"];

/// The results `agentmesh_webhook_attempts_total` counts, each from zero.
const WEBHOOK_RESULTS: [&str; 2] = ["delivered", "failed"];

/// The version `agentmesh_build_info` reports.
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit `agentmesh_build_info` reports: `HEAD` of the repository the daemon
/// was built in (12 hex digits), `$AGENTMESH_BUILD_COMMIT` at build time, or
/// `unknown` (see `build.rs`).
pub const BUILD_COMMIT: &str = env!("AGENTMESH_BUILD_COMMIT");
/// What `agentmesh --version` prints after the program's name: the version and,
/// in parentheses, [`BUILD_COMMIT`].
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("AGENTMESH_BUILD_COMMIT"), ")");

/// One HTTP series: a route, a method and a status.
type HttpKey = (String, String, u16);

/// Request count and latency histogram of one HTTP series.
#[derive(Debug, Default, Clone)]
struct HttpStats {
    /// Requests per bucket (not cumulative; summed when rendered).
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum_secs: f64,
}

/// The daemon's counters. Shared by every handler and loop through `AppState`.
#[derive(Debug)]
pub struct Metrics {
    http: Mutex<BTreeMap<HttpKey, HttpStats>>,
    /// Claims by outcome: `claimed`, or the refusal reason.
    claims: Mutex<BTreeMap<String, u64>>,
    /// Completions and failures accepted, by the task's new status.
    completions: Mutex<BTreeMap<&'static str, u64>>,
    /// Completions and heartbeats refused by the fencing check, by operation and code.
    fencing_refusals: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// Drain and watch requests answered, by kind.
    drains: Mutex<BTreeMap<&'static str, u64>>,
    /// Events handed to drainers.
    delivered_events: AtomicU64,
    /// The v2 drain counters summed over every drain the daemon ran.
    drain_counters: Mutex<DrainCounters>,
    /// Watches waiting right now.
    watches_waiting: AtomicU64,
    /// Tasks the lease reaper reclaimed, by outcome (`requeued`, `failed`).
    lease_reclaims: Mutex<BTreeMap<&'static str, u64>>,
    archived: Mutex<BTreeMap<&'static str, u64>>,
    /// Path reservation requests answered, by outcome (`granted`, `denied`).
    reservations: Mutex<BTreeMap<&'static str, u64>>,
    /// Webhook requests made, by result (`delivered`, `failed`).
    webhook_attempts: Mutex<BTreeMap<&'static str, u64>>,
    /// Upkeep passes, by job and result (`ok`, `error`).
    upkeep_passes: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// Meshes this daemon answered a request for (or reclaimed a lease in).
    meshes: Mutex<BTreeSet<String>>,
    /// Background loops restarted after a panic, by loop.
    background_restarts: Mutex<BTreeMap<&'static str, u64>>,
    /// Requests the store failed for a fault of the system, by error code.
    store_faults: Mutex<BTreeMap<&'static str, u64>>,
}

/// The codes of the store's faults, counted from zero: what a fault of the
/// system (not of the request) answers.
const FAULT_CODES: [&str; 6] =
    ["busy", "lock_timeout", "unavailable", "storage_full", "database_error", "corrupt_row"];

/// Locks a registry map; a panic elsewhere never poisons the counters for good.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// A map with each of `keys` at zero.
fn zeros<K: Ord>(keys: impl IntoIterator<Item = K>) -> Mutex<BTreeMap<K, u64>> {
    Mutex::new(keys.into_iter().map(|key| (key, 0)).collect())
}

impl Metrics {
    /// A registry with every label value known in advance at zero.
    pub fn new() -> Metrics {
        let outcomes = std::iter::once(CLAIMED).chain(ClaimRefusal::ALL.map(ClaimRefusal::as_str));
        let fencing = FENCED_OPERATIONS
            .into_iter()
            .flat_map(|op| FENCING_CODES.into_iter().map(move |code| (op, code)));
        Metrics {
            http: Mutex::default(),
            claims: zeros(outcomes.map(str::to_owned)),
            completions: zeros([TaskStatus::Completed.as_str(), TaskStatus::Failed.as_str()]),
            fencing_refusals: zeros(fencing),
            drains: zeros(DRAIN_KINDS),
            delivered_events: AtomicU64::default(),
            drain_counters: Mutex::default(),
            watches_waiting: AtomicU64::default(),
            lease_reclaims: zeros(RECLAIM_OUTCOMES),
            archived: zeros(ARCHIVED_KINDS),
            reservations: zeros(RESERVATION_OUTCOMES),
            webhook_attempts: zeros(WEBHOOK_RESULTS),
            upkeep_passes: Mutex::default(),
            background_restarts: Mutex::default(),
            meshes: Mutex::default(),
            store_faults: zeros(FAULT_CODES),
        }
    }

    /// Counts a request the store failed for a fault of the system, by its code.
    pub fn store_fault(&self, code: &'static str) {
        *lock(&self.store_faults).entry(code).or_default() += 1;
    }

    /// Counts one HTTP request and its latency.
    pub fn observe_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let mut http = lock(&self.http);
        let stats = http.entry((route.to_owned(), method.to_owned(), status)).or_default();
        if let Some(slot) = LATENCY_BUCKETS.iter().position(|bound| seconds <= *bound) {
            stats.buckets[slot] += 1;
        }
        stats.count += 1;
        stats.sum_secs += seconds;
    }

    /// Counts a claim: the task claimed, or why nothing was. Every known outcome
    /// is in the map from the start, so a claim allocates nothing.
    pub fn claim(&self, refusal: Option<&str>) {
        let outcome = refusal.unwrap_or(CLAIMED);
        let mut claims = lock(&self.claims);
        match claims.get_mut(outcome) {
            Some(n) => *n += 1,
            None => {
                claims.insert(outcome.to_owned(), 1);
            }
        }
    }

    /// Counts an accepted completion or failure, by the task's new status.
    pub fn completion(&self, status: TaskStatus) {
        *lock(&self.completions).entry(status.as_str()).or_default() += 1;
    }

    /// Counts a completion or heartbeat the fencing check refused.
    pub fn fencing_refusal(&self, operation: &'static str, code: &'static str) {
        *lock(&self.fencing_refusals).entry((operation, code)).or_default() += 1;
    }

    /// Counts one store drain: its delivered events and its v2 counters.
    pub fn drained(&self, delivered: usize, counters: &DrainCounters) {
        self.delivered_events.fetch_add(delivered as u64, Ordering::Relaxed);
        lock(&self.drain_counters).merge(counters);
    }

    /// Counts a drain or watch request answered.
    pub fn drain_request(&self, kind: &'static str) {
        *lock(&self.drains).entry(kind).or_default() += 1;
    }

    /// Marks a watch as waiting until the returned guard is dropped.
    pub fn watch_waiting(&self) -> WaitingWatch<'_> {
        self.watches_waiting.fetch_add(1, Ordering::Relaxed);
        WaitingWatch(self)
    }

    /// Counts a path reservation request's answer.
    pub fn reservation(&self, granted: bool) {
        *lock(&self.reservations).entry(if granted { "granted" } else { "denied" }).or_default() += 1;
    }

    /// Counts a lease reclaim, by whether the task was requeued or failed.
    pub fn lease_reclaim(&self, outcome: &'static str) {
        *lock(&self.lease_reclaims).entry(outcome).or_default() += 1;
    }

    /// Counts rows the retention moved to the archive.
    pub fn archived(&self, tasks: u64, ledger_entries: u64) {
        let mut archived = lock(&self.archived);
        *archived.entry("tasks").or_default() += tasks;
        *archived.entry("ledger_entries").or_default() += ledger_entries;
    }

    /// Exports an upkeep job's passes at zero (both results), before its first pass.
    pub fn upkeep_job(&self, job: &'static str) {
        let mut passes = lock(&self.upkeep_passes);
        for result in ["ok", "error"] {
            passes.entry((job, result)).or_default();
        }
    }

    /// Counts a webhook request's result.
    pub fn webhook_attempt(&self, delivered: bool) {
        *lock(&self.webhook_attempts).entry(if delivered { "delivered" } else { "failed" }).or_default() += 1;
    }

    /// Counts an upkeep pass.
    pub fn upkeep_pass(&self, job: &'static str, ok: bool) {
        *lock(&self.upkeep_passes).entry((job, if ok { "ok" } else { "error" })).or_default() += 1;
    }

    /// Counts a background loop's restart after a panic.
    pub fn background_restart(&self, name: &'static str) {
        *lock(&self.background_restarts).entry(name).or_default() += 1;
    }

    /// Remembers a mesh (for the queue-depth gauges and the per-mesh sweeps).
    pub fn note_mesh(&self, mesh: &str) {
        let mut meshes = lock(&self.meshes);
        if meshes.len() < MAX_TRACKED_MESHES && !meshes.contains(mesh) {
            meshes.insert(mesh.to_owned());
        }
    }

    /// The meshes remembered so far, in order.
    pub fn meshes(&self) -> Vec<String> {
        lock(&self.meshes).iter().cloned().collect()
    }

    /// The whole exposition: the process and build figures, then `depth` (per
    /// mesh, read from the store at scrape time), then the counters.
    fn render(&self, process: &ProcessStats, durability: Option<Durability>, depth: &[MeshDepth]) -> String {
        let mut out = String::with_capacity(8192);

        render_process(&mut out, process);
        family(
            &mut out,
            "agentmesh_build_info",
            "gauge",
            "Always 1; the labels name the version and the commit the daemon was built from.",
        );
        sample(&mut out, "agentmesh_build_info", &[("version", BUILD_VERSION), ("commit", BUILD_COMMIT)], 1);
        if let Some(mode) = durability {
            family(
                &mut out,
                "agentmesh_store_durability_info",
                "gauge",
                "Always 1; the mode label says what an acknowledged write survives (full: a power loss; \
                 process-crash-only: a crash of the process).",
            );
            sample(&mut out, "agentmesh_store_durability_info", &[("mode", mode.as_str())], 1);
        }

        family(&mut out, "agentmesh_tasks", "gauge", "Tasks by mesh and status.");
        for mesh in depth {
            for (status, count) in &mesh.tasks {
                sample(&mut out, "agentmesh_tasks", &[("mesh", &mesh.mesh), ("status", status)], *count);
            }
        }
        family(&mut out, "agentmesh_pending_events", "gauge", "Undrained coordinator events by mesh.");
        for mesh in depth {
            sample(&mut out, "agentmesh_pending_events", &[("mesh", &mesh.mesh)], mesh.pending_events);
        }
        family(
            &mut out,
            "agentmesh_oldest_pending_task_age_seconds",
            "gauge",
            "Seconds since the oldest pending task of the mesh was enqueued (tasks waiting for \
             dependencies included); 0 when none is pending.",
        );
        for mesh in depth {
            let labels = [("mesh", mesh.mesh.as_str())];
            sample_f64(
                &mut out,
                "agentmesh_oldest_pending_task_age_seconds",
                &labels,
                mesh.oldest_pending_age,
            );
        }
        family(
            &mut out,
            "agentmesh_webhooks",
            "gauge",
            "Webhook subscriptions by mesh and state (failing: waiting for webhook resume or skip).",
        );
        for mesh in depth {
            for (state, n) in [("active", mesh.webhooks[0]), ("failing", mesh.webhooks[1])] {
                sample(&mut out, "agentmesh_webhooks", &[("mesh", &mesh.mesh), ("state", state)], n);
            }
        }

        family(
            &mut out,
            "agentmesh_claims_total",
            "counter",
            "Claims, by outcome (claimed or the refusal reason).",
        );
        for (outcome, n) in lock(&self.claims).iter() {
            sample(&mut out, "agentmesh_claims_total", &[("outcome", outcome)], *n);
        }
        family(&mut out, "agentmesh_completions_total", "counter", "Completions and failures accepted.");
        for (status, n) in lock(&self.completions).iter() {
            sample(&mut out, "agentmesh_completions_total", &[("status", status)], *n);
        }
        family(
            &mut out,
            "agentmesh_fencing_refusals_total",
            "counter",
            "Completions and heartbeats refused (stale epoch, wrong session, not assigned).",
        );
        for ((operation, code), n) in lock(&self.fencing_refusals).iter() {
            sample(
                &mut out,
                "agentmesh_fencing_refusals_total",
                &[("operation", operation), ("code", code)],
                *n,
            );
        }

        family(
            &mut out,
            "agentmesh_store_faults_total",
            "counter",
            "Requests the store failed for a fault of the system, by code (busy, lock_timeout, unavailable, ...).",
        );
        for (code, n) in lock(&self.store_faults).iter() {
            sample(&mut out, "agentmesh_store_faults_total", &[("code", code)], *n);
        }

        family(&mut out, "agentmesh_drains_total", "counter", "Drain and watch requests answered.");
        for (kind, n) in lock(&self.drains).iter() {
            sample(&mut out, "agentmesh_drains_total", &[("kind", kind)], *n);
        }
        family(&mut out, "agentmesh_delivered_events_total", "counter", "Events handed to drainers.");
        sample(
            &mut out,
            "agentmesh_delivered_events_total",
            &[],
            self.delivered_events.load(Ordering::Relaxed),
        );
        family(
            &mut out,
            "agentmesh_drain_decisions_total",
            "counter",
            "Events routed by drains, by routing decision (the v2 drain counters, summed over every drain).",
        );
        let counters = *lock(&self.drain_counters);
        for counter in DrainCounter::ALL {
            sample(
                &mut out,
                "agentmesh_drain_decisions_total",
                &[("decision", counter.as_str())],
                counters.get(counter),
            );
        }
        family(&mut out, "agentmesh_watches_waiting", "gauge", "Watches waiting for an event now.");
        sample(&mut out, "agentmesh_watches_waiting", &[], self.watches_waiting.load(Ordering::Relaxed));

        family(
            &mut out,
            "agentmesh_lease_reclaims_total",
            "counter",
            "Tasks reclaimed after their lease ran out.",
        );
        for (outcome, n) in lock(&self.lease_reclaims).iter() {
            sample(&mut out, "agentmesh_lease_reclaims_total", &[("outcome", outcome)], *n);
        }
        family(
            &mut out,
            "agentmesh_archived_total",
            "counter",
            "Rows the retention policy moved to the archive, by kind.",
        );
        for (kind, n) in lock(&self.archived).iter() {
            sample(&mut out, "agentmesh_archived_total", &[("kind", kind)], *n);
        }
        family(
            &mut out,
            "agentmesh_reservations_total",
            "counter",
            "Path reservation requests answered, by outcome.",
        );
        for (outcome, n) in lock(&self.reservations).iter() {
            sample(&mut out, "agentmesh_reservations_total", &[("outcome", outcome)], *n);
        }
        family(
            &mut out,
            "agentmesh_webhook_attempts_total",
            "counter",
            "Webhook requests this daemon made, by result (a 2xx is delivered).",
        );
        for (result, n) in lock(&self.webhook_attempts).iter() {
            sample(&mut out, "agentmesh_webhook_attempts_total", &[("result", result)], *n);
        }
        family(
            &mut out,
            "agentmesh_upkeep_passes_total",
            "counter",
            "Background upkeep passes, by job and result.",
        );
        for ((job, result), n) in lock(&self.upkeep_passes).iter() {
            sample(&mut out, "agentmesh_upkeep_passes_total", &[("job", job), ("result", result)], *n);
        }
        family(
            &mut out,
            "agentmesh_background_restarts_total",
            "counter",
            "Background loops restarted after a panic, by loop.",
        );
        let restarts = lock(&self.background_restarts).clone();
        for name in crate::upkeep::loop_names() {
            let n = restarts.get(name).copied().unwrap_or(0);
            sample(&mut out, "agentmesh_background_restarts_total", &[("loop", name)], n);
        }

        let http = lock(&self.http).clone();
        family(
            &mut out,
            "agentmesh_http_requests_total",
            "counter",
            "HTTP requests, by route, method and status.",
        );
        for ((route, method, status), stats) in &http {
            let status = status.to_string();
            let labels =
                [("route", route.as_str()), ("method", method.as_str()), ("status", status.as_str())];
            sample(&mut out, "agentmesh_http_requests_total", &labels, stats.count);
        }
        family(
            &mut out,
            "agentmesh_http_request_duration_seconds",
            "histogram",
            "HTTP request latency, by route, method and status.",
        );
        for ((route, method, status), stats) in &http {
            let status = status.to_string();
            let labels =
                [("route", route.as_str()), ("method", method.as_str()), ("status", status.as_str())];
            let mut cumulative = 0;
            for (bound, n) in LATENCY_BUCKETS.iter().zip(stats.buckets) {
                cumulative += n;
                let le = bound.to_string();
                let with_le = [labels[0], labels[1], labels[2], ("le", le.as_str())];
                sample(&mut out, "agentmesh_http_request_duration_seconds_bucket", &with_le, cumulative);
            }
            let with_inf = [labels[0], labels[1], labels[2], ("le", "+Inf")];
            sample(&mut out, "agentmesh_http_request_duration_seconds_bucket", &with_inf, stats.count);
            sample_f64(&mut out, "agentmesh_http_request_duration_seconds_sum", &labels, stats.sum_secs);
            sample(&mut out, "agentmesh_http_request_duration_seconds_count", &labels, stats.count);
        }
        out
    }
}

/// A watch counted as waiting; dropping it (on return or cancellation) uncounts it.
#[derive(Debug)]
pub struct WaitingWatch<'a>(&'a Metrics);

impl Drop for WaitingWatch<'_> {
    fn drop(&mut self) {
        self.0.watches_waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Queue depth of one mesh, read at scrape time.
#[derive(Debug)]
struct MeshDepth {
    mesh: String,
    tasks: Vec<(&'static str, u64)>,
    pending_events: u64,
    /// Seconds since the oldest pending task was enqueued; 0 when none is pending.
    oldest_pending_age: f64,
    /// Webhook subscriptions delivering and failing.
    webhooks: [u64; 2],
}

/// Writes the `process_*` families, each only when its figure could be read.
fn render_process(out: &mut String, process: &ProcessStats) {
    if let Some(seconds) = process.cpu_seconds {
        family(
            out,
            "process_cpu_seconds_total",
            "counter",
            "CPU time the process has used, user and system together, in seconds.",
        );
        sample_f64(out, "process_cpu_seconds_total", &[], seconds);
    }
    if let Some(bytes) = process.resident_memory_bytes {
        family(
            out,
            "process_resident_memory_bytes",
            "gauge",
            "Memory the process holds in RAM (its resident set), in bytes.",
        );
        sample(out, "process_resident_memory_bytes", &[], bytes);
    }
    if let Some(bytes) = process.virtual_memory_bytes {
        family(
            out,
            "process_virtual_memory_bytes",
            "gauge",
            "Size of the process's virtual address space, in bytes.",
        );
        sample(out, "process_virtual_memory_bytes", &[], bytes);
    }
    if let Some(count) = process.open_fds {
        family(out, "process_open_fds", "gauge", "File descriptors the process has open.");
        sample(out, "process_open_fds", &[], count);
    }
    if let Some(limit) = process.max_fds {
        family(
            out,
            "process_max_fds",
            "gauge",
            "The most file descriptors the process may open (its soft limit).",
        );
        sample(out, "process_max_fds", &[], limit);
    }
    if let Some(seconds) = process.start_time_seconds {
        family(
            out,
            "process_start_time_seconds",
            "gauge",
            "When the process started, in seconds since the Unix epoch.",
        );
        sample_f64(out, "process_start_time_seconds", &[], seconds);
    }
}

/// Writes a family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample line.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    let _ = writeln!(out, "{name}{} {value}", label_set(labels));
}

/// Writes one sample line with a fractional value (Rust prints a finite `f64`
/// without an exponent, which every exposition parser reads).
fn sample_f64(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    let _ = writeln!(out, "{name}{} {value}", label_set(labels));
}

/// `{a="x",b="y"}`, values escaped as the format requires; empty without labels.
fn label_set(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut out = String::from("{");
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
    out
}

/// Middleware around every route: counts and times each request under its
/// route template (`/v1/meshes/{mesh}/claims`, never the concrete path, so the
/// series stay few), and remembers the mesh of every request answered 2xx.
pub(crate) async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req.extensions().get::<MatchedPath>().map_or(UNMATCHED_ROUTE, MatchedPath::as_str).to_owned();
    // Standard methods by name, anything else as one series: a client must not be
    // able to add series by inventing methods.
    let method = match *req.method() {
        Method::GET
        | Method::POST
        | Method::PUT
        | Method::DELETE
        | Method::HEAD
        | Method::OPTIONS
        | Method::PATCH => req.method().as_str(),
        _ => "other",
    }
    .to_owned();
    let mesh = mesh_of_path(req.uri().path());
    let response = next.run(req).await;
    let status = response.status();
    if status.is_success()
        && let Some(mesh) = mesh
    {
        state.metrics.note_mesh(&mesh);
    }
    state.metrics.observe_request(&route, &method, status.as_u16(), started.elapsed().as_secs_f64());
    response
}

/// The mesh id of a `/v1/meshes/{mesh}/...` path, percent-decoded.
pub(crate) fn mesh_of_path(path: &str) -> Option<String> {
    let segment = path.strip_prefix("/v1/meshes/")?.split('/').next()?;
    let decoded = percent_decode(segment)?;
    (!decoded.trim().is_empty()).then_some(decoded)
}

/// Decodes `%XX` escapes; `None` for a malformed escape or invalid UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `GET /metrics`: the exposition. The figures of every remembered mesh are read
/// on the blocking pool, one store call per mesh and figure (each an index
/// lookup), and the process figures beside them. A store that cannot be read
/// leaves the mesh figures out (the fault is counted): the rest is answered.
pub(crate) async fn render(State(state): State<AppState>) -> Result<Response, ApiError> {
    let meshes = state.metrics.meshes();
    let now = crate::now();
    let read = state
        .with_mesh(move |api| {
            let store = api.store();
            let durability = store.profile().durability;
            let mut depth = Vec::with_capacity(meshes.len());
            for mesh in meshes {
                let counts = store.stats_by_status(&mesh)?;
                let tasks = TaskStatus::ALL
                    .into_iter()
                    .map(|status| {
                        (status.as_str(), counts.iter().find(|c| c.status == status).map_or(0, |c| c.count))
                    })
                    .collect();
                let pending_events = store.pending_event_count(&mesh)?;
                let oldest = store.oldest_pending_created_at(&mesh)?;
                let oldest_pending_age = oldest.map_or(0.0, |since| age_seconds(since, now));
                let mut webhooks = [0u64; 2];
                for hook in store.webhooks(Some(&mesh))? {
                    webhooks[usize::from(hook.state == agentmesh_core::WebhookState::Failing)] += 1;
                }
                depth.push(MeshDepth { mesh, tasks, pending_events, oldest_pending_age, webhooks });
            }
            Ok((Some(durability), depth))
        })
        .await;
    let (durability, depth) = match read {
        Ok(read) => read,
        Err(err @ ApiError::Internal(_)) => return Err(err),
        Err(err) => {
            tracing::debug!(error = %err, "the mesh figures of /metrics could not be read");
            (None, Vec::new())
        }
    };
    let process = tokio::task::spawn_blocking(ProcessStats::read)
        .await
        .map_err(|join| ApiError::Internal(format!("the process figures could not be read: {join}")))?;
    let body = state.metrics.render(&process, durability, &depth);
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// Seconds from `since` to `now`, never negative (a task enqueued by a process
/// whose clock runs ahead is zero seconds old, not minus some).
fn age_seconds(since: Timestamp, now: Timestamp) -> f64 {
    (now.millis().saturating_sub(since.millis())).max(0) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label_set(&[("mesh", "a\"b\\c\nd")]), r#"{mesh="a\"b\\c\nd"}"#);
        assert_eq!(label_set(&[]), "");
    }

    #[test]
    fn the_histogram_is_cumulative_and_ends_in_inf() {
        let metrics = Metrics::new();
        metrics.observe_request("/r", "GET", 200, 0.002);
        metrics.observe_request("/r", "GET", 200, 0.2);
        metrics.observe_request("/r", "GET", 200, 500.0);
        let text = metrics.render(&ProcessStats::default(), Some(Durability::Full), &[]);
        let bucket = |le: &str| {
            let prefix = format!(
                "agentmesh_http_request_duration_seconds_bucket{{route=\"/r\",method=\"GET\",status=\"200\",le=\"{le}\"}} "
            );
            let line =
                text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {le} in {text}"));
            line[prefix.len()..].parse::<u64>().unwrap()
        };
        assert_eq!(
            (bucket("0.001"), bucket("0.005"), bucket("0.25"), bucket("120"), bucket("+Inf")),
            (0, 1, 2, 2, 3)
        );
        assert!(
            text.contains("agentmesh_http_requests_total{route=\"/r\",method=\"GET\",status=\"200\"} 3\n")
        );
    }

    #[test]
    fn meshes_are_read_from_paths() {
        assert_eq!(mesh_of_path("/v1/meshes/m/tasks"), Some("m".to_owned()));
        assert_eq!(mesh_of_path("/v1/meshes/a%20b/claims"), Some("a b".to_owned()));
        assert_eq!(mesh_of_path("/v1/meshes/%ZZ/claims"), None);
        assert_eq!(mesh_of_path("/healthz"), None);
    }
}
