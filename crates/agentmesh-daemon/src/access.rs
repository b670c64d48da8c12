//! The access log: one `info` line per request answered.
//!
//! [`log_request`] wraps every route, refused requests included, and logs under
//! the target `agentmesh::access` the method, the route template
//! (`/v1/meshes/{mesh}/tasks`, never the concrete path or its query string), the
//! status, the time to the response head in milliseconds and the mesh of a
//! `/v1/meshes/{mesh}/...` path. Nothing else of the request is logged: no header
//! (so never the bearer token), no body, no peer address. Values go in as
//! strings, which the text format quotes and escapes, so a crafted mesh id cannot
//! forge a log line.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::mesh_of_path;

/// The route of a request no route matched.
const UNMATCHED_ROUTE: &str = "unmatched";

/// Middleware: answers the request, then logs its access line.
pub(crate) async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route =
        request.extensions().get::<MatchedPath>().map_or(UNMATCHED_ROUTE, MatchedPath::as_str).to_owned();
    let mesh = mesh_of_path(request.uri().path());
    let response = next.run(request).await;
    let duration_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    tracing::info!(
        target: "agentmesh::access",
        method = method.as_str(),
        route = route.as_str(),
        status = response.status().as_u16(),
        duration_ms,
        mesh = mesh.as_deref(),
        "request"
    );
    response
}
