//! The PostgreSQL server of the tests that need one, and a fresh schema on it.

/// `AGENTMESH_TEST_DATABASE_URL`, or the local server's `test` database.
pub fn database_url() -> String {
    std::env::var("AGENTMESH_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A schema name no other test run uses, dropped with everything in it when the
/// guard drops.
pub struct Schema(pub String);

impl Schema {
    /// `<prefix>_<pid>_<count>_<nanos>`.
    pub fn fresh(prefix: &str) -> Schema {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.subsec_nanos());
        Schema(format!("{prefix}_{}_{}_{nanos}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&database_url(), postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.0));
        }
    }
}
