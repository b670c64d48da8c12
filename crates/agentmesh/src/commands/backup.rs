//! `agentmesh backup DEST` and `agentmesh restore BACKUP`: a consistent copy of
//! the embedded database taken while a daemon serves it, and its installation
//! back into a data dir.
//!
//! The SQLite side is `agentmesh_sqlite`'s (`backup_database`,
//! `verify_database`, `restore_database`, whose docs say what each guarantees);
//! here the database file is found from the global options, the flags checked
//! before anything is written, the data dir's daemon lock taken for a restore
//! (a daemon cannot start meanwhile, and one that serves the data dir refuses the
//! restore), progress shown on stderr and the result printed. A PostgreSQL
//! installation is refused, naming PostgreSQL's own tools.

use std::io::{self, IsTerminal as _, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentmesh_core::{InvalidInput, TaskStatus, Timestamp};
use agentmesh_daemon::{DataDirLock, LockError};
use agentmesh_sqlite::{BackupProgress, BackupRefusal, BackupReport, DB_FILE_NAME, LEGACY_DB_FILE_NAME};
use agentmesh_store::StoreError;
use anyhow::Context as _;
use serde::Serialize;

use super::{Context, NoDatabase, StoreConfig};
use crate::cli::{BackupArgs, RestoreArgs};
use crate::output::{Output, Table};

/// Runs `backup`.
pub(super) fn backup(ctx: &Context, args: BackupArgs, out: &mut Output) -> anyhow::Result<()> {
    embedded_only(ctx, "backup")?;
    let config = ctx.store_config();
    let source = database_to_read(config)?;
    let dest = &args.dest;
    if dest.is_dir() {
        return Err(InvalidInput::new(
            "dest",
            format!(
                "{} is a directory: name the backup file, such as {}",
                dest.display(),
                dest.join("mesh-backup.db").display()
            ),
        )
        .into());
    }
    let parent = parent_dir(dest);
    if !parent.is_dir() {
        return Err(
            InvalidInput::new("dest", format!("the directory {} does not exist", parent.display())).into()
        );
    }
    if agentmesh_sqlite::names_database(dest, &source) {
        return Err(InvalidInput::new(
            "dest",
            format!("{} is the database itself (or one of its files): name another file", dest.display()),
        )
        .into());
    }
    if !args.force && std::fs::symlink_metadata(dest).is_ok() {
        return Err(InvalidInput::new(
            "dest",
            format!("{} exists already: pass --force to replace it, or name another file", dest.display()),
        )
        .into());
    }
    let started = Instant::now();
    let mut line = ProgressLine::new("backup");
    let report = agentmesh_sqlite::backup_database(&source, dest, args.force, |p| line.show(p))
        .map_err(surface)
        .with_context(|| {
            format!("backup of {} failed (nothing was written to {})", source.display(), dest.display())
        })?;
    let summary = BackupSummary {
        source: &source,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        backup: &report,
    };
    out.emit(&summary, |w| write_backup(w, &summary))
}

/// Runs `restore`.
pub(super) fn restore(ctx: &Context, args: RestoreArgs, out: &mut Output) -> anyhow::Result<()> {
    embedded_only(ctx, "restore")?;
    let config = ctx.store_config();
    let backup = &args.backup;
    if backup.is_dir() {
        return Err(InvalidInput::new(
            "backup",
            format!("{} is a directory: name the backup file", backup.display()),
        )
        .into());
    }
    if !backup.exists() {
        return Err(InvalidInput::new("backup", format!("there is no file {}", backup.display())).into());
    }
    let target = database_path(config);
    let legacy = config.dir().join(LEGACY_DB_FILE_NAME);
    if agentmesh_sqlite::names_database(backup, &target) || agentmesh_sqlite::names_database(backup, &legacy)
    {
        return Err(InvalidInput::new(
            "backup",
            format!("{} is the data dir's database itself: name a backup file", backup.display()),
        )
        .into());
    }
    let refused = || format!("refusing to restore {}", backup.display());
    let checked = agentmesh_sqlite::verify_database(backup).map_err(surface).with_context(refused)?;
    if args.dry_run {
        let summary = DryRun { dry_run: true, backup: &checked };
        return out.emit(&summary, |w| write_dry_run(w, &checked));
    }

    let dir = parent_dir(&target);
    agentmesh_sqlite::create_private_dir(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    // Held until the restore is done: a daemon cannot start on the data dir
    // meanwhile.
    let lock = lock_data_dir(dir).with_context(refused)?;
    let mut line = ProgressLine::new("restore");
    let report = agentmesh_sqlite::restore_database(backup, &target, &stamp(crate::now()), |p| line.show(p))
        .map_err(surface)
        .with_context(refused)?;
    drop(lock);
    let summary = Restored { dry_run: false, backup, checked: &checked, report: &report };
    out.emit(&summary, |w| write_restored(w, &summary, dir))
}

/// Runs `archive compact`.
pub(super) fn compact(ctx: &Context, out: &mut Output) -> anyhow::Result<()> {
    embedded_only(ctx, "archive compact")?;
    let config = ctx.store_config();
    let db = database_to_read(config)?;
    let refused = || format!("refusing to compact {}", db.display());
    // Held until the end: a daemon cannot start on the data dir meanwhile.
    let lock = lock_data_dir(parent_dir(&db)).with_context(refused)?;
    let _ = writeln!(io::stderr(), "compacting {} ({})", db.display(), size(file_size(&db)));
    let files = agentmesh_sqlite::compact_database(&db).map_err(surface).with_context(refused)?;
    drop(lock);
    let summary = Compacted { files: &files };
    out.emit(&summary, |w| {
        for f in &files {
            writeln!(
                w,
                "{}: {} -> {}{}",
                f.path.display(),
                size(f.bytes_before),
                size(f.bytes_after),
                if f.rewritten {
                    " (rewritten once: from now on it gives freed pages back by itself)"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    })
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// What `archive compact` prints as its `--json` document.
#[derive(Debug, Serialize)]
struct Compacted<'a> {
    /// Each file, the database first, then its archive.
    files: &'a [agentmesh_sqlite::CompactedFile],
}

/// Refuses `--server` and a PostgreSQL installation: both commands work on the
/// embedded database file itself.
fn embedded_only(ctx: &Context, command: &str) -> anyhow::Result<()> {
    if ctx.server_on_command_line() {
        return Err(InvalidInput::new(
            "server",
            format!(
                "{command} works on the database file itself: run it on the daemon's machine with --data-dir \
                 (or --database-url sqlite://...), without --server"
            ),
        )
        .into());
    }
    if let Some(pg) = ctx.store_config().postgres() {
        let schema = &pg.schema;
        let instead = match command {
            "archive compact" => format!(
                "PostgreSQL's autovacuum keeps the space retention frees for reuse, and `VACUUM FULL` on the \
                 tables of schema {schema} gives it back to the file system"
            ),
            _ => {
                let (tool, what) = match command {
                    "restore" => ("pg_restore", "restore a dump"),
                    _ => ("pg_dump", "back it up"),
                };
                format!(
                    "{what} with PostgreSQL's own tools ({tool}; `pg_dump -n {schema} -Fc` takes a logical copy of \
                     the installation's schema, `pg_restore` puts it back), or with base backups and WAL archiving \
                     for point-in-time recovery (PITR); `agentmesh migrate --from <url> --to <data-dir>` copies \
                     its meshes into an embedded database, which {command} then works on"
                )
            }
        };
        return Err(InvalidInput::new(
            "databaseUrl",
            format!("names a PostgreSQL installation, and {command} works on the embedded SQLite database only: {instead}"),
        )
        .into());
    }
    Ok(())
}

/// The database file of the data dir (or the one `--database-url` names).
fn database_path(config: &StoreConfig) -> PathBuf {
    config.database_file().map_or_else(|| config.dir().join(DB_FILE_NAME), Path::to_owned)
}

/// The database a command reads: [`existing_database`], else the error that
/// names where none was found.
fn database_to_read(config: &StoreConfig) -> Result<PathBuf, NoDatabase> {
    existing_database(config).ok_or_else(|| NoDatabase {
        data_dir: config.dir().to_owned(),
        database_file: config.database_file().map(Path::to_owned),
    })
}

/// The data dir's daemon lock, held while a command changes the database file
/// itself; a daemon serving it is [`BackupRefusal::InUse`].
fn lock_data_dir(dir: &Path) -> anyhow::Result<DataDirLock> {
    DataDirLock::acquire(dir).map_err(|err| match err {
        LockError::Held { dir, holder } => anyhow::Error::new(BackupRefusal::InUse {
            path: dir,
            holder: format!("an agentmesh daemon ({holder})"),
        }),
        other => anyhow::Error::new(other),
    })
}

/// The database file that exists: [`database_path`], else a data dir's legacy
/// `beads.db` (read as it is, not renamed).
fn existing_database(config: &StoreConfig) -> Option<PathBuf> {
    let path = database_path(config);
    if path.is_file() {
        return Some(path);
    }
    let legacy = config.dir().join(LEGACY_DB_FILE_NAME);
    (config.database_file().is_none() && legacy.is_file()).then_some(legacy)
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// `2025-01-01T12:00:00Z` as a file name's part: `20250101T120000Z`.
fn stamp(now: Timestamp) -> String {
    let iso = now.iso();
    let seconds: String = iso.chars().take(19).filter(|c| c.is_ascii_alphanumeric()).collect();
    format!("{seconds}Z")
}

/// A [`StoreError`] carrying a [`BackupRefusal`] as the refusal itself, so its
/// message reads as one and `failure` classifies it by its own code.
fn surface(err: StoreError) -> anyhow::Error {
    match err {
        StoreError::Backend(source) => match source.downcast::<BackupRefusal>() {
            Ok(refusal) => anyhow::Error::new(*refusal),
            Err(source) => anyhow::Error::new(StoreError::Backend(source)),
        },
        other => anyhow::Error::new(other),
    }
}

/// Progress of a copy on stderr: a line at most four times a second on a
/// terminal, once a second otherwise, and only once the copy has taken a
/// while (a quarter second on a terminal, a second otherwise).
struct ProgressLine {
    what: &'static str,
    started: Instant,
    last: Option<Instant>,
    terminal: bool,
}

impl ProgressLine {
    fn new(what: &'static str) -> ProgressLine {
        ProgressLine { what, started: Instant::now(), last: None, terminal: io::stderr().is_terminal() }
    }

    fn every(&self) -> Duration {
        if self.terminal { Duration::from_millis(250) } else { Duration::from_secs(1) }
    }

    fn show(&mut self, at: BackupProgress) {
        if at.copied >= at.total {
            // The last line, when earlier ones were shown: what follows the
            // copy takes a while too on a large file.
            if self.last.is_some() {
                self.write(at, self.started.elapsed());
                let _ = writeln!(io::stderr(), "{}: verifying the copy", self.what);
            }
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.started) < self.every()
            || self.last.is_some_and(|last| now.duration_since(last) < self.every())
        {
            return;
        }
        self.last = Some(now);
        self.write(at, now.duration_since(self.started));
    }

    fn write(&self, at: BackupProgress, elapsed: Duration) {
        let percent = (at.copied * 100).checked_div(at.total).unwrap_or(100);
        let _ = writeln!(
            io::stderr(),
            "{}: {}/{} pages copied ({percent}%), {:.1} s",
            self.what,
            at.copied,
            at.total,
            elapsed.as_secs_f64()
        );
    }
}

/// What `backup` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BackupSummary<'a> {
    /// The database copied.
    source: &'a Path,
    /// How long the copy and its verification took.
    elapsed_ms: u64,
    /// The copy: its path and what it holds.
    #[serde(flatten)]
    backup: &'a BackupReport,
}

/// What `restore --dry-run` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DryRun<'a> {
    dry_run: bool,
    backup: &'a BackupReport,
}

/// What `restore` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Restored<'a> {
    dry_run: bool,
    /// The backup installed.
    backup: &'a Path,
    /// What it held, verified before anything was changed.
    #[serde(skip)]
    checked: &'a BackupReport,
    /// The database now in place, what was moved aside, the numbers it starts
    /// above.
    #[serde(flatten)]
    report: &'a agentmesh_sqlite::RestoreReport,
}

fn write_backup(w: &mut dyn Write, s: &BackupSummary<'_>) -> io::Result<()> {
    let b = s.backup;
    writeln!(w, "backed up {} to {}", s.source.display(), b.path.display())?;
    writeln!(
        w,
        "{} ({} pages of {} bytes) in {:.1} s; verified: integrity {}, schema version {}{}",
        size(b.bytes),
        b.pages,
        b.page_size,
        s.elapsed_ms as f64 / 1000.0,
        b.integrity,
        b.schema_version,
        b.last_ledger_seq.map_or_else(String::new, |seq| format!(", ledger up to #{seq}")),
    )?;
    write_contents(w, b)
}

fn write_dry_run(w: &mut dyn Write, b: &BackupReport) -> io::Result<()> {
    writeln!(
        w,
        "{} is a usable backup: {}, integrity {}, schema version {} (nothing was changed)",
        b.path.display(),
        size(b.bytes),
        b.integrity,
        b.schema_version
    )?;
    write_contents(w, b)
}

fn write_restored(w: &mut dyn Write, s: &Restored<'_>, dir: &Path) -> io::Result<()> {
    let r = s.report;
    writeln!(
        w,
        "verified {}: integrity {}, schema version {}",
        s.backup.display(),
        s.checked.integrity,
        s.checked.schema_version
    )?;
    if let Some(previous) = &r.previous {
        let companions: Vec<String> = r
            .moved_aside
            .iter()
            .filter(|p| *p != previous)
            .filter_map(|p| p.to_str()?.strip_prefix(previous.to_str()?).map(str::to_owned))
            .collect();
        let with = if companions.is_empty() {
            String::new()
        } else {
            format!(" (with its {})", companions.join(", "))
        };
        writeln!(w, "the old database was moved aside to {}{with}", previous.display())?;
    }
    writeln!(
        w,
        "restored {} as {} ({})",
        s.backup.display(),
        r.restored.path.display(),
        size(r.restored.bytes)
    )?;
    if let Some(id) = &r.restored.database_id {
        writeln!(w, "new ledger id {id}: followers paging the ledger by sequence start over")?;
    }
    if let Some(above) = &r.numbers_above {
        writeln!(
            w,
            "ledger numbers continue above {} and claim epochs above {}, the old database's highest",
            above.ledger_seq, above.epoch
        )?;
    }
    write_contents(w, &r.restored)?;
    for warning in &r.warnings {
        writeln!(w, "warning: {warning}")?;
    }
    if let Some(archive) = &r.archive_kept {
        writeln!(
            w,
            "the backup has no archive: the archive {} stays in place and the restored database reads \
             it (a task archived after the backup is in both until retention's next step moves it again)",
            archive.path.display()
        )?;
    }
    writeln!(w, "start the daemon again: agentmesh --data-dir {} serve", dir.display())
}

/// The meshes of a database, one row each, and the totals.
fn write_contents(w: &mut dyn Write, b: &BackupReport) -> io::Result<()> {
    if b.meshes.is_empty() {
        writeln!(w, "no meshes: it holds no task, ledger entry, inbox event or mission")?;
        return write_archive(w, b);
    }
    let mut table = Table::new(vec![
        "MESH",
        "TASKS",
        "PENDING",
        "ASSIGNED",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "LEDGER",
        "EVENTS",
        "UNDRAINED",
        "MISSIONS",
    ]);
    for mesh in &b.meshes {
        let mut row = vec![mesh.mesh_id.clone(), mesh.tasks.values().sum::<u64>().to_string()];
        row.extend(
            TaskStatus::ALL
                .into_iter()
                .map(|status| mesh.tasks.get(status.as_str()).copied().unwrap_or(0).to_string()),
        );
        row.extend(
            [mesh.ledger_entries, mesh.inbox_events, mesh.undrained_events, mesh.missions]
                .map(|n| n.to_string()),
        );
        table.row(row);
    }
    table.write(w)?;
    let t = &b.totals;
    writeln!(
        w,
        "{} mesh(es): {} task(s), {} ledger entries, {} inbox events ({} undrained), {} mission(s)",
        t.meshes, t.tasks, t.ledger_entries, t.inbox_events, t.undrained_events, t.missions
    )?;
    write_archive(w, b)
}

/// The archive that goes with a database, when it has one.
fn write_archive(w: &mut dyn Write, b: &BackupReport) -> io::Result<()> {
    match &b.archive {
        Some(a) => writeln!(
            w,
            "and its archive {} ({}): {} task(s), {} ledger entries",
            a.path.display(),
            size(a.bytes),
            a.tasks,
            a.ledger_entries
        ),
        None => Ok(()),
    }
}

/// `bytes` in the largest binary unit that keeps it at or above 1.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_file_name_safe() {
        assert_eq!(stamp(Timestamp::from_millis(1_735_732_800_123)), "20250101T120000Z");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size(512), "512 bytes");
        assert_eq!(size(4096), "4.0 KiB");
        assert_eq!(size(5 * 1024 * 1024 + 1024 * 512), "5.5 MiB");
    }
}
