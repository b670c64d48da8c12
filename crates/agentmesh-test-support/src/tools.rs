//! What some tests need beyond a Rust toolchain and a C compiler, and the one
//! rule for when it is missing: the test prints one `skipped: ...` line (once per
//! tool and test binary) and returns, so `cargo test --workspace` passes on a
//! machine that has nothing else; with `AGENTMESH_TEST_REQUIRE_ALL=1` (`.ci/run`
//! sets it) the test fails instead, saying what is missing and how to get it.
//!
//! ```no_run
//! use agentmesh_test_support::{Tool, require};
//!
//! #[test]
//! fn a_test_in_a_browser() {
//!     let chromium = require!(Tool::Chromium);
//!     let node = require!(Tool::Node);
//!     // ... run `node` with a script that drives `chromium`.
//! }
//! ```
//!
//! Each tool is looked for once per process: the programs on `PATH` (`node` and
//! `npm`, `python3`, `groff`, `git`), whether a tmpfs mounts, Chromium at `/usr/bin/chromium` or where
//! `AGENTMESH_TEST_CHROMIUM` points, the PostgreSQL server named by
//! `AGENTMESH_TEST_DATABASE_URL`. The skip line goes straight to the process's
//! stderr, so the test harness's output capture does not hide it.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Set to `1`, every missing tool fails the tests that need it instead of
/// skipping them (`.ci/run` sets it).
pub const REQUIRE_ALL_VAR: &str = "AGENTMESH_TEST_REQUIRE_ALL";
/// The variable that may name the Chromium binary, instead of [`CHROMIUM`].
pub const CHROMIUM_VAR: &str = "AGENTMESH_TEST_CHROMIUM";
/// Where Debian's `chromium` package puts the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// The oldest Node.js the tests' clients run on.
const NODE_MAJOR: u32 = 18;

/// What a test may need beyond the Rust toolchain and a C compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// A PostgreSQL 15+ server, named by `AGENTMESH_TEST_DATABASE_URL`; what the
    /// test gets is the URL.
    PostgreSQL,
    /// Node.js 18+ and npm on `PATH` (the TypeScript MCP SDK's client and the
    /// browser script, their packages installed by `npm ci`); what the test gets
    /// is the path of `node`.
    Node,
    /// Python 3.11+ on `PATH` as `python3`, with its `venv` module and ensurepip
    /// (the Python MCP SDK's client, in a virtualenv pip fills from PyPI); what
    /// the test gets is the path of `python3`.
    Python,
    /// Chromium at `/usr/bin/chromium` (Debian's `chromium` package), or the
    /// binary `AGENTMESH_TEST_CHROMIUM` names; what the test gets is its path.
    Chromium,
    /// `groff` on `PATH`, to render the manual pages as man(1) does; what the
    /// test gets is its path.
    Groff,
    /// A small filesystem of the test's own: mounting a tmpfs, which needs root
    /// or a private mount namespace; what the test gets is the `mount` program.
    Tmpfs,
    /// `git` on `PATH`, for the tests of the commit guard and of the
    /// reservation scope a repository names; what the test gets is its path.
    Git,
}

impl Tool {
    /// How many tools there are: the size of the per-tool tables.
    const COUNT: usize = 7;

    /// The tool's name in the skip line: "the {name} tests of ...".
    pub fn name(self) -> &'static str {
        match self {
            Tool::PostgreSQL => "PostgreSQL",
            Tool::Node => "Node.js",
            Tool::Python => "Python",
            Tool::Chromium => "Chromium",
            Tool::Groff => "groff",
            Tool::Tmpfs => "tmpfs",
            Tool::Git => "git",
        }
    }

    /// How to get the tool, as the skip line and the failure say it.
    pub fn how_to_get(self) -> String {
        match self {
            Tool::PostgreSQL => format!(
                "set {}={} to run them against a PostgreSQL 15+ server",
                crate::postgres::URL_VAR,
                crate::postgres::EXAMPLE_URL
            ),
            Tool::Node => {
                format!("install Node.js {NODE_MAJOR}+ and npm, e.g. Debian's nodejs and npm packages")
            }
            Tool::Python => String::from(concat!(
                "install Python 3.11+ with its venv module as python3, ",
                "e.g. Debian's python3 and python3-venv packages"
            )),
            Tool::Chromium => {
                format!("install Debian's chromium package, or set {CHROMIUM_VAR} to a Chromium binary")
            }
            Tool::Groff => String::from("install groff, e.g. Debian's groff-base package"),
            Tool::Tmpfs => String::from(
                "run the tests as root (as CI does) or inside `unshare --user --map-root-user --mount`",
            ),
            Tool::Git => String::from("install git, e.g. Debian's git package"),
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Looks for the tool: what the test gets, or why it is missing.
    fn probe(self) -> Result<String, String> {
        match self {
            Tool::PostgreSQL => std::env::var(crate::postgres::URL_VAR)
                .ok()
                .map(|url| url.trim().to_owned())
                .filter(|url| !url.is_empty())
                .ok_or_else(|| format!("{} is unset or blank", crate::postgres::URL_VAR)),
            Tool::Node => probe_node(),
            Tool::Python => probe_python(),
            Tool::Chromium => probe_chromium(),
            Tool::Groff => on_path("groff")
                .map(|groff| groff.to_string_lossy().into_owned())
                .ok_or_else(|| String::from("groff is not on PATH")),
            Tool::Tmpfs => probe_tmpfs(),
            Tool::Git => on_path("git")
                .map(|git| git.to_string_lossy().into_owned())
                .ok_or_else(|| String::from("git is not on PATH")),
        }
    }
}

/// Whether a missing `tool` fails its tests: `AGENTMESH_TEST_REQUIRE_ALL=1`, or
/// for PostgreSQL also `AGENTMESH_TEST_REQUIRE_POSTGRES=1`.
pub fn required(tool: Tool) -> bool {
    let set = |var: &str| std::env::var(var).is_ok_and(|v| v.trim() == "1");
    set(REQUIRE_ALL_VAR) || (tool == Tool::PostgreSQL && set(crate::postgres::REQUIRE_VAR))
}

/// The tool, or `None` after the skip line (printed once per tool and process).
/// Tests start with [`require!`](crate::require), which returns on `None`.
///
/// # Panics
///
/// When the tool is missing and [`required`]: the message says what is missing
/// and how to get it.
pub fn require(tool: Tool) -> Option<String> {
    static FOUND: [OnceLock<Result<String, String>>; Tool::COUNT] = [const { OnceLock::new() }; Tool::COUNT];
    static SKIP_LINE: [OnceLock<()>; Tool::COUNT] = [const { OnceLock::new() }; Tool::COUNT];
    let why = match FOUND[tool.index()].get_or_init(|| tool.probe()) {
        Ok(found) => return Some(found.clone()),
        Err(why) => why,
    };
    if required(tool) {
        let var = if std::env::var(REQUIRE_ALL_VAR).is_ok_and(|v| v.trim() == "1") {
            REQUIRE_ALL_VAR
        } else {
            crate::postgres::REQUIRE_VAR
        };
        panic!("the {} tests were required ({var}=1), but {why}: {}", tool.name(), tool.how_to_get());
    }
    SKIP_LINE[tool.index()].get_or_init(|| {
        let line = if tool == Tool::PostgreSQL {
            // The line as it always read.
            format!("skipped: the PostgreSQL tests of {} ({})", binary_name(), tool.how_to_get())
        } else {
            format!("skipped: the {} tests of {} ({why}: {})", tool.name(), binary_name(), tool.how_to_get())
        };
        let _ = writeln!(std::io::stderr(), "{line}");
    });
    None
}

/// What the test needs of `tool`, or `return` from the enclosing function (a
/// test) when it is missing: `let node = agentmesh_test_support::require!(Tool::Node);`.
/// See [`tools::require`](crate::tools::require).
#[macro_export]
macro_rules! require {
    ($tool:expr) => {
        match $crate::tools::require($tool) {
            ::std::option::Option::Some(found) => found,
            ::std::option::Option::None => return,
        }
    };
}

/// The first executable file named `name` in a directory of `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| executable(candidate))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What `program args` printed on stdout, trimmed, when it ran and succeeded.
fn output_of(program: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|err| format!("{} did not run ({err})", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{} {}` failed ({}): {}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn probe_node() -> Result<String, String> {
    let node = on_path("node").ok_or("node is not on PATH")?;
    let version = output_of(&node, &["--version"])?;
    let major = version.trim_start_matches('v').split('.').next().and_then(|m| m.parse::<u32>().ok());
    if major.is_none_or(|major| major < NODE_MAJOR) {
        return Err(format!("{} is Node.js {version}", node.display()));
    }
    let npm = on_path("npm").ok_or("npm is not on PATH")?;
    output_of(&npm, &["--version"])?;
    Ok(node.to_string_lossy().into_owned())
}

fn probe_python() -> Result<String, String> {
    let python = on_path("python3").ok_or("python3 is not on PATH")?;
    let version = output_of(
        &python,
        &["-c", "import sys; print(sys.version_info >= (3, 11), sys.version.split()[0])"],
    )?;
    let (recent, number) = version.split_once(' ').unwrap_or((&version, "unknown"));
    if recent != "True" {
        return Err(format!("{} is Python {number}", python.display()));
    }
    // Debian ships ensurepip (which venv needs for pip) apart, in python3-venv.
    output_of(&python, &["-c", "import ensurepip, venv"])
        .map_err(|_| format!("{} (Python {number}) has no venv module with ensurepip", python.display()))?;
    Ok(python.to_string_lossy().into_owned())
}

fn probe_chromium() -> Result<String, String> {
    let (path, from) = match std::env::var_os(CHROMIUM_VAR).filter(|v| !v.is_empty()) {
        Some(path) => (PathBuf::from(path), format!(" ({CHROMIUM_VAR})")),
        None => (PathBuf::from(CHROMIUM), String::new()),
    };
    if !executable(&path) {
        return Err(format!("no executable at {}{from}", path.display()));
    }
    Ok(path.to_string_lossy().into_owned())
}

/// Mounts (and unmounts) a tiny tmpfs on a temp dir: whether this process may.
fn probe_tmpfs() -> Result<String, String> {
    let mount = on_path("mount").ok_or("mount is not on PATH")?;
    let dir = tempfile::tempdir().map_err(|err| format!("no temp dir ({err})"))?;
    let target = dir.path().to_string_lossy().into_owned();
    output_of(&mount, &["-t", "tmpfs", "-o", "size=64k", "tmpfs", &target])
        .map_err(|why| format!("a tmpfs cannot be mounted here: {why}"))?;
    let umount = on_path("umount").unwrap_or_else(|| PathBuf::from("umount"));
    output_of(&umount, &[&target]).map_err(|why| format!("a tmpfs mounted but did not unmount: {why}"))?;
    Ok(mount.to_string_lossy().into_owned())
}

/// The test binary's name without cargo's hash suffix (`it`, not
/// `it-0123456789abcdef`), after its package's when cargo runs it.
fn binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe.as_deref().and_then(Path::file_stem).and_then(OsStr::to_str).unwrap_or("this binary");
    let name = match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name,
        _ => stem,
    };
    match std::env::var("CARGO_PKG_NAME") {
        Ok(package) if !package.is_empty() => format!("{package}/{name}"),
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_its_own_slot_and_a_way_to_get_it() {
        let all =
            [Tool::PostgreSQL, Tool::Node, Tool::Python, Tool::Chromium, Tool::Groff, Tool::Tmpfs, Tool::Git];
        assert_eq!(all.len(), Tool::COUNT);
        for (i, tool) in all.into_iter().enumerate() {
            assert_eq!(tool.index(), i);
            assert!(!tool.how_to_get().is_empty());
        }
    }

    #[test]
    fn a_chromium_path_that_points_nowhere_is_missing() {
        assert!(!executable(Path::new("/nonexistent/chromium")));
        assert!(!executable(Path::new("/")), "a directory is not a program");
    }

    #[test]
    fn the_binary_name_drops_cargos_hash() {
        let name = binary_name();
        assert!(name.starts_with("agentmesh-test-support/agentmesh_test_support"), "{name}");
    }
}
