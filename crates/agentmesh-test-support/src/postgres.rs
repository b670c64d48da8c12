//! The PostgreSQL server of the tests: [`database_url`], the
//! [`require_postgres!`](crate::require_postgres) skip, and a [`Schema`] of a
//! test's own, dropped when the test ends.

use std::sync::atomic::{AtomicU32, Ordering};

/// The variable that names the tests' server.
pub const URL_VAR: &str = "AGENTMESH_TEST_DATABASE_URL";
/// Set to `1`, a missing [`URL_VAR`] fails the tests that need the server
/// instead of skipping them (as [`REQUIRE_ALL_VAR`](crate::tools::REQUIRE_ALL_VAR)
/// does for every tool).
pub const REQUIRE_VAR: &str = "AGENTMESH_TEST_REQUIRE_POSTGRES";
/// The URL the skip line suggests: the local server's `test` database.
pub const EXAMPLE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The server's URL: the trimmed value of `AGENTMESH_TEST_DATABASE_URL`, or
/// `None` when it is unset or blank.
///
/// `None` prints one `skipped: the PostgreSQL tests of <binary> ...` line to
/// the process's stderr, once per process (see [`tools`](crate::tools), which
/// does the same for every tool the tests may need).
///
/// # Panics
///
/// When the variable is unset or blank and `AGENTMESH_TEST_REQUIRE_POSTGRES` or
/// `AGENTMESH_TEST_REQUIRE_ALL` is `1`.
pub fn database_url() -> Option<String> {
    crate::tools::require(crate::Tool::PostgreSQL)
}

/// The URL of the tests' server, or `return` from the enclosing function (a
/// test) when there is none: a test that needs the server starts with
/// `let url = agentmesh_test_support::require_postgres!();`. See
/// [`postgres::database_url`](crate::postgres::database_url).
#[macro_export]
macro_rules! require_postgres {
    () => {
        match $crate::postgres::database_url() {
            ::std::option::Option::Some(url) => url,
            ::std::option::Option::None => return,
        }
    };
}

/// A schema name no other test run uses, on the server at a URL; the schema is
/// dropped, with everything in it, when this drops. Creating it is left to what
/// uses it (a store creates its schema when it is missing).
#[derive(Debug)]
pub struct Schema {
    url: String,
    name: String,
}

impl Schema {
    /// `<prefix>_<pid>_<count>_<nanos>` on the server at `url`; `prefix` starts
    /// with a letter and holds letters, digits and underscores only.
    pub fn fresh(url: &str, prefix: &str) -> Schema {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.subsec_nanos());
        let count = COUNT.fetch_add(1, Ordering::Relaxed);
        Schema { url: url.to_owned(), name: format!("{prefix}_{}_{count}_{nanos}", std::process::id()) }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Schema {
    /// Drops the schema `CASCADE`; a failure is printed, never a panic.
    fn drop(&mut self) {
        let dropped = ::postgres::Client::connect(&self.url, ::postgres::NoTls).and_then(|mut client| {
            client.batch_execute(&format!(
                "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                self.name.replace('"', "\"\"")
            ))
        });
        if let Err(err) = dropped {
            eprintln!("could not drop test schema {}: {err}", self.name);
        }
    }
}
