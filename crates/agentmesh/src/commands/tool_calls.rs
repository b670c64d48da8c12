//! `agentmesh tool-calls`: the log behind the rate guard, the agent-facing tool
//! calls of the last minutes, counted per caller role and tool, then listed
//! newest first.
//!
//! A read view for a person who wonders why an agent was told to stop polling.

use agentmesh_api::wire::ToolCallParams;

use super::{Context, required};
use crate::cli::ToolCallsArgs;
use crate::output::{self, Output};

/// Runs `tool-calls`.
pub(super) fn run(ctx: &Context, args: ToolCallsArgs, out: &mut Output) -> anyhow::Result<()> {
    let role = args.role.as_deref().map(|r| required("role", r).map(str::to_owned)).transpose()?;
    let params =
        ToolCallParams { role, within_secs: args.within.map(|span| span.as_secs()), limit: args.limit };
    let log = ctx.read_api()?.tool_calls(ctx.mesh(), params)?;
    out.emit(&log, |w| output::write_tool_call_log(w, &log))
}
