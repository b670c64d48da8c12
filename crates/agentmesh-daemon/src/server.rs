//! The accept loop: how connections are taken, watched and closed.
//!
//! [`serve_connections`] accepts TCP connections, hands each to a [`Transport`]
//! (plain TCP is [`PlainTcp`]; an encrypting transport wraps the stream in its
//! handshake) and serves HTTP/1.1 on the result with hyper, until shutdown. No
//! token is needed to open a connection, so these rules keep clients that open
//! connections and then send nothing, or half a request, from holding the daemon's
//! file descriptors and memory:
//!
//! - A connection must finish its request head (request line and headers) within
//!   the header timeout: counted from the accept for the first request, and from
//!   the first byte of each later one. The transport's handshake counts too.
//! - Between requests, a keep-alive connection may stay idle for the idle timeout.
//! - While a request is being answered (from the moment its head is parsed until
//!   the last byte of its response body is written) neither limit applies: a watch
//!   or an MCP event stream may take long by design. Its request body, however,
//!   must keep coming: each chunk within the header timeout of the one before.
//! - At most `max_connections` connections are open at once. A connection beyond
//!   the cap is refused at once: it gets a `503` if the socket takes it without
//!   waiting, and is closed.
//!
//! A connection's phase ([`Phase`]) is kept in an [`Activity`] that two wrappers
//! update: [`Watched`] around the byte stream notes the first byte of a request
//! head, and [`Tracked`] around the router notes when a request starts and when its
//! response body is done (dropped). The task that drives the connection sleeps
//! until the current phase's deadline and closes the connection when it passes.
//!
//! At shutdown the listener is closed first; connections in the middle of a
//! request finish it (hyper's graceful shutdown), the others are closed at once.
//! [`serve_connections`] returns when the last connection is gone.
//!
//! [`raise_open_file_limit`] lifts the process's soft limit on open files to its
//! hard limit, and [`connections_allowed_by`] tells how many connections a limit
//! leaves room for.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;
use tower_http::timeout::TimeoutBody;

/// The default of [`ServeOptions::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The default of [`ServeOptions::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default of [`ServeOptions::max_connections`]. Each open connection costs a
/// file descriptor, a task and hyper's buffers (some 10 to 20 KiB while idle), so
/// the default stays well below what a raised open-file limit allows.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// File descriptors kept out of the connection cap for everything else the
/// daemon opens: the database, its WAL and shared-memory files for each
/// connection, the token and lock files, the runtime's own descriptors, stdio.
pub const RESERVED_FILE_DESCRIPTORS: u64 = 128;

/// How long the accept loop waits after an error that is not about one
/// connection (such as running out of file descriptors) before accepting again.
const ACCEPT_RETRY: Duration = Duration::from_millis(250);

/// The body of the answer a refused connection is sent.
const REFUSAL_BODY: &str =
    r#"{"error":{"code":"too_many_connections","message":"the daemon is at its connection limit; retry"}}"#;

/// The whole answer a refused connection is sent before it is closed.
static REFUSAL: LazyLock<Vec<u8>> = LazyLock::new(|| {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{REFUSAL_BODY}",
        REFUSAL_BODY.len()
    )
    .into_bytes()
});

/// How the daemon treats connections: the two timeouts and the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// How long a client may take to send a request head (and the transport's
    /// handshake), and the longest pause inside a request body (default 10 s; at
    /// least 1 ms).
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait between requests (default 60 s;
    /// at least 1 ms).
    pub idle_timeout: Duration,
    /// How many connections may be open at once; more are refused at once
    /// (default [`DEFAULT_MAX_CONNECTIONS`]; at least 1).
    pub max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ServeOptions {
    /// The options with every value raised to its smallest usable one.
    fn usable(self) -> ServeOptions {
        let least = Duration::from_millis(1);
        ServeOptions {
            header_timeout: self.header_timeout.max(least),
            idle_timeout: self.idle_timeout.max(least),
            max_connections: self.max_connections.max(1),
        }
    }
}

/// What turns an accepted TCP stream into the byte stream HTTP is served on.
///
/// The handshake runs in the connection's own task, never in the accept loop, and
/// within the header timeout: a client that stalls it is closed like one that
/// stalls its request head.
pub trait Transport: Clone + Send + Sync + 'static {
    /// The byte stream HTTP is read from and written to.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Whether the transport encrypts (the dashboard's cookie is then `Secure`).
    const SECURE: bool = false;

    /// Turns an accepted stream into [`Transport::Io`].
    fn handshake(&self, tcp: TcpStream) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

/// HTTP straight over TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainTcp;

impl Transport for PlainTcp {
    type Io = TcpStream;

    async fn handshake(&self, tcp: TcpStream) -> io::Result<TcpStream> {
        Ok(tcp)
    }
}

/// Accepts connections on `listener` and serves `app` on each through
/// `transport`, under `options`, until `shutdown` is cancelled; then stops
/// accepting and returns once every connection is closed.
pub(crate) async fn serve_connections<T: Transport>(
    listener: TcpListener,
    transport: T,
    app: Router,
    options: ServeOptions,
    shutdown: CancellationToken,
) {
    let options = options.usable();
    let slots = Arc::new(Semaphore::new(options.max_connections));
    let connections = TaskTracker::new();
    // Set while connections are being refused, so the cap is logged once per
    // episode rather than once per refused connection.
    let mut refusing = false;
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(err) if concerns_one_connection(&err) => continue,
            Err(err) => {
                tracing::warn!(error = %err, "could not accept a connection; accepting again shortly");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                }
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            if !refusing {
                refusing = true;
                tracing::warn!(
                    max_connections = options.max_connections,
                    "at the connection limit; refusing new connections until some close"
                );
            }
            refuse(&tcp);
            continue;
        };
        refusing = false;
        // Answers go out at once: without TCP_NODELAY a response written in two
        // parts can wait for the client's delayed ACK.
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY on a connection");
        }
        let (transport, app, shutdown) = (transport.clone(), app.clone(), shutdown.clone());
        connections.spawn(connection(tcp, transport, app, options, shutdown, permit));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Errors of `accept` that concern only the connection being accepted (it was
/// reset or aborted before it was taken); the loop just accepts the next one.
fn concerns_one_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
    )
}

/// Refuses a connection beyond the cap: writes the 503 if the socket takes it
/// without waiting, reads what already arrived (closing with unread data would
/// reset the connection before the client reads the answer) and closes it.
fn refuse(tcp: &TcpStream) {
    let _ = tcp.try_write(&REFUSAL);
    let mut sink = [0_u8; 4096];
    let _ = tcp.try_read(&mut sink);
}

/// One connection's task: the transport's handshake, then HTTP until the client
/// leaves, a deadline passes or shutdown closes it. Holds its slot under the cap
/// until it ends.
async fn connection<T: Transport>(
    tcp: TcpStream,
    transport: T,
    app: Router,
    options: ServeOptions,
    shutdown: CancellationToken,
    _slot: OwnedSemaphorePermit,
) {
    let io = tokio::select! {
        () = shutdown.cancelled() => return,
        handshake = tokio::time::timeout(options.header_timeout, transport.handshake(tcp)) => match handshake {
            Ok(Ok(io)) => io,
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "connection handshake failed");
                return;
            }
            Err(_elapsed) => {
                tracing::debug!("connection closed: handshake not finished within the header timeout");
                return;
            }
        },
    };
    let activity = Arc::new(Activity::new());
    let service = Tracked { app, activity: Arc::clone(&activity), body_timeout: options.header_timeout };
    let mut http = http1::Builder::new();
    // The timeouts are this module's own (hyper's header timeout also runs while
    // a keep-alive connection is idle, so it cannot tell the two apart).
    http.timer(TokioTimer::new()).header_read_timeout(None).keep_alive(true);
    let served =
        http.serve_connection(TokioIo::new(Watched { io, activity: Arc::clone(&activity) }), service);
    let mut served = pin!(served);
    let mut draining = false;
    loop {
        // Taken before the phase is read: a change from here on wakes the select.
        let changed = activity.changed.notified();
        let deadline = activity.deadline(&options, draining);
        if let Some(at) = deadline
            && at <= Instant::now()
        {
            tracing::debug!(phase = activity.phase_name(), "connection closed: its deadline passed");
            return;
        }
        tokio::select! {
            result = served.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "connection ended with an error");
                }
                return;
            }
            () = shutdown.cancelled(), if !draining => {
                draining = true;
                served.as_mut().graceful_shutdown();
            }
            () = sleep_until(deadline) => {}
            () = changed => {}
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where a connection is between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A request head is expected to be complete within the header timeout of
    /// `since`: the accept, or the first byte of the head.
    Head { since: Instant },
    /// Requests are being answered: their heads were parsed and their responses
    /// are not yet written in full.
    Busy { requests: usize },
    /// The last response is written; no byte of the next request has arrived.
    Idle { since: Instant },
}

/// The phase of one connection, shared by its byte stream, its service and the
/// task that enforces the deadlines.
#[derive(Debug)]
struct Activity {
    phase: Mutex<Phase>,
    /// Woken when a deadline appears or moves closer (the connection goes idle,
    /// or a request head begins).
    changed: Notify,
}

impl Activity {
    /// A freshly accepted connection: its first request head is due.
    fn new() -> Activity {
        Activity { phase: Mutex::new(Phase::Head { since: Instant::now() }), changed: Notify::new() }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn phase_name(&self) -> &'static str {
        match self.phase() {
            Phase::Head { .. } => "head",
            Phase::Busy { .. } => "busy",
            Phase::Idle { .. } => "idle",
        }
    }

    /// Bytes arrived: on an idle connection they begin the next request head.
    fn bytes_arrived(&self) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head { since: Instant::now() };
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A request head was parsed and the request goes to the router.
    fn request_started(&self) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        *phase = match *phase {
            Phase::Busy { requests } => Phase::Busy { requests: requests + 1 },
            Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1 },
        };
    }

    /// A response was written in full (or abandoned): with none left, the
    /// connection is idle from now.
    fn request_finished(&self) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if let Phase::Busy { requests } = *phase {
            if requests > 1 {
                *phase = Phase::Busy { requests: requests - 1 };
            } else {
                *phase = Phase::Idle { since: Instant::now() };
                drop(phase);
                self.changed.notify_one();
            }
        }
    }

    /// When the connection is to be closed, if nothing changes first. While
    /// `draining`, a connection not answering a request is closed at once.
    fn deadline(&self, options: &ServeOptions, draining: bool) -> Option<Instant> {
        match self.phase() {
            Phase::Busy { .. } => None,
            _ if draining => Some(Instant::now()),
            Phase::Head { since } => Some(since + options.header_timeout),
            Phase::Idle { since } => Some(since + options.idle_timeout),
        }
    }
}

/// A connection's byte stream, noting when bytes arrive.
struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled
            && buf.filled().len() > before
        {
            self.activity.bytes_arrived();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The router as hyper calls it, noting each request's start and end, and with a
/// pause limit on each request body.
#[derive(Clone)]
struct Tracked {
    app: Router,
    activity: Arc<Activity>,
    body_timeout: Duration,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<TrackedBody>, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        self.activity.request_started();
        // Dropped with the response body once it is written, or with this future
        // if the connection goes away first.
        let answering = Answering(Arc::clone(&self.activity));
        let request: Request = request.map(|body| Body::new(TimeoutBody::new(self.body_timeout, body)));
        let app = self.app.clone();
        Box::pin(async move {
            let response = app.oneshot(request).await?;
            Ok(response.map(|body| TrackedBody { body, _answering: answering }))
        })
    }
}

/// Marks its request as answered when dropped.
struct Answering(Arc<Activity>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that keeps its request counted as being answered until
/// hyper has written it and drops it.
struct TrackedBody {
    body: Body,
    _answering: Answering,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The open-file limit before and after [`raise_open_file_limit`] (`None`: no
/// limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit the process started with.
    pub before: Option<u64>,
    /// The soft limit in force now.
    pub now: Option<u64>,
}

/// Raises the process's soft limit on open files to its hard limit, so the daemon
/// is not held to a login shell's 1,024 when the system allows more.
///
/// Should the system refuse the hard limit (an unlimited one, or one above what
/// the kernel allows a process), it tries 1,048,576, then 10,240. Returns the
/// limits before and after; the error of the last attempt when every one was
/// refused (the limit then stays as it was).
#[cfg(unix)]
pub fn raise_open_file_limit() -> io::Result<OpenFileLimit> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let before = limit.current;
    // `None` is unlimited, above every number.
    let above = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a > b,
    };
    let mut last_error = None;
    for target in [limit.maximum, Some(1 << 20), Some(10_240)] {
        if !above(target, before) || above(target, limit.maximum) {
            continue;
        }
        match setrlimit(Resource::Nofile, Rlimit { current: target, maximum: limit.maximum }) {
            Ok(()) => return Ok(OpenFileLimit { before, now: target }),
            Err(errno) => last_error = Some(io::Error::from(errno)),
        }
    }
    match last_error {
        Some(err) => Err(err),
        None => Ok(OpenFileLimit { before, now: before }),
    }
}

/// Without Unix resource limits there is nothing to raise.
#[cfg(not(unix))]
pub fn raise_open_file_limit() -> io::Result<OpenFileLimit> {
    Ok(OpenFileLimit { before: None, now: None })
}

/// How many connections an open-file limit leaves room for, after
/// [`RESERVED_FILE_DESCRIPTORS`] (at least 1; `None` for no limit).
pub fn connections_allowed_by(limit: Option<u64>) -> Option<usize> {
    let limit = limit?;
    let room = limit.saturating_sub(RESERVED_FILE_DESCRIPTORS).max(1);
    Some(usize::try_from(room).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_response() {
        let text = std::str::from_utf8(&REFUSAL).expect("ASCII");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .expect("a length")
            .parse()
            .expect("a number");
        assert_eq!(length, body.len());
        let parsed: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(parsed["error"]["code"], "too_many_connections");
    }

    #[test]
    fn the_connection_room_leaves_the_reserve() {
        assert_eq!(connections_allowed_by(Some(1024)), Some(896));
        assert_eq!(connections_allowed_by(Some(10)), Some(1));
        assert_eq!(connections_allowed_by(None), None);
    }

    /// Asserts that `deadline` lies `after` past a moment between `from` and now.
    #[track_caller]
    fn due(deadline: Option<Instant>, from: Instant, after: Duration) {
        let deadline = deadline.expect("a deadline");
        assert!(deadline >= from + after && deadline <= Instant::now() + after, "{deadline:?}");
    }

    #[test]
    fn deadlines_follow_the_phases() {
        let options = ServeOptions {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1,
        };
        let opened = Instant::now();
        let activity = Activity::new();
        due(activity.deadline(&options, false), opened, options.header_timeout);
        activity.request_started();
        assert_eq!(activity.deadline(&options, false), None);
        // Body bytes of a request being answered start nothing.
        activity.bytes_arrived();
        assert_eq!(activity.deadline(&options, false), None);
        let answered = Instant::now();
        activity.request_finished();
        due(activity.deadline(&options, false), answered, options.idle_timeout);
        let next = Instant::now();
        activity.bytes_arrived();
        due(activity.deadline(&options, false), next, options.header_timeout);
        // Draining closes a connection at once unless it is answering.
        assert!(activity.deadline(&options, true).expect("a deadline") <= Instant::now());
        activity.request_started();
        activity.request_started();
        activity.request_finished();
        assert_eq!(activity.deadline(&options, true), None);
    }
}
