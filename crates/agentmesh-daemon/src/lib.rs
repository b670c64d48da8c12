//! The agentmesh daemon: the HTTP API over a [`Store`], and the background
//! upkeep beside it.
//!
//! [`router`] builds the whole HTTP surface and [`serve`] runs it on a listener the
//! caller has already bound, together with the upkeep loops, until a
//! [`CancellationToken`] is cancelled. The binary (`agentmesh serve`) binds,
//! installs the signal handlers and cancels the token; tests bind `127.0.0.1:0`
//! and drive the same router.
//!
//! Modules: `api` holds the `/v1` routes, as a table of `route::Route`s (method,
//! path, handler, and the types and statuses the OpenAPI document tells of);
//! `route` mounts such tables, and `openapi` describes the same tables as the
//! OpenAPI 3.1 document of `GET /openapi.json` ([`openapi_document`]); `auth` the
//! bearer token (its file, and the middleware that checks it); `error` the one
//! [`ApiError`] every failure becomes; `extract` the body, query and path
//! extractors that turn malformed input into an [`ApiError`] naming the field;
//! `metrics` the counters and the `/metrics` exposition, with `process` reading the
//! process figures from `/proc`; `upkeep` the background loops (lease reaper,
//! sweeps, retention, WAL checkpoint) and their supervisor; `ready` what `/readyz`
//! answers (whether the store can write); `server` the accept loop (timeouts, the
//! connection cap, the open-file limit); `access` the access log; `lock` the data
//! dir's lock that keeps a second daemon off it. Handlers are adapters: they parse
//! into the shared wire types of `agentmesh_api`, run one operation of the daemon's
//! [`LocalMesh`] through `AppState::with_mesh` and answer its view. Rules live in
//! the core and the store.
//!
//! `/` serves the dashboard (`dashboard`): a page for people, behind the same
//! token through a session cookie, live through the `/v1/meshes/{mesh}/stream`
//! Server-Sent Events.
//!
//! `/mcp` serves the MCP tools of `agentmesh_mcp` over streamable HTTP, behind
//! the same token, on the same `LocalMesh`, in the daemon's mesh
//! ([`AppState::with_mcp_mesh`]); `/mcp/{mesh}` serves them in any other mesh.
//! Each MCP session is a coordinator run of its own on this daemon's machine id
//! ([`AppState::with_daemon_id`]).
//!
//! [`now`] is the daemon's only read of the wall clock.

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use std::time::Duration;

use agentmesh_api::{LocalMesh, MeshResult};
use agentmesh_core::MeshId;
use agentmesh_core::Timestamp;
use agentmesh_store::Store;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::{Router, middleware};
use route::Route;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

mod access;
mod api;
mod auth;
mod dashboard;
mod error;
mod extract;
mod lock;
mod mcp;
mod metrics;
mod openapi;
mod process;
mod ready;
mod route;
mod server;
mod tls;
mod upkeep;
mod webhooks;

pub use auth::{ApiToken, TOKEN_FILE_NAME};
pub use dashboard::{CONTENT_SECURITY_POLICY, REQUEST_HEADER, SESSION_COOKIE};
pub use error::{ApiError, ErrorBody, ErrorDetail};
pub use lock::{DataDirLock, LOCK_FILE_NAME, LockError, LockHolder};
pub use metrics::{BUILD_COMMIT, BUILD_VERSION, Metrics, VERSION_LINE};
pub use openapi::document as openapi_document;
pub use ready::{DEFAULT_LOCK_WAIT as DEFAULT_READY_LOCK_WAIT, FRESH as READY_FRESH};
pub use server::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, OpenFileLimit, PlainTcp,
    RESERVED_FILE_DESCRIPTORS, ServeOptions, Transport, connections_allowed_by, raise_open_file_limit,
};
pub use tls::{TlsError, TlsTransport};
pub use upkeep::{CheckpointHook, LeaderHook, UpkeepConfig};
pub use webhooks::WebhookConfig;

/// The largest request body accepted, in bytes; a larger one gets 413 and is not read.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The mesh `/mcp` sessions work in unless [`AppState::with_mcp_mesh`] names another.
pub const DEFAULT_MCP_MESH: &str = "default";

/// How often a waiting watch looks again without being woken by one of the
/// daemon's own writes: the fallback that notices writes other processes made to
/// the same database file.
pub const FALLBACK_WATCH_POLL: Duration = Duration::from_secs(1);

/// What every handler and background loop shares: the mesh operations, the token
/// requests must present, the wake-up of waiting watches, the metrics and the
/// upkeep settings.
#[derive(Clone)]
pub struct AppState {
    /// The operations over the store. Synchronous: reach them only through
    /// [`AppState::with_mesh`].
    mesh: LocalMesh,
    /// The bearer token of the `/v1` routes.
    token: ApiToken,
    /// See [`FALLBACK_WATCH_POLL`].
    fallback_poll: Duration,
    /// The counters `/metrics` exposes.
    metrics: Arc<Metrics>,
    /// What the upkeep loops do, and how often.
    upkeep: Arc<UpkeepConfig>,
    /// The machine id MCP sessions act under.
    daemon_id: String,
    /// The mesh MCP sessions work in.
    mcp_mesh: MeshId,
    /// Whether the store can write, for `/readyz`.
    readiness: Arc<ready::Readiness>,
    /// The webhook deliverer's settings.
    webhook_config: WebhookConfig,
    /// Wakes the webhook deliverer when a subscription is added or changed.
    webhook_wake: Arc<tokio::sync::Notify>,
}

impl AppState {
    /// State over `store`, accepting requests that present `token`.
    pub fn new(store: Arc<dyn Store>, token: ApiToken) -> AppState {
        let mesh = LocalMesh::new(store, now);
        let readiness = Arc::new(ready::Readiness::new(ready::DEFAULT_LOCK_WAIT));
        let wrote = Arc::clone(&readiness);
        mesh.signal().listen(move || wrote.wrote());
        AppState {
            mesh,
            token,
            fallback_poll: FALLBACK_WATCH_POLL,
            metrics: Arc::new(Metrics::new()),
            upkeep: Arc::new(UpkeepConfig::default()),
            daemon_id: agentmesh_mcp::identity::new_daemon_id(),
            mcp_mesh: MeshId::parse(DEFAULT_MCP_MESH).expect("the default mesh id follows the id rule"),
            readiness,
            webhook_config: WebhookConfig::default(),
            webhook_wake: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Replaces the webhook settings: where receivers may be (checked when a
    /// subscription is added and before every request), the receivers'
    /// timeout, the retries, and whether this daemon delivers.
    pub fn with_webhooks(mut self, config: WebhookConfig) -> AppState {
        self.mesh = self.mesh.with_webhooks(config.policy, config.timeout);
        self.webhook_config = config;
        self
    }

    /// Wakes the webhook deliverer: a subscription was added or changed.
    pub(crate) fn webhooks_changed(&self) {
        self.webhook_wake.notify_waiters();
    }

    /// Sets how long `/readyz` waits for its probe write (waiting for the
    /// database's write lock) before it answers 503 `lock_wait`
    /// ([`DEFAULT_READY_LOCK_WAIT`] otherwise).
    pub fn with_ready_lock_wait(self, wait: Duration) -> AppState {
        self.readiness.set_lock_wait(wait);
        self
    }

    /// Reads the time from `clock` (see [`LocalMesh::with_clock`]).
    pub fn with_clock(mut self, clock: agentmesh_api::Clock) -> AppState {
        self.mesh = self.mesh.with_clock(clock);
        self
    }

    /// Bounds each request's store calls by `timeout`, across every attempt
    /// (see [`LocalMesh::with_request_timeout`]): one that runs out is answered
    /// 503 with the code of what held it up, and `Retry-After`.
    pub fn with_request_timeout(mut self, timeout: Duration) -> AppState {
        self.mesh = self.mesh.with_request_timeout(timeout);
        self
    }

    /// Runs every drain in v2 enforce mode when `enforce` is set: what
    /// `MESH_PROTOCOL_V2_ENFORCE` said when the daemon started.
    pub fn with_enforce(mut self, enforce: bool) -> AppState {
        self.mesh = self.mesh.with_enforce(enforce);
        self
    }

    /// Replaces the upkeep settings (intervals, ages, the WAL checkpoint hook).
    pub fn with_upkeep(mut self, config: UpkeepConfig) -> AppState {
        self.upkeep = Arc::new(config);
        self
    }

    /// Replaces [`FALLBACK_WATCH_POLL`], how often a waiting watch looks again
    /// without a wake-up (at least 1 ms).
    pub fn with_fallback_watch_poll(mut self, every: Duration) -> AppState {
        self.fallback_poll = every.max(Duration::from_millis(1));
        self
    }

    /// The counters `/metrics` exposes.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Sets the machine id MCP sessions act under: the data dir's
    /// (`agentmesh_mcp::load_or_create_daemon_id`). Without it, the daemon makes up
    /// one for the life of the process.
    pub fn with_daemon_id(mut self, daemon_id: impl Into<String>) -> AppState {
        self.daemon_id = daemon_id.into();
        self
    }

    /// Sets the mesh `/mcp` sessions work in ([`DEFAULT_MCP_MESH`] otherwise);
    /// `/mcp/{mesh}` serves any mesh.
    pub fn with_mcp_mesh(mut self, mesh: MeshId) -> AppState {
        self.mcp_mesh = mesh;
        self
    }

    /// The mesh operations (for background loops that run beside the routes).
    pub fn mesh(&self) -> &LocalMesh {
        &self.mesh
    }

    /// Runs one mesh operation on Tokio's blocking thread pool and returns its result.
    ///
    /// The store is synchronous: every call is a SQLite transaction that may wait for
    /// the connection mutex or for another process's file lock (up to the 5 s busy
    /// timeout). Run on a runtime worker thread, that wait would stall every other
    /// request scheduled on the worker, so each call goes to `spawn_blocking`. A
    /// panic inside the operation becomes an internal error, logged once.
    pub(crate) async fn with_mesh<T, F>(&self, op: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&LocalMesh) -> MeshResult<T> + Send + 'static,
    {
        let mesh = self.mesh.clone();
        // The request's budget starts now, not when a blocking thread is free.
        let deadline = mesh.request_deadline();
        let run = move || agentmesh_store::deadline::within(Some(deadline), || op(&mesh));
        match tokio::task::spawn_blocking(run).await {
            Ok(result) => result.map_err(|err| self.failed(err)),
            Err(join) => Err(ApiError::Internal(format!("store operation did not finish: {join}"))),
        }
    }

    /// Awaits a write submitted to the store (the hot paths: claim, heartbeat,
    /// completion), which holds no thread while it waits. A panic inside the
    /// operation becomes an internal error, as in [`AppState::with_mesh`].
    pub(crate) async fn submitted<T>(
        &self,
        write: impl Future<Output = MeshResult<T>>,
    ) -> Result<T, ApiError> {
        match CatchUnwind(std::pin::pin!(write)).await {
            Ok(result) => result.map_err(|err| self.failed(err)),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or(panic.downcast_ref::<String>().map(String::as_str));
                tracing::error!(panic = what.unwrap_or("?"), "a store operation panicked");
                Err(ApiError::Internal(String::from("store operation did not finish: it panicked")))
            }
        }
    }
}

impl AppState {
    /// Tells the readiness that a request failed, and makes the error its answer.
    fn failed(&self, err: agentmesh_api::MeshError) -> ApiError {
        self.readiness.failed(&err);
        if let agentmesh_api::MeshError::Store(store) = &err
            && !store.is_caller_error()
        {
            self.metrics.store_fault(store.code());
        }
        ApiError::from(err)
    }
}

/// A future whose panic is caught and returned instead of unwinding.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

/// The current wall-clock time.
///
/// The core and the stores take time as an argument; in the daemon every handler
/// takes it from here, so a later injected clock replaces exactly this function.
#[allow(clippy::disallowed_methods)] // The daemon's one sanctioned read of the clock.
pub fn now() -> Timestamp {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Timestamp::from_millis(i64::try_from(millis).unwrap_or(i64::MAX))
}

/// The whole HTTP surface: `/healthz`, `/readyz` and `/openapi.json` (open),
/// `/metrics`, the `/v1` API and the MCP endpoints `/mcp` and `/mcp/{mesh}` (all
/// three behind the bearer token).
///
/// Bodies over [`MAX_BODY_BYTES`] are refused with 413 before they are parsed; an
/// unknown path gets a JSON 404, an unsupported method a JSON 405. Every request,
/// refused ones included, is counted and timed for `/metrics`. MCP sessions built
/// by this router end only when their clients leave; [`serve`] ends them at
/// shutdown.
pub fn router(state: AppState) -> Router {
    app(state, CancellationToken::new())
}

/// [`router`], with MCP sessions ended when `shutdown` is cancelled (an open
/// session stream would otherwise hold a graceful shutdown forever).
fn app(state: AppState, shutdown: CancellationToken) -> Router {
    // The daemon's own mesh is on `/metrics` from the start, before any request.
    state.metrics.note_mesh(&state.mcp_mesh);
    let [(_, top), (_, v1)] = surface(&shutdown);
    let services = mcp::McpServices::new(Arc::new(state.mesh.clone()), state.daemon_id.clone(), shutdown);
    let own_mesh = services.for_mesh(&state.mcp_mesh);
    let mcp = Router::new()
        .route_service("/mcp", own_mesh)
        .route(
            "/mcp/{mesh}",
            axum::routing::any(move |mesh, request| mcp::serve_mesh(services.clone(), mesh, request)),
        )
        .layer(middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .merge(route::router(top, &state))
        .merge(dashboard::routes())
        .nest("/v1", route::router(v1, &state))
        .merge(mcp)
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), metrics::track))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(access::log_request))
        .with_state(state)
}

/// Serves [`router`] on `listener` over plain TCP with the default
/// [`ServeOptions`]; see [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, PlainTcp, state, shutdown, ServeOptions::default()).await
}

/// Serves [`router`] on `listener` through `transport`, with the upkeep loops
/// beside it, until `shutdown` is cancelled; then stops taking connections and
/// returns once the requests in flight have been answered and the upkeep passes
/// in flight have finished.
///
/// `options` bound what a connection may hold: how long it may take to send a
/// request head, how long it may stay idle between requests, and how many may be
/// open at once (see the `server` module).
pub async fn serve_with<T: Transport>(
    listener: TcpListener,
    transport: T,
    state: AppState,
    shutdown: CancellationToken,
    options: ServeOptions,
) -> std::io::Result<()> {
    // A child token: the loops stop with the server.
    let upkeep_shutdown = shutdown.child_token();
    let upkeep = tokio::spawn(upkeep::run(state.clone(), Arc::clone(&state.upkeep), upkeep_shutdown.clone()));
    let deliverer = tokio::spawn(webhooks::run(state.clone(), state.webhook_config, upkeep_shutdown.clone()));
    let app = app(state, shutdown.child_token()).layer(axum::Extension(dashboard::Secure(T::SECURE)));
    server::serve_connections(listener, transport, app, options, shutdown).await;
    upkeep_shutdown.cancel();
    if let Err(err) = upkeep.await {
        tracing::error!(error = %err, "the upkeep loops stopped unexpectedly");
    }
    if let Err(err) = deliverer.await {
        tracing::error!(error = %err, "the webhook deliverer stopped unexpectedly");
    }
    Ok(())
}

/// Every route [`router`] serves but the dashboard's pages and the MCP
/// endpoints, by the prefix it is mounted under: the routes outside `/v1`, then
/// the `/v1` API. The router mounts these lists and the OpenAPI document
/// (`openapi`) describes them, so the two cannot differ. `shutdown` ends the
/// dashboard's streams.
fn surface(shutdown: &CancellationToken) -> [(&'static str, Vec<Route>); 2] {
    let top = vec![
        Route::get("/healthz", healthz, "The process is up and serving (touches no store)")
            .answers::<Health>()
            .open(),
        Route::get("/readyz", readyz, "Whether the store can write right now (503 with the reason when not)")
            .answers::<ready::ReadyView>()
            .or(StatusCode::SERVICE_UNAVAILABLE)
            .open(),
        Route::get("/metrics", metrics::render, "The daemon's counters, in the Prometheus text format")
            .named("metrics")
            .text("text/plain", "Prometheus text exposition format 0.0.4")
            .errors(&[StatusCode::INTERNAL_SERVER_ERROR, StatusCode::SERVICE_UNAVAILABLE]),
        Route::get("/openapi.json", openapi::serve, "This OpenAPI 3.1 document")
            .named("openapi")
            .answers::<serde_json::Map<String, serde_json::Value>>()
            .open(),
    ];
    let mut v1 = api::table();
    v1.push(dashboard::stream_route(shutdown.clone()));
    [("", top), ("/v1", v1)]
}

/// What `/healthz` answers.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
struct Health {
    /// Always `ok`.
    status: &'static str,
}

/// `GET /healthz`: the process is up and serving. Needs no token and touches no store.
async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok" })
}

/// `GET /readyz`: whether the store can write right now (see the `ready` module):
/// 200 `{"status": "ready"}`, or 503 with the reason. Needs no token.
async fn readyz(State(state): State<AppState>) -> ready::Verdict {
    state.readiness.check(Arc::clone(state.mesh.store())).await
}

/// Any path no route matches.
async fn route_not_found() -> ApiError {
    ApiError::RouteNotFound
}

/// A known path with a method it does not take.
async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
