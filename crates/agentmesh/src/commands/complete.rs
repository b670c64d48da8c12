//! `agentmesh complete`: a worker session reports that its task ended.
//!
//! The report carries this machine's clock as the time the work ended; the store
//! uses it only to choose among several tasks assigned to the same session, so a
//! skewed clock cannot make the report miss.

use agentmesh_api::wire::{CompletionBody, DEFAULT_FAILURE_REASON};
use agentmesh_core::TaskStatus;

use super::{Context, required};
use crate::cli::CompleteArgs;
use crate::output::Output;

/// Runs `complete`.
pub fn run(ctx: &Context, args: CompleteArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = CompletionBody {
        session_id: required("sessionId", &args.session)?.to_owned(),
        task_id: args.task.map(|id| id.trim().to_owned()).filter(|id| !id.is_empty()),
        epoch: args.epoch,
        summary: args.summary,
        failed: args.failed,
        reason: args.reason,
    };
    let task = ctx.api()?.complete(ctx.mesh(), body)?;
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
