//! What the agentmesh tests share. Used only as a dev-dependency.
//!
//! [`cluster`]: a PostgreSQL server of a test's own, to stop and start again.
//!
//! [`postgres`]: the PostgreSQL server of the tests that need one. It is named by
//! `AGENTMESH_TEST_DATABASE_URL`; without it those tests return at once (after one
//! `skipped: ...` line per test binary on stderr) and the rest of the suite runs,
//! unless `AGENTMESH_TEST_REQUIRE_POSTGRES=1`, which makes them fail instead.
//!
//! ```no_run
//! #[test]
//! fn a_test_on_postgresql() {
//!     let url = agentmesh_test_support::require_postgres!();
//!     let schema = agentmesh_test_support::postgres::Schema::fresh(&url, "am_example");
//!     // ... open a store on `url` in `schema.name()`; the schema is dropped at the end.
//! }
//! ```

pub mod cluster;
pub mod postgres;
