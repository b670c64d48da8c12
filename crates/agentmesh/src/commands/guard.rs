//! `agentmesh guard`: a git pre-commit hook that keeps two sessions from
//! committing over each other's reserved paths.
//!
//! `guard install` writes the hook into a repository's hooks directory
//! (`core.hooksPath` when set). A pre-commit hook already there is never
//! replaced: it is moved aside to `pre-commit.agentmesh-chained` and the new
//! hook runs it first, stopping the commit when it fails. The hook is a few
//! lines of POSIX sh that run `guard check` with the absolute path of the
//! binary that installed it; the environment (`AGENTMESH_SESSION`,
//! `AGENTMESH_SERVER`, `AGENTMESH_HOME`, `AGENTMESH_MESH`, `AGENTMESH_TOKEN`,
//! `AGENTMESH_GUARD`, ...) passes through untouched, so the check finds the
//! reservations the way every other command does.
//!
//! `guard check` reads the staged paths (both sides of a rename or copy) and
//! asks which of them another session's exclusive reservation covers, in the
//! scope `reservations check` would use. It refuses the commit (exit status 1)
//! after naming each such path with its holder, pattern and task, or only warns
//! with `AGENTMESH_GUARD=warn`.
//!
//! The guard **fails open**: a reservation it cannot read (no daemon answering,
//! no database, a refused token, a deadline passed) lets the commit through
//! with one line on stderr saying why. It never holds a commit longer than the
//! request timeout and a second: a watchdog thread ends the process with the
//! same line when the answer has not come by then, whatever the check was
//! waiting for. Reading creates nothing: a data dir without a database stays
//! without one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentmesh_api::views::BlockedPathView;
use agentmesh_api::wire::CheckPathsBody;
use agentmesh_core::reservation::MAX_PATTERNS;
use agentmesh_core::{InvalidInput, PathPattern};
use serde::Serialize;

use super::Context;
use super::reservations::{git, scope};
use crate::cli::{GuardCheckArgs, GuardCommand, GuardInstallArgs};
use crate::failure::Answered;
use crate::output::Output;

/// The line that marks a pre-commit hook as ours.
const MARKER: &str = "# agentmesh guard: pre-commit hook written by `agentmesh guard install`";
/// The name the pre-commit hook found at install time is kept under.
const CHAINED: &str = "pre-commit.agentmesh-chained";
/// The environment variable that picks what a conflict does: `warn` or `off`.
const GUARD_ENV: &str = "AGENTMESH_GUARD";
/// How much longer than the request timeout the watchdog lets a check run.
const WATCHDOG_GRACE: Duration = Duration::from_secs(1);

/// Runs `guard`.
pub(super) fn run(ctx: &Context, command: GuardCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        GuardCommand::Install(args) => install(args, out),
        GuardCommand::Check(args) => check(ctx, args, out),
    }
}

/// What `guard install` did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct InstallView {
    /// The hook file.
    hook: PathBuf,
    /// The hook was written now (false: ours was there already).
    installed: bool,
    /// Where the pre-commit hook found there was moved, when there was one.
    chained: Option<PathBuf>,
    /// The agentmesh binary the hook runs.
    agentmesh: PathBuf,
}

/// Runs `guard install`.
fn install(args: GuardInstallArgs, out: &mut Output) -> anyhow::Result<()> {
    let dir = args.repo.unwrap_or_else(|| PathBuf::from("."));
    let top = git(&dir, &["rev-parse", "--show-toplevel"]).filter(|top| !top.is_empty()).ok_or_else(|| {
        InvalidInput::new(
            "repo",
            format!(
                "{} is not in a git working tree: run it inside the repository, or name one with --repo DIR",
                dir.display()
            ),
        )
    })?;
    let top = PathBuf::from(top);
    let hooks = hooks_dir(&top)?;
    let hook = hooks.join("pre-commit");
    let agentmesh = std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .map_err(|err| anyhow::anyhow!("cannot tell where this agentmesh binary is: {err}"))?;

    let existing = std::fs::read(&hook).ok();
    if existing.as_deref().is_some_and(|text| String::from_utf8_lossy(text).lines().any(|l| l == MARKER)) {
        let chained = hooks.join(CHAINED);
        let view =
            InstallView { chained: chained.exists().then_some(chained), hook, installed: false, agentmesh };
        return out.emit(&view, |w| {
            writeln!(w, "already installed: {} is agentmesh's guard; nothing changed", view.hook.display())
        });
    }

    std::fs::create_dir_all(&hooks)
        .map_err(|err| anyhow::anyhow!("cannot create {}: {err}", hooks.display()))?;
    let script = hook_script(&agentmesh)?;
    let mut file = tempfile::Builder::new()
        .prefix(".pre-commit.agentmesh-")
        .tempfile_in(&hooks)
        .map_err(|err| anyhow::anyhow!("cannot write in {}: {err}", hooks.display()))?;
    file.write_all(script.as_bytes())?;
    file.as_file().sync_all()?;
    make_executable(file.path())?;

    // An existing hook (a file or a link, working or not) is kept as it is.
    let chained = if std::fs::symlink_metadata(&hook).is_ok() {
        let chained = hooks.join(CHAINED);
        if std::fs::symlink_metadata(&chained).is_ok() {
            return Err(anyhow::anyhow!(
                "{} is not agentmesh's guard, and {} is taken already: move one of them away, then install \
                 again",
                hook.display(),
                chained.display()
            ));
        }
        std::fs::rename(&hook, &chained).map_err(|err| {
            anyhow::anyhow!("cannot move the existing hook {} aside: {err}", hook.display())
        })?;
        Some(chained)
    } else {
        None
    };
    if let Err(err) = file.persist(&hook) {
        // Put the hook that was there back, so a failed install changes nothing.
        if let Some(chained) = &chained {
            let _ = std::fs::rename(chained, &hook);
        }
        return Err(anyhow::anyhow!("cannot write {}: {}", hook.display(), err.error));
    }

    let view = InstallView { hook, installed: true, chained, agentmesh };
    out.emit(&view, |w| {
        writeln!(w, "installed {}: it runs {} guard check", view.hook.display(), view.agentmesh.display())?;
        match &view.chained {
            Some(chained) => writeln!(
                w,
                "  the pre-commit hook that was there is now {} and runs first",
                chained.display()
            ),
            None => Ok(()),
        }
    })
}

/// Where git looks for the hooks of the repository whose top level is `top`:
/// `core.hooksPath` (relative to the top level) when it is set, else the
/// repository's `hooks` directory.
fn hooks_dir(top: &Path) -> anyhow::Result<PathBuf> {
    if let Some(path) = git(top, &["config", "--path", "core.hooksPath"]).filter(|p| !p.is_empty()) {
        return Ok(top.join(path));
    }
    let path = git(top, &["rev-parse", "--git-path", "hooks"])
        .filter(|p| !p.is_empty())
        .ok_or_else(|| anyhow::anyhow!("git does not say where the hooks of {} are", top.display()))?;
    Ok(top.join(path))
}

/// The hook: runs the chained hook first (stopping when it fails), then this
/// binary's `guard check`. A binary that went away lets the commit through.
fn hook_script(agentmesh: &Path) -> anyhow::Result<String> {
    let binary = agentmesh.to_str().ok_or_else(|| {
        anyhow::anyhow!(
            "the agentmesh binary's path is not UTF-8, so a hook cannot name it: {}",
            agentmesh.display()
        )
    })?;
    let quoted = format!("'{}'", binary.replace('\'', r"'\''"));
    Ok(format!(
        r#"#!/bin/sh
{MARKER}
#
# Refuses a commit that stages a path another session holds an exclusive
# reservation on. The environment passes through as it is: AGENTMESH_SESSION is
# the committing session, and AGENTMESH_SERVER, AGENTMESH_HOME, AGENTMESH_MESH,
# AGENTMESH_TOKEN (and the other AGENTMESH_* settings) say where the
# reservations are. AGENTMESH_GUARD=warn only warns, AGENTMESH_GUARD=off skips
# the check; `git commit --no-verify` skips every pre-commit hook.
chained="$(dirname "$0")/{CHAINED}"
if [ -x "$chained" ]; then
    "$chained" "$@" || exit $?
fi
agentmesh={quoted}
if [ ! -x "$agentmesh" ]; then
    echo "agentmesh guard: $agentmesh is gone, so reservations were not checked; commit allowed (run agentmesh guard install again)" >&2
    exit 0
fi
exec "$agentmesh" guard check
"#
    ))
}

#[cfg(unix)]
fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

/// What a conflict does, from `$AGENTMESH_GUARD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// Refuse the commit (the default).
    Block,
    /// Name the conflicts and let the commit through.
    Warn,
    /// Do not check.
    Off,
}

impl Mode {
    fn from_env() -> Mode {
        match std::env::var(GUARD_ENV).unwrap_or_default().trim().to_ascii_lowercase().as_str() {
            "warn" => Mode::Warn,
            "off" => Mode::Off,
            _ => Mode::Block,
        }
    }
}

/// What `guard check` found.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckView {
    /// What a conflict does.
    mode: Mode,
    /// Whether the reservations were read (false: the commit went ahead unchecked).
    checked: bool,
    /// Whether the commit may go ahead.
    allowed: bool,
    /// Why the reservations could not be read, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The committing session.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// The staged paths, both sides of a rename.
    staged: Vec<String>,
    /// The staged paths another session's exclusive reservation covers.
    blocked: Vec<BlockedPathView>,
}

/// Runs `guard check`.
fn check(ctx: &Context, args: GuardCheckArgs, out: &mut Output) -> anyhow::Result<()> {
    let mode = Mode::from_env();
    let session_id = args.session.clone().filter(|s| !s.trim().is_empty());
    let mut view = CheckView {
        mode,
        checked: false,
        allowed: true,
        error: None,
        session_id,
        staged: Vec::new(),
        blocked: Vec::new(),
    };
    if mode == Mode::Off {
        return out.emit(&view, |_| Ok(()));
    }
    let json = out.is_json();
    let decided = Watchdog::arm(ctx.store_config().request_timeout() + WATCHDOG_GRACE, json);
    let result = blocked_paths(ctx, &args, &mut view.staged);
    decided.disarm();
    match result {
        Err(err) => {
            let reason = format!("{:#}", ctx.advise(err));
            fail_open_line(&reason);
            view.error = Some(reason);
            out.emit(&view, |_| Ok(()))
        }
        Ok(blocked) => {
            view.checked = true;
            view.allowed = blocked.is_empty() || mode == Mode::Warn;
            view.blocked = blocked;
            if !json && !view.blocked.is_empty() {
                // A closed stderr changes nothing: the exit status is the answer.
                let _ = write_blocked(&mut std::io::stderr().lock(), &view);
            }
            out.emit(&view, |_| Ok(()))?;
            if view.allowed { Ok(()) } else { Err(Answered("paths_reserved").into()) }
        }
    }
}

/// The one line a check that could not read the reservations prints.
fn fail_open_line(reason: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "agentmesh guard: could not check reservations ({reason}); commit allowed"
    );
}

/// Reads the staged paths into `staged` and returns those in another
/// session's way.
fn blocked_paths(
    ctx: &Context,
    args: &GuardCheckArgs,
    staged: &mut Vec<String>,
) -> anyhow::Result<Vec<BlockedPathView>> {
    let top = git(Path::new("."), &["rev-parse", "--show-toplevel"])
        .filter(|top| !top.is_empty())
        .ok_or_else(|| InvalidInput::new("repo", "the working directory is not in a git working tree"))?;
    *staged = staged_paths(Path::new(&top))?;
    if staged.is_empty() {
        return Ok(Vec::new());
    }
    let scope = scope(&args.scope)?;
    // A path is asked about as a pattern that names it alone.
    let mut asked: Vec<(String, String)> = Vec::with_capacity(staged.len());
    for path in staged.iter() {
        let literal = literal_pattern(path);
        match PathPattern::parse("path", &literal) {
            Ok(pattern) => asked.push((pattern.as_str().to_owned(), path.clone())),
            Err(err) => {
                let _ = writeln!(std::io::stderr(), "agentmesh guard: {path:?} is not checked: {err}");
            }
        }
    }
    let api = ctx.read_api()?;
    let mut blocked = Vec::new();
    for chunk in asked.chunks(MAX_PATTERNS) {
        let body = CheckPathsBody {
            scope: scope.name.clone(),
            paths: chunk.iter().map(|(pattern, _)| pattern.clone()).collect(),
            session_id: args.session.clone().filter(|s| !s.trim().is_empty()),
            ignore_case: Some(scope.ignore_case),
        };
        let answer = api.check_paths(ctx.mesh(), body)?;
        for mut path in answer.blocked {
            // Shown as git names it, without the escapes.
            if let Some((_, original)) = chunk.iter().find(|(pattern, _)| *pattern == path.path) {
                path.path = original.clone();
            }
            blocked.push(path);
        }
    }
    Ok(blocked)
}

/// The staged paths of the repository at `top`, in git's order, each once:
/// added, modified, deleted, and both the old and new side of a rename or copy.
fn staged_paths(top: &Path) -> anyhow::Result<Vec<String>> {
    let output = Command::new("git")
        .arg("-C")
        .arg(top)
        .args(["diff", "--cached", "--name-status", "-z", "-M", "--no-color", "--no-ext-diff"])
        .output()
        .map_err(|err| anyhow::anyhow!("cannot run git: {err}"))?;
    if !output.status.success() {
        return Err(anyhow::anyhow!(
            "git diff --cached failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(parse_name_status(&output.stdout))
}

/// The paths of `git diff --name-status -z` output: a status, then one path,
/// or two for a rename (`R`) or copy (`C`); repeats dropped.
fn parse_name_status(raw: &[u8]) -> Vec<String> {
    let mut fields = raw.split(|&b| b == 0).filter(|f| !f.is_empty());
    let mut paths: Vec<String> = Vec::new();
    while let Some(status) = fields.next() {
        let sides = if matches!(status.first(), Some(b'R' | b'C')) { 2 } else { 1 };
        for _ in 0..sides {
            if let Some(path) = fields.next() {
                let path = String::from_utf8_lossy(path).into_owned();
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
    }
    paths
}

/// `path` as a pattern that matches it literally: its wildcard characters,
/// and a leading `!`, escaped.
fn literal_pattern(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 4);
    for (i, c) in path.chars().enumerate() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') || (i == 0 && c == '!') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The refusal (or, with `AGENTMESH_GUARD=warn`, the warning): each blocked
/// path with every holder in its way.
fn write_blocked(w: &mut dyn Write, view: &CheckView) -> std::io::Result<()> {
    let n = view.blocked.len();
    let paths = if n == 1 { "1 staged path is".to_owned() } else { format!("{n} staged paths are") };
    let (outcome, whose) = match (&view.session_id, view.mode) {
        (Some(session), Mode::Warn) => (format!("warning for session {session}"), "another session"),
        (Some(session), _) => (format!("commit refused for session {session}"), "another session"),
        // Without a session, every holder's reservations count.
        (None, Mode::Warn) => ("warning (no AGENTMESH_SESSION)".to_owned(), "a session"),
        (None, _) => ("commit refused (no AGENTMESH_SESSION)".to_owned(), "a session"),
    };
    writeln!(w, "agentmesh guard: {outcome}: {paths} reserved by {whose}:")?;
    for blocked in &view.blocked {
        writeln!(w, "  {}", blocked.path)?;
        super::reservations::write_conflicts(w, &blocked.held_by)?;
    }
    match view.mode {
        Mode::Warn => writeln!(w, "  the commit goes ahead ({GUARD_ENV}=warn)"),
        _ => writeln!(
            w,
            "  leave those paths out of this commit, wait for the holder to release them, or commit anyway \
             with {GUARD_ENV}=warn (or git commit --no-verify)"
        ),
    }
}

/// Ends the process with the fail-open line when a check has not finished in
/// time: a daemon that accepts the connection and never answers, a lock held,
/// a git that hangs. Whichever of the check and the watchdog decides first is
/// the answer; the other stands down.
struct Watchdog {
    /// Dropped to wake the watchdog early, once the check has finished.
    wake: mpsc::Sender<()>,
    /// Set by whichever decided the outcome first: `true` once someone has.
    decided: Arc<Mutex<bool>>,
}

impl Watchdog {
    /// Starts the watchdog: `budget` from now, it ends the process with exit
    /// status 0 unless [`Watchdog::disarm`] came first.
    fn arm(budget: Duration, json: bool) -> Watchdog {
        let (wake, woken) = mpsc::channel::<()>();
        let decided = Arc::new(Mutex::new(false));
        let flag = Arc::clone(&decided);
        std::thread::spawn(move || {
            if woken.recv_timeout(budget) != Err(RecvTimeoutError::Timeout) {
                return;
            }
            let mut decided = flag.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if *decided {
                return;
            }
            *decided = true;
            let reason = format!("no answer within {budget:?}");
            fail_open_line(&reason);
            if json {
                let body = serde_json::json!({ "checked": false, "allowed": true, "error": reason });
                let _ = writeln!(std::io::stdout(), "{body}");
            }
            // The lock stays held: the check, finishing now, waits for the exit.
            std::process::exit(0);
        });
        Watchdog { wake, decided }
    }

    /// Stands the watchdog down, or, when it has fired already, waits for it to
    /// end the process.
    fn disarm(self) {
        let mut decided = self.decided.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *decided = true;
        drop(decided);
        drop(self.wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_of_a_rename_or_copy_are_staged_paths() {
        let raw = b"M\0src/a.rs\0R087\0src/b.rs\0other/b.rs\0A\0docs/x.md\0C100\0a\0src/a.rs\0D\0gone\0";
        assert_eq!(parse_name_status(raw), ["src/a.rs", "src/b.rs", "other/b.rs", "docs/x.md", "a", "gone"]);
        assert!(parse_name_status(b"").is_empty());
    }

    #[test]
    fn a_path_with_wildcard_characters_is_asked_about_literally() {
        assert_eq!(literal_pattern("src/a.rs"), "src/a.rs");
        assert_eq!(literal_pattern("src/[id]/*.rs"), r"src/\[id\]/\*.rs");
        assert_eq!(literal_pattern("!x/{a}?"), r"\!x/\{a\}\?");
        for path in ["src/[id]/*.rs", "!x/{a}?", r"a\b"] {
            let pattern = PathPattern::parse("path", &literal_pattern(path)).unwrap();
            assert!(pattern.is_literal(), "{path}");
            assert!(pattern.covers(path, false), "{path}");
        }
    }

    #[test]
    fn a_refusal_names_each_path_with_its_holder_pattern_and_task() {
        let holder = agentmesh_core::Conflict {
            reservation_id: "r1".to_owned(),
            session_id: "w1".to_owned(),
            node_id: "n1".to_owned(),
            task_id: Some("t-42".to_owned()),
            exclusive: true,
            patterns: vec![PathPattern::parse("p", "src/**").unwrap()],
            requested: vec![PathPattern::parse("p", "src/a.rs").unwrap()],
            expires_at: None,
        };
        let mut view = CheckView {
            mode: Mode::Block,
            checked: true,
            allowed: false,
            error: None,
            session_id: Some("w2".to_owned()),
            staged: vec!["src/a.rs".to_owned()],
            blocked: vec![BlockedPathView { path: "src/a.rs".to_owned(), held_by: vec![holder] }],
        };
        let written = |view: &CheckView| {
            let mut out = Vec::new();
            write_blocked(&mut out, view).unwrap();
            String::from_utf8(out).unwrap()
        };
        let refusal = written(&view);
        assert!(
            refusal.starts_with("agentmesh guard: commit refused for session w2: 1 staged path is"),
            "{refusal}"
        );
        assert!(
            refusal.contains(
                "  src/a.rs\n  - src/** (exclusive) held by session w1 on node n1 for task t-42 (reservation r1)"
            ),
            "{refusal}"
        );
        assert!(refusal.contains("AGENTMESH_GUARD=warn"), "{refusal}");
        view.mode = Mode::Warn;
        view.session_id = None;
        let warning = written(&view);
        assert!(warning.starts_with("agentmesh guard: warning (no AGENTMESH_SESSION): "), "{warning}");
        assert!(warning.contains("the commit goes ahead"), "{warning}");
    }

    #[test]
    fn the_hook_quotes_the_binary_and_chains_the_old_hook() {
        let script = hook_script(Path::new("/opt/it's here/agentmesh")).unwrap();
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(script.lines().any(|line| line == MARKER));
        assert!(script.contains(r"agentmesh='/opt/it'\''s here/agentmesh'"), "{script}");
        assert!(script.contains(CHAINED));
    }
}
