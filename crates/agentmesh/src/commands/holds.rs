//! `agentmesh holds`: the in-flight holds of acknowledged tasks, in the order they
//! were first held; `set` holds a task or updates its hold (its first held time is
//! kept), `show` reads one, `release` deletes one.

use agentmesh_api::wire::HoldBody;

use super::{Context, id};
use crate::cli::{HoldsArgs, HoldsCommand};
use crate::now;
use crate::output::{self, HoldView, Noun, Output};

/// Runs `holds`.
pub(super) fn run(ctx: &Context, args: HoldsArgs, out: &mut Output) -> anyhow::Result<()> {
    match args.command {
        None => {
            let holds: Vec<HoldView> = ctx.read_api()?.holds(ctx.mesh())?;
            let now = now();
            out.emit(&holds, |w| {
                output::write_listing(
                    w,
                    ctx.mesh(),
                    Noun("in-flight hold", "in-flight holds"),
                    holds.len(),
                    |w| output::write_hold_table(w, &holds, now),
                )
            })
        }
        Some(HoldsCommand::Set(args)) => {
            let body = HoldBody {
                task_id: id("taskId", &args.task)?.to_owned(),
                hold_reason: args.reason,
                first_idle_since_ack: args.first_idle_since_ack,
                read_failure_count: args.read_failures,
            };
            let hold = ctx.api()?.hold_task(ctx.mesh(), body)?;
            out.emit(&hold, |w| output::write_view_fields(w, &hold))
        }
        Some(HoldsCommand::Show(args)) => {
            let hold = ctx.read_api()?.hold(ctx.mesh(), id("taskId", &args.task)?)?;
            out.emit(&hold, |w| output::write_view_fields(w, &hold))
        }
        Some(HoldsCommand::Release(args)) => {
            let task = id("taskId", &args.task)?;
            let view = ctx.api()?.release_hold(ctx.mesh(), task)?;
            out.emit(&view, |w| {
                if view.released {
                    writeln!(w, "released the hold of {task}")
                } else {
                    writeln!(w, "{task} was not held")
                }
            })
        }
    }
}
