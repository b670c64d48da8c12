//! `agentmesh dispatches`: direct dispatches not yet completed, failed or stale,
//! oldest first; `show` reads the dispatch of one task whatever its status, and
//! `mark`, `mark-stale` and `remove` move dispatches through their lifecycle as
//! the daemon's sweep does (completed and failed dispatches never change again).

use agentmesh_api::wire::{DispatchStatusBody, RemoveDispatchesBody, StaleDispatchesBody};

use super::{Context, id};
use crate::cli::{DispatchesArgs, DispatchesCommand};
use crate::now;
use crate::output::{self, DispatchView, Noun, Output};

/// Runs `dispatches`.
pub(super) fn run(ctx: &Context, args: DispatchesArgs, out: &mut Output) -> anyhow::Result<()> {
    match args.command {
        None => {
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
        Some(DispatchesCommand::Show(args)) => {
            let dispatch = ctx.read_api()?.dispatch(ctx.mesh(), id("taskId", &args.task)?)?;
            out.emit(&dispatch, |w| output::write_view_fields(w, &dispatch))
        }
        Some(DispatchesCommand::Mark(args)) => {
            let task_id = args.task.as_deref().map(|t| id("taskId", t).map(str::to_owned)).transpose()?;
            let session_id =
                args.session.as_deref().map(|s| id("sessionId", s).map(str::to_owned)).transpose()?;
            let body = DispatchStatusBody { status: args.status, task_id, session_id };
            let view = ctx.api()?.update_dispatches(ctx.mesh(), body)?;
            out.emit(&view, |w| writeln!(w, "{} dispatch(es) changed", view.changed))
        }
        Some(DispatchesCommand::MarkStale(args)) => {
            let body = StaleDispatchesBody { older_than_secs: args.older_than.as_secs() };
            let view = ctx.api()?.mark_stale_dispatches(ctx.mesh(), body)?;
            out.emit(&view, |w| writeln!(w, "{} dispatch(es) marked stale", view.marked_stale))
        }
        Some(DispatchesCommand::Remove(args)) => {
            let task_ids = args
                .tasks
                .iter()
                .map(|t| id("taskIds", t).map(str::to_owned))
                .collect::<Result<Vec<_>, _>>()?;
            let view = ctx.api()?.remove_dispatches(ctx.mesh(), RemoveDispatchesBody { task_ids })?;
            out.emit(&view, |w| writeln!(w, "{} dispatch(es) removed", view.removed))
        }
    }
}
