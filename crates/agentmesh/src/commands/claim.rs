//! `agentmesh claim`: a worker session asks for its next task.
//!
//! "Nothing to claim" is an answer, not an error: with `--json` the document is
//! `null` and the refusal reason goes to stderr; the exit code is 0 either way, so
//! a worker loop can tell "no work" from "broken" by the exit code alone.

use agentmesh_core::{Claimant, Task};
use agentmesh_store::{ClaimOptions, ClaimOutcome};

use super::{Context, required};
use crate::cli::ClaimArgs;
use crate::now;
use crate::output::{self, Output};

/// Runs `claim`.
pub fn run(ctx: &Context, args: ClaimArgs, out: &mut Output) -> anyhow::Result<()> {
    let claimant = Claimant {
        node_id: required("nodeId", &args.node)?.to_owned(),
        session_id: required("sessionId", &args.session)?.to_owned(),
        capability_tags: args.tags,
        provider_type: args.provider,
        provider_max_parallel: args.max_parallel,
        node_is_worktree: args.worktree,
    };
    let opts = ClaimOptions { lease_ms: args.lease_secs.map(|secs| i64::from(secs) * 1000) };
    match ctx.store()?.claim_next(ctx.mesh(), &claimant, &opts, now())? {
        ClaimOutcome::Claimed(task) => out.emit(&task, |w| {
            writeln!(
                w,
                "claimed {} (epoch {}): {}",
                task.id,
                task.epoch(),
                output::excerpt(&task.message, 100)
            )
        }),
        ClaimOutcome::Refused(reason) => {
            if out.is_json() {
                eprintln!("agentmesh: nothing to claim: {reason}");
            }
            out.emit(&None::<Task>, |w| writeln!(w, "nothing to claim: {reason}"))
        }
    }
}
