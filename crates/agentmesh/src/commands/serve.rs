//! `agentmesh serve`: runs the daemon in the foreground.
//!
//! Opens the store in the data dir, reads (or creates) the API token, binds the
//! listen address and serves until SIGINT or SIGTERM, then lets the requests in
//! flight finish. `listening on http://ADDR` goes to stderr with the address
//! actually bound, so `--listen 127.0.0.1:0` tells the caller its port. Logs go
//! to stderr too, filtered by `RUST_LOG` (default `info`).

use std::io::IsTerminal;
use std::sync::Arc;

use agentmesh_daemon::{ApiToken, AppState};
use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::cli::ServeArgs;

/// Runs `serve`.
pub fn run(ctx: &Context, args: ServeArgs) -> anyhow::Result<()> {
    init_logging();
    let store = Arc::clone(ctx.store()?);
    let token_path = ctx.token_file();
    let token = ApiToken::load_or_create(&token_path)
        .with_context(|| format!("failed to read or create the token file {}", token_path.display()))?;
    let state = AppState::new(store, token);
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
        eprintln!("listening on http://{addr}");
        agentmesh_daemon::serve(listener, state, shutdown).await.context("the server failed")
    })
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Fails only when a subscriber is installed already, which then stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
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
