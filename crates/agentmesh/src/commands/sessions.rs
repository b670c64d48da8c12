//! `agentmesh sessions`: the worker sessions of the mesh that reported themselves
//! idle and whose report has not run out; `sessions remove` forgets one session's
//! report, as a session shutting down does.
//!
//! The list is sorted by node, then session, so repeated runs line up.

use super::{Context, id};
use crate::cli::{SessionRemoveArgs, SessionsArgs, SessionsCommand};
use crate::now;
use crate::output::{self, IdleSessionView, Noun, Output};

/// Runs `sessions`.
pub(super) fn run(ctx: &Context, args: SessionsArgs, out: &mut Output) -> anyhow::Result<()> {
    match args.command {
        None => list(ctx, out),
        Some(SessionsCommand::Remove(args)) => remove(ctx, args, out),
    }
}

fn list(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    let sessions: Vec<IdleSessionView> = ctx.read_api()?.idle_sessions(ctx.mesh())?;
    let now = now();
    out.emit(&sessions, |w| {
        output::write_listing(w, ctx.mesh(), Noun("idle session", "idle sessions"), sessions.len(), |w| {
            output::write_idle_session_table(w, &sessions, now)
        })
    })
}

fn remove(ctx: &Context, args: SessionRemoveArgs, out: &mut Output) -> anyhow::Result<()> {
    let node = id("nodeId", &args.node)?;
    let session = id("sessionId", &args.session)?;
    let view = ctx.api()?.remove_idle_session(ctx.mesh(), node, session)?;
    out.emit(&view, |w| {
        if view.removed {
            writeln!(w, "removed the idle report of {session} on {node}")
        } else {
            writeln!(w, "{session} on {node} had no idle report")
        }
    })
}
