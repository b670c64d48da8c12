//! The agentmesh MCP tools: what a coding agent calls to coordinate a mesh or to
//! work in one.
//!
//! [`MeshTools`] is the tool server. It holds a [`MeshApi`](agentmesh_api::MeshApi)
//! (a local store or a remote daemon: the tools cannot tell), the mesh it works
//! in and the [`Identity`] it acts under. Coordinator tools enqueue and manage
//! tasks and missions and take the events addressed to this coordinator run;
//! worker tools claim, heartbeat, complete and fail tasks. [`serve_stdio`] runs it
//! for `agentmesh mcp`; [`http_service`] is the `/mcp` endpoint of the daemon.
//!
//! Modules: `identity` (daemon id file, run ids), `args` (tool arguments and the
//! tool error), `render` (events as the agent reads them, the drain budget),
//! `schema` (the tools' input schemas), `server` (the tools), `transport` (stdio
//! and HTTP).

mod args;
pub mod identity;
pub mod render;
mod schema;
mod server;
mod transport;

pub use args::ToolError;
pub use identity::{DAEMON_ID_FILE_NAME, Identity, load_or_create_daemon_id};
pub use server::{DEFAULT_WAIT_SECS, MAX_WAIT_SECS, MeshTools, PRESENCE_EVERY, WAIT_TOOL};
pub use transport::{McpHttpService, http_service, serve_stdio};
