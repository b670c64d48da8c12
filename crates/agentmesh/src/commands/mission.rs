//! `agentmesh mission add|list|show`: missions, the named plans that group tasks.
//!
//! A mission's progress is never stored: every view asks the store to count the
//! mission's tasks as they are now. `mission show` also lists those tasks, read
//! from the queue by their `missionId`. Status words are checked by the core's
//! rule, for filters too, so a typo is refused instead of matching nothing.

use agentmesh_core::{InvalidInput, NewMission, Task};
use agentmesh_store::StoreError;
use anyhow::Context as _;

use super::{Context, required};
use crate::cli::{MissionAddArgs, MissionCommand, MissionListArgs, MissionShowArgs};
use crate::now;
use crate::output::{self, MissionDetailView, MissionView, Output};

/// Runs one `mission` subcommand.
pub fn run(ctx: &Context, command: MissionCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        MissionCommand::Add(args) => add(ctx, args, out),
        MissionCommand::List(args) => list(ctx, args, out),
        MissionCommand::Show(args) => show(ctx, args, out),
    }
}

/// A `--status` filter, checked with the rule a mission's own status follows.
fn status_filter(text: &str) -> Result<String, InvalidInput> {
    let status = text.trim().to_owned();
    agentmesh_core::mission::validate_status(&status)?;
    Ok(status)
}

fn add(ctx: &Context, args: MissionAddArgs, out: &mut Output) -> anyhow::Result<()> {
    let new = NewMission {
        id: args.id.trim().to_owned(),
        title: args.title,
        goal: args.goal,
        status: args.status.map(|s| s.trim().to_owned()),
    };
    // Checked before the store opens, so refused flags never create a database.
    new.validate()?;
    let store = ctx.store()?;
    let existed = store.mission(ctx.mesh(), &new.id)?.is_some();
    let mission = store
        .upsert_mission(ctx.mesh(), &new, now())
        .with_context(|| format!("cannot save mission {}", new.id))?;
    let progress = store.mission_progress(ctx.mesh(), &mission.id)?;
    let view = MissionView::new(mission, progress);
    out.emit(&view, |w| {
        writeln!(
            w,
            "{} mission {} ({}): {}",
            if existed { "updated" } else { "created" },
            view.id,
            view.status,
            output::progress_summary(&view.progress)
        )
    })
}

fn list(ctx: &Context, args: MissionListArgs, out: &mut Output) -> anyhow::Result<()> {
    let mut statuses: Vec<String> = Vec::with_capacity(args.statuses.len());
    for text in &args.statuses {
        let status = status_filter(text)?;
        if !statuses.contains(&status) {
            statuses.push(status);
        }
    }
    let store = ctx.store()?;
    let mut views = Vec::new();
    for mission in store.missions(ctx.mesh(), &statuses)? {
        let progress = store.mission_progress(ctx.mesh(), &mission.id)?;
        views.push(MissionView::new(mission, progress));
    }
    let now = now();
    out.emit(&views, |w| output::write_mission_table(w, &views, now))
}

fn show(ctx: &Context, args: MissionShowArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = required("id", &args.id)?;
    let store = ctx.store()?;
    let mission = store.mission(ctx.mesh(), id)?.ok_or_else(|| StoreError::NotFound {
        kind: "mission",
        mesh_id: ctx.mesh().to_owned(),
        id: id.to_owned(),
    })?;
    let progress = store.mission_progress(ctx.mesh(), id)?;
    let tasks: Vec<Task> = store
        .queue_entries(ctx.mesh(), &[])?
        .into_iter()
        .filter(|task| task.mission_id.as_deref() == Some(id))
        .collect();
    let detail = MissionDetailView { mission: MissionView::new(mission, progress), tasks };
    let now = now();
    out.emit(&detail, |w| output::write_mission_detail(w, &detail, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_filters_follow_the_mission_status_rule() {
        assert_eq!(status_filter(" active ").unwrap(), "active");
        assert_eq!(status_filter("on_hold").unwrap(), "on_hold");
        assert_eq!(status_filter("Done!").unwrap_err().field, "status");
        assert_eq!(status_filter("").unwrap_err().field, "status");
    }
}
