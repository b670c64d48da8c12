//! A Python virtualenv of pinned packages, made once per target dir for the
//! tests that run a Python program (the MCP SDK's client, the OpenAPI
//! validator): `python3 -m venv`, then `pip install -r` a requirements file.
//!
//! ```no_run
//! use std::path::Path;
//!
//! use agentmesh_test_support::{Tool, python, require};
//!
//! fn a_test_with_a_python_client(target_tmpdir: &Path) {
//!     let python3 = require!(Tool::Python);
//!     let root = target_tmpdir.join("python-example");
//!     let python = python::venv(&python3, &root, Path::new("tests/requirements.txt"));
//!     // ... `std::process::Command::new(&python)`.
//! }
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The interpreter of the virtualenv `root/venv` holding the packages of
/// `requirements`, made by `python3` unless one made from the same requirements
/// is there.
///
/// The install holds an exclusive `flock` on `root/install.lock`, so test
/// binaries running at once neither install over each other nor use a half-made
/// virtualenv. The copy of the requirements is written into the virtualenv last:
/// it is the mark of a finished install.
///
/// # Panics
///
/// When the virtualenv cannot be made or pip fails: the message says what the
/// tests need (python3's venv module with ensurepip, and PyPI).
pub fn venv(python3: &str, root: &Path, requirements_path: &Path) -> PathBuf {
    std::fs::create_dir_all(root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
    let lock_path = root.join("install.lock");
    let lock = File::create(&lock_path).unwrap_or_else(|e| panic!("creating {}: {e}", lock_path.display()));
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .unwrap_or_else(|e| panic!("locking {}: {e}", lock_path.display()));

    let requirements = std::fs::read_to_string(requirements_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", requirements_path.display()));
    let venv = root.join("venv");
    let python = venv.join("bin").join("python");
    let installed = venv.join("agentmesh-requirements.txt");
    if python.exists() && std::fs::read_to_string(&installed).is_ok_and(|done| done == requirements) {
        return python;
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).unwrap_or_else(|e| panic!("removing {}: {e}", venv.display()));
    }

    let made = Command::new(python3)
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .output()
        .unwrap_or_else(|e| panic!("{python3} did not run: {e}"));
    assert!(
        made.status.success(),
        "`{python3} -m venv {}` failed ({}): the Python tests need python3's venv module and \
         ensurepip (Debian: python3-venv; .ci/run installs it)\n{}{}",
        venv.display(),
        made.status,
        String::from_utf8_lossy(&made.stdout),
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--quiet", "-r"])
        .arg(requirements_path)
        .output()
        .unwrap_or_else(|e| panic!("{} did not run: {e}", python.display()));
    assert!(
        pip.status.success(),
        "`pip install -r {}` failed in the virtualenv {} ({}): the Python tests need pip \
         (it comes with the venv module) and PyPI\n{}{}",
        requirements_path.display(),
        venv.display(),
        pip.status,
        String::from_utf8_lossy(&pip.stdout),
        String::from_utf8_lossy(&pip.stderr)
    );
    std::fs::write(&installed, &requirements)
        .unwrap_or_else(|e| panic!("writing {}: {e}", installed.display()));
    python
}
