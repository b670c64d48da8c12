//! `agentmesh complete`: a worker session reports that its task ended, and with
//! `--claim-next NODE` claims its next task in the same transaction.
//!
//! The report carries this machine's clock as the time the work ended; the store
//! uses it only to choose among several tasks assigned to the same session, so a
//! skewed clock cannot make the report miss.
//!
//! With `--claim-next`, the text output is the report's line, then the claim's
//! line as `agentmesh claim` prints it; `--json` prints one document,
//! `{"completed": <task>, "next": {"task": <task or null>, "refusal": ...}}`. A
//! refused report claims nothing.

use agentmesh_api::wire::{ClaimBody, CompleteAndClaimBody, CompletionBody, DEFAULT_FAILURE_REASON};
use agentmesh_core::{Task, TaskStatus};

use super::claim::{lease_ms, print_claim};
use super::{Context, id};
use crate::cli::CompleteArgs;
use crate::output::Output;

/// Runs `complete`.
pub(super) fn run(ctx: &Context, args: CompleteArgs, out: &mut Output) -> anyhow::Result<()> {
    let session = id("sessionId", &args.session)?.to_owned();
    let completion = CompletionBody {
        session_id: session.clone(),
        task_id: args.task.map(|id| id.trim().to_owned()).filter(|id| !id.is_empty()),
        epoch: args.epoch,
        summary: args.summary,
        failed: args.failed,
        reason: args.reason,
    };
    let Some(node) = args.claim_next else {
        let task = ctx.api()?.complete(ctx.mesh(), completion)?;
        return out.emit(&task, |w| writeln!(w, "{}", report_line(&task)));
    };
    let claim = ClaimBody {
        node_id: id("claimNext", &node)?.to_owned(),
        session_id: session,
        capability_tags: args.tags,
        provider_type: args.provider,
        lease_ms: lease_ms(args.lease)?,
        ..ClaimBody::default()
    };
    let view = ctx.api()?.complete_and_claim(ctx.mesh(), CompleteAndClaimBody { completion, claim })?;
    if out.is_json() {
        // The document carries the refusal, unlike `claim`'s bare `null`.
        return out.emit(&view, |_| Ok(()));
    }
    out.emit(&view.completed, |w| writeln!(w, "{}", report_line(&view.completed)))?;
    print_claim(view.next, out)
}

/// `completed <id>`, or `failed <id>: <reason>`.
fn report_line(task: &Task) -> String {
    match task.status {
        TaskStatus::Failed => {
            format!(
                "failed {}: {}",
                task.id,
                task.failure_reason.as_deref().unwrap_or(DEFAULT_FAILURE_REASON)
            )
        }
        status => format!("{status} {}", task.id),
    }
}
