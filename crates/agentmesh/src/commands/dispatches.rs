//! `agentmesh dispatches`: direct dispatches not yet completed, failed or stale,
//! oldest first; `show` reads the dispatch of one task whatever its status, and
//! `mark`, `mark-stale` and `remove` move dispatches through their lifecycle as
//! the daemon's sweep does (completed and failed dispatches never change again).

use agentmesh_api::wire::{DispatchStatusBody, RemoveDispatchesBody, StaleDispatchesBody};

use super::{Context, required};
use crate::cli::{DispatchesArgs, DispatchesCommand};
use crate::now;
use crate::output::{self, DispatchView, Output};

/// Runs `dispatches`.
pub fn run(ctx: &Context, args: DispatchesArgs, out: &mut Output) -> anyhow::Result<()> {
    let api = ctx.api()?;
    match args.command {
        None => {
            let dispatches: Vec<DispatchView> = api.dispatches(ctx.mesh())?;
            let now = now();
            out.emit(&dispatches, |w| output::write_dispatch_table(w, &dispatches, now))
        }
        Some(DispatchesCommand::Show(args)) => {
            let dispatch = api.dispatch(ctx.mesh(), required("taskId", &args.task)?)?;
            out.emit(&dispatch, |w| output::write_view_fields(w, &dispatch))
        }
        Some(DispatchesCommand::Mark(args)) => {
            let body =
                DispatchStatusBody { status: args.status, task_id: args.task, session_id: args.session };
            let view = api.update_dispatches(ctx.mesh(), body)?;
            out.emit(&view, |w| writeln!(w, "{} dispatch(es) changed", view.changed))
        }
        Some(DispatchesCommand::MarkStale(args)) => {
            let view = api.mark_stale_dispatches(
                ctx.mesh(),
                StaleDispatchesBody { older_than_secs: args.older_than },
            )?;
            out.emit(&view, |w| writeln!(w, "{} dispatch(es) marked stale", view.marked_stale))
        }
        Some(DispatchesCommand::Remove(args)) => {
            let view = api.remove_dispatches(ctx.mesh(), RemoveDispatchesBody { task_ids: args.tasks })?;
            out.emit(&view, |w| writeln!(w, "{} dispatch(es) removed", view.removed))
        }
    }
}
