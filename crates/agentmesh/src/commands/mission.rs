//! `agentmesh mission add|list|show`: missions, the named plans that group tasks.
//!
//! A mission's progress is never stored: every view asks the store to count the
//! mission's tasks as they are now. `mission show` also lists those tasks, read
//! from the queue by their `missionId`. Status words are checked by the core's
//! rule, for filters too, so a typo is refused instead of matching nothing.

use agentmesh_api::wire::{MissionBody, MissionListParams};
use anyhow::Context as _;

use super::Context;
use crate::cli::{MissionAddArgs, MissionCommand, MissionListArgs, MissionShowArgs};
use crate::now;
use crate::output::{self, MissionDetailView, MissionView, Noun, Output};

/// Runs one `mission` subcommand.
pub(super) fn run(ctx: &Context, command: MissionCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        MissionCommand::Add(args) => add(ctx, args, out),
        MissionCommand::List(args) => list(ctx, args, out),
        MissionCommand::Show(args) => show(ctx, args, out),
    }
}

fn add(ctx: &Context, args: MissionAddArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = MissionBody {
        id: args.id.trim().to_owned(),
        title: args.title,
        goal: args.goal,
        status: args.status,
        source: args.source,
    };
    let id = body.id.clone();
    // Checked before the store opens, so a refused mission never creates a database.
    agentmesh_core::NewMission::try_from(body.clone())?;
    let saved =
        ctx.api()?.upsert_mission(ctx.mesh(), body).with_context(|| format!("cannot save mission {id}"))?;
    let view = &saved.mission;
    out.emit(&saved, |w| {
        writeln!(
            w,
            "{} mission {} ({}): {}",
            if saved.created { "created" } else { "updated" },
            view.id,
            view.status,
            output::progress_summary(&view.progress)
        )
    })
}

fn list(ctx: &Context, args: MissionListArgs, out: &mut Output) -> anyhow::Result<()> {
    // Checked before the store opens (the operation checks again, for every
    // transport), so a refused filter never creates a database.
    for status in &args.statuses {
        agentmesh_core::mission::validate_status(status.trim())?;
    }
    let status = (!args.statuses.is_empty()).then(|| args.statuses.join(","));
    let views: Vec<MissionView> = ctx.read_api()?.missions(ctx.mesh(), MissionListParams { status })?;
    let now = now();
    out.emit(&views, |w| {
        output::write_listing(w, ctx.mesh(), Noun("mission", "missions"), views.len(), |w| {
            output::write_mission_table(w, &views, now)
        })
    })
}

fn show(ctx: &Context, args: MissionShowArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = super::id("id", &args.id)?;
    let detail: MissionDetailView = ctx.read_api()?.mission(ctx.mesh(), id)?;
    let now = now();
    out.emit(&detail, |w| output::write_mission_detail(w, &detail, now))
}
