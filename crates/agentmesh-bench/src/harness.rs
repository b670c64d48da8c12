//! What every case shares: the run options, a fresh store per case in its own temp
//! dir, behaviour checks, result lines and the closing summary.
//!
//! Result lines go to stdout and nothing else does; the environment line, checks,
//! file sizes and the summary go to stderr.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use agentmesh_sqlite::{DB_FILE_NAME, Durability, OpenOptions, SqliteStore};
use agentmesh_store::Store;
use anyhow::Context as _;
use tempfile::TempDir;

use crate::timing::{self, Timer};

/// The database of the PostgreSQL groups when `--database-url` is not given.
pub(crate) const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Command-line options.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// Every N divided by 10 (at least 10), for a smoke run.
    pub quick: bool,
    /// Keep the temp dirs and print where they are.
    pub keep: bool,
    /// Run only these groups (all but the `pg-*` ones when `None`).
    pub only: Option<Vec<String>>,
    /// The PostgreSQL database the `pg-*` groups run in.
    pub database_url: String,
    /// The depths of `pg-claim-depth` instead of its own (`--pg-depths=`).
    pub pg_depths: Option<Vec<usize>>,
    /// The tasks of each `pg-throughput` load instead of its own (`--pg-tasks=`).
    pub pg_tasks: Option<usize>,
    /// Only the PostgreSQL cases whose name contains one of these.
    pub pg_cases: Option<Vec<String>>,
    /// What an acknowledged write of every SQLite case survives (`--durability=`):
    /// the stores of the cases, the daemon's store of the `http` group, and the
    /// bare connections and the writer of the `floor` group.
    pub durability: Durability,
}

impl Options {
    /// `n`, or `n / 10` (rounded, at least 10) under `--quick`.
    pub(crate) fn scale(&self, n: usize) -> usize {
        if self.quick { ((n + 5) / 10).max(10) } else { n }
    }

    /// Claims per claim case: 200, or 20 under `--quick`.
    pub(crate) fn claims(&self) -> usize {
        if self.quick { 20 } else { 200 }
    }

    /// Whether the group runs: a `pg-*` group only when `--only=` names it (it
    /// needs a server), any other when `--only=` is absent or names it.
    pub(crate) fn wants(&self, group: &str) -> bool {
        match &self.only {
            Some(only) => only.iter().any(|g| g == group),
            None => !group.starts_with("pg-"),
        }
    }
}

/// The store of one case and where it lives.
pub(crate) struct CaseStore {
    label: String,
    /// The case's own dir, where the store's file lives.
    dir: std::path::PathBuf,
    /// Shared, so that a case can hand the store to a daemon it runs.
    store: Arc<SqliteStore>,
}

impl CaseStore {
    /// The store, through the backend-independent interface the cases use.
    pub(crate) fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// The SQLite store itself, for cases that serve it or tune it.
    pub(crate) fn sqlite(&self) -> &Arc<SqliteStore> {
        &self.store
    }

    /// The case's label (`enqueue-1000`), used to name its checks.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The case's own dir (the store's file is in it), for files of its own.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

/// State of one bench run.
pub(crate) struct Harness {
    opts: Options,
    root: TempDir,
    cases_opened: u32,
    env_logged: bool,
    failures: Vec<String>,
    started: Instant,
}

impl Harness {
    /// A run with its own temp root.
    pub(crate) fn new(opts: Options) -> anyhow::Result<Harness> {
        let root = tempfile::Builder::new()
            .prefix("agentmesh-bench-")
            .tempdir()
            .context("failed to create the bench's temp dir")?;
        Ok(Harness {
            opts,
            root,
            cases_opened: 0,
            env_logged: false,
            failures: Vec::new(),
            started: Instant::now(),
        })
    }

    /// The run's options.
    pub(crate) fn opts(&self) -> &Options {
        &self.opts
    }

    /// Runs one case on a fresh store labelled `label` (its dir and check names).
    /// An error stops only this case; it counts as a failure and the run goes on.
    pub(crate) fn run_case(
        &mut self,
        label: &str,
        body: impl FnOnce(&mut Harness, &CaseStore) -> anyhow::Result<()>,
    ) {
        let result = self.fresh_store(label).and_then(|case| {
            let outcome = body(self, &case);
            close(case);
            outcome
        });
        if let Err(err) = result {
            self.fail(label, &err);
        }
    }

    /// Records that case `label` stopped on `err`; the run goes on.
    pub(crate) fn fail(&mut self, label: &str, err: &anyhow::Error) {
        eprintln!("FAIL {label}: {err:#}");
        self.failures.push(format!("{label}: {err:#}"));
    }

    /// Opens a fresh store in a new dir named after `label` in the run's durability
    /// mode, logs the environment on first use, and checks that the journal mode
    /// and `synchronous`, read back through the store's own connection, are WAL
    /// and the mode's (FULL, or NORMAL for `process-crash-only`).
    fn fresh_store(&mut self, label: &str) -> anyhow::Result<CaseStore> {
        self.cases_opened += 1;
        let dir = self.root.path().join(format!("{:02}-{label}", self.cases_opened));
        fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
        let path = dir.join(DB_FILE_NAME);
        let durability = self.opts.durability;
        let store = SqliteStore::open_with(&path, &OpenOptions::with_durability(durability))
            .with_context(|| format!("failed to open the store at {}", path.display()))?;
        let journal_mode = store.pragma("journal_mode")?;
        let synchronous = store.pragma("synchronous")?;
        if !self.env_logged {
            self.env_logged = true;
            eprintln!(
                "env agentmesh-bench sqlite={} durability={durability} journal_mode={journal_mode} \
                 synchronous={synchronous} platform={}-{} quick={}",
                SqliteStore::sqlite_version(),
                std::env::consts::OS,
                std::env::consts::ARCH,
                self.opts.quick,
            );
        }
        self.check(
            &format!("{label}: journal_mode is wal"),
            journal_mode == "wal",
            format!("journal_mode={journal_mode}"),
        );
        let expected = synchronous_level(durability);
        self.check(
            &format!("{label}: synchronous is {expected} ({durability})"),
            synchronous == expected,
            format!("synchronous={synchronous}"),
        );
        Ok(CaseStore { label: label.to_owned(), dir, store: Arc::new(store) })
    }

    /// Records one behaviour check; `detail` is shown when not empty.
    pub(crate) fn check(&mut self, name: &str, ok: bool, detail: impl Into<String>) {
        let detail = detail.into();
        let shown = if detail.is_empty() { String::new() } else { format!(" ({detail})") };
        eprintln!("check {} {name}{shown}", if ok { "ok  " } else { "FAIL" });
        if !ok {
            self.failures.push(if detail.is_empty() { name.to_owned() } else { format!("{name}: {detail}") });
        }
    }

    /// Prints a case's result line on stdout.
    pub(crate) fn report(&self, case: &str, n: usize, ops: usize, timer: &Timer) {
        println!("{}", timing::result_line(case, n, ops, timer));
    }

    /// Removes (or keeps) the temp root, prints the summary, and says whether every
    /// check passed.
    pub(crate) fn finish(self) -> bool {
        if self.opts.keep {
            let kept = self.root.keep();
            eprintln!("kept store dirs under {}", kept.display());
        } else if let Err(err) = self.root.close() {
            eprintln!("warning: could not remove the bench's temp dir: {err}");
        }
        eprintln!(
            "total {:.1}s; {} check(s) failed",
            self.started.elapsed().as_secs_f64(),
            self.failures.len()
        );
        for failure in &self.failures {
            eprintln!("  FAILED: {failure}");
        }
        self.failures.is_empty()
    }
}

/// The `PRAGMA synchronous` value (as a number) a connection of `durability` reads
/// back: FULL (2) or NORMAL (1).
pub(crate) fn synchronous_level(durability: Durability) -> &'static str {
    match durability {
        Durability::Full => "2",
        Durability::ProcessCrashOnly => "1",
    }
}

/// Prints the sizes of the case's database and WAL files, then closes the store.
fn close(case: CaseStore) {
    let db = case.store.path().to_owned();
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    eprintln!("  files: db={}B wal={}B", file_size(&db), file_size(&wal));
}

/// A file's size in bytes, -1 when it does not exist (as the seed prints it).
fn file_size(path: &Path) -> i64 {
    fs::metadata(path).map_or(-1, |m| i64::try_from(m.len()).unwrap_or(i64::MAX))
}

/// The mesh's pending tasks, for the cases' checks.
pub(crate) fn pending_count(store: &dyn Store, mesh: &str) -> anyhow::Result<u64> {
    let counts = store.stats_by_status(mesh)?;
    Ok(counts.iter().find(|c| c.status == agentmesh_core::TaskStatus::Pending).map_or(0, |c| c.count))
}

/// The mesh's ledger entries, for the cases' checks.
pub(crate) fn ledger_count(store: &dyn Store, mesh: &str) -> anyhow::Result<u64> {
    Ok(store.read_ledger_ordered(mesh, &agentmesh_core::LedgerQuery::default())?.len() as u64)
}
