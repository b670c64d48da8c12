//! `agentmesh sessions`: the worker sessions of the mesh that reported themselves
//! idle and whose report has not run out.
//!
//! A read view for a person; sessions report idleness through the daemon. The
//! list is sorted by node, then session, so repeated runs line up.

use super::Context;
use crate::now;
use crate::output::{self, IdleSessionView, Noun, Output};

/// Runs `sessions`.
pub fn run(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    let sessions: Vec<IdleSessionView> = ctx.read_api()?.idle_sessions(ctx.mesh())?;
    let now = now();
    out.emit(&sessions, |w| {
        output::write_listing(w, ctx.mesh(), Noun("idle session", "idle sessions"), sessions.len(), |w| {
            output::write_idle_session_table(w, &sessions, now)
        })
    })
}
