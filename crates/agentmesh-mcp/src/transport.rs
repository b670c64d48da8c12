//! The two transports: stdio (`agentmesh mcp`) and streamable HTTP (`/mcp` on the
//! daemon). Both serve [`MeshTools`], so a tool behaves the same on either.

use std::sync::Arc;

use agentmesh_api::MeshApi;
use agentmesh_core::MeshId;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::identity::Identity;
use crate::server::MeshTools;

/// The streamable HTTP service the daemon nests at `/mcp`.
pub type McpHttpService = StreamableHttpService<MeshTools, LocalSessionManager>;

/// Serves `tools` over this process's stdin and stdout until the client closes
/// stdin or `shutdown` is cancelled. Answers how the session ended (`Closed`,
/// `Cancelled`, or why it never started).
///
/// stdout carries the protocol: nothing else may write to it.
pub async fn serve_stdio(tools: MeshTools, shutdown: CancellationToken) -> String {
    // `stdio_pipes` reads stdin without a blocking thread, so a cancelled session
    // lets the process exit even while the client still holds stdin open.
    match tools.serve_with_ct(rmcp::transport::stdio_pipes(), shutdown).await {
        Ok(running) => match running.waiting().await {
            Ok(reason) => format!("{reason:?}"),
            Err(err) => format!("the session task failed: {err}"),
        },
        Err(err) => format!("the session did not start: {err}"),
    }
}

/// The `/mcp` service: streamable HTTP with sessions, each session a
/// [`MeshTools`] on `mesh` with machine id `daemon_id` and a fresh run id, so two
/// coordinators connected to one daemon each get only their own events. A
/// session reports its presence when it starts and every `presence_every` while
/// it lives, also when it calls no tools, and reports its end when it closes.
///
/// rmcp's `Host` allowlist (loopback names only, against DNS rebinding) is
/// turned off: the daemon may listen on any address, and every request must
/// carry the daemon's bearer token, which a rebinding web page cannot send.
pub fn http_service(
    api: Arc<dyn MeshApi>,
    mesh: MeshId,
    daemon_id: String,
    presence_every: std::time::Duration,
    shutdown: CancellationToken,
) -> McpHttpService {
    let config =
        StreamableHttpServerConfig::default().with_cancellation_token(shutdown).disable_allowed_hosts();
    let mesh: MeshId = mesh;
    StreamableHttpService::new(
        move || {
            let tools =
                MeshTools::new(Arc::clone(&api), mesh.clone(), Identity::fresh_run(daemon_id.clone(), None));
            Ok(tools.keeping_presence(presence_every))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
