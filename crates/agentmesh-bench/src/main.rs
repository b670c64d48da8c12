//! `agentmesh-bench`: the seed harness's benchmark, run against our store.
//!
//! ```text
//! cargo run --release -p agentmesh-bench -- [--quick] [--only=a,b] [--keep] [--database-url=URL]
//!     [--durability=full|process-crash-only]
//! ```
//!
//! stdout carries one JSON line per case in the seed harness's format
//! (`{"case","n","ops","seconds","ops_per_s","p50_us","p99_us"}`), with its case
//! names and its meaning of every field, so `bench/compare.sh` can join the two
//! outputs on `(case, n)`. stderr carries the environment, one `check ok|FAIL` line
//! per behaviour check, the file sizes after each case and a summary. The exit
//! status is 1 when any check failed, and every case still runs.
//!
//! `--quick` divides every N by 10 (at least 10); `--only=` takes group names;
//! `--keep` keeps each case's temp dir. `--durability=` (default `full`) is the
//! mode every SQLite case runs in: the stores of the cases (and so the daemon of
//! the `http` group, which serves the case's store in this process), the bare
//! connections of the `floor` group and the store behind its writer round trip.
//! The case names do not say the mode, so two runs join on `(case, n)`; the
//! environment line on stderr does. The PostgreSQL groups (`pg-*`) run only
//! when `--only=` names them, against `--database-url` (default
//! [`harness::DEFAULT_DATABASE_URL`]), each case in a schema of its own that it
//! drops at the end.

use std::process::ExitCode;

/// The allocator the `agentmesh` binary uses, so the cases measure what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cases;
mod data;
mod harness;
mod pg;
mod timing;

use harness::{Harness, Options};

/// Runs every case of one group.
type RunGroup = fn(&mut Harness);

/// Groups this bench runs, in order, with the function that runs each. The `pg-*`
/// groups need a PostgreSQL server and run only when `--only=` names them.
const GROUPS: [(&str, RunGroup); 17] = [
    ("enqueue", cases::enqueue::run),
    ("claim-depth", cases::claim::run_depth),
    ("claim-with-deps", cases::claim::run_with_deps),
    ("pending-events", cases::pending_events::run),
    ("ledger", cases::ledger::run),
    ("http", cases::http::run),
    ("floor", cases::floor::run),
    ("reads", cases::reads::run),
    ("reservations", cases::reservations::run),
    ("webhooks", cases::webhooks::run),
    ("retention", cases::retention::run),
    ("storage", cases::storage::run),
    ("pg-claim-depth", cases::pg_claim::run_depth),
    ("pg-throughput", cases::pg_claim::run_throughput),
    ("pg-floor", cases::pg_floor::run),
    ("pg-reservations", cases::reservations::run_pg),
    ("pg-storage", cases::storage::run_pg),
];

const USAGE: &str = "usage: agentmesh-bench [--quick] [--only=GROUP,...] [--keep] [--database-url=URL]\n\
                     [--pg-depths=N,...] [--pg-tasks=N] [--pg-cases=TEXT,...] [--durability=full|process-crash-only]\n\
                     groups: enqueue, claim-depth, claim-with-deps, pending-events, ledger, http, floor, reads,\n\
                     reservations, webhooks, retention, storage\n\
                     PostgreSQL groups (only when named): pg-claim-depth, pg-throughput, pg-floor,\n\
                     pg-reservations, pg-storage\n\
                     --database-url: the PostgreSQL database of the pg groups\n\
                     (default postgres://postgres@127.0.0.1:5432/test)\n\
                     --pg-depths, --pg-tasks: other sizes for pg-claim-depth and pg-throughput\n\
                     --pg-cases=TEXT,...: only the pg cases whose name contains one of these\n\
                     --durability: the SQLite cases' mode (default full: every commit synced;\n\
                     process-crash-only: synchronous=NORMAL)";

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            eprintln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("agentmesh-bench: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    for group in opts.only.iter().flatten() {
        if !GROUPS.iter().any(|(name, _)| name == group) {
            eprintln!("note: unknown group {group}; ignored");
        }
    }
    let mut harness = match Harness::new(opts) {
        Ok(harness) => harness,
        Err(err) => {
            eprintln!("agentmesh-bench: {err:#}");
            return ExitCode::from(2);
        }
    };
    for (name, run) in GROUPS {
        if harness.opts().wants(name) {
            run(&mut harness);
        }
    }
    if harness.finish() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Parses the arguments; `None` asks for the usage text.
fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut opts = Options { database_url: harness::DEFAULT_DATABASE_URL.to_owned(), ..Options::default() };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => opts.quick = true,
            "--keep" => opts.keep = true,
            "-h" | "--help" => return Ok(None),
            "--database-url" => {
                opts.database_url = args.next().ok_or("--database-url needs a URL")?;
            }
            "--durability" => {
                let mode = args.next().ok_or("--durability needs a mode")?;
                opts.durability = mode.parse().map_err(|err| format!("{err}"))?;
            }
            _ => {
                if let Some(list) = arg.strip_prefix("--only=") {
                    opts.only = Some(list.split(',').filter(|g| !g.is_empty()).map(str::to_owned).collect());
                } else if let Some(mode) = arg.strip_prefix("--durability=") {
                    opts.durability = mode.parse().map_err(|err| format!("{err}"))?;
                } else if let Some(url) = arg.strip_prefix("--database-url=") {
                    opts.database_url = url.to_owned();
                } else if let Some(list) = arg.strip_prefix("--pg-depths=") {
                    let depths = list.split(',').map(|d| d.parse().map_err(|_| format!("bad depth {d:?}")));
                    opts.pg_depths = Some(depths.collect::<Result<_, _>>()?);
                } else if let Some(list) = arg.strip_prefix("--pg-cases=") {
                    opts.pg_cases =
                        Some(list.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect());
                } else if let Some(n) = arg.strip_prefix("--pg-tasks=") {
                    opts.pg_tasks = Some(n.parse().map_err(|_| format!("bad task count {n:?}"))?);
                } else {
                    return Err(format!("unknown argument {arg:?}"));
                }
            }
        }
    }
    Ok(Some(opts))
}

#[cfg(test)]
mod tests {
    use agentmesh_sqlite::Durability;

    use super::parse_args;

    fn parse(args: &[&str]) -> Result<Option<super::Options>, String> {
        parse_args(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn durability_defaults_to_full_and_takes_either_form() {
        assert_eq!(parse(&[]).unwrap().unwrap().durability, Durability::Full);
        let relaxed = parse(&["--durability=process-crash-only"]).unwrap().unwrap();
        assert_eq!(relaxed.durability, Durability::ProcessCrashOnly);
        let spaced = parse(&["--durability", "process-crash-only", "--quick"]).unwrap().unwrap();
        assert_eq!((spaced.durability, spaced.quick), (Durability::ProcessCrashOnly, true));
        assert_eq!(parse(&["--durability=full"]).unwrap().unwrap().durability, Durability::Full);
    }

    #[test]
    fn an_unknown_durability_is_refused() {
        let err = parse(&["--durability=normal"]).unwrap_err();
        assert!(err.contains("unknown durability"), "{err}");
        assert!(parse(&["--durability"]).is_err());
    }
}
