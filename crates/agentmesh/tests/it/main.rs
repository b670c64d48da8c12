//! The `agentmesh` binary's end-to-end tests, as one test binary (one link, one
//! process per `cargo test` run). Each module drives the real executable, a real
//! daemon on loopback or a real MCP client against a data dir of its own, so the
//! modules' tests run side by side.
//!
//! Two suites keep binaries of their own: `dashboard` measures a browser's first
//! paint and `serve_process` holds thousands of connections against a lowered
//! file limit; both time what they observe, so they run apart from the rest.

mod archive;
mod backup;
mod cli;
mod conventions;
mod daemon_log;
mod disk_full;
mod faults;
mod first_start;
mod guidance;
mod import_adhdev;
mod mcp;
mod mcp_http;
mod mcp_python;
mod mcp_stdio;
mod mcp_support;
mod mcp_two_coordinators;
mod migrate;
#[path = "../support/node.rs"]
mod node_support;
mod packaging;
mod postgres_daemons;
mod records;
mod reservations;
mod tls;
mod webhooks;
mod work;

/// The binary under test, with an environment that cannot leak a developer's
/// own settings: every `AGENTMESH_*` variable (the data dir, mesh, server,
/// token, database, durability, request timeout, ...) and the v2 enforce switch
/// are removed, and the log kept to warnings (a test sets its own after).
fn agentmesh() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentmesh"));
    for (var, _) in std::env::vars_os() {
        if var.to_str().is_some_and(|v| v.starts_with("AGENTMESH_") || v == "MESH_PROTOCOL_V2_ENFORCE") {
            cmd.env_remove(var);
        }
    }
    cmd.env("RUST_LOG", "warn");
    cmd
}
