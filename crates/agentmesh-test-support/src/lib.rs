//! What the agentmesh tests share. Used only as a dev-dependency.
//!
//! [`tools`]: what some tests need beyond a Rust toolchain and a C compiler
//! (PostgreSQL, Node.js and npm, Python with venv, Chromium) and the one rule
//! when it is missing: [`require!`] prints one `skipped: the <tool> tests of
//! <binary> (...)` line per tool and test binary on stderr, saying how to get
//! the tool, and returns from the test, so the rest of the suite runs. With
//! `AGENTMESH_TEST_REQUIRE_ALL=1` (`.ci/run` sets it) those tests fail instead;
//! `AGENTMESH_TEST_REQUIRE_POSTGRES=1` does the same for PostgreSQL alone.
//!
//! [`postgres`]: the PostgreSQL server of the tests that need one, named by
//! `AGENTMESH_TEST_DATABASE_URL`, and a fresh schema per test.
//!
//! [`cluster`]: a PostgreSQL server of a test's own, to stop and start again.
//!
//! [`python`]: a virtualenv of pinned Python packages, made once per target dir.
//!
//! ```no_run
//! #[test]
//! fn a_test_on_postgresql() {
//!     let url = agentmesh_test_support::require_postgres!();
//!     let schema = agentmesh_test_support::postgres::Schema::fresh(&url, "am_example");
//!     // ... open a store on `url` in `schema.name()`; the schema is dropped at the end.
//! }
//!
//! #[test]
//! fn a_test_with_a_node_client() {
//!     use agentmesh_test_support::{Tool, require};
//!     let node = require!(Tool::Node);
//!     // ... `std::process::Command::new(&node)`.
//! }
//! ```

pub mod cluster;
pub mod postgres;
pub mod python;
pub mod tools;

pub use tools::Tool;

/// `len` letters and digits that deflate barely shortens (stored payloads are
/// deflated, so a test that needs a row to take room uses these), the same for
/// the same `seed`.
pub fn incompressible(len: usize, seed: u32) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            char::from(ALPHABET[state as usize % ALPHABET.len()])
        })
        .collect()
}

/// Sends the signal named `name` (`INT`, `TERM`, `KILL`, `STOP`) to process
/// `pid`, as `kill -NAME pid` would, without needing a `kill` program.
///
/// # Errors
///
/// An unknown name, a pid out of range, or what `kill(2)` refused.
pub fn signal(pid: u32, name: &str) -> std::io::Result<()> {
    use rustix::process::{Pid, Signal, kill_process};
    let signal = match name {
        "INT" => Signal::INT,
        "TERM" => Signal::TERM,
        "KILL" => Signal::KILL,
        "STOP" => Signal::STOP,
        other => return Err(std::io::Error::other(format!("no signal named {other:?}"))),
    };
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other(format!("no process {pid}")))?;
    kill_process(pid, signal).map_err(std::io::Error::from)
}
