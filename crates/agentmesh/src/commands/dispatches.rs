//! `agentmesh dispatches`: direct dispatches not yet completed, failed or stale,
//! oldest first.
//!
//! A read view for a person; coordinators record dispatches through the daemon.

use super::Context;
use crate::now;
use crate::output::{self, DispatchView, Output};

/// Runs `dispatches`.
pub fn run(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    let dispatches: Vec<DispatchView> =
        ctx.store()?.active_direct_dispatches(ctx.mesh())?.into_iter().map(DispatchView::from).collect();
    let now = now();
    out.emit(&dispatches, |w| output::write_dispatch_table(w, &dispatches, now))
}
