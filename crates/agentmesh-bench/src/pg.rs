//! What the PostgreSQL cases share: a fresh schema per case, dropped when the case
//! ends however it ends, stores and bare connections in it, and the server's
//! settings on stderr once per run.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use agentmesh_postgres::{PgOptions, PgStore};
use anyhow::Context as _;
use postgres::{Client, NoTls};

use crate::harness::Harness;

/// Cases opened in this run, numbering their schemas.
static CASES_OPENED: AtomicU32 = AtomicU32::new(0);
/// Whether the server's settings were printed.
static ENV_LOGGED: AtomicBool = AtomicBool::new(false);

/// The schema of one case and how to reach it.
pub(crate) struct PgCase {
    label: String,
    url: String,
    schema: String,
}

impl PgCase {
    /// The case's label (`pg-claim-depth-100`), used to name its checks.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The database URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The case's schema (unquoted; letters, digits and `_` only).
    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    /// A store on the case's schema opening at most `max_connections`.
    pub(crate) fn open_store(&self, max_connections: usize) -> anyhow::Result<PgStore> {
        let options = PgOptions { max_connections, ..PgOptions::new(&self.url).schema(&self.schema) };
        PgStore::open(&options).with_context(|| format!("failed to open a store in schema {}", self.schema))
    }

    /// A bare connection with `search_path` set to the case's schema.
    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        let mut client = connect(&self.url)?;
        client.batch_execute(&format!("SET search_path TO {}", self.schema))?;
        Ok(client)
    }

    /// `VACUUM (ANALYZE)` of every table of the schema, as the peers do after a
    /// fill, so no case runs on statistics autovacuum has not caught up with.
    pub(crate) fn vacuum_analyze(&self) -> anyhow::Result<()> {
        let began = Instant::now();
        let mut client = self.client()?;
        let tables: Vec<String> = client
            .query("SELECT tablename FROM pg_tables WHERE schemaname = $1", &[&self.schema])?
            .iter()
            .map(|row| row.get(0))
            .collect();
        for table in &tables {
            client.batch_execute(&format!("VACUUM (ANALYZE) {}.\"{table}\"", self.schema))?;
        }
        eprintln!(
            "  {}: VACUUM (ANALYZE) of {} tables in {:.1}s",
            self.label,
            tables.len(),
            began.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// Runs one case in a fresh schema of its own, created before and dropped
/// after `body`, even when it fails. An error stops only this case; it counts
/// as a failure and the run goes on.
pub(crate) fn run_case(
    h: &mut Harness,
    label: &str,
    body: impl FnOnce(&mut Harness, &PgCase) -> anyhow::Result<()>,
) {
    if let Some(wanted) = &h.opts().pg_cases
        && !wanted.iter().any(|w| label.contains(w.as_str()))
    {
        return;
    }
    let case =
        PgCase { label: label.to_owned(), url: h.opts().database_url.clone(), schema: schema_name(label) };
    let outcome = create_schema(&case).and_then(|()| {
        let outcome = body(h, &case);
        let dropped = drop_schema(&case);
        outcome.and(dropped)
    });
    if let Err(err) = outcome {
        h.fail(label, &err);
    }
}

/// `agentmesh_bench_<pid>_<case number>_<label>`, cut to PostgreSQL's 63 bytes.
fn schema_name(label: &str) -> String {
    let number = CASES_OPENED.fetch_add(1, Ordering::Relaxed) + 1;
    let mut name = format!("agentmesh_bench_{}_{number:02}_{}", std::process::id(), label.replace('-', "_"));
    name.retain(|c| c.is_ascii_alphanumeric() || c == '_');
    name.truncate(63);
    name
}

fn connect(url: &str) -> anyhow::Result<Client> {
    Client::connect(url, NoTls).with_context(|| format!("failed to connect to {}", redact(url)))
}

fn create_schema(case: &PgCase) -> anyhow::Result<()> {
    let mut client = connect(&case.url)?;
    if !ENV_LOGGED.swap(true, Ordering::Relaxed) {
        let mut setting = |name: &str| -> anyhow::Result<String> {
            Ok(client.query_one(&format!("SHOW {name}"), &[])?.get(0))
        };
        eprintln!(
            "env agentmesh-bench postgres={} synchronous_commit={} fsync={} shared_buffers={} max_connections={} \
             database={} platform={}-{}",
            setting("server_version")?,
            setting("synchronous_commit")?,
            setting("fsync")?,
            setting("shared_buffers")?,
            setting("max_connections")?,
            redact(&case.url),
            std::env::consts::OS,
            std::env::consts::ARCH,
        );
    }
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {0} CASCADE; CREATE SCHEMA {0}", case.schema))?;
    Ok(())
}

fn drop_schema(case: &PgCase) -> anyhow::Result<()> {
    connect(&case.url)?
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", case.schema))
        .with_context(|| format!("failed to drop schema {}", case.schema))
}

/// The URL without a password, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_valid_identifiers() {
        let name = schema_name("pg-claim-complete-32-clients-own-store-1000000");
        assert!(name.starts_with("agentmesh_bench_"));
        agentmesh_postgres::validate_schema(&name).unwrap();
    }

    #[test]
    fn redacts_the_password() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u@h:5432/db");
        assert_eq!(redact("postgres://postgres@127.0.0.1/test"), "postgres://postgres@127.0.0.1/test");
    }
}
