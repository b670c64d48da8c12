//! `agentmesh claim`: a worker session asks for its next task.
//!
//! "Nothing to claim" is an answer, not an error: with `--json` the document is
//! `null` and the refusal reason goes to stderr; the exit code is 0 either way, so
//! a worker loop can tell "no work" from "broken" by the exit code alone.

use std::num::NonZeroU32;

use agentmesh_api::wire::ClaimBody;
use agentmesh_core::{InvalidInput, Task};

use super::{Context, required};
use crate::cli::ClaimArgs;
use crate::output::{self, Output};

/// Runs `claim`.
pub fn run(ctx: &Context, args: ClaimArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = ClaimBody {
        node_id: required("nodeId", &args.node)?.to_owned(),
        session_id: required("sessionId", &args.session)?.to_owned(),
        capability_tags: args.tags,
        provider_type: args.provider,
        provider_max_parallel: args.max_parallel,
        node_is_worktree: args.worktree,
        lease_ms: args
            .lease_secs
            .map(|secs| {
                secs.checked_mul(1000)
                    .and_then(NonZeroU32::new)
                    .ok_or_else(|| InvalidInput::new("leaseSecs", "must be between 1 and 4294967 seconds"))
            })
            .transpose()?,
    };
    let view = ctx.api()?.claim(ctx.mesh(), body)?;
    match view.task {
        Some(task) => out.emit(&task, |w| {
            writeln!(
                w,
                "claimed {} (epoch {}): {}",
                task.id,
                task.epoch(),
                output::excerpt(&task.message, 100)
            )
        }),
        None => {
            let reason = view.refusal.unwrap_or_else(|| "no pending task".to_owned());
            if out.is_json() {
                eprintln!("agentmesh: nothing to claim: {reason}");
            }
            out.emit(&None::<Task>, |w| writeln!(w, "nothing to claim: {reason}"))
        }
    }
}
