//! The Node.js packages the tests' clients run on (the official TypeScript MCP
//! SDK, ajv, playwright-core), installed once by `npm ci` from the committed lock
//! file into `tests/node/node_modules`. A test first asks for Node.js and npm
//! with `agentmesh_test_support::require!(Tool::Node)`, which skips it (one
//! `skipped: ...` line) on a machine without them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory of the Node scripts and their packages.
pub(crate) fn node_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("node")
}

/// What a finished install holds: npm writes its hidden lock file last.
const INSTALLED: [&str; 4] = [
    "node_modules/.package-lock.json",
    "node_modules/@modelcontextprotocol/sdk",
    "node_modules/ajv",
    "node_modules/playwright-core",
];

/// Installs the packages unless a finished install is there, and returns the
/// directory (npm on `PATH`: the test has required `Tool::Node`). `npm ci` removes `node_modules` before it installs, so two at once
/// would pull the packages from under each other: within a process the first
/// caller installs while the others wait, and across test binaries an exclusive
/// `flock` on a file of the target dir does the same.
pub(crate) fn install_packages() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = node_dir();
        let lock_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("node-packages.lock");
        let lock =
            File::create(&lock_path).unwrap_or_else(|e| panic!("creating {}: {e}", lock_path.display()));
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .unwrap_or_else(|e| panic!("locking {}: {e}", lock_path.display()));
        if INSTALLED.iter().all(|p| dir.join(p).exists()) {
            return dir;
        }
        let output = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("npm did not run in {}: {e}", dir.display()));
        assert!(
            output.status.success(),
            "npm ci failed in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        dir
    })
}
