//! `agentmesh complete`: a worker session reports that its task ended, and with
//! `--claim-next NODE` claims its next task in the same transaction.
//!
//! The report carries this machine's clock as the time the work ended; the store
//! uses it only to choose among several tasks assigned to the same session, so a
//! skewed clock cannot make the report miss.
//!
//! With `--claim-next`, the text output is the report's line, then the claim's
//! line as `agentmesh claim` prints it; `--json` prints one document,
//! `{"completed": <task>, "next": {"task": <task or null>, "refusal": ...}}`, the
//! next task with its epoch under `epoch` too, as `claim` prints it. A refused
//! report claims nothing.
//!
//! The refusals a worker meets most (no task held, another session's task, a
//! stale epoch) end with what to do about them.

use agentmesh_api::MeshError;
use agentmesh_api::wire::{ClaimBody, CompleteAndClaimBody, CompletionBody, DEFAULT_FAILURE_REASON};
use agentmesh_core::{Task, TaskStatus};
use agentmesh_store::StoreError;

use super::claim::{lease_ms, print_claim, with_epoch};
use super::{Context, id};
use crate::cli::CompleteArgs;
use crate::failure::{code_of, with_fix};
use crate::output::Output;

/// Runs `complete`.
pub(super) fn run(ctx: &Context, args: CompleteArgs, out: &mut Output) -> anyhow::Result<()> {
    let session = id("sessionId", &args.session)?.to_owned();
    let task_id = args.task.as_deref().map(str::trim).filter(|id| !id.is_empty()).map(str::to_owned);
    let fix = |err: anyhow::Error| advise(err, &session, task_id.as_deref());
    let completion = CompletionBody {
        session_id: session.clone(),
        task_id: task_id.clone(),
        epoch: args.epoch,
        summary: args.summary,
        failed: args.failed,
        reason: args.reason,
        occurred_at: args.occurred_at,
    };
    let Some(node) = args.claim_next else {
        let task = ctx.api()?.complete(ctx.mesh(), completion).map_err(|err| fix(err.into()))?;
        return out.emit(&task, |w| writeln!(w, "{}", report_line(&task)));
    };
    let claim = ClaimBody {
        node_id: id("claimNext", &node)?.to_owned(),
        session_id: session.clone(),
        capability_tags: args.tags,
        provider_type: args.provider,
        lease_ms: lease_ms(args.lease)?,
        ..ClaimBody::default()
    };
    let view = ctx
        .api()?
        .complete_and_claim(ctx.mesh(), CompleteAndClaimBody { completion, claim })
        .map_err(|err| fix(err.into()))?;
    if out.is_json() {
        // The document carries the refusal, unlike `claim`'s bare `null`.
        let mut document = serde_json::to_value(&view)?;
        if let Some(next) = &view.next.task {
            document["next"]["task"] = with_epoch(next)?;
        }
        return out.emit(&document, |_| Ok(()));
    }
    out.emit(&view.completed, |w| writeln!(w, "{}", report_line(&view.completed)))?;
    print_claim(view.next, &session, out)
}

/// `err` with what the worker can do about it, for the refusals a report meets
/// most; any other error as it is.
fn advise(err: anyhow::Error, session: &str, task: Option<&str>) -> anyhow::Error {
    let named = task_named_by(&err);
    let show = task.or(named.as_deref()).map_or_else(
        || format!("`agentmesh task list --session {session}`"),
        |task| format!("`agentmesh task show {task}`"),
    );
    let fix = match code_of(&err).as_str() {
        "no_assigned_task" => format!(
            "claim a task first with `agentmesh claim --node NODE --session {session}`, or name the task \
             with --task ID (`agentmesh task list --session {session}` lists the session's tasks)"
        ),
        "not_assigned_to_session" => format!(
            "report it as the session that holds it ({show} names it, assignedSessionId), or leave out \
             --task to report this session's own task"
        ),
        "stale_epoch" => format!(
            "pass --epoch the epoch your claim printed (`(epoch N)`, or `epoch` in `claim --json`); an \
             older one means the task was claimed again or cancelled since: see {show}"
        ),
        _ => return err,
    };
    with_fix(err, fix)
}

/// The task a refused report names (`stale epoch for task t1: ...`), from the
/// store's error or the daemon's message.
fn task_named_by(err: &anyhow::Error) -> Option<String> {
    for cause in err.chain() {
        let store = cause.downcast_ref::<StoreError>().or_else(|| match cause.downcast_ref::<MeshError>() {
            Some(MeshError::Store(store)) => Some(store),
            _ => None,
        });
        match store {
            Some(
                StoreError::StaleEpoch { task_id, .. } | StoreError::NotAssignedToSession { task_id, .. },
            ) => {
                return Some(task_id.clone());
            }
            Some(_) => return None,
            None => {}
        }
        if let Some(MeshError::Remote { message, .. }) = cause.downcast_ref::<MeshError>() {
            let rest =
                message.strip_prefix("stale epoch for task ").or_else(|| message.strip_prefix("task "))?;
            return rest.split([':', ' ']).next().filter(|id| !id.is_empty()).map(str::to_owned);
        }
    }
    None
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
