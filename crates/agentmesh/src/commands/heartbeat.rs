//! `agentmesh heartbeat`: a worker session extends its task's lease, and may say
//! how the work is going: a percent, a one-line note, or both. The task keeps
//! the latest report (`task show` prints it); a report that says something new
//! is also kept in the ledger as `task_progress`, up to a bounded trail per
//! assignment.
//!
//! Fencing: the beat carries the claim's epoch; a beat for an older one (the
//! task was reclaimed, cancelled or claimed again since) is refused, and the
//! error says what to do.

use agentmesh_api::wire::{HeartbeatBody, ProgressBody};
use agentmesh_core::InvalidInput;

use super::claim::{lease_ms, with_epoch};
use super::{Context, id};
use crate::cli::HeartbeatArgs;
use crate::failure::{code_of, with_fix};
use crate::output::{self, Output};

/// The lease a beat sets when `--lease` is not given: the claim's default.
const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// Runs `heartbeat`.
pub(super) fn run(ctx: &Context, args: HeartbeatArgs, out: &mut Output) -> anyhow::Result<()> {
    let session = id("sessionId", &args.session)?.to_owned();
    let task_id = id("taskId", &args.task)?.to_owned();
    let lease = lease_ms(Some(args.lease.unwrap_or(DEFAULT_LEASE)))?
        .ok_or_else(|| InvalidInput::new("lease", "a lease is required"))?;
    let progress = (args.percent.is_some() || args.note.is_some())
        .then_some(ProgressBody { percent: args.percent, note: args.note });
    let body = HeartbeatBody {
        task_id: task_id.clone(),
        session_id: session.clone(),
        epoch: args.epoch,
        lease_ms: lease,
        progress,
    };
    let task =
        ctx.api()?.heartbeat(ctx.mesh(), body).map_err(|err| advise(err.into(), &session, &task_id))?;
    if out.is_json() {
        return out.emit(&with_epoch(&task)?, |_| Ok(()));
    }
    out.emit(&task, |w| {
        let until = task.lease_expires_at.as_deref().unwrap_or("-");
        writeln!(w, "{} (epoch {}): lease until {until}", task.id, task.epoch())?;
        if let Some(progress) = &task.progress {
            writeln!(w, "progress: {}", output::progress_line(progress))?;
        }
        Ok(())
    })
}

/// `err` with what the worker can do about it, for the refusals a beat meets.
fn advise(err: anyhow::Error, session: &str, task: &str) -> anyhow::Error {
    let fix = match code_of(&err).as_str() {
        "stale_epoch" | "not_assigned_to_session" | "invalid_transition" => format!(
            "the task is no longer this session's: stop working on it (`agentmesh task show {task}` says who \
             holds it now), and claim again with `agentmesh claim --node NODE --session {session}`"
        ),
        "task_not_found" => String::from("`agentmesh task list` lists the mesh's tasks"),
        _ => return err,
    };
    with_fix(err, fix)
}
