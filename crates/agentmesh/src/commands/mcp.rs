//! `agentmesh mcp`: the MCP tools over stdin and stdout, for an agent's MCP
//! configuration (`claude mcp add agentmesh -- agentmesh mcp`).
//!
//! The tools run on the data dir, or against the daemon of `--server`, in the
//! mesh of `--mesh`. The process acts as one coordinator run: the machine's
//! daemon id from `<data-dir>/daemon-id` (created on first use), a fresh run id,
//! and `--session` when given; its worker tools act as `--session`, else as a
//! worker session made for this process. stdout is the protocol, and stdin and
//! stdout may be pipes, sockets, files or a terminal; logs go to stderr
//! (`RUST_LOG`, default `warn`). The session ends when the client closes stdin (or
//! stdin reaches its end), or on SIGINT or SIGTERM.

use std::io::IsTerminal;
use std::sync::Arc;

use agentmesh_mcp::{Identity, MeshTools, load_or_create_daemon_id};
use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::cli::McpArgs;

/// Runs `mcp`.
pub(super) fn run(ctx: &Context, args: McpArgs) -> anyhow::Result<()> {
    init_logging();
    let session = agentmesh_core::ids::validate_optional_id("session", args.session.as_deref())?;
    // The store first: it creates a new data dir privately, and a database it
    // refuses leaves the data dir as it was.
    let api = Arc::clone(ctx.shared_api()?);
    let daemon_id = load_or_create_daemon_id(ctx.data_dir())
        .with_context(|| format!("failed to read or create the daemon id in {}", ctx.data_dir().display()))?;
    let identity = Identity::fresh_run(daemon_id, session);
    tracing::info!(daemon_id = %identity.daemon_id, run_id = %identity.run_id, mesh = ctx.mesh(), "serving MCP on stdio");
    let tools = MeshTools::new(api, ctx.mesh_id().clone(), identity);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let ended = runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        spawn_signal_handler(shutdown.clone())?;
        // Live from the start, and kept live while the process runs, so a sibling
        // coordinator on this machine never takes this run's events.
        tools.report_presence(false).await;
        let keeper = tools.clone();
        let keep_alive = tokio::spawn(async move {
            let mut every = tokio::time::interval(agentmesh_mcp::PRESENCE_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                keeper.report_presence(false).await;
            }
        });
        let ended = agentmesh_mcp::serve_stdio(tools.clone(), shutdown).await;
        keep_alive.abort();
        // Gone: the next coordinator run on this machine inherits what is queued,
        // and the idle report this session made no longer stands.
        tools.report_presence(true).await;
        tools.forget_idle().await;
        anyhow::Ok(ended)
    })?;
    tracing::info!(reason = %ended, "MCP session ended");
    // A wait still running on the blocking pool must not hold the exit.
    runtime.shutdown_background();
    Ok(())
}

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM.
#[cfg(unix)]
fn spawn_signal_handler(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("failed to listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("failed to listen for SIGTERM")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        shutdown.cancel();
    });
    Ok(())
}

/// Cancels `shutdown` on the first Ctrl-C.
#[cfg(not(unix))]
fn spawn_signal_handler(shutdown: CancellationToken) -> anyhow::Result<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            shutdown.cancel();
        }
    });
    Ok(())
}
