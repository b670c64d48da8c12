//! `agentmesh events push|drain|peek|ack|retract|held|requeue-held`: the
//! coordinator inbox.
//!
//! `push` queues one event, read as JSON in the original's shape (`--file`, `-`
//! for stdin) or built from flags; the store stamps its v2 envelope and refuses a
//! duplicate, which is an answer (exit 0), not an error. `drain` and `peek` take
//! the draining coordinator's identity from flags; the routing, dedup and
//! quarantine rules are the store's. Enforce mode is `--enforce`, else
//! `MESH_PROTOCOL_V2_ENFORCE` as it reads when the command runs.
//!
//! `held` lists the held events (quarantined, or moved to the ledger by
//! retention) that were not put back, and `requeue-held` puts them back, by id
//! or by the same filters.
//!
//! Every input is checked before the store opens, so a refused push never
//! creates a database and never stores anything.

use std::io::Read as _;
use std::path::Path;

use agentmesh_api::views::PushView;
use agentmesh_api::wire::{
    AckBody, DeleteEventsBody, DrainBody, EmitHintBody, HeldParams, PushEventBody, RequeueHeldBody,
    RetractBody,
};
use agentmesh_core::events::{PendingEvent, Scope, texted_event};
use agentmesh_core::{InvalidInput, Timestamp};
use serde_json::{Map, Value};

use super::{Context, id, required};
use crate::cli::{
    EventsAckArgs, EventsCommand, EventsDrainArgs, EventsPushArgs, EventsRetractArgs, EventsWatchArgs,
    HeldFilterArgs, RequeueHeldArgs,
};
use crate::now;
use crate::output::{self, InboxEventView, Noun, Output};

/// Runs one `events` subcommand.
pub(super) fn run(ctx: &Context, command: EventsCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        EventsCommand::Push(args) => push(ctx, *args, out),
        EventsCommand::Drain(args) => drain(ctx, args, out),
        EventsCommand::Peek(args) => peek(ctx, args, out),
        EventsCommand::Watch(args) => watch(ctx, args, out),
        EventsCommand::Ack(args) => ack(ctx, args, out),
        EventsCommand::Delete(args) => delete(ctx, args, out),
        EventsCommand::Retract(args) => retract(ctx, args, out),
        EventsCommand::Held(args) => held(ctx, args, out),
        EventsCommand::RequeueHeld(args) => requeue_held(ctx, args, out),
    }
}

/// The listing's query from the filter flags: node and task ids follow the id
/// rule, the reason and event name must not be blank when given.
fn held_params(args: HeldFilterArgs) -> Result<HeldParams, InvalidInput> {
    let text = |field: &str, value: Option<String>| {
        value.map(|v| required(field, &v).map(str::to_owned)).transpose()
    };
    Ok(HeldParams {
        reason: text("reason", args.reason)?,
        node_id: optional("nodeId", args.node)?,
        task_id: optional("taskId", args.task)?,
        event: text("event", args.event)?,
        older_than_secs: args.older_than.map(|age| age.as_secs()),
    })
}

fn held(ctx: &Context, args: HeldFilterArgs, out: &mut Output) -> anyhow::Result<()> {
    let params = held_params(args)?;
    let held = ctx.read_api()?.held_events(ctx.mesh(), params)?;
    let now = now();
    out.emit(&held, |w| output::write_held_table(w, &held, now))
}

fn requeue_held(ctx: &Context, args: RequeueHeldArgs, out: &mut Output) -> anyhow::Result<()> {
    let HeldParams { reason, node_id, task_id, event, older_than_secs } = held_params(args.filter)?;
    let ids = args.ids.iter().map(|v| id("ids", v).map(str::to_owned)).collect::<Result<Vec<_>, _>>()?;
    let body = RequeueHeldBody { ids, reason, node_id, task_id, event, older_than_secs, all: args.all };
    let view = ctx.api()?.requeue_held(ctx.mesh(), body)?;
    out.emit(&view, |w| {
        for event in &view.events {
            let what = match (event.requeued, event.unrecoverable) {
                (true, _) => "requeued",
                (false, true) => "unrecoverable",
                (false, false) => "already queued",
            };
            writeln!(w, "{what}  {}  {}", event.held_entry_id, event.event.as_deref().unwrap_or("?"))?;
        }
        write!(w, "requeued {} of {} held event(s)", view.requeued, view.events.len())?;
        if view.unrecoverable > 0 {
            write!(
                w,
                "; {} unrecoverable (their event can no longer be read), skipped and still held",
                view.unrecoverable
            )?;
        }
        writeln!(w)
    })
}

/// An id flag that may be left out, but follows the id rule when given; trimmed.
fn optional(field: &str, value: Option<String>) -> Result<Option<String>, InvalidInput> {
    value.map(|v| id(field, &v).map(str::to_owned)).transpose()
}

fn push(ctx: &Context, args: EventsPushArgs, out: &mut Output) -> anyhow::Result<()> {
    let now = now();
    let hint = EmitHintBody {
        scope: args.scope.as_deref().map(|s| s.trim().parse::<Scope>()).transpose()?,
        coordinator_run_id: optional("coordinatorRunId", args.to_run.clone())?,
    };
    let self_machine_id = optional("machineId", args.machine_id.clone())?;
    let event = match &args.file {
        Some(path) => event_from_json(&read_source(path)?, ctx.mesh(), now)?,
        None => event_from_flags(args, ctx.mesh(), now)?,
    };
    let Value::Object(event) = event.to_value() else {
        unreachable!("an event serializes to a JSON object");
    };
    let body = PushEventBody { event, hint, self_machine_id };
    match ctx.api()?.push_event(ctx.mesh(), body)? {
        PushView::Queued(view) => out.emit(&view, |w| {
            write!(w, "queued {}: {}", view.id, view.name())?;
            let payload = view.payload.parse();
            let field = |name: &str| payload.get(name).and_then(Value::as_str);
            match (field("eventId"), field("protocolVersion")) {
                (Some(event_id), Some("2.0")) => {
                    writeln!(w, " (eventId {event_id}, {})", field("scope").unwrap_or("no scope"))
                }
                _ => writeln!(w, " (unversioned: no coordinator and no machine id to stamp it with)"),
            }
        }),
        duplicate @ PushView::Duplicate { .. } => {
            let PushView::Duplicate { duplicate: reason } = &duplicate else { unreachable!() };
            let line = format!("duplicate: {reason}");
            out.emit(&duplicate, |w| writeln!(w, "{line}"))
        }
    }
}

/// The text of the `--file` argument: the file, or stdin for `-`. A source that
/// cannot be read is the caller's mistake, reported against `file`.
fn read_source(path: &Path) -> Result<String, InvalidInput> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|err| InvalidInput::new("file", format!("cannot read stdin: {err}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(path)
        .map_err(|err| InvalidInput::new("file", format!("cannot read {}: {err}", path.display())))
}

/// Reads an event in the original's JSON shape. `meshId` defaults to `mesh` and
/// `queuedAt` to `now` when absent; a `meshId` naming another mesh is refused. The
/// remaining fields are checked by the core's model, whose error names the field.
fn event_from_json(text: &str, mesh: &str, now: Timestamp) -> Result<PendingEvent, InvalidInput> {
    let value: Value = serde_json::from_str(text)
        .map_err(|err| InvalidInput::new("file", format!("is not valid JSON: {err}")))?;
    let Value::Object(mut map) = value else {
        return Err(InvalidInput::new("pendingEvent", "must be a JSON object"));
    };
    match map.get("meshId") {
        None => {
            map.insert("meshId".to_owned(), Value::from(mesh));
        }
        Some(Value::String(id)) if id != mesh => {
            return Err(InvalidInput::new(
                "meshId",
                format!("the event belongs to mesh {id:?}, but the command works in mesh {mesh:?}"),
            ));
        }
        Some(_) => {}
    }
    map.entry("queuedAt").or_insert_with(|| Value::from(now.millis()));
    let event = PendingEvent::from_map(map)?;
    if event.event.trim().is_empty() {
        return Err(InvalidInput::new("event", "must not be blank"));
    }
    Ok(event)
}

/// Builds an event from `push` flags, with the coordinator-facing text the core
/// writes for its name (none for names that carry no text).
fn event_from_flags(args: EventsPushArgs, mesh: &str, now: Timestamp) -> Result<PendingEvent, InvalidInput> {
    let name = required("event", args.event.as_deref().unwrap_or_default())?.to_owned();
    let node = optional("nodeId", args.node)?;
    let mut metadata = Map::new();
    if let Some(task) = optional("taskId", args.task)? {
        metadata.insert("taskId".to_owned(), Value::from(task));
    }
    if let Some(summary) = args.summary.filter(|s| !s.trim().is_empty()) {
        metadata.insert("finalSummary".to_owned(), Value::from(summary));
    }
    let mut event = texted_event(name, mesh, node, metadata, now);
    event.target_coordinator_daemon_id = optional("targetCoordinatorDaemonId", args.to_daemon)?;
    event.target_coordinator_session_id = optional("targetCoordinatorSessionId", args.to_session)?;
    Ok(event)
}

/// The drain body the flags describe. Enforce mode is the flag, else
/// `env_enforce`, the environment variable as the command read it at start (a
/// daemon also applies its own).
fn drain_body(args: EventsDrainArgs, env_enforce: bool) -> Result<DrainBody, InvalidInput> {
    let also_known_as = args
        .also_known_as
        .iter()
        .map(|other| id("alsoKnownAs", other).map(str::to_owned))
        .collect::<Result<_, _>>()?;
    let only_events = if args.only.is_empty() {
        None
    } else {
        Some(
            args.only
                .iter()
                .map(|e| required("onlyEvents", e).map(str::to_owned))
                .collect::<Result<_, _>>()?,
        )
    };
    let enforce = args.enforce || env_enforce;
    Ok(DrainBody {
        daemon_id: id("daemonId", &args.daemon)?.to_owned(),
        run_id: id("coordinatorRunId", &args.run)?.to_owned(),
        session_id: optional("sessionId", args.session)?,
        also_known_as,
        only_events,
        limit: args.limit,
        enforce,
    })
}

fn drain(ctx: &Context, args: EventsDrainArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = drain_body(args, ctx.enforce())?;
    let view = ctx.api()?.drain(ctx.mesh(), body)?;
    out.emit(&view, |w| output::write_drain(w, ctx.mesh(), &view))
}

fn peek(ctx: &Context, args: EventsDrainArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = drain_body(args, ctx.enforce())?;
    let events: Vec<InboxEventView> = ctx.read_api()?.peek(ctx.mesh(), body)?;
    out.emit(&events, |w| {
        output::write_listing(w, ctx.mesh(), Noun("event", "events"), events.len(), |w| {
            output::write_inbox_events(w, &events)
        })
    })
}

fn watch(ctx: &Context, args: EventsWatchArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = drain_body(args.drain, ctx.enforce())?;
    if !out.is_json() {
        eprintln!("waiting up to {} for events...", crate::duration::format(args.timeout));
    }
    let view = ctx.api()?.watch(ctx.mesh(), body, args.timeout)?;
    out.emit(&view, |w| output::write_drain(w, ctx.mesh(), &view))
}

fn ack(ctx: &Context, args: EventsAckArgs, out: &mut Output) -> anyhow::Result<()> {
    let ids =
        args.ids.iter().map(|value| id("id", value).map(str::to_owned)).collect::<Result<Vec<_>, _>>()?;
    let asked = ids.len();
    let view = ctx.api()?.ack(ctx.mesh(), AckBody { ids })?;
    out.emit(&view, |w| writeln!(w, "acked {} of {asked} event(s)", view.acked))
}

fn delete(ctx: &Context, args: EventsAckArgs, out: &mut Output) -> anyhow::Result<()> {
    let ids =
        args.ids.iter().map(|value| id("id", value).map(str::to_owned)).collect::<Result<Vec<_>, _>>()?;
    let asked = ids.len();
    let view = ctx.api()?.delete_events(ctx.mesh(), DeleteEventsBody { ids })?;
    out.emit(&view, |w| writeln!(w, "deleted {} of {asked} event(s)", view.deleted))
}

fn retract(ctx: &Context, args: EventsRetractArgs, out: &mut Output) -> anyhow::Result<()> {
    let task = id("taskId", &args.task)?.to_owned();
    let view = ctx.api()?.retract(ctx.mesh(), RetractBody { task_id: task.clone() })?;
    out.emit(&view, |w| {
        writeln!(w, "retracted {} undelivered mesh:dispatch_blocked event(s) of task {task}", view.retracted)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_735_689_600_000);

    #[test]
    fn json_events_default_their_mesh_and_time() {
        let event = event_from_json(r#"{"event": "agent:ready", "metadataEvent": {}}"#, "m", NOW).unwrap();
        assert_eq!(event.mesh_id, "m");
        assert_eq!(event.queued_at, NOW);
        assert_eq!(event.node_label, "");
        let text =
            json!({"event": "agent:ready", "meshId": "m", "metadataEvent": {}, "queuedAt": 5}).to_string();
        assert_eq!(event_from_json(&text, "m", NOW).unwrap().queued_at, Timestamp::from_millis(5));
    }

    #[test]
    fn json_errors_name_the_field() {
        let cases = [
            ("{", "file"),
            ("[]", "pendingEvent"),
            (r#"{"event": "x", "meshId": "other", "metadataEvent": {}}"#, "meshId"),
            (r#"{"event": "x", "meshId": 7, "metadataEvent": {}}"#, "meshId"),
            (r#"{"event": "x", "metadataEvent": "done"}"#, "metadataEvent"),
            (r#"{"event": "x", "metadataEvent": {}, "queuedAt": "now"}"#, "queuedAt"),
            (r#"{"event": " ", "metadataEvent": {}}"#, "event"),
            (r#"{"metadataEvent": {}}"#, "event"),
        ];
        for (text, field) in cases {
            assert_eq!(event_from_json(text, "m", NOW).unwrap_err().field, field, "{text}");
        }
    }

    #[test]
    fn flags_build_the_event_and_its_text() {
        let args = EventsPushArgs {
            file: None,
            event: Some(" agent:generating_completed ".into()),
            task: Some("t1".into()),
            summary: Some("parser written".into()),
            node: Some("laptop".into()),
            to_daemon: Some("mach_A".into()),
            to_session: None,
            to_run: None,
            scope: None,
            machine_id: None,
        };
        let event = event_from_flags(args, "m", NOW).unwrap();
        assert_eq!(event.event, "agent:generating_completed");
        assert_eq!(event.node_id.as_deref(), Some("laptop"));
        assert_eq!(event.node_label, "Node 'laptop'");
        assert_eq!(
            Value::Object(event.metadata_event),
            json!({"taskId": "t1", "finalSummary": "parser written"})
        );
        assert!(event.coordinator_message.unwrap().contains("parser written"));
        assert_eq!(event.target_coordinator_daemon_id.as_deref(), Some("mach_A"));
    }

    #[test]
    fn drain_flags_name_the_blank_field() {
        let args = |daemon: &str, only: &[&str]| EventsDrainArgs {
            daemon: daemon.into(),
            run: "run-1".into(),
            session: None,
            also_known_as: Vec::new(),
            only: only.iter().map(|s| (*s).to_owned()).collect(),
            limit: None,
            enforce: true,
        };
        assert_eq!(drain_body(args(" ", &[]), false).unwrap_err().field, "daemonId");
        assert_eq!(drain_body(args("mach_A", &["x", " "]), false).unwrap_err().field, "onlyEvents");
        let body = drain_body(args("mach_A", &[]), false).unwrap();
        assert_eq!(body.only_events, None);
        assert!(body.enforce);
        assert_eq!((body.daemon_id.as_str(), body.run_id.as_str()), ("mach_A", "run-1"));
    }
}
