//! `agentmesh claim`: a worker session asks for its next task.
//!
//! "Nothing to claim" is an answer, not an error: with `--json` the document is
//! `null` and the refusal reason goes to stderr; the exit code is 0 either way, so
//! a worker loop can tell "no work" from "broken" by the exit code alone.

use std::num::NonZeroU32;
use std::time::Duration;

use agentmesh_api::views::ClaimView;
use agentmesh_api::wire::ClaimBody;
use agentmesh_core::{InvalidInput, Task};

use super::{Context, id};
use crate::cli::ClaimArgs;
use crate::duration;
use crate::output::{self, Output};

/// Runs `claim`.
pub(super) fn run(ctx: &Context, args: ClaimArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = ClaimBody {
        node_id: id("nodeId", &args.node)?.to_owned(),
        session_id: id("sessionId", &args.session)?.to_owned(),
        capability_tags: args.tags,
        provider_type: args.provider,
        provider_max_parallel: args.max_parallel,
        node_is_worktree: args.worktree,
        lease_ms: lease_ms(args.lease)?,
    };
    let view = ctx.api()?.claim(ctx.mesh(), body)?;
    print_claim(view, out)
}

/// A claim's lease in milliseconds, from `--lease`.
pub(super) fn lease_ms(lease: Option<Duration>) -> Result<Option<NonZeroU32>, InvalidInput> {
    lease
        .map(|lease| {
            duration::lease_millis(lease).ok_or_else(|| {
                InvalidInput::new(
                    "lease",
                    format!("must be between 1s and {}", duration::format(duration::MAX_LEASE)),
                )
            })
        })
        .transpose()
}

/// Prints a claim's answer: the task, or `null` (JSON) and why there is none.
pub(super) fn print_claim(view: ClaimView, out: &mut Output) -> anyhow::Result<()> {
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
