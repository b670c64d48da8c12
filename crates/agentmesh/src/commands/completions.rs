//! `agentmesh completions fingerprints|conflicts`: the records that explain a
//! completion that was dropped as a duplicate, or that clashed with another.
//!
//! Both are read views. Fingerprints are the keys of completions already
//! handled (a second one with the same key is a duplicate until the key
//! expires); conflicts record two tasks that claimed one key. Either can be
//! narrowed to a task or a session.

use agentmesh_api::wire::{ConflictParams, FingerprintParams};

use super::{Context, required};
use crate::cli::{CompletionsCommand, ConflictsArgs, FingerprintsArgs};
use crate::now;
use crate::output::{self, Output};

/// Runs one `completions` subcommand.
pub fn run(ctx: &Context, command: CompletionsCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        CompletionsCommand::Fingerprints(args) => fingerprints(ctx, args, out),
        CompletionsCommand::Conflicts(args) => conflicts(ctx, args, out),
    }
}

/// A flag that may be left out but must not be blank when given, trimmed.
fn flag(field: &str, value: Option<String>) -> anyhow::Result<Option<String>> {
    Ok(value.map(|v| required(field, &v).map(str::to_owned)).transpose()?)
}

fn fingerprints(ctx: &Context, args: FingerprintsArgs, out: &mut Output) -> anyhow::Result<()> {
    let params = FingerprintParams {
        task_id: flag("taskId", args.task)?,
        session_id: flag("sessionId", args.session)?,
        limit: args.limit,
    };
    let found = ctx.api()?.completion_fingerprints(ctx.mesh(), params)?;
    let now = now();
    out.emit(&found, |w| output::write_fingerprint_table(w, &found, now))
}

fn conflicts(ctx: &Context, args: ConflictsArgs, out: &mut Output) -> anyhow::Result<()> {
    let params = ConflictParams {
        task_id: flag("taskId", args.task)?,
        session_id: flag("sessionId", args.session)?,
        within_secs: args.within,
    };
    let found = ctx.api()?.completion_conflicts(ctx.mesh(), params)?;
    out.emit(&found, |w| output::write_conflict_table(w, &found))
}
