//! `agentmesh complete`: a worker session reports that its task ended.
//!
//! The report carries this machine's clock as the time the work ended; the store
//! uses it only to choose among several tasks assigned to the same session, so a
//! skewed clock cannot make the report miss.

use agentmesh_core::TaskStatus;
use agentmesh_store::{CompletionReport, Outcome};

use super::{Context, required};
use crate::cli::CompleteArgs;
use crate::now;
use crate::output::Output;

/// The failure reason when `--failed` comes without `--reason`.
const DEFAULT_FAILURE_REASON: &str = "worker reported failure";

/// Runs `complete`.
pub fn run(ctx: &Context, args: CompleteArgs, out: &mut Output) -> anyhow::Result<()> {
    let outcome = if args.failed {
        Outcome::Failed {
            reason: args.reason.unwrap_or_else(|| DEFAULT_FAILURE_REASON.to_owned()),
            summary: args.summary,
        }
    } else {
        Outcome::Completed { summary: args.summary }
    };
    let now = now();
    let report = CompletionReport {
        session_id: required("sessionId", &args.session)?.to_owned(),
        task_id: args.task.map(|id| id.trim().to_owned()).filter(|id| !id.is_empty()),
        epoch: args.epoch,
        occurred_at: Some(now.iso()),
        outcome,
    };
    let task = ctx.store()?.complete_task(ctx.mesh(), &report, now)?;
    out.emit(&task, |w| match task.status {
        TaskStatus::Failed => writeln!(
            w,
            "failed {}: {}",
            task.id,
            task.failure_reason.as_deref().unwrap_or(DEFAULT_FAILURE_REASON)
        ),
        status => writeln!(w, "{status} {}", task.id),
    })
}
