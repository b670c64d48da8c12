//! `agentmesh serve`: runs the daemon in the foreground.
//!
//! Opens the store in the data dir, reads (or creates) the API token (in
//! `--token-file`, else `<data-dir>/daemon.token`), binds the listen address and
//! serves, with the background upkeep, until SIGINT or SIGTERM; then lets the
//! requests in flight finish. One line goes to stderr on start,
//! `listening on http://ADDR (token file: PATH)`, with the address actually
//! bound, so `--listen 127.0.0.1:0` tells the caller its port. Logs go to stderr
//! too, as text or JSON lines (`--log-format`), filtered by `RUST_LOG` (default
//! `info`).

use std::io::IsTerminal;
use std::sync::Arc;

use agentmesh_daemon::{ApiToken, AppState, CheckpointHook, UpkeepConfig};
use agentmesh_sqlite::SqliteStore;
use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::cli::{LogFormat, ServeArgs};

/// The upkeep's periodic checkpoint truncates a WAL past this size. (The store
/// itself truncates past 50 MB while writing; this catches a WAL left large by a
/// burst once the daemon is quiet.)
const UPKEEP_WAL_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Runs `serve`.
pub fn run(ctx: &Context, args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let store = SqliteStore::open_data_dir(&ctx.data_dir)
        .with_context(|| format!("failed to open the database in {}", ctx.data_dir.display()))?;
    let store = Arc::new(store);
    let token_path = ctx.token_file();
    let token = ApiToken::load_or_create(&token_path)
        .with_context(|| format!("failed to read or create the token file {}", token_path.display()))?;
    let wal = Arc::clone(&store);
    let checkpoint: CheckpointHook =
        Arc::new(move || wal.checkpoint_if_wal_exceeds(UPKEEP_WAL_MAX_BYTES).map_err(|err| err.to_string()));
    let upkeep = UpkeepConfig { checkpoint: Some(checkpoint), ..UpkeepConfig::default() };
    let daemon_id = agentmesh_mcp::load_or_create_daemon_id(&ctx.data_dir)
        .with_context(|| format!("failed to read or create the daemon id in {}", ctx.data_dir.display()))?;
    let state =
        AppState::new(store, token).with_upkeep(upkeep).with_daemon_id(daemon_id).with_mcp_mesh(ctx.mesh());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("failed to listen on {}", args.listen))?;
        let addr = listener.local_addr().context("failed to read the bound address")?;
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone())?);
        eprintln!("listening on http://{addr} (token file: {})", token_path.display());
        agentmesh_daemon::serve(listener, state, shutdown).await.context("the server failed")
    })
}

/// Logs to stderr in `format`, filtered by `RUST_LOG` (default `info`).
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // Each fails only when a subscriber is installed already, which then stays.
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

/// Cancels `shutdown` on the first SIGINT (Ctrl-C) or SIGTERM.
///
/// The handlers are installed before this returns, so a signal that arrives once
/// the address is printed is never missed; the returned future waits for it.
#[cfg(unix)]
fn cancel_on_signal(shutdown: CancellationToken) -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("failed to listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("failed to listen for SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("shutting down");
        shutdown.cancel();
    })
}

/// Cancels `shutdown` on the first Ctrl-C.
#[cfg(not(unix))]
fn cancel_on_signal(shutdown: CancellationToken) -> anyhow::Result<impl Future<Output = ()>> {
    Ok(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("shutting down");
            shutdown.cancel();
        }
    })
}
