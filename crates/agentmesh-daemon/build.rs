//! Build script: records the commit the daemon is built from, for the
//! `agentmesh_build_info` metric.
//!
//! `AGENTMESH_BUILD_COMMIT` in the build's environment wins (for builds from a
//! source archive, which has no repository); otherwise `git rev-parse` names
//! `HEAD`, abbreviated to 12 hex digits; without git or a repository the commit
//! is `unknown`. The script is run again when `HEAD` moves, so an incremental
//! build never reports a stale commit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The commit's name when nothing can tell it.
const UNKNOWN: &str = "unknown";

fn main() {
    println!("cargo::rerun-if-env-changed=AGENTMESH_BUILD_COMMIT");
    let from_env = std::env::var("AGENTMESH_BUILD_COMMIT").ok().filter(|c| !c.trim().is_empty());
    let commit = match from_env {
        Some(commit) => commit.trim().to_owned(),
        None => {
            watch_head();
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| UNKNOWN.to_owned())
        }
    };
    println!("cargo::rustc-env=AGENTMESH_BUILD_COMMIT={commit}");
}

/// One line of `git`'s output, run in this crate's directory; `None` when git is
/// missing or fails (no repository).
fn git(args: &[&str]) -> Option<String> {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let output = Command::new("git").args(args).current_dir(manifest_dir).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned()).filter(|line| !line.is_empty())
}

/// Asks cargo to run the script again when `HEAD` or the branch it points at
/// moves (a commit, a checkout, a fetch that rewrites packed refs). Works in a
/// worktree too, where `HEAD` is the worktree's and the refs are shared.
fn watch_head() {
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) else {
        return;
    };
    watch(&git_dir.join("HEAD"));
    let common_dir = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .map_or_else(|| git_dir.clone(), PathBuf::from);
    watch(&common_dir.join("packed-refs"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        // A branch whose ref is packed gets a file of its own at its next commit:
        // then its directory is what changes.
        let loose = common_dir.join(branch);
        if loose.exists() {
            watch(&loose);
        } else if let Some(directory) = loose.parent() {
            watch(directory);
        }
    }
}

/// `rerun-if-changed` for `path`, when it exists (cargo would otherwise rerun the
/// script on every build).
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo::rerun-if-changed={}", path.display());
    }
}
