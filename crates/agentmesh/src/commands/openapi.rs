//! `agentmesh openapi`: prints the OpenAPI 3.1 document of the daemon's HTTP API,
//! the one `GET /openapi.json` serves (`agentmesh_daemon::openapi_document`),
//! built from the daemon's routes and the types they decode and answer. It is
//! JSON either way; `--json` changes nothing.

use crate::output::Output;

/// Runs `openapi`.
pub(super) fn run(out: &mut Output) -> anyhow::Result<()> {
    let document = agentmesh_daemon::openapi_document();
    let text = serde_json::to_string_pretty(&document)?;
    out.emit(&document, |w| writeln!(w, "{text}"))
}
