//! The SQLite backend's tests, as one test binary: `conformance` runs the
//! backend-agnostic suite (one `#[test]` per rule), `sqlite` what only this
//! backend promises (the file, its schema, the sequence, the original's
//! databases), `group_commit` the writer sharing commits between callers, and
//! `inbox_legacy` the import of the original's inbox files, and `model` the
//! store held to the reference model over random operation sequences. Each test works on a
//! database file in a temp directory of its own.
//!
//! `multiprocess` and `crash` keep binaries of their own: each is its own `main`,
//! starting copies of itself as worker processes.

mod conformance;
mod group_commit;
mod inbox_legacy;
mod model;
mod sqlite;
