//! `agentmesh task add|list|show|cancel|requeue`: the coordinator's side of the
//! queue.
//!
//! Mode and priority travel to the core as the strings the user typed, so the
//! core's validation error names the field; the not-before form (number, duration or
//! instant) is decided by its flag's parser (`duration::not_before`), and only the
//! list's filters here.
//!
//! `task list` takes the filters of the HTTP API's listing (`ListParams`: status,
//! tag, node, session, mission, dependency, text, offset, limit), so it reads the
//! same on the data dir and through `--server`; `--status blocked` selects the
//! pending tasks a failed dependency holds back, the rows the table shows as
//! `blocked`.

use agentmesh_api::wire::{
    CancelBody, CoordinatorBody, DispatchedTaskBody, EnqueueBody, ListParams, PriorityBody, RequeueBody,
    StatusFilter,
};
use agentmesh_core::InvalidInput;
use agentmesh_core::enqueue::prepare_task;
use anyhow::Context as _;

use super::{Context, id};
use crate::cli::{
    TaskAddArgs, TaskCancelArgs, TaskCommand, TaskListArgs, TaskPriorityArgs, TaskRecordDispatchedArgs,
    TaskRequeueArgs, TaskShowArgs,
};
use crate::now;
use crate::output::{self, Noun, Output};

/// Runs one `task` subcommand.
pub(super) fn run(ctx: &Context, command: TaskCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        TaskCommand::Add(args) => add(ctx, *args, out),
        TaskCommand::List(args) => list(ctx, args, out),
        TaskCommand::Show(args) => show(ctx, args, out),
        TaskCommand::Cancel(args) => cancel(ctx, args, out),
        TaskCommand::Priority(args) => priority(ctx, args, out),
        TaskCommand::Requeue(args) => requeue(ctx, args, out),
        TaskCommand::RecordDispatched(args) => record_dispatched(ctx, args, out),
        TaskCommand::Delivered(args) => delivered(ctx, args, out),
    }
}

fn enqueue_body(args: TaskAddArgs) -> EnqueueBody {
    let coordinator = CoordinatorBody {
        daemon_id: args.coordinator_daemon,
        run_id: args.coordinator_run,
        session_id: args.coordinator_session,
    };
    EnqueueBody {
        id: args.id,
        message: args.message,
        task_mode: args.mode,
        readonly: args.readonly.then_some(true),
        target_node_id: args.target_node,
        target_session_id: args.target_session,
        required_tags: args.tags,
        priority: args.priority,
        not_before: args.not_before,
        depends_on: args.depends_on,
        mission_id: args.mission,
        max_retries: args.max_retries,
        difficulty: args.difficulty,
        paths: args.paths,
        paths_scope: args.paths_scope,
        coordinator: (coordinator != CoordinatorBody::default()).then_some(coordinator),
        ..EnqueueBody::default()
    }
}

fn add(ctx: &Context, args: TaskAddArgs, out: &mut Output) -> anyhow::Result<()> {
    let mut body = enqueue_body(args);
    if !body.paths.is_empty() && body.paths_scope.is_none() {
        let top = super::reservations::git(std::path::Path::new("."), &["rev-parse", "--show-toplevel"]);
        let top = top.map(|top| super::reservations::repository_scope(std::path::Path::new(&top)));
        body.paths_scope = Some(top.ok_or_else(|| {
            agentmesh_core::InvalidInput::new(
                "pathsScope",
                "the working directory is not in a git repository: name one with --paths-scope",
            )
        })?);
    }
    // Checked before the store opens (the operation checks again, for every
    // transport), so a refused task never creates a database.
    prepare_task(ctx.mesh(), &body.clone().into_new_task()?, "-", now())?;
    let task = ctx.api()?.enqueue(ctx.mesh(), body).context("cannot enqueue the task")?;
    out.emit(&task, |w| {
        write!(w, "enqueued {}", task.id)?;
        if !task.dependencies().is_empty() {
            write!(w, " (after {})", task.dependencies().join(", "))?;
        }
        writeln!(w)
    })
}

fn list(ctx: &Context, args: TaskListArgs, out: &mut Output) -> anyhow::Result<()> {
    // Checked before the store opens (the operation checks again, for every
    // transport), so a refused filter is bad input even on a data dir with no database.
    let (params, filters) = list_params(&args)?;
    let tasks = ctx.read_api()?.list_tasks(ctx.mesh(), params)?;
    let now = now();
    out.emit(&tasks, |w| {
        if tasks.is_empty() && !filters.is_empty() {
            return writeln!(w, "no tasks in mesh {:?} match {}", ctx.mesh(), filters.join(" "));
        }
        output::write_listing(w, ctx.mesh(), Noun("task", "tasks"), tasks.len(), |w| {
            output::write_task_table(w, &tasks, now)
        })
    })
}

/// The listing's query from the flags, checked as the API checks it (ids by the
/// id rule, statuses by name, the page bounds), and the filters as they were
/// written, for the line that says nothing matched.
fn list_params(args: &TaskListArgs) -> Result<(ListParams, Vec<String>), InvalidInput> {
    let mut written = Vec::new();
    for status in &args.statuses {
        StatusFilter::parse(Some(status))?;
        written.push(format!("--status {}", status.trim()));
    }
    let mut filter = |flag: &str, field: &str, value: &Option<String>, is_id: bool| {
        value
            .as_deref()
            .map(|value| {
                let value = if is_id { id(field, value)? } else { super::required(field, value)? };
                written.push(format!("--{flag} {value}"));
                Ok(value.to_owned())
            })
            .transpose()
    };
    let params = ListParams {
        status: (!args.statuses.is_empty()).then(|| args.statuses.join(",")),
        tag: filter("tag", "tag", &args.tag, false)?,
        node: filter("node", "node", &args.node, true)?,
        session: filter("session", "session", &args.session, true)?,
        mission: filter("mission", "mission", &args.mission, true)?,
        depends_on: filter("depends-on", "dependsOn", &args.depends_on, true)?,
        q: filter("text", "text", &args.text, false)?,
        offset: args.offset,
        limit: args.limit,
    };
    params.check()?;
    Ok((params, written))
}

fn show(ctx: &Context, args: TaskShowArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = id("id", &args.id)?;
    let task = ctx.read_api()?.show_task(ctx.mesh(), id)?;
    out.emit(&task, |w| output::write_task_fields(w, &task))
}

fn record_dispatched(ctx: &Context, args: TaskRecordDispatchedArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = DispatchedTaskBody {
        id: args.id,
        message: args.message,
        node_id: args.node,
        session_id: args.session,
        provider_type: args.provider,
        mission_id: args.mission,
        task_mode: args.mode,
    };
    // Checked before the store opens, so a refused record never creates a database.
    agentmesh_core::NewDispatchedTask::try_from(body.clone())?;
    let view = ctx.api()?.record_dispatched_task(ctx.mesh(), body)?;
    out.emit(&view, |w| {
        let session = view.task.assigned_session_id.as_deref().unwrap_or("-");
        if view.created {
            writeln!(w, "recorded {} as dispatched to {session}", view.task.id)
        } else {
            writeln!(w, "{} exists already ({}); nothing changed", view.task.id, view.task.status)
        }
    })
}

fn delivered(ctx: &Context, args: TaskShowArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = id("id", &args.id)?;
    let view = ctx.read_api()?.delivery_confirmed(ctx.mesh(), id)?;
    out.emit(&view, |w| {
        if view.confirmed {
            writeln!(w, "{id}: a delivery reached its session")
        } else {
            writeln!(w, "{id}: no delivery confirmed")
        }
    })
}

fn cancel(ctx: &Context, args: TaskCancelArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = id("id", &args.id)?;
    let task = ctx.api()?.cancel_task(ctx.mesh(), id, CancelBody { reason: args.reason })?;
    out.emit(&task, |w| writeln!(w, "cancelled {}", task.id))
}

fn priority(ctx: &Context, args: TaskPriorityArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = id("id", &args.id)?;
    // Checked before the store opens, like every flag.
    let _: agentmesh_core::TaskPriority = args.priority.parse()?;
    let body = PriorityBody { priority: args.priority, reason: args.reason };
    let task = ctx.api()?.set_priority(ctx.mesh(), id, body)?;
    let now = task.priority.map_or("normal", |p| p.as_str());
    out.emit(&task, |w| writeln!(w, "{} is now {now} priority", task.id))
}

fn requeue(ctx: &Context, args: TaskRequeueArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = id("id", &args.id)?;
    let body = RequeueBody {
        reason: args.reason,
        force: args.force,
        max_retries: args.max_retries,
        keep_session_pin: args.keep_session_pin,
    };
    let requeued = ctx.api()?.requeue_task(ctx.mesh(), id, body)?;
    let task = &requeued.task;
    out.emit(task, |w| {
        if requeued.outcome == "retries_exhausted" {
            writeln!(
                w,
                "task {} is out of retries and failed: {}",
                task.id,
                task.failure_reason.as_deref().unwrap_or("max_retries_exceeded")
            )
        } else {
            writeln!(w, "requeued {} (requeue {})", task.id, task.requeue_count.unwrap_or(0))
        }
    })
}
