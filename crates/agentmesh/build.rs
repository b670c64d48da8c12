//! Build script of the `agentmesh` binary: hands the commit it is built from to
//! `--version` as the `AGENTMESH_COMMIT` environment variable.
//!
//! The commit is `git rev-parse --short HEAD` when the sources are a git checkout
//! and git runs; otherwise it is `unknown`, and the build goes on: a source
//! tarball or a vendored copy builds the same as a checkout. Cargo reruns the
//! script when HEAD moves (a commit, a checkout, a rebase), so the version never
//! names a stale commit, and only then.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit =
        git(&manifest_dir, &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=AGENTMESH_COMMIT={commit}");

    // Without any rerun-if line cargo would rerun the script whenever a file of
    // the package changes; this one alone keeps it from running on every edit.
    println!("cargo:rerun-if-changed=build.rs");
    for file in head_files(&manifest_dir) {
        println!("cargo:rerun-if-changed={}", file.display());
    }
}

/// The files whose change means HEAD names another commit: `HEAD` itself, the
/// branch file it points to, and `packed-refs` (where a branch may live instead).
/// Only files that exist are named: cargo reruns a script on every build while a
/// file it was told to watch is missing.
fn head_files(dir: &Path) -> Vec<PathBuf> {
    let mut names = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        names.push(branch);
    }
    names
        .iter()
        .filter_map(|name| git(dir, &["rev-parse", "--git-path", name]))
        // A relative answer is relative to `dir`; joining keeps an absolute one as it is.
        .map(|path| dir.join(path))
        .filter(|path| path.is_file())
        .collect()
}

/// Runs git in `dir` and returns its output's first line, or `None` when git is
/// missing, fails, or prints nothing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}
