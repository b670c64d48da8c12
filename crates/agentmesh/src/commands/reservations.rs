//! `agentmesh reserve`, `release` and `reservations`: path reservations of a
//! repository scope. The scope defaults to the git top level of the working
//! directory, and names compare without case when that repository's
//! `core.ignorecase` is true.
//!
//! A denied request and a check that finds a path in another holder's way are
//! answers: printed in full (every conflict), then the process exits with
//! status 1 so that a script or a commit hook can tell.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use agentmesh_api::views::{CheckPathsView, ReserveView};
use agentmesh_api::wire::{CheckPathsBody, FenceBody, ReservationListParams, ReserveBody};
use agentmesh_core::{Conflict, InvalidInput, Reservation};

use super::{Context, id};
use crate::cli::{ReleaseArgs, ReservationsArgs, ReservationsCommand, ReserveArgs, ScopeArgs};
use crate::failure::Answered;
use crate::now;
use crate::output::{self, Noun, Output, Table};

/// A scope and whether its names compare without case.
pub(super) struct Scope {
    /// The scope's name: what `--scope` gave, else the git top level.
    pub name: String,
    /// Names compare without case.
    pub ignore_case: bool,
}

/// The scope `args` name, or the git top level of the working directory.
pub(super) fn scope(args: &ScopeArgs) -> anyhow::Result<Scope> {
    if let Some(name) = &args.scope {
        return Ok(Scope { name: name.clone(), ignore_case: args.ignore_case });
    }
    let top = git(Path::new("."), &["rev-parse", "--show-toplevel"]).ok_or_else(|| {
        let why = if git_runs() {
            "the working directory is not in a git repository: name one with --scope"
        } else {
            "git is not installed, and the default scope is the git top level of the working directory: install git, or name one with --scope"
        };
        InvalidInput::new("scope", why)
    })?;
    let ignore_case = args.ignore_case
        || git(Path::new(&top), &["config", "--bool", "core.ignorecase"]).as_deref() == Some("true");
    Ok(Scope { name: repository_scope(Path::new(&top)), ignore_case })
}

/// The scope of the repository whose top level is `top`: its `agentmesh.scope`
/// setting (`git config agentmesh.scope github.com/acme/app`), so that every
/// clone of it, and the commit guard, name it alike; else the top level itself.
pub(crate) fn repository_scope(top: &Path) -> String {
    git(top, &["config", "--get", "agentmesh.scope"])
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| top.to_string_lossy().into_owned())
}

/// What `git args` prints in `dir`, trimmed; `None` when git fails or is missing.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Whether a `git` program runs at all.
fn git_runs() -> bool {
    Command::new("git").arg("--version").output().is_ok_and(|out| out.status.success())
}

/// Runs `reserve`.
pub(super) fn reserve(ctx: &Context, args: ReserveArgs, out: &mut Output) -> anyhow::Result<()> {
    let scope = scope(&args.scope)?;
    let body = ReserveBody {
        scope: scope.name,
        session_id: id("sessionId", &args.session)?.to_owned(),
        node_id: id("nodeId", &args.node)?.to_owned(),
        patterns: args.patterns,
        exclusive: Some(!args.shared),
        reason: args.reason,
        ttl_ms: args.ttl.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        ignore_case: Some(scope.ignore_case),
        wait_secs: args.wait.map(|d| d.as_secs().max(1)),
    };
    let session = body.session_id.clone();
    let view: ReserveView = ctx.api()?.reserve(ctx.mesh(), body)?;
    out.emit(&view, |w| match &view.reservation {
        Some(r) => {
            writeln!(
                w,
                "reserved {} (epoch {}, {}){}: {}",
                r.id,
                r.epoch,
                mode(r.exclusive),
                until(r),
                patterns(r)
            )?;
            writeln!(
                w,
                "  release it with: agentmesh release {} --session {session} --epoch {}",
                r.id, r.epoch
            )
        }
        None => {
            writeln!(w, "denied: {} conflicting reservation(s)", view.conflicts.len())?;
            write_conflicts(w, &view.conflicts)
        }
    })?;
    if view.granted { Ok(()) } else { Err(Answered("reservation_denied").into()) }
}

/// Runs `release`.
pub(super) fn release(ctx: &Context, args: ReleaseArgs, out: &mut Output) -> anyhow::Result<()> {
    let id = id("reservationId", &args.reservation)?;
    let body = FenceBody { session_id: args.session, epoch: args.epoch, ttl_ms: None };
    let released: Reservation = ctx.api()?.release_reservation(ctx.mesh(), id, body)?;
    out.emit(&released, |w| writeln!(w, "released {}: {}", released.id, patterns(&released)))
}

/// Runs `reservations`.
pub(super) fn run(ctx: &Context, args: ReservationsArgs, out: &mut Output) -> anyhow::Result<()> {
    match args.command {
        None => {
            let scope = if args.all_scopes { None } else { Some(scope(&args.scope)?.name) };
            let held = ctx.read_api()?.reservations(ctx.mesh(), ReservationListParams { scope })?;
            out.emit(&held, |w| {
                output::write_listing(w, ctx.mesh(), Noun("reservation", "reservations"), held.len(), |w| {
                    write_table(w, &held)
                })
            })
        }
        Some(ReservationsCommand::Renew(renew)) => {
            let id = id("reservationId", &renew.fence.reservation)?;
            let body = FenceBody {
                session_id: renew.fence.session,
                epoch: renew.fence.epoch,
                ttl_ms: renew.ttl.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            };
            let renewed = ctx.api()?.renew_reservation(ctx.mesh(), id, body)?;
            out.emit(&renewed, |w| {
                writeln!(w, "renewed {}{}: {}", renewed.id, until(&renewed), patterns(&renewed))
            })
        }
        Some(ReservationsCommand::Check(check)) => {
            let given = if check.scope.scope.is_some() || check.scope.ignore_case {
                &check.scope
            } else {
                &args.scope
            };
            let scope = scope(given)?;
            let body = CheckPathsBody {
                scope: scope.name,
                paths: check.paths,
                session_id: check.session,
                ignore_case: Some(scope.ignore_case),
            };
            let view: CheckPathsView = ctx.read_api()?.check_paths(ctx.mesh(), body)?;
            out.emit(&view, |w| {
                if view.clear {
                    return writeln!(w, "clear: no other holder's exclusive reservation covers these paths");
                }
                for blocked in &view.blocked {
                    writeln!(w, "{} is reserved:", blocked.path)?;
                    write_conflicts(w, &blocked.held_by)?;
                }
                Ok(())
            })?;
            if view.clear { Ok(()) } else { Err(Answered("paths_reserved").into()) }
        }
    }
}

fn mode(exclusive: bool) -> &'static str {
    if exclusive { "exclusive" } else { "shared" }
}

fn patterns(r: &Reservation) -> String {
    r.patterns.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
}

fn until(r: &Reservation) -> String {
    match (&r.expires_at, &r.task_id) {
        (Some(at), _) => format!(" until {at}"),
        (None, Some(task)) => format!(" while task {task} is held"),
        (None, None) => String::new(),
    }
}

/// Writes each conflict on a line of its own: what holds the paths, and its id.
pub(super) fn write_conflicts(w: &mut dyn Write, conflicts: &[Conflict]) -> std::io::Result<()> {
    for c in conflicts {
        writeln!(w, "  - {c} (reservation {})", c.reservation_id)?;
    }
    Ok(())
}

fn write_table(w: &mut dyn Write, held: &[Reservation]) -> std::io::Result<()> {
    if held.is_empty() {
        return writeln!(w, "no reservations in force");
    }
    let now = now();
    let mut table = Table::new(vec!["ID", "HOLDER", "MODE", "PATTERNS", "TASK", "LEFT", "REASON"]);
    for r in held {
        table.row(vec![
            r.id.clone(),
            format!("{} on {}", r.session_id, r.node_id),
            mode(r.exclusive).to_owned(),
            patterns(r),
            r.task_id.clone().unwrap_or_else(|| "-".to_owned()),
            r.expires_ms().map_or_else(|| "-".to_owned(), |ms| output::remaining(ms, now)),
            r.reason.clone().unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    table.write(w)
}
