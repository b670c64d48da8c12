//! Group `pg-floor`: what the PostgreSQL server itself allows on this machine, in
//! the same run as the claim cases, through the client crate the store uses
//! (`postgres`, synchronous) with no schema of ours:
//!
//! - `pg-select-floor`: a prepared `SELECT 1` on one connection: one round trip;
//! - `pg-insert-floor`: a prepared one-row `INSERT` of a text key and a payload of
//!   about 450 bytes (a task's size) into a table with a primary key, on one
//!   connection in autocommit: one round trip and one durable COMMIT;
//! - the same with `-8-clients` and `-32-clients`: K threads, each its own
//!   connection, N/K operations each, released together; `ops_per_s` is over the
//!   wall-clock time of all, the percentiles are those of one operation.
//!
//! N is 10,000 (1,000 under `--quick`).
//!
//! When `pgbench` is installed, the server's own benchmark in the same schema
//! (`pgbench -i -s 1`, then `-S` select-only and `-N` simple-update, each with 1, 8
//! and 32 clients, N transactions in all): `pgbench-select-only[-K-clients]` and
//! `pgbench-simple-update[-K-clients]`. `ops_per_s` is pgbench's tps without the
//! initial connection time; the percentiles are from its per-transaction log
//! (`-l`). Without pgbench the cases are skipped with a note.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::data::message;
use crate::harness::Harness;
use crate::pg::{self, PgCase};
use crate::timing::{Timer, released_together};

/// Concurrent clients of the multi-client floors and pgbench runs.
const CLIENTS: [usize; 3] = [1, 8, 32];

/// What one floor operation is.
#[derive(Clone, Copy)]
enum Floor {
    Select,
    Insert,
}

impl Floor {
    fn name(self) -> &'static str {
        match self {
            Floor::Select => "pg-select-floor",
            Floor::Insert => "pg-insert-floor",
        }
    }
}

/// Runs the group.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(10_000);
    for floor in [Floor::Select, Floor::Insert] {
        for clients in CLIENTS {
            let name = with_clients(floor.name(), clients);
            pg::run_case(h, &format!("{name}-{n}"), |h, case| bare(h, case, &name, floor, n, clients));
        }
    }
    match Command::new("pgbench").arg("--version").output() {
        Ok(out) if out.status.success() => {
            pg::run_case(h, &format!("pgbench-{n}"), |h, case| pgbench(h, case, n));
        }
        _ => {
            eprintln!("note: pgbench is not installed (Debian: postgresql-contrib); pgbench-* cases skipped")
        }
    }
}

/// `name`, or `name-K-clients` for more than one client.
fn with_clients(name: &str, clients: usize) -> String {
    if clients == 1 { name.to_owned() } else { format!("{name}-{clients}-clients") }
}

fn bare(
    h: &mut Harness,
    case: &PgCase,
    name: &str,
    floor: Floor,
    n: usize,
    clients: usize,
) -> anyhow::Result<()> {
    let mut admin = case.client()?;
    admin.batch_execute("CREATE TABLE floor_t (id TEXT PRIMARY KEY, payload TEXT NOT NULL)")?;
    let payload =
        format!("{{\"event\":\"task_completed\",\"summary\":{:?},\"pad\":{:?}}}", message(0), message(1));
    let per_client = n.div_ceil(clients);
    // Every connection is made and its statement prepared before the clock starts.
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut client = case.client()?;
        let statement = match floor {
            Floor::Select => client.prepare("SELECT 1")?,
            Floor::Insert => client.prepare("INSERT INTO floor_t (id, payload) VALUES ($1, $2)")?,
        };
        conns.push((client, statement));
    }
    let (runs, wall) = released_together(conns, |k, (mut client, statement)| {
        let ops = per_client.min(n.saturating_sub(k * per_client));
        let mut latencies = Vec::with_capacity(ops);
        for i in 0..ops {
            let began = Instant::now();
            match floor {
                Floor::Select => {
                    let one: i32 = client.query_one(&statement, &[])?.get(0);
                    anyhow::ensure!(one == 1, "SELECT 1 gave {one}");
                }
                Floor::Insert => {
                    client.execute(&statement, &[&format!("{k}-{i}"), &payload])?;
                }
            }
            latencies.push(began.elapsed());
        }
        Ok(latencies)
    });
    let latencies: Vec<Duration> = runs?.into_iter().flatten().collect();
    let ops = latencies.len();
    h.report(name, n, ops, &Timer::concurrent(latencies, wall));
    h.check(&format!("{}: every operation ran", case.label()), ops == n, format!("{ops} of {n}"));
    if let Floor::Insert = floor {
        let rows: i64 = admin.query_one("SELECT count(*) FROM floor_t", &[])?.get(0);
        h.check(&format!("{}: every row committed", case.label()), rows == n as i64, format!("rows={rows}"));
    }
    Ok(())
}

fn pgbench(h: &mut Harness, case: &PgCase, n: usize) -> anyhow::Result<()> {
    let logs = tempfile::Builder::new().prefix("agentmesh-pgbench-").tempdir()?;
    let init = run_pgbench(case, &["-i", "-q", "-s", "1"])?;
    anyhow::ensure!(
        init.status.success(),
        "pgbench -i failed: {}",
        String::from_utf8_lossy(&init.stderr).trim()
    );
    for (script, flag) in [("pgbench-select-only", "-S"), ("pgbench-simple-update", "-N")] {
        for clients in CLIENTS {
            let name = with_clients(script, clients);
            let per_client = n.div_ceil(clients);
            let prefix = logs.path().join(&name);
            let out = run_pgbench(
                case,
                &[
                    flag,
                    "-n",
                    "-c",
                    &clients.to_string(),
                    "-j",
                    &clients.min(2).to_string(),
                    "-t",
                    &per_client.to_string(),
                    "-l",
                    &format!("--log-prefix={}", prefix.display()),
                ],
            )?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            anyhow::ensure!(
                out.status.success(),
                "pgbench {flag} -c {clients} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            let tps = tps_of(&stdout).with_context(|| format!("no tps in pgbench's output: {stdout}"))?;
            let latencies = logged_latencies(logs.path(), &name)?;
            let ops = latencies.len();
            let wall = Duration::from_secs_f64(ops as f64 / tps.max(1e-9));
            h.report(&name, n, ops, &Timer::concurrent(latencies, wall));
            h.check(
                &format!("{}: {name} ran every transaction", case.label()),
                ops == per_client * clients,
                format!("{ops} logged of {}", per_client * clients),
            );
        }
    }
    Ok(())
}

/// Runs pgbench with `args` against the case's database, in its schema.
fn run_pgbench(case: &PgCase, args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new("pgbench")
        .args(args)
        .arg(case.url())
        .env("PGOPTIONS", format!("-c search_path={}", case.schema()))
        .output()
        .context("failed to run pgbench")
}

/// pgbench's `tps = X (without initial connection time)`.
fn tps_of(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("tps = "))
        .find(|rest| rest.contains("without initial connection time"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|x| x.parse().ok())
}

/// The latencies of pgbench's transaction logs `<dir>/<name>.<pid>[.<thread>]`:
/// each line is `client transaction latency_us script epoch_s epoch_us`.
fn logged_latencies(dir: &Path, name: &str) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file = entry.file_name();
        let is_ours = file.to_str().and_then(|f| f.strip_prefix(name)).is_some_and(|rest| {
            rest.strip_prefix('.')
                .is_some_and(|r| r.split('.').all(|p| p.bytes().all(|b| b.is_ascii_digit())))
        });
        if !is_ours {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())?.lines() {
            let micros: u64 = line
                .split_whitespace()
                .nth(2)
                .and_then(|x| x.parse().ok())
                .with_context(|| format!("a pgbench log line without a latency: {line:?}"))?;
            latencies.push(Duration::from_micros(micros));
        }
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pgbench_tps_without_connection_time() {
        let out = "number of failed transactions: 0 (0.000%)\n\
                   latency average = 0.094 ms\n\
                   initial connection time = 2.345 ms\n\
                   tps = 10623.4 (without initial connection time)\n";
        assert_eq!(tps_of(out), Some(10623.4));
        assert_eq!(tps_of("tps = 12 (including connections establishing)\n"), None);
    }

    #[test]
    fn reads_the_logs_of_one_run_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("pgbench-select-only.77"),
            "0 0 70 0 1700000000 1\n0 1 90 0 1700000000 2\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("pgbench-select-only.77.1"), "1 0 80 0 1700000000 3\n").unwrap();
        std::fs::write(dir.path().join("pgbench-select-only-8-clients.78"), "0 0 999 0 1700000000 1\n")
            .unwrap();
        let mut got = logged_latencies(dir.path(), "pgbench-select-only").unwrap();
        got.sort();
        assert_eq!(got, [70, 80, 90].map(Duration::from_micros));
    }
}
