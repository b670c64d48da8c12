//! `GET /v1/meshes/{mesh}/stream`: Server-Sent Events telling the dashboard
//! that its mesh changed.
//!
//! The stream opens with a `ready` event carrying the ledger cursor: a sequence
//! number, the mesh's newest entry's, or `afterSeq` when the client names one.
//! Then, whenever the daemon commits a write, or the fallback interval passes
//! (writes by other processes on the same database file), it reads the mesh's
//! ledger slice by sequence after the cursor; new entries go out as one `changed`
//! event (`{"cursor": ..., "entries": [...]}`) and move the cursor. Every state
//! change writes a ledger entry in its own transaction, and pages by sequence are
//! in commit order, so a change is never missed (also one stamped before an entry
//! already sent) and an idle mesh sends nothing but a keep-alive comment now and
//! then. The stream ends when the client goes away or
//! the daemon shuts down.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use agentmesh_api::MeshApi;
use agentmesh_api::wire::SliceParams;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use http_body::Frame;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::api::mesh_id;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::route::Route;

/// How long a quiet stream waits before it sends a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Ledger entries read per page while catching up.
const PAGE: u32 = 200;

/// The stream route (behind the token check, as every route not marked open).
pub(crate) fn route(shutdown: CancellationToken) -> Route {
    Route::get(
        "/meshes/{mesh}/stream",
        move |state, path, query| stream(state, path, query, shutdown.clone()),
        "The mesh's ledger as it grows, as Server-Sent Events",
    )
    .named("stream")
    .query::<StreamParams>()
    .text(
        "text/event-stream",
        "Server-Sent Events: the ledger entries after afterSeq, then each new one as it is written",
    )
}

/// Path `{mesh}`.
#[derive(Debug, Deserialize)]
struct MeshPath {
    mesh: String,
}

/// Query of the stream.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StreamParams {
    /// The sequence number of the ledger entry the client has seen last (the
    /// mesh's newest entry when absent).
    after_seq: Option<u64>,
}

/// A future that completes at the next write that concerns `mesh` (the mesh's
/// [`agentmesh_api::WakeUp`], the one the event watch waits on), or after the
/// fallback interval. The mark is taken when it is made: a write between its
/// making and its first poll still wakes it.
fn write_wakeup(state: &AppState, mesh: &str) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let wake_up = state.mesh.wake_up();
    let seen = wake_up.mark(mesh);
    let (woke, woken) = tokio::sync::oneshot::channel::<()>();
    wake_up.on_wake(
        mesh,
        seen,
        Box::new(move || {
            let _ = woke.send(());
        }),
    );
    let fallback = state.fallback_poll;
    Box::pin(async move {
        let _ = tokio::time::timeout(fallback, woken).await;
    })
}

async fn stream(
    State(state): State<AppState>,
    ApiPath(MeshPath { mesh }): ApiPath<MeshPath>,
    ApiQuery(params): ApiQuery<StreamParams>,
    shutdown: CancellationToken,
) -> Result<Response, ApiError> {
    let mesh = mesh_id(mesh)?;
    let cursor = match params.after_seq {
        Some(after_seq) => after_seq,
        None => {
            let query = mesh.clone();
            let head = SliceParams { after_seq: Some(0), limit: Some(1), ..SliceParams::default() };
            let slice = state.with_mesh(move |m| m.ledger_slice(&query, head)).await?;
            slice.cursor.head_seq.unwrap_or(0)
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let ready = serde_json::json!({ "cursor": cursor });
    let _ = tx.try_send(event("ready", &ready));
    tokio::spawn(follow(state, mesh.to_string(), cursor, tx, shutdown));
    let mut response = Body::new(EventBody(rx)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Sends the mesh's changes down `tx` until the client leaves or the daemon stops.
async fn follow(
    state: AppState,
    mesh: String,
    mut cursor: u64,
    tx: mpsc::Sender<Bytes>,
    shutdown: CancellationToken,
) {
    let mut quiet = Duration::ZERO;
    loop {
        let wakeup = write_wakeup(&state, &mesh);
        // Catch up: page through everything after the cursor.
        loop {
            let query = mesh.clone();
            let params = SliceParams { after_seq: Some(cursor), limit: Some(PAGE), ..SliceParams::default() };
            let Ok(slice) = state.with_mesh(move |m| m.ledger_slice(&query, params)).await else { break };
            // A page may hold nothing of this mesh and still move the cursor (past
            // other meshes' entries), with more to come.
            let before = cursor;
            cursor = slice.cursor.next_after_seq.unwrap_or(cursor);
            let more = slice.cursor.has_more && cursor > before;
            if !slice.entries.is_empty() {
                let changed = serde_json::json!({ "cursor": cursor, "entries": slice.entries });
                if tx.send(event("changed", &changed)).await.is_err() {
                    return;
                }
                quiet = Duration::ZERO;
            }
            if !more {
                break;
            }
        }
        let started = tokio::time::Instant::now();
        tokio::select! {
            () = wakeup => {}
            () = shutdown.cancelled() => return,
            () = tx.closed() => return,
        }
        quiet += started.elapsed();
        if quiet >= KEEP_ALIVE {
            quiet = Duration::ZERO;
            if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                return;
            }
        }
    }
}

/// One SSE event: `event: <name>` and its JSON data on one line.
fn event(name: &str, data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// The response body: the frames `follow` sends, ending when it drops its sender.
struct EventBody(mpsc::Receiver<Bytes>);

impl http_body::Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}
