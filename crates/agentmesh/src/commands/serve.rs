//! `agentmesh serve`: runs the daemon in the foreground.
//!
//! Opens the store in the data dir, takes the data dir's lock (a second daemon
//! on the same data dir refuses to start and names the first, unless
//! `--allow-second-daemon`), reads (or creates) the API token (in `--token-file`,
//! else `<data-dir>/daemon.token`), raises the open-file limit, binds the listen
//! address and serves, with the background upkeep, until SIGINT or SIGTERM; then
//! lets the requests in flight finish.
//!
//! Once bound it prints `listening on http://ADDR (token file: PATH)` on stdout
//! (`https://` with `--tls-cert`/`--tls-key`),
//! with the address actually bound, so `--listen 127.0.0.1:0` tells the caller its
//! port. Logs go to stderr as text or JSON lines (`--log-format`), filtered by
//! `RUST_LOG` (default `info`): with text, the `listening on` line is repeated
//! there as it is and `shutting down` is a plain line too; with JSON, every
//! stderr line is one JSON object, those two included, with the message at the
//! top level (`message`), and a panic is logged as one too. When stdout and
//! stderr lead to the same place (one terminal, `> serve.log 2>&1`), the
//! `listening on` line is written once, on stdout.
//!
//! An address it cannot listen on fails with the address, the reason in words
//! and the fix: a taken port says whether an agentmesh daemon answers there and
//! ends with `--listen` and stopping that daemon.
//!
//! Nothing the daemon writes to stdout or stderr may stop it: a closed pipe, a
//! log collector gone away or a full disk make the writes fail, and every such
//! failure is ignored (the log writer swallows it and reports nothing).

use std::io::{self, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use agentmesh_daemon::{
    ApiToken, AppState, DEFAULT_MAX_CONNECTIONS, DataDirLock, LockError, PlainTcp, ServeOptions,
    TlsTransport, UpkeepConfig,
};
use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::Context;
use super::database::Opened;
use crate::cli::{LogFormat, ServeArgs};
use crate::failure::AlreadyLogged;

/// Runs `serve`. With JSON logs, a failure is logged as a JSON line and marked
/// [`AlreadyLogged`], so stderr carries no plain-text line.
pub(super) fn run(ctx: &Context, args: ServeArgs) -> anyhow::Result<()> {
    let format = args.log_format;
    init_logging(format);
    let served = serve(ctx, args);
    match served {
        Err(err) if format == LogFormat::Json => {
            tracing::error!(error = format!("{err:#}"), "agentmesh: {err:#}");
            Err(err.context(AlreadyLogged))
        }
        other => other,
    }
}

/// Opens, locks, binds and serves until a signal (see the module docs).
fn serve(ctx: &Context, args: ServeArgs) -> anyhow::Result<()> {
    let format = args.log_format;
    // Read before anything is opened: a bad certificate or key changes nothing.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsTransport::from_pem_files(cert, key)?),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let max_connections = connection_cap(args.max_connections);
    let opened = ctx.store_config().open()?;
    // The data dir holds the daemon's lock and token file whatever the backend;
    // a PostgreSQL installation does not create it the way the embedded file does.
    if matches!(opened, Opened::Postgres(_)) {
        agentmesh_sqlite::create_private_dir(ctx.data_dir())
            .with_context(|| format!("cannot create the data directory {}", ctx.data_dir().display()))?;
    }
    let mut lock = if args.allow_second_daemon {
        None
    } else {
        Some(DataDirLock::acquire(ctx.data_dir()).map_err(|err| match err {
            LockError::Held { .. } => anyhow::anyhow!(
                "{err}; stop it first, or pass --allow-second-daemon to run a second daemon anyway"
            ),
            other => anyhow::Error::new(other),
        })?)
    };
    // A PostgreSQL installation may be served by several daemons: each learns
    // of the others' commits, one at a time runs the upkeep, and all read the
    // database's clock.
    let (store, pg) = match opened {
        Opened::Postgres(pg) => {
            let pg = Arc::new(pg);
            (Arc::clone(&pg) as Arc<dyn agentmesh_store::Store>, Some(pg))
        }
        sqlite => (sqlite.into_store(), None),
    };
    let token_path = ctx.token_file();
    let token = ApiToken::load_or_create(&token_path)
        .with_context(|| format!("failed to read or create the token file {}", token_path.display()))?;
    // The store keeps its WAL small by itself (its checkpointer): the upkeep
    // runs no checkpoint of its own.
    let mut upkeep = UpkeepConfig {
        retention: agentmesh_core::retention::RetentionPolicy {
            tasks: args.retain_tasks,
            ledger: args.retain_ledger,
            events: args.retain_events,
        },
        ..UpkeepConfig::default()
    };
    if let Some(pg) = &pg {
        let ctx_timeout = ctx.store_config().request_timeout();
        let leader = pg.upkeep_leader();
        let clock_of = Arc::clone(pg);
        upkeep.leader = Some(Arc::new(move || {
            // Bounded like a request: a database that does not answer costs the
            // upkeep tick a few seconds, not the tick itself.
            let deadline = std::time::Instant::now() + ctx_timeout;
            if let Err(err) = agentmesh_store::deadline::within(Some(deadline), || clock_of.sync_clock()) {
                tracing::warn!(error = %err, "could not read the database's clock");
            }
            leader.holds()
        }));
    }
    let daemon_id = agentmesh_mcp::load_or_create_daemon_id(ctx.data_dir())
        .with_context(|| format!("failed to read or create the daemon id in {}", ctx.data_dir().display()))?;
    let state = AppState::new(store, token)
        .with_upkeep(upkeep)
        .with_daemon_id(daemon_id)
        .with_mcp_mesh(ctx.mesh_id().clone())
        .with_enforce(ctx.enforce())
        .with_webhooks(agentmesh_daemon::WebhookConfig {
            policy: agentmesh_core::webhook::UrlPolicy {
                allow_http: args.webhook_allow_http,
                allow_private: args.webhook_allow_private,
            },
            timeout: args.webhook_timeout,
            delivery: agentmesh_core::webhook::DeliveryPolicy {
                base_delay_ms: u64::try_from(args.webhook_retry.as_millis()).unwrap_or(u64::MAX),
                max_attempts: args.webhook_attempts,
                ..agentmesh_core::webhook::DeliveryPolicy::default()
            },
            enabled: true,
        })
        .with_request_timeout(ctx.store_config().request_timeout())
        .with_clock(ctx.store_config().clock());
    // Kept to the end: it wakes this daemon's watches on every daemon's commits.
    let _listener = match &pg {
        Some(pg) => {
            let signal = Arc::clone(state.mesh().signal());
            Some(
                pg.listen(move |_mesh| signal.bump())
                    .context("failed to listen for the database's commits")?,
            )
        }
        None => None,
    };
    tracing::info!(database = %ctx.store_config().describe(), postgres = pg.is_some(), "store opened");
    let options = ServeOptions {
        header_timeout: args.header_timeout,
        idle_timeout: args.idle_timeout,
        max_connections,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    // This future runs on the main thread, which holds the stdout lock for the
    // whole command: the `listening on` line must be written from here.
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(listener) => listener,
            Err(err) => return Err(cannot_listen(args.listen, &err)),
        };
        let addr = listener.local_addr().context("failed to read the bound address")?;
        if let Some(lock) = &mut lock
            && let Err(err) = lock.record_address(&format!("{scheme}://{addr}"))
        {
            tracing::warn!(error = %err, lock_file = %lock.path().display(), "could not record the address in the lock file");
        }
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone(), format)?);
        if tls.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(
                address = %addr,
                "listening beyond loopback without TLS: the bearer token and every request cross the \
                 network in clear; pass --tls-cert and --tls-key, or put a TLS reverse proxy in front"
            );
        }
        announce_listening(format, scheme, addr, &token_path);
        let served = match tls {
            Some(tls) => agentmesh_daemon::serve_with(listener, tls, state, shutdown, options).await,
            None => agentmesh_daemon::serve_with(listener, PlainTcp, state, shutdown, options).await,
        };
        // Held to the end: the next daemon may start once this one has stopped.
        drop(lock);
        served.context("the server failed")
    })
}

/// Why `serve` cannot listen on `addr`, and what to do instead: another
/// `--listen`, or stopping what holds the port (named when it is an agentmesh
/// daemon).
fn cannot_listen(addr: SocketAddr, err: &io::Error) -> anyhow::Error {
    let other_port = SocketAddr::new(addr.ip(), addr.port().wrapping_add(1).max(1));
    let free_port = SocketAddr::new(addr.ip(), 0);
    let pick = format!(
        "pick another address with --listen, such as --listen {other_port} (--listen {free_port} picks a free \
         port and prints it)"
    );
    match err.kind() {
        io::ErrorKind::AddrInUse => {
            let (holder, stop) = if agentmesh_answers_at(addr) {
                ("an agentmesh daemon already answers there", "the daemon already running there")
            } else {
                ("something that does not answer as an agentmesh daemon holds it", "the program holding it")
            };
            anyhow::anyhow!(
                "cannot listen on {addr}: the address is already in use ({holder}); {pick}, or stop {stop}"
            )
        }
        io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "cannot listen on {addr}: no network interface of this machine has the address {}; pick one it \
             has with --listen, such as --listen 127.0.0.1:{} (this machine only) or --listen 0.0.0.0:{} \
             (every interface)",
            addr.ip(),
            addr.port(),
            addr.port()
        ),
        io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot listen on {addr}: permission denied ({err}; ports below 1024 need privileges); {pick}"
        ),
        _ => anyhow::anyhow!("cannot listen on {addr}: {err}; {pick}"),
    }
}

/// Whether an agentmesh daemon answers at `addr`: its `GET /healthz` says
/// `{"status":"ok"}` over plain HTTP within a moment. An unspecified address
/// (`0.0.0.0`, `::`) is asked on loopback.
fn agentmesh_answers_at(addr: SocketAddr) -> bool {
    use std::io::Read as _;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpStream};
    const PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let target = SocketAddr::new(ip, addr.port());
    let Ok(mut stream) = TcpStream::connect_timeout(&target, PATIENCE) else { return false };
    let _ = stream.set_read_timeout(Some(PATIENCE));
    let _ = stream.set_write_timeout(Some(PATIENCE));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.take(4096).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer.starts_with("HTTP/1.1 200") && answer.contains(r#"{"status":"ok"}"#)
}

/// The connection cap: `requested` (or [`DEFAULT_MAX_CONNECTIONS`]), lowered to
/// what the open-file limit leaves room for once it is raised as far as allowed.
/// Logs the limit and the cap.
fn connection_cap(requested: Option<u32>) -> usize {
    let wanted = requested.map_or(DEFAULT_MAX_CONNECTIONS, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let limit = match agentmesh_daemon::raise_open_file_limit() {
        Ok(limit) => limit.now,
        Err(err) => {
            tracing::warn!(error = %err, "could not raise the open-file limit");
            None
        }
    };
    let room = agentmesh_daemon::connections_allowed_by(limit);
    let cap = room.map_or(wanted, |room| wanted.min(room));
    if requested.is_some() && cap < wanted {
        tracing::warn!(
            requested = wanted,
            max_connections = cap,
            open_file_limit = limit,
            "--max-connections lowered to what the open-file limit leaves room for"
        );
    } else {
        tracing::debug!(max_connections = cap, open_file_limit = limit, "connection cap");
    }
    cap
}

/// Logs to stderr in `format`, filtered by `RUST_LOG` (default `info`), through
/// a writer that ignores failed writes. In JSON mode each event is one object
/// with its fields (the message among them) at the top level, and a panic is
/// logged as an event instead of the standard plain-text report.
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        .log_internal_errors(false);
    // Each fails only when a subscriber is installed already, which then stays.
    let _ = match format {
        LogFormat::Text => builder.with_ansi(io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_ansi(false)
            .try_init(),
    };
    if format == LogFormat::Json {
        std::panic::set_hook(Box::new(|info| {
            let location = info.location().map(ToString::to_string);
            let payload = info.payload();
            let panic = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("?");
            let thread = std::thread::current();
            tracing::error!(panic, location, thread = thread.name(), "a thread panicked");
        }));
    }
}

/// Stderr for the log: a write that fails (a closed pipe, a full disk) is
/// dropped and reported as done, so logging never fails and never panics.
struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// Writes `line` to stderr as it is (text mode), ignoring a failure.
fn plain_stderr(line: &str) {
    let _ = writeln!(LossyStderr, "{line}");
}

/// Announces the bound address: the `listening on` line on stdout for scripts,
/// and on stderr as a log line (JSON mode) or as it is (text mode), unless
/// stderr leads where stdout does and it would show twice. Must run on the main
/// thread (see [`run`]).
fn announce_listening(format: LogFormat, scheme: &str, addr: SocketAddr, token_path: &Path) {
    let url = format!("{scheme}://{addr}");
    let token_file = token_path.display().to_string();
    let line = format!("listening on {url} (token file: {token_file})");
    let mut stdout = io::stdout();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    if stdout_and_stderr_are_one() {
        return;
    }
    match format {
        LogFormat::Json => tracing::info!(address = url, token_file, "{line}"),
        LogFormat::Text => plain_stderr(&line),
    }
}

/// Whether stdout and stderr lead to the same place: the same terminal, file or
/// pipe (on Unix, the same device and inode; elsewhere, both terminals).
fn stdout_and_stderr_are_one() -> bool {
    #[cfg(unix)]
    {
        match (rustix::fs::fstat(io::stdout()), rustix::fs::fstat(io::stderr())) {
            (Ok(out), Ok(err)) => out.st_dev == err.st_dev && out.st_ino == err.st_ino,
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        io::stdout().is_terminal() && io::stderr().is_terminal()
    }
}

/// Logs that the daemon is stopping: a JSON log line, or a plain one in text mode.
fn announce_shutdown(format: LogFormat) {
    match format {
        LogFormat::Json => tracing::info!("shutting down"),
        LogFormat::Text => plain_stderr("shutting down"),
    }
}

/// Cancels `shutdown` on the first SIGINT (Ctrl-C) or SIGTERM.
///
/// The handlers are installed before this returns, so a signal that arrives once
/// the address is printed is never missed; the returned future waits for it.
#[cfg(unix)]
fn cancel_on_signal(
    shutdown: CancellationToken,
    format: LogFormat,
) -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("failed to listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("failed to listen for SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        // Cancelled first: nothing written after may delay the shutdown.
        shutdown.cancel();
        announce_shutdown(format);
    })
}

/// Cancels `shutdown` on the first Ctrl-C.
#[cfg(not(unix))]
fn cancel_on_signal(
    shutdown: CancellationToken,
    format: LogFormat,
) -> anyhow::Result<impl Future<Output = ()>> {
    Ok(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            shutdown.cancel();
            announce_shutdown(format);
        }
    })
}
