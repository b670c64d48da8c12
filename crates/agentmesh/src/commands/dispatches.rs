//! `agentmesh dispatches`: direct dispatches not yet completed, failed or stale,
//! oldest first.
//!
//! A read view for a person; coordinators record dispatches through the daemon.

use super::Context;
use crate::now;
use crate::output::{self, DispatchView, Noun, Output};

/// Runs `dispatches`.
pub fn run(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    let dispatches: Vec<DispatchView> = ctx.read_api()?.dispatches(ctx.mesh())?;
    let now = now();
    out.emit(&dispatches, |w| {
        output::write_listing(
            w,
            ctx.mesh(),
            Noun("active dispatch", "active dispatches"),
            dispatches.len(),
            |w| output::write_dispatch_table(w, &dispatches, now),
        )
    })
}
