//! The MCP endpoints: `/mcp` serves the daemon's mesh, `/mcp/{mesh}` any other.
//! Each mesh has its own streamable HTTP service (and so its own sessions), made
//! the first time the mesh is asked for and kept while the daemon runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agentmesh_api::MeshApi;
use agentmesh_core::MeshId;
use agentmesh_mcp::McpHttpService;
use axum::extract::{Path, Request};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::api::mesh_id;

/// The MCP services of the meshes asked for so far.
#[derive(Clone)]
pub(crate) struct McpServices {
    inner: Arc<Inner>,
}

struct Inner {
    api: Arc<dyn MeshApi>,
    daemon_id: String,
    shutdown: CancellationToken,
    by_mesh: Mutex<HashMap<String, McpHttpService>>,
}

impl McpServices {
    pub(crate) fn new(api: Arc<dyn MeshApi>, daemon_id: String, shutdown: CancellationToken) -> McpServices {
        McpServices {
            inner: Arc::new(Inner { api, daemon_id, shutdown, by_mesh: Mutex::new(HashMap::new()) }),
        }
    }

    /// The service of `mesh`, made on first use.
    pub(crate) fn for_mesh(&self, mesh: &MeshId) -> McpHttpService {
        let inner = &self.inner;
        let mut by_mesh = inner.by_mesh.lock().unwrap_or_else(PoisonError::into_inner);
        by_mesh
            .entry(mesh.to_string())
            .or_insert_with(|| {
                agentmesh_mcp::http_service(
                    Arc::clone(&inner.api),
                    mesh.clone(),
                    inner.daemon_id.clone(),
                    agentmesh_mcp::PRESENCE_EVERY,
                    inner.shutdown.clone(),
                )
            })
            .clone()
    }
}

/// The handler of `/mcp/{mesh}`: the request goes to the mesh's service; a mesh id
/// that is blank, too long or has control characters gets a 400 naming `mesh`.
pub(crate) async fn serve_mesh(
    services: McpServices,
    Path(mesh): Path<String>,
    request: Request,
) -> Response {
    let mesh = match mesh_id(mesh) {
        Ok(mesh) => mesh,
        Err(err) => return err.into_response(),
    };
    match services.for_mesh(&mesh).oneshot(request).await {
        Ok(response) => response.map(axum::body::Body::new),
        Err(never) => match never {},
    }
}
