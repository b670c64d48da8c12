//! `agentmesh fingerprints` and `agentmesh conflicts`: the records that explain a
//! completion that was dropped as a duplicate, or that clashed with another.
//!
//! Both are read views. Fingerprints are the keys of completions already
//! handled (a second one with the same key is a duplicate until the key
//! expires); conflicts record two tasks that claimed one key. Either can be
//! narrowed to a task or a session.

use agentmesh_api::wire::{ConflictParams, FingerprintParams};

use super::{Context, id};
use crate::cli::{ConflictsArgs, FingerprintsArgs};
use crate::now;
use crate::output::{self, Output};

/// An id flag that may be left out, but follows the id rule when given; trimmed.
fn optional_id(field: &str, value: Option<String>) -> anyhow::Result<Option<String>> {
    Ok(value.map(|v| id(field, &v).map(str::to_owned)).transpose()?)
}

/// Runs `fingerprints`.
pub(super) fn fingerprints(ctx: &Context, args: FingerprintsArgs, out: &mut Output) -> anyhow::Result<()> {
    let params = FingerprintParams {
        task_id: optional_id("taskId", args.task)?,
        session_id: optional_id("sessionId", args.session)?,
        limit: args.limit,
    };
    let found = ctx.read_api()?.completion_fingerprints(ctx.mesh(), params)?;
    let now = now();
    out.emit(&found, |w| output::write_fingerprint_table(w, &found, now))
}

/// Runs `conflicts`.
pub(super) fn conflicts(ctx: &Context, args: ConflictsArgs, out: &mut Output) -> anyhow::Result<()> {
    let params = ConflictParams {
        task_id: optional_id("taskId", args.task)?,
        session_id: optional_id("sessionId", args.session)?,
        within_secs: args.within.map(|span| span.as_secs()),
    };
    let found = ctx.read_api()?.completion_conflicts(ctx.mesh(), params)?;
    out.emit(&found, |w| output::write_conflict_table(w, &found))
}
