//! `agentmesh task add|list|show|cancel|requeue`: the coordinator's side of the
//! queue.
//!
//! Mode and priority travel to the core as the strings the user typed, so the
//! core's validation error names the field; only the not-before form (number or
//! instant) and the status filter are decided here.

use agentmesh_core::{NewTask, NotBefore, RequeueOptions, Requeued, TaskStatus};
use agentmesh_store::StoreError;
use anyhow::Context as _;

use super::Context;
use crate::cli::{TaskAddArgs, TaskCancelArgs, TaskCommand, TaskListArgs, TaskRequeueArgs, TaskShowArgs};
use crate::now;
use crate::output::{self, Output};

/// Runs one `task` subcommand.
pub fn run(ctx: &Context, command: TaskCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        TaskCommand::Add(args) => add(ctx, *args, out),
        TaskCommand::List(args) => list(ctx, args, out),
        TaskCommand::Show(args) => show(ctx, args, out),
        TaskCommand::Cancel(args) => cancel(ctx, args, out),
        TaskCommand::Requeue(args) => requeue(ctx, args, out),
    }
}

/// A not-before that reads as an integer is milliseconds; anything else is an
/// instant for the core to parse.
fn parse_not_before(text: String) -> NotBefore {
    match text.trim().parse::<i64>() {
        Ok(ms) => NotBefore::Millis(ms),
        Err(_) => NotBefore::Iso(text),
    }
}

fn new_task(args: TaskAddArgs) -> NewTask {
    NewTask {
        id: args.id,
        message: args.message,
        task_mode: args.mode,
        readonly: args.readonly.then_some(true),
        target_node_id: args.target_node,
        target_session_id: args.target_session,
        required_tags: args.tags,
        priority: args.priority,
        not_before: args.not_before.map(parse_not_before),
        depends_on: args.depends_on,
        mission_id: args.mission,
        max_retries: args.max_retries,
        source_coordinator_session_id: args.coordinator_session,
        source_coordinator_daemon_id: args.coordinator_daemon,
        source_coordinator_run_id: args.coordinator_run,
        ..NewTask::default()
    }
}

fn add(ctx: &Context, args: TaskAddArgs, out: &mut Output) -> anyhow::Result<()> {
    let new = new_task(args);
    let task = ctx.store()?.enqueue(ctx.mesh(), &new, now()).context("cannot enqueue the task")?;
    out.emit(&task, |w| {
        write!(w, "enqueued {}", task.id)?;
        if !task.dependencies().is_empty() {
            write!(w, " (after {})", task.dependencies().join(", "))?;
        }
        writeln!(w)
    })
}

fn list(ctx: &Context, args: TaskListArgs, out: &mut Output) -> anyhow::Result<()> {
    let mut statuses: Vec<TaskStatus> = Vec::with_capacity(args.statuses.len());
    for text in &args.statuses {
        let status: TaskStatus = text.parse()?;
        if !statuses.contains(&status) {
            statuses.push(status);
        }
    }
    let tasks = ctx.store()?.queue_entries(ctx.mesh(), &statuses)?;
    let now = now();
    out.emit(&tasks, |w| output::write_task_table(w, &tasks, now))
}

fn show(ctx: &Context, args: TaskShowArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = args.id.trim();
    let task = ctx
        .store()?
        .find_task(ctx.mesh(), id)?
        .ok_or_else(|| StoreError::TaskNotFound { mesh_id: ctx.mesh().to_owned(), task_id: id.to_owned() })?;
    out.emit(&task, |w| output::write_task_fields(w, &task))
}

fn cancel(ctx: &Context, args: TaskCancelArgs, out: &mut Output) -> anyhow::Result<()> {
    let task = ctx.store()?.cancel_task(ctx.mesh(), args.id.trim(), args.reason.as_deref(), now())?;
    out.emit(&task, |w| writeln!(w, "cancelled {}", task.id))
}

fn requeue(ctx: &Context, args: TaskRequeueArgs, out: &mut Output) -> anyhow::Result<()> {
    let opts = RequeueOptions {
        reason: args.reason,
        force: args.force,
        max_retries: args.max_retries,
        keep_session_pin: args.keep_session_pin,
    };
    let requeued = ctx.store()?.requeue_task(ctx.mesh(), args.id.trim(), &opts, now())?;
    out.emit(requeued.task(), |w| match &requeued {
        Requeued::Pending(task) => {
            writeln!(w, "requeued {} (requeue {})", task.id, task.requeue_count.unwrap_or(0))
        }
        Requeued::RetriesExhausted(task) => writeln!(
            w,
            "task {} is out of retries and failed: {}",
            task.id,
            task.failure_reason.as_deref().unwrap_or("max_retries_exceeded")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_before_numbers_are_millis_and_the_rest_is_iso() {
        assert_eq!(parse_not_before(" 5000 ".into()), NotBefore::Millis(5000));
        assert_eq!(parse_not_before("-1".into()), NotBefore::Millis(-1));
        assert_eq!(
            parse_not_before("2030-01-01T00:00:00Z".into()),
            NotBefore::Iso("2030-01-01T00:00:00Z".into())
        );
    }
}
