//! Integration tests of the PostgreSQL backend, against the server named by
//! `AGENTMESH_TEST_DATABASE_URL`; without it they are skipped (one line on
//! stderr says so, see `agentmesh_test_support`). Each test runs in a fresh
//! schema of its own, dropped when it ends.

mod announce;
mod archive;
mod concurrency;
mod conformance;
mod inbox;
mod ledger;
mod shard;
mod support;
