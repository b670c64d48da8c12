//! Online backup, verification and restore of a database file: what `agentmesh
//! backup` and `agentmesh restore` run.
//!
//! **A backup is one snapshot.** [`backup_database`] copies the file with
//! SQLite's online backup API, a few hundred pages a step with a short pause
//! between steps, from a read-only connection that holds one read transaction
//! for the whole copy. In WAL mode that transaction is a snapshot: the daemon's
//! writers go on committing to the WAL beside it, and the copy sees none of
//! it. The backup API restarts a copy whose source changed between two steps
//! (it notices when a step opens a new read transaction on a changed file),
//! which under a steady write load could go on for ever; with the one read
//! transaction held the source never changes under the copy, so it ends after
//! one pass. The price: while the snapshot is held, checkpoints cannot copy the
//! WAL back past it, so the WAL grows by what is written meanwhile (and is
//! reused from its start once the copy ends).
//!
//! The copy goes to a temporary file beside the destination, is switched to a
//! rollback journal (one self-contained file, no `-wal` to carry along), synced,
//! verified, and renamed into place, refusing to replace a file unless asked;
//! then the directory is synced.
//!
//! **The archive goes along.** When the database's archive file (what
//! retention moved out, `<file>-archive`) holds anything, it is copied after
//! the database's snapshot to `<dest>-archive` and put in place before the
//! database (see `copy_archive` for why that order never misses a row); a
//! restore of a backup with an archive moves the data dir's archive aside and
//! puts the backup's in its place, and one without leaves the data dir's.
//!
//! **Verification** ([`verify_database`]): the SQLite header, `PRAGMA
//! integrity_check`, agentmesh's tables, a schema version this build knows
//! (not past [`crate::SCHEMA_VERSION`]), and the contents counted per mesh. A
//! backup's copy must count exactly what the source's snapshot counted.
//!
//! **Restore** ([`restore_database`]) installs a backup as a data dir's
//! database; the caller holds the data dir's daemon lock. The old database must
//! not be open anywhere: it is opened in exclusive locking mode, which every
//! other connection to a WAL database prevents (each holds a shared lock on the
//! file while open), so a process still using it (an `agentmesh mcp`, a second
//! daemon) is found and the restore refused before anything changed. The backup
//! is copied to a temporary file in the data dir, given a new database id (the
//! ledger's origin: a follower paging by sequence starts over) and numbers above
//! every number the old database handed out (the ledger's sequence floor and
//! the claims' epoch ceiling: a worker still holding a task of the old database
//! cannot pass a fencing check with it, and no ledger number comes back with
//! another entry), switched to WAL, synced and verified. Then the old database
//! is moved aside, its `-wal`, `-shm` and `-journal` first (a WAL must never be
//! applied to another database than its own), the new file is renamed into
//! place and the directory synced. A failed move puts back what was moved.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentmesh_store::{StoreError, StoreResult};
use rusqlite::backup::{Backup, StepResult};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::Serialize;

use crate::durability::{EPOCH_CEILING, SEQ_CEILING, SEQ_FLOOR};
use crate::migrations::LATEST_VERSION;
use crate::paths::{DB_FILE_NAME, LEGACY_DB_FILE_NAME, create_private_dir, create_private_file, with_suffix};
use crate::{Fail, Res};

/// Pages copied per step of the backup API (1 MiB with 4 KiB pages).
const PAGES_PER_STEP: i32 = 256;
/// The pause between two steps, leaving the disk to the daemon's writers.
const PAUSE_BETWEEN_STEPS: Duration = Duration::from_millis(1);
/// How long steps that find a lock held may be retried before the copy gives up.
const BUSY_STEP_WAIT: Duration = Duration::from_secs(5);
/// How long the old database is waited for while another connection has it
/// open (a command that is about to end), before a restore is refused.
const IN_USE_WAIT: Duration = Duration::from_secs(1);
/// The tables every agentmesh database has (the original's schema has them too).
const REQUIRED_TABLES: [&str; 3] = ["mesh_queue", "mesh_event_ledger", "mesh_pending_events"];
/// The files SQLite keeps beside a database.
const COMPANIONS: [&str; 3] = ["-wal", "-shm", "-journal"];
/// At most this many problems of a failed integrity check are reported.
const INTEGRITY_PROBLEMS_SHOWN: u32 = 10;

/// How far a copy got: pages copied of the source's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupProgress {
    /// Pages copied so far.
    pub copied: u64,
    /// The source's pages.
    pub total: u64,
}

/// Why a backup or a restore was refused, or a file is no usable database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupRefusal {
    /// The file is not a SQLite database.
    #[error("{} is not a SQLite database: {reason}", path.display())]
    NotSqlite {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A SQLite database, but not agentmesh's.
    #[error(
        "{} is a SQLite database, but not an agentmesh one: it has no {} table",
        path.display(),
        missing.join(", no ")
    )]
    NotAgentmesh {
        /// The file.
        path: PathBuf,
        /// The agentmesh tables it lacks.
        missing: Vec<String>,
    },
    /// `PRAGMA integrity_check` found problems.
    #[error("{} fails SQLite's integrity check: {}", path.display(), problems.join("; "))]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What the check reported (the first few problems).
        problems: Vec<String>,
    },
    /// The copy does not count what the source's snapshot counted.
    #[error("the copy {} does not hold what {} held when it was taken: {problem}", copy.display(), original.display())]
    Mismatch {
        /// The copy.
        copy: PathBuf,
        /// The database copied.
        original: PathBuf,
        /// The first difference.
        problem: String,
    },
    /// The destination exists and was not to be replaced.
    #[error("{} exists already; it was left as it is", path.display())]
    Exists {
        /// The destination.
        path: PathBuf,
    },
    /// Another process has the database (or the data dir) in use.
    #[error("{} is in use by {holder}: stop it first (nothing was changed)", path.display())]
    InUse {
        /// The database file or data dir.
        path: PathBuf,
        /// Who holds it, as far as is known.
        holder: String,
    },
    /// The filesystem has too little room for rewriting the file.
    #[error(
        "rewriting {} needs about {needed} bytes free beside it, and {available} are (nothing was changed)",
        path.display()
    )]
    NoRoom {
        /// The database file.
        path: PathBuf,
        /// The bytes the rewrite needs.
        needed: u64,
        /// The bytes available.
        available: u64,
    },
}

impl BackupRefusal {
    /// A stable machine-readable code for the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            BackupRefusal::NotSqlite { .. } => "not_a_database",
            BackupRefusal::NotAgentmesh { .. } => "not_an_agentmesh_database",
            BackupRefusal::Damaged { .. } => "integrity_check_failed",
            BackupRefusal::Mismatch { .. } => "backup_mismatch",
            BackupRefusal::Exists { .. } => "destination_exists",
            BackupRefusal::InUse { .. } => "database_in_use",
            BackupRefusal::NoRoom { .. } => "storage_full",
        }
    }

    /// Whether the caller named the wrong file (as opposed to a damaged file or
    /// a busy database).
    pub fn is_caller_error(&self) -> bool {
        matches!(
            self,
            BackupRefusal::NotSqlite { .. }
                | BackupRefusal::NotAgentmesh { .. }
                | BackupRefusal::Exists { .. }
        )
    }

    /// The refusal `err` carries, if it is one (the functions of this module
    /// return it as [`StoreError::Backend`]).
    pub fn of(err: &StoreError) -> Option<&BackupRefusal> {
        match err {
            StoreError::Backend(source) => source.downcast_ref::<BackupRefusal>(),
            _ => None,
        }
    }
}

fn refused(refusal: BackupRefusal) -> Fail {
    Fail(StoreError::Backend(Box::new(refusal)))
}

/// What a verified database holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupReport {
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// SQLite's page size.
    pub page_size: u64,
    /// Pages in the database.
    pub pages: u64,
    /// What `PRAGMA integrity_check` answered: `ok`.
    pub integrity: String,
    /// The schema version (`PRAGMA user_version`).
    pub schema_version: i64,
    /// The database's id, the origin its ledger pages name.
    pub database_id: Option<String>,
    /// The highest ledger sequence number it holds.
    pub last_ledger_seq: Option<i64>,
    /// Each mesh with a task, ledger entry, inbox event or mission, by id.
    pub meshes: Vec<MeshContents>,
    /// Every mesh together.
    pub totals: BackupTotals,
    /// The archive file that goes with it (`<file>-archive`: what retention
    /// moved out of the database), when it has one that holds anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveContents>,
}

/// What an archive file beside a database holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveContents {
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Archived tasks.
    pub tasks: u64,
    /// Archived ledger entries.
    pub ledger_entries: u64,
}

impl ArchiveContents {
    /// The archive file at `path` holding `counts` (tasks, ledger entries);
    /// `None` when it holds nothing.
    fn of(path: &Path, (tasks, ledger_entries): (u64, u64)) -> Res<Option<ArchiveContents>> {
        if (tasks, ledger_entries) == (0, 0) {
            return Ok(None);
        }
        let bytes = fs::metadata(path).map_err(crate::io_error)?.len();
        Ok(Some(ArchiveContents { path: path.to_owned(), bytes, tasks, ledger_entries }))
    }
}

/// What one mesh holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshContents {
    /// The mesh.
    pub mesh_id: String,
    /// Tasks by status.
    pub tasks: BTreeMap<String, u64>,
    /// Ledger entries.
    pub ledger_entries: u64,
    /// Coordinator inbox events, drained or not.
    pub inbox_events: u64,
    /// Inbox events not drained yet.
    pub undrained_events: u64,
    /// Missions.
    pub missions: u64,
}

/// Every mesh's contents added up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupTotals {
    /// Meshes.
    pub meshes: u64,
    /// Tasks.
    pub tasks: u64,
    /// Ledger entries.
    pub ledger_entries: u64,
    /// Inbox events.
    pub inbox_events: u64,
    /// Inbox events not drained yet.
    pub undrained_events: u64,
    /// Missions.
    pub missions: u64,
}

/// What [`restore_database`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    /// The database now in place, verified.
    pub restored: BackupReport,
    /// The old database's new name, when there was one.
    pub previous: Option<PathBuf>,
    /// Every file moved aside (the old database and its `-wal`, `-shm`).
    pub moved_aside: Vec<PathBuf>,
    /// The numbers the restored database hands out next are above these: the
    /// highest the old database had handed out.
    pub numbers_above: Option<NumbersAbove>,
    /// What could not be done, and what it means.
    pub warnings: Vec<String>,
    /// The data dir's archive, left in place because the backup has none: the
    /// restored database reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive_kept: Option<ArchiveContents>,
}

/// The highest numbers a database handed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NumbersAbove {
    /// The ledger's sequence numbers.
    pub ledger_seq: i64,
    /// The claims' fencing epochs.
    pub epoch: i64,
}

/// Copies the database `src` to the new file `dest` while other processes
/// (a daemon) go on writing to it: one consistent snapshot (see the module
/// docs). `progress` is called after each step. The copy is verified and
/// renamed into place; an existing `dest` is replaced only when `replace`
/// (else [`BackupRefusal::Exists`]). Returns what the copy holds.
pub fn backup_database(
    src: &Path,
    dest: &Path,
    replace: bool,
    mut progress: impl FnMut(BackupProgress),
) -> StoreResult<BackupReport> {
    backup_res(src, dest, replace, &mut progress).map_err(|Fail(err)| err)
}

fn backup_res(
    src: &Path,
    dest: &Path,
    replace: bool,
    progress: &mut dyn FnMut(BackupProgress),
) -> Res<BackupReport> {
    if names_database(dest, src) {
        return Err(Fail(StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
            "dest",
            format!("{} is the database itself (or one of its files)", dest.display()),
        ))));
    }
    let archive_dest = crate::archive::file_of(dest);
    if !replace {
        for path in [dest, archive_dest.as_path()] {
            if fs::symlink_metadata(path).is_ok() {
                return Err(refused(BackupRefusal::Exists { path: path.to_owned() }));
            }
        }
    }
    let temp = TempFile::beside(dest)?;
    let original = copy(src, temp.path(), progress)?;
    sync_file(temp.path())?;
    let mut report = verify(temp.path())?;
    if let Some(problem) = differences(&original, &report, true) {
        return Err(refused(BackupRefusal::Mismatch {
            copy: dest.to_owned(),
            original: src.to_owned(),
            problem,
        }));
    }
    // The archive after the database's snapshot (see `copy_archive`).
    let archive_src = crate::archive::file_of(src);
    let archive = if archive_src.is_file() {
        let archive_temp = TempFile::beside(&archive_dest)?;
        let counts = copy_archive(&archive_src, archive_temp.path(), progress)?;
        sync_file(archive_temp.path())?;
        if counts == (0, 0) { None } else { Some((archive_temp, counts)) }
    } else {
        None
    };
    // The archive goes first: a database never lies beside an archive that is
    // not its own.
    if replace {
        // Whatever lay beside the file replaced belongs to it, not to the copy.
        for suffix in COMPANIONS {
            remove_if_present(&with_suffix(dest, suffix))?;
            remove_if_present(&with_suffix(&archive_dest, suffix))?;
        }
        match &archive {
            Some((archive_temp, _)) => {
                fs::rename(archive_temp.path(), &archive_dest).map_err(crate::io_error)?
            }
            None => remove_if_present(&archive_dest)?,
        }
        fs::rename(temp.path(), dest).map_err(crate::io_error)?;
    } else {
        if let Some((archive_temp, _)) = &archive {
            place_new(archive_temp.path(), &archive_dest)?;
        }
        if let Err(fail) = place_new(temp.path(), dest) {
            if archive.is_some() {
                let _ = fs::remove_file(&archive_dest);
            }
            return Err(fail);
        }
    }
    temp.disarm();
    if let Some((archive_temp, counts)) = archive {
        archive_temp.disarm();
        report.archive = ArchiveContents::of(&archive_dest, counts)?;
    }
    sync_dir(dest)?;
    report.path = dest.to_owned();
    Ok(report)
}

/// What [`compact_database`] did to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactedFile {
    /// The file.
    pub path: PathBuf,
    /// Its size before, its WAL included.
    pub bytes_before: u64,
    /// Its size after.
    pub bytes_after: u64,
    /// Whether the file was rewritten (`VACUUM`) to switch it to incremental
    /// vacuum: a file made before agentmesh gave pages back.
    pub rewritten: bool,
}

/// Gives the free pages of the database at `path`, and of its archive, back to
/// the filesystem; the caller holds the data dir's daemon lock, and a database
/// another process has open is refused ([`BackupRefusal::InUse`]). A file made
/// with incremental vacuum (every file agentmesh makes) gives its free pages
/// back in place; an older one is rewritten once (`VACUUM`), which needs about
/// twice its size free beside it ([`BackupRefusal::NoRoom`] otherwise) and
/// makes it give pages back by itself from then on, as retention frees them.
pub fn compact_database(path: &Path) -> StoreResult<Vec<CompactedFile>> {
    let compacted = || -> Res<Vec<CompactedFile>> {
        check_header(path)?;
        let main = hold_exclusively(path)?;
        let mut files = vec![compact_file(&main, path)?];
        let archive = crate::archive::file_of(path);
        if archive.is_file() {
            // Nobody attaches the archive while the database is held.
            let conn = open_read_write(&archive)?;
            files.push(compact_file(&conn, &archive)?);
            close(conn)?;
        }
        close(main)?;
        Ok(files)
    };
    compacted().map_err(|Fail(err)| err)
}

/// A read-write connection to `path` that keeps every other connection out
/// until it closes; [`BackupRefusal::InUse`] when another has it open.
fn hold_exclusively(path: &Path) -> Res<Connection> {
    let conn = open_read_write(path)?;
    match take_exclusively(&conn, path)? {
        Ok(()) => Ok(conn),
        Err(problem) => Err(refused(BackupRefusal::NotSqlite { path: path.to_owned(), reason: problem })),
    }
}

/// Puts `conn` (to `path`) in exclusive locking mode and takes the file's
/// lock: in WAL mode the first read takes the exclusive lock, which any other
/// open connection's shared lock refuses ([`BackupRefusal::InUse`], after a
/// short wait for a command that is about to end). `Ok(Err(problem))` when
/// the file cannot be read at all.
fn take_exclusively(conn: &Connection, path: &Path) -> Res<Result<(), String>> {
    conn.busy_timeout(IN_USE_WAIT)?;
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    match conn.query_row("SELECT COUNT(*) FROM sqlite_schema", [], |r| r.get::<_, i64>(0)) {
        Ok(_) => Ok(Ok(())),
        Err(err)
            if matches!(
                err.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            ) =>
        {
            Err(refused(BackupRefusal::InUse {
                path: path.to_owned(),
                holder: String::from(
                    "another process (an `agentmesh mcp` or `work` on this data dir, a command still running, or \
                     a daemon)",
                ),
            }))
        }
        Err(err) => Ok(Err(err.to_string())),
    }
}

/// Compacts the one file `path` open on `conn` (see [`compact_database`]).
fn compact_file(conn: &Connection, path: &Path) -> Res<CompactedFile> {
    let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let bytes_before = size(path) + size(&with_suffix(path, "-wal"));
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    // 2: incremental.
    let rewritten = mode != 2;
    if rewritten {
        let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        // The rewrite builds a copy, and in WAL mode writes it to the WAL too.
        let needed = count(pages).saturating_mul(count(page_size)).saturating_mul(2);
        if let Some(available) = crate::space::available_bytes(parent_dir(path))
            && available < needed
        {
            return Err(refused(BackupRefusal::NoRoom { path: path.to_owned(), needed, available }));
        }
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
    } else {
        conn.execute_batch("PRAGMA incremental_vacuum")?;
    }
    let journal: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if journal.eq_ignore_ascii_case("wal") {
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    }
    sync_file(path)?;
    Ok(CompactedFile {
        path: path.to_owned(),
        bytes_before,
        bytes_after: size(path) + size(&with_suffix(path, "-wal")),
        rewritten,
    })
}

/// Verifies the database file at `path` without writing to it: the SQLite
/// header, `PRAGMA integrity_check`, agentmesh's tables and a schema version
/// this build knows. Returns what it holds; a file that is not a usable
/// agentmesh database is refused with a [`BackupRefusal`], one from a newer
/// agentmesh with [`StoreError::SchemaTooNew`].
pub fn verify_database(path: &Path) -> StoreResult<BackupReport> {
    let verified = || -> Res<BackupReport> {
        let mut report = verify(path)?;
        let archive = crate::archive::file_of(path);
        if archive.is_file() {
            report.archive = ArchiveContents::of(&archive, archive_counts(&archive)?)?;
        }
        Ok(report)
    };
    verified().map_err(|Fail(err)| err)
}

fn verify(path: &Path) -> Res<BackupReport> {
    check_header(path)?;
    let conn = open_read_only(path)?;
    let problems = integrity_problems(&conn).map_err(|fail| as_refusal(fail, path))?;
    if !problems.is_empty() {
        return Err(refused(BackupRefusal::Damaged { path: path.to_owned(), problems }));
    }
    // Counted in one read transaction: the counts of one moment.
    conn.execute_batch("BEGIN")?;
    let contents = read_contents(&conn, path)?;
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    conn.execute_batch("COMMIT")?;
    close(conn)?;
    let bytes = fs::metadata(path).map_err(crate::io_error)?.len();
    Ok(BackupReport {
        path: path.to_owned(),
        bytes,
        page_size: u64::try_from(page_size).unwrap_or(0),
        pages: u64::try_from(pages).unwrap_or(0),
        integrity: String::from("ok"),
        schema_version: contents.schema_version,
        database_id: contents.database_id,
        last_ledger_seq: contents.last_ledger_seq,
        meshes: contents.meshes,
        totals: contents.totals,
        archive: None,
    })
}

/// Installs the database `src` (a backup) as the database file `target` (a data
/// dir's `mesh-runtime.db`), keeping the old one under the name
/// `<file>.before-restore-<stamp>`; see the module docs. The caller holds the
/// data dir's daemon lock. A database still in use by another process is
/// refused with [`BackupRefusal::InUse`], and nothing is changed; so is a
/// `src` that is no usable agentmesh database.
pub fn restore_database(
    src: &Path,
    target: &Path,
    stamp: &str,
    mut progress: impl FnMut(BackupProgress),
) -> StoreResult<RestoreReport> {
    restore_res(src, target, stamp, &mut progress).map_err(|Fail(err)| err)
}

fn restore_res(
    src: &Path,
    target: &Path,
    stamp: &str,
    progress: &mut dyn FnMut(BackupProgress),
) -> Res<RestoreReport> {
    let dir = parent_dir(target);
    create_private_dir(dir).map_err(crate::io_error)?;
    let mut warnings = Vec::new();
    let old_db = [target.to_owned(), dir.join(LEGACY_DB_FILE_NAME)]
        .into_iter()
        .take(if target.file_name().is_some_and(|n| n == DB_FILE_NAME) { 2 } else { 1 })
        .find(|path| path.is_file());
    // Held until the new file is in place: nobody opens the old one meanwhile.
    let mut held = None;
    let mut old_numbers = None;
    if let Some(old) = &old_db {
        match hold_unused(old)? {
            Ok(holding) => {
                match &holding.numbers {
                    Ok(numbers) => old_numbers = Some(*numbers),
                    Err(problem) => warnings.push(unread_numbers_warning(old, problem)),
                }
                held = Some(holding);
            }
            Err(problem) => warnings.push(unread_numbers_warning(old, &problem)),
        }
    }

    let temp = TempFile::beside(target)?;
    let original = copy(src, temp.path(), progress)?;
    let numbers_above = renumber(temp.path(), old_numbers, &mut warnings)?;
    // Verified before the switch to WAL: a read-only connection to a WAL file
    // leaves a `-wal` and `-shm` beside it.
    let mut restored = verify(temp.path())?;
    if let Some(problem) = differences(&original, &restored, false) {
        return Err(refused(BackupRefusal::Mismatch {
            copy: target.to_owned(),
            original: src.to_owned(),
            problem,
        }));
    }
    switch_to_wal(temp.path())?;
    sync_file(temp.path())?;
    // The backup's archive, when it has one, replaces the data dir's; else the
    // data dir's archive stays, and the restored database reads it.
    let archive_src = crate::archive::file_of(src);
    let archive_target = crate::archive::file_of(target);
    let archive = if archive_src.is_file() {
        let archive_temp = TempFile::beside(&archive_target)?;
        let counts = copy_archive(&archive_src, archive_temp.path(), progress)?;
        sync_file(archive_temp.path())?;
        Some((archive_temp, counts))
    } else {
        None
    };

    let mut moves = moves_aside(target, old_db.as_deref(), stamp);
    if archive.is_some() {
        moves.extend(moves_aside(&archive_target, None, stamp));
    }
    let mut moved = Vec::new();
    for (from, to) in &moves {
        if let Err(err) = fs::rename(from, to) {
            put_back(&moved);
            return Err(Fail(crate::io_error(err)));
        }
        moved.push((from.clone(), to.clone()));
    }
    if let Some((archive_temp, _)) = &archive
        && let Err(err) = fs::rename(archive_temp.path(), &archive_target)
    {
        put_back(&moved);
        return Err(Fail(crate::io_error(err)));
    }
    if let Err(err) = fs::rename(temp.path(), target) {
        if archive.is_some() {
            let _ = fs::remove_file(&archive_target);
        }
        put_back(&moved);
        return Err(Fail(crate::io_error(err)));
    }
    temp.disarm();
    let mut archive_kept = None;
    match archive {
        Some((archive_temp, counts)) => {
            archive_temp.disarm();
            restored.archive = ArchiveContents::of(&archive_target, counts)?;
        }
        None => archive_kept = archive_holding(&archive_target)?,
    }
    sync_dir(target)?;
    drop(held);
    restored.path = target.to_owned();
    let previous =
        old_db.and_then(|old| moves.iter().find(|(from, _)| *from == old).map(|(_, to)| to.clone()));
    Ok(RestoreReport {
        restored,
        previous,
        moved_aside: moved.into_iter().map(|(_, to)| to).collect(),
        numbers_above,
        warnings,
        archive_kept,
    })
}

fn unread_numbers_warning(old: &Path, problem: &str) -> String {
    format!(
        "the old database {} could not be read ({problem}): claim epochs and ledger numbers it handed out \
         after the backup was taken may be handed out again; workers still holding its tasks should stop",
        old.display()
    )
}

/// Copies `src` into the existing empty file `dest` with the backup API, under
/// one read transaction of `src` (see the module docs), and returns what that
/// snapshot held.
fn copy(src: &Path, dest: &Path, progress: &mut dyn FnMut(BackupProgress)) -> Res<Contents> {
    check_header(src)?;
    let source = open_read_only(src)?;
    source.execute_batch("BEGIN")?;
    // The first read opens the snapshot every step of the copy reads.
    let original = read_contents(&source, src).map_err(|fail| as_refusal(fail, src))?;
    copy_pages(&source, dest, progress)?;
    source.execute_batch("COMMIT")?;
    close(source)?;
    Ok(original)
}

/// Copies every page of `source` into the existing empty file `dest` with the
/// backup API and makes the copy one self-contained file (journal mode DELETE).
fn copy_pages(source: &Connection, dest: &Path, progress: &mut dyn FnMut(BackupProgress)) -> Res<()> {
    let mut target = open_read_write(dest)?;
    {
        let backup = Backup::new(source, &mut target)?;
        let mut busy_since: Option<Instant> = None;
        loop {
            let step = backup.step(PAGES_PER_STEP)?;
            let at = backup.progress();
            let total = u64::try_from(at.pagecount).unwrap_or(0);
            let left = u64::try_from(at.remaining).unwrap_or(0);
            match step {
                StepResult::Done => {
                    progress(BackupProgress { copied: total, total });
                    break;
                }
                StepResult::More => {
                    busy_since = None;
                    progress(BackupProgress { copied: total.saturating_sub(left), total });
                    std::thread::sleep(PAUSE_BETWEEN_STEPS);
                }
                // Busy or locked: the destination's lock (nobody else has it open).
                _ => {
                    if busy_since.get_or_insert_with(Instant::now).elapsed() > BUSY_STEP_WAIT {
                        return Err(Fail(StoreError::Busy));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
    // The copy took the source's header, WAL mode included: it becomes one
    // self-contained file.
    let mode: String = target.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(Fail(StoreError::Backend(
            format!("the copy's journal_mode is {mode}, not delete").into(),
        )));
    }
    close(target)
}

/// Copies the archive file `src` into the existing empty file `dest`. Not under
/// one read transaction: the daemon's writer holds the database's write lock
/// while it writes the archive, so a long read lock on the archive would stall
/// every write. The backup API takes the archive's lock a step at a time and
/// starts over when the archive changed between two steps; retention writes it
/// seldom, so the copy ends, holding the archive of one moment. Taken after the
/// database's snapshot, it never misses a row that left the database before that
/// snapshot (retention copies a row into the archive before it deletes it from
/// the database); a row moved meanwhile is in both, which retention's next step
/// settles. Returns how many tasks and ledger entries the copy holds.
fn copy_archive(src: &Path, dest: &Path, progress: &mut dyn FnMut(BackupProgress)) -> Res<(u64, u64)> {
    check_header(src)?;
    let source = open_read_only(src)?;
    copy_pages(&source, dest, progress)?;
    close(source)?;
    archive_counts(dest)
}

/// The archive file at `path`, checked: SQLite's integrity check; how many
/// tasks and ledger entries it holds.
fn archive_counts(path: &Path) -> Res<(u64, u64)> {
    check_header(path)?;
    let conn = open_read_only(path)?;
    let problems = integrity_problems(&conn).map_err(|fail| as_refusal(fail, path))?;
    if !problems.is_empty() {
        return Err(refused(BackupRefusal::Damaged { path: path.to_owned(), problems }));
    }
    let counts = archive_rows(&conn)?;
    close(conn)?;
    Ok(counts)
}

/// How many tasks and ledger entries the archive file open on `conn` holds.
fn archive_rows(conn: &Connection) -> Res<(u64, u64)> {
    let rows = |table: &str| -> Res<u64> {
        if !table_exists(conn, table)? {
            return Ok(0);
        }
        let n: i64 = conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?;
        Ok(count(n))
    };
    Ok((rows("archived_tasks")?, rows("archived_ledger")?))
}

/// The archive file at `path` when it holds anything (counted, not checked).
fn archive_holding(path: &Path) -> Res<Option<ArchiveContents>> {
    if !path.is_file() {
        return Ok(None);
    }
    let conn = open_read_only(path)?;
    let counts = archive_rows(&conn)?;
    close(conn)?;
    ArchiveContents::of(path, counts)
}

/// Makes the copy at `path` a database of its own: a new database id, and
/// numbers above the old database's. Returns the numbers it starts above.
fn renumber(path: &Path, old: Option<NumbersAbove>, warnings: &mut Vec<String>) -> Res<Option<NumbersAbove>> {
    let mut conn = open_read_write(path)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut numbers_above = None;
    if table_exists(&tx, "mesh_meta")? {
        tx.execute(
            "INSERT INTO mesh_meta (key, value) VALUES ('database_id', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [agentmesh_store::ids::mint()],
        )?;
        if let Some(old) = old {
            // `ledger::NEXT_SEQ` hands out numbers above the floor, and the store
            // hands out epochs above the ceiling (see `durability`).
            let ledger_seq = write_max(&tx, SEQ_FLOOR, old.ledger_seq)?;
            let epoch = write_max(&tx, EPOCH_CEILING, old.epoch)?;
            numbers_above = Some(NumbersAbove { ledger_seq, epoch });
        }
    } else {
        warnings.push(String::from(
            "the backup's schema predates the ledger's sequence: its numbers are made when it is first opened",
        ));
    }
    tx.commit()?;
    close(conn)?;
    Ok(numbers_above)
}

/// Puts the database at `path` in WAL mode, as the store runs it, and leaves
/// nothing beside it.
fn switch_to_wal(path: &Path) -> Res<()> {
    let conn = open_read_write(path)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Fail(StoreError::Backend(format!("journal_mode is {mode}, not wal").into())));
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    close(conn)?;
    // The last connection's close copied the WAL back and removed it.
    let wal = with_suffix(path, "-wal");
    if fs::metadata(&wal).is_ok_and(|meta| meta.len() > 0) {
        return Err(Fail(StoreError::Backend(
            format!("{} was left with frames not copied back", wal.display()).into(),
        )));
    }
    for suffix in COMPANIONS {
        remove_if_present(&with_suffix(path, suffix))?;
    }
    Ok(())
}

/// Opens the old database `path` in exclusive locking mode and reads the
/// numbers it handed out. `Ok(Err(problem))` when it cannot be read (a damaged
/// file is what a restore is for); [`BackupRefusal::InUse`] when another
/// connection has it open. The connection returned keeps everyone else out
/// until it is dropped, and neither checkpoints nor removes a file when it
/// closes.
fn hold_unused(path: &Path) -> Res<Result<Held, String>> {
    let conn = match Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(conn) => conn,
        Err(err) => return Ok(Err(err.to_string())),
    };
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    if let Err(problem) = take_exclusively(&conn, path)? {
        return Ok(Err(problem));
    }
    let numbers = highest_numbers(&conn).map_err(|Fail(err)| crate::with_causes(&err));
    Ok(Ok(Held { _conn: conn, numbers }))
}

/// The old database, held by [`hold_unused`], and the numbers it handed out
/// (or why they could not be read).
struct Held {
    /// Open in exclusive locking mode until dropped.
    _conn: Connection,
    numbers: Result<NumbersAbove, String>,
}

/// The highest ledger number and epoch the database at `conn` handed out,
/// counting the floors and ceilings it keeps.
fn highest_numbers(conn: &Connection) -> Res<NumbersAbove> {
    let meta = |key: &str| -> Res<i64> {
        if !table_exists(conn, "mesh_meta")? {
            return Ok(0);
        }
        let value: Option<i64> =
            conn.query_row("SELECT value FROM mesh_meta WHERE key = ?1", [key], |r| r.get(0)).optional()?;
        Ok(value.unwrap_or(0))
    };
    let ledger_seq = if column_exists(conn, "mesh_event_ledger", "seq")? {
        conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM mesh_event_ledger", [], |r| r.get(0))?
    } else {
        0
    };
    let epoch = if column_exists(conn, "mesh_queue", "epoch")? {
        conn.query_row("SELECT COALESCE(MAX(epoch), 0) FROM mesh_queue", [], |r| r.get(0))?
    } else {
        0
    };
    Ok(NumbersAbove {
        ledger_seq: ledger_seq.max(meta(SEQ_FLOOR)?).max(meta(SEQ_CEILING)?),
        epoch: epoch.max(meta(EPOCH_CEILING)?),
    })
}

/// Stores `value` under `key` unless a larger one is there; returns the one kept.
fn write_max(conn: &Connection, key: &str, value: i64) -> Res<i64> {
    Ok(conn.query_row(
        "INSERT INTO mesh_meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)
         RETURNING value",
        rusqlite::params![key, value],
        |r| r.get(0),
    )?)
}

/// The renames that move the old database out of `target`'s way: every
/// companion first, then the file (so a database never lies beside a WAL that
/// is not its own); with a legacy `beads.db` as `old`, that one too.
fn moves_aside(target: &Path, old: Option<&Path>, stamp: &str) -> Vec<(PathBuf, PathBuf)> {
    let mut bases = vec![target.to_owned()];
    if let Some(old) = old.filter(|old| *old != target) {
        bases.push(old.to_owned());
    }
    let mut moves = Vec::new();
    for base in bases {
        let aside = aside_name(&base, stamp);
        for suffix in COMPANIONS.into_iter().chain([""]) {
            let from = with_suffix(&base, suffix);
            if fs::symlink_metadata(&from).is_ok() {
                moves.push((from, with_suffix(&aside, suffix)));
            }
        }
    }
    moves
}

/// `<base>.before-restore-<stamp>`, or with `-2`, `-3`, ... when that is taken.
fn aside_name(base: &Path, stamp: &str) -> PathBuf {
    let taken = |name: &Path| {
        COMPANIONS
            .into_iter()
            .chain([""])
            .any(|suffix| fs::symlink_metadata(with_suffix(name, suffix)).is_ok())
    };
    let first = with_suffix(base, &format!(".before-restore-{stamp}"));
    if !taken(&first) {
        return first;
    }
    (2..)
        .map(|n| with_suffix(base, &format!(".before-restore-{stamp}-{n}")))
        .find(|name| !taken(name))
        .unwrap_or(first)
}

/// Undoes `moved` renames, the last first.
fn put_back(moved: &[(PathBuf, PathBuf)]) {
    for (from, to) in moved.iter().rev() {
        if let Err(err) = fs::rename(to, from) {
            tracing::error!(from = %to.display(), to = %from.display(), %err, "could not put a moved file back");
        }
    }
}

/// What a database holds, read in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents {
    schema_version: i64,
    database_id: Option<String>,
    last_ledger_seq: Option<i64>,
    meshes: Vec<MeshContents>,
    totals: BackupTotals,
}

/// Reads what the agentmesh database at `conn` holds; refuses one that is not
/// agentmesh's or is newer than this build.
fn read_contents(conn: &Connection, path: &Path) -> Res<Contents> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table'")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let has = |name: &str| tables.iter().any(|t| t == name);
    let missing: Vec<String> =
        REQUIRED_TABLES.into_iter().filter(|t| !has(t)).map(ToOwned::to_owned).collect();
    if !missing.is_empty() {
        return Err(refused(BackupRefusal::NotAgentmesh { path: path.to_owned(), missing }));
    }
    let schema_version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if schema_version > LATEST_VERSION {
        return Err(Fail(StoreError::SchemaTooNew {
            path: path.to_owned(),
            found: schema_version,
            supported: LATEST_VERSION,
        }));
    }
    let database_id = if has("mesh_meta") {
        conn.query_row("SELECT CAST(value AS TEXT) FROM mesh_meta WHERE key = 'database_id'", [], |r| {
            r.get(0)
        })
        .optional()?
        .flatten()
    } else {
        None
    };
    let last_ledger_seq = if column_exists(conn, "mesh_event_ledger", "seq")? {
        conn.query_row("SELECT MAX(seq) FROM mesh_event_ledger", [], |r| r.get(0))?
    } else {
        None
    };

    let mut meshes: BTreeMap<String, MeshContents> = BTreeMap::new();
    let mut stmt =
        conn.prepare("SELECT mesh_id, status, COUNT(*) FROM mesh_queue GROUP BY mesh_id, status")?;
    let rows =
        stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))?;
    for row in rows {
        let (id, status, n) = row?;
        mesh_of(&mut meshes, id).tasks.insert(status, count(n));
    }
    drop(stmt);
    let undrained = if has("mesh_inbox_queue") {
        Some("SELECT mesh_id, COUNT(*) FROM mesh_inbox_queue GROUP BY mesh_id")
    } else if column_exists(conn, "mesh_pending_events", "drained")? {
        Some("SELECT mesh_id, COUNT(*) FROM mesh_pending_events WHERE drained = 0 GROUP BY mesh_id")
    } else {
        None
    };
    let counts: [(Option<&str>, CountOf); 4] = [
        (Some("SELECT mesh_id, COUNT(*) FROM mesh_event_ledger GROUP BY mesh_id"), |m| &mut m.ledger_entries),
        (Some("SELECT mesh_id, COUNT(*) FROM mesh_pending_events GROUP BY mesh_id"), |m| &mut m.inbox_events),
        (undrained, |m| &mut m.undrained_events),
        (
            has("mesh_missions").then_some("SELECT mesh_id, COUNT(*) FROM mesh_missions GROUP BY mesh_id"),
            |m| &mut m.missions,
        ),
    ];
    for (sql, field) in counts {
        let Some(sql) = sql else { continue };
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (id, n) = row?;
            *field(mesh_of(&mut meshes, id)) = count(n);
        }
    }
    let meshes: Vec<MeshContents> = meshes.into_values().collect();
    let totals = BackupTotals {
        meshes: meshes.len() as u64,
        tasks: meshes.iter().flat_map(|m| m.tasks.values()).sum(),
        ledger_entries: meshes.iter().map(|m| m.ledger_entries).sum(),
        inbox_events: meshes.iter().map(|m| m.inbox_events).sum(),
        undrained_events: meshes.iter().map(|m| m.undrained_events).sum(),
        missions: meshes.iter().map(|m| m.missions).sum(),
    };
    Ok(Contents { schema_version, database_id, last_ledger_seq, meshes, totals })
}

/// Where a count per mesh goes in [`MeshContents`].
type CountOf = fn(&mut MeshContents) -> &mut u64;

/// The contents of mesh `id`, added when new.
fn mesh_of(meshes: &mut BTreeMap<String, MeshContents>, id: String) -> &mut MeshContents {
    meshes.entry(id.clone()).or_insert_with(|| MeshContents { mesh_id: id, ..MeshContents::default() })
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The first way `copy` differs from `original` (its identity too when
/// `same_identity`: a restored copy gets a new database id).
fn differences(original: &Contents, copy: &BackupReport, same_identity: bool) -> Option<String> {
    if original.schema_version != copy.schema_version {
        return Some(format!(
            "schema version {} instead of {}",
            copy.schema_version, original.schema_version
        ));
    }
    if same_identity && original.database_id != copy.database_id {
        return Some(format!("database id {:?} instead of {:?}", copy.database_id, original.database_id));
    }
    if original.last_ledger_seq != copy.last_ledger_seq {
        return Some(format!(
            "last ledger number {:?} instead of {:?}",
            copy.last_ledger_seq, original.last_ledger_seq
        ));
    }
    if original.totals != copy.totals || original.meshes != copy.meshes {
        return Some(format!("counts {:?} instead of {:?}", copy.totals, original.totals));
    }
    None
}

/// `PRAGMA integrity_check`'s problems (none when it says `ok`).
fn integrity_problems(conn: &Connection) -> Res<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA integrity_check({INTEGRITY_PROBLEMS_SHOWN})"))?;
    let rows: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(if rows.len() == 1 && rows[0] == "ok" { Vec::new() } else { rows })
}

/// Refuses a file that does not start with SQLite's header. (An empty file is
/// a new database to SQLite, and no backup.)
fn check_header(path: &Path) -> Res<()> {
    let not_sqlite = |reason: String| refused(BackupRefusal::NotSqlite { path: path.to_owned(), reason });
    let mut header = Vec::with_capacity(100);
    match fs::File::open(path).and_then(|file| file.take(100).read_to_end(&mut header)) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            Err(not_sqlite(String::from("there is no such file")))
        }
        Err(err) => Err(Fail(crate::io_error(err))),
        Ok(0) => Err(not_sqlite(String::from("it is empty"))),
        Ok(n) if n < 100 || !header.starts_with(b"SQLite format 3\0") => {
            Err(not_sqlite(String::from("it does not start with the SQLite header")))
        }
        Ok(_) => Ok(()),
    }
}

/// `fail`, as the refusal it means when SQLite found `path` to be no database
/// or a damaged one.
fn as_refusal(fail: Fail, path: &Path) -> Fail {
    let code = match &fail.0 {
        StoreError::Backend(source) => {
            source.downcast_ref::<rusqlite::Error>().and_then(|e| e.sqlite_error_code())
        }
        _ => None,
    };
    match code {
        Some(ErrorCode::NotADatabase) => {
            refused(BackupRefusal::NotSqlite { path: path.to_owned(), reason: crate::with_causes(&fail.0) })
        }
        Some(ErrorCode::DatabaseCorrupt) => refused(BackupRefusal::Damaged {
            path: path.to_owned(),
            problems: vec![crate::with_causes(&fail.0)],
        }),
        _ => fail,
    }
}

fn open_read_only(path: &Path) -> Res<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_millis(u64::from(crate::BUSY_TIMEOUT_MS)))?;
    Ok(conn)
}

fn open_read_write(path: &Path) -> Res<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_millis(u64::from(crate::BUSY_TIMEOUT_MS)))?;
    Ok(conn)
}

/// Closes `conn`, reporting what closing it failed with.
fn close(conn: Connection) -> Res<()> {
    conn.close().map_err(|(_, err)| Fail::from(err))
}

fn table_exists(conn: &Connection, name: &str) -> Res<bool> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )?)
}

fn column_exists(conn: &Connection, table: &str, column: &str) -> Res<bool> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
        [table, column],
        |r| r.get(0),
    )?)
}

/// Whether `path` names the database `db`, a file SQLite keeps beside it, or
/// its archive or a file beside that (symbolic links to their directories
/// followed; the file itself need not exist).
pub fn names_database(path: &Path, db: &Path) -> bool {
    let resolve = |p: &Path| {
        let dir = parent_dir(p).canonicalize().unwrap_or_else(|_| parent_dir(p).to_owned());
        p.file_name().map(|name| dir.join(name))
    };
    let (Some(path), Some(db)) = (resolve(path), resolve(db)) else { return false };
    let archive = crate::archive::file_of(&db);
    COMPANIONS
        .into_iter()
        .chain([""])
        .any(|suffix| path == with_suffix(&db, suffix) || path == with_suffix(&archive, suffix))
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

fn remove_if_present(path: &Path) -> Res<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(Fail(crate::io_error(err))),
        _ => Ok(()),
    }
}

/// Puts `temp` at `dest`, which must not exist: a hard link fails rather than
/// replace a file that appeared meanwhile. Where links are not supported, a
/// rename after a last look.
fn place_new(temp: &Path, dest: &Path) -> Res<()> {
    match fs::hard_link(temp, dest) {
        Ok(()) => remove_if_present(temp),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            Err(refused(BackupRefusal::Exists { path: dest.to_owned() }))
        }
        Err(_) if fs::symlink_metadata(dest).is_ok() => {
            Err(refused(BackupRefusal::Exists { path: dest.to_owned() }))
        }
        Err(_) => fs::rename(temp, dest).map_err(|err| Fail(crate::io_error(err))),
    }
}

fn sync_file(path: &Path) -> Res<()> {
    fs::File::open(path).and_then(|file| file.sync_all()).map_err(|err| Fail(crate::io_error(err)))
}

/// Syncs the directory holding `path`, so a rename into it survives a power loss.
fn sync_dir(path: &Path) -> Res<()> {
    #[cfg(unix)]
    fs::File::open(parent_dir(path))
        .and_then(|dir| dir.sync_all())
        .map_err(|err| Fail(crate::io_error(err)))?;
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// A temporary database file beside its destination (so a rename never crosses
/// filesystems), private to its owner, removed with its companions unless
/// disarmed.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    fn beside(dest: &Path) -> Res<TempFile> {
        let name =
            dest.file_name().map_or_else(|| String::from("database"), |n| n.to_string_lossy().into_owned());
        let path = parent_dir(dest).join(format!(".{name}.{}.tmp", agentmesh_store::ids::mint()));
        create_private_file(&path).map_err(crate::io_error)?;
        Ok(TempFile { path, armed: true })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the file (it was renamed into place); removes what may be left
    /// beside its temporary name.
    fn disarm(mut self) {
        self.armed = false;
        for suffix in COMPANIONS {
            let _ = fs::remove_file(with_suffix(&self.path, suffix));
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for suffix in COMPANIONS.into_iter().chain([""]) {
            let _ = fs::remove_file(with_suffix(&self.path, suffix));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use agentmesh_core::{Claimant, NewTask, Timestamp};
    use agentmesh_store::prelude::*;
    use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, Outcome};

    use super::*;
    use crate::SqliteStore;

    const NOW: Timestamp = Timestamp::from_millis(1_735_689_600_000);

    fn enqueue(store: &SqliteStore, mesh: &str, id: &str) {
        let task = NewTask { id: Some(id.to_owned()), message: format!("task {id}"), ..NewTask::default() };
        store.enqueue(mesh, &task, NOW).unwrap();
    }

    /// Enqueues `n` tasks with messages of `pad` bytes, 500 to a transaction.
    fn seed(store: &SqliteStore, mesh: &str, n: usize, pad: usize) {
        let tasks: Vec<NewTask> = (0..n)
            .map(|i| NewTask {
                id: Some(format!("seed-{i}")),
                message: "x".repeat(pad),
                ..NewTask::default()
            })
            .collect();
        for batch in tasks.chunks(500) {
            store.enqueue_batch(mesh, batch, NOW).unwrap();
        }
    }

    /// Claims a task of `mesh` for `session` and completes it; whether there was one.
    fn claim_and_complete(store: &SqliteStore, mesh: &str, session: &str) -> bool {
        let claimant =
            Claimant { node_id: String::from("n1"), session_id: session.to_owned(), ..Claimant::default() };
        let ClaimOutcome::Claimed(task) =
            store.claim_next(mesh, &claimant, &ClaimOptions::default(), NOW).unwrap()
        else {
            return false;
        };
        let report = CompletionReport {
            session_id: session.to_owned(),
            task_id: Some(task.id.clone()),
            epoch: Some(task.epoch()),
            occurred_at: None,
            outcome: Outcome::Completed { summary: Some(String::from("done")) },
        };
        store.complete_task(mesh, &report, NOW).unwrap();
        true
    }

    /// Completed tasks without a `task_completed` entry, in the file at `path`.
    fn completed_without_entry(path: &Path) -> i64 {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        conn.query_row(
            "SELECT COUNT(*) FROM mesh_queue q WHERE q.status = 'completed' AND NOT EXISTS (
                 SELECT 1 FROM mesh_event_ledger l
                  WHERE l.mesh_id = q.mesh_id AND l.kind = 'task_completed'
                    AND json_extract(l.payload, '$.taskId') = q.id)",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn the_database_its_companions_and_its_archive_are_recognized() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        for name in [
            "mesh-runtime.db",
            "mesh-runtime.db-wal",
            "mesh-runtime.db-archive",
            "mesh-runtime.db-archive-journal",
        ] {
            assert!(names_database(&dir.path().join(name), &db), "{name}");
        }
        assert!(names_database(&dir.path().join(".").join("mesh-runtime.db"), &db));
        assert!(!names_database(&dir.path().join("copy.db"), &db));
        assert!(!names_database(&dir.path().join("copy.db-archive"), &db));
    }

    #[test]
    fn compacting_rewrites_an_old_file_once_and_gives_free_pages_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        let store = SqliteStore::open(&db).unwrap();
        seed(&store, "m", 2_000, 2_000);
        drop(store);
        // A file made before incremental vacuum, most of whose pages are then freed.
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA auto_vacuum = NONE; VACUUM;").unwrap();
        conn.execute("DELETE FROM mesh_queue WHERE id <> 'seed-7'", []).unwrap();
        conn.execute("DELETE FROM mesh_event_ledger", []).unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        drop(conn);

        // Refused while another connection has the file open, nothing changed.
        let other = Connection::open(&db).unwrap();
        let _: i64 = other.query_row("SELECT COUNT(*) FROM mesh_queue", [], |r| r.get(0)).unwrap();
        let err = compact_database(&db).unwrap_err();
        assert_eq!(BackupRefusal::of(&err).map(BackupRefusal::code), Some("database_in_use"), "{err}");
        drop(other);

        let files = compact_database(&db).unwrap();
        let main = &files[0];
        assert!(main.rewritten, "{files:?}");
        assert!(main.bytes_after * 4 < main.bytes_before, "{files:?}");
        assert_eq!(fs::metadata(&db).unwrap().len(), main.bytes_after);
        let conn = Connection::open(&db).unwrap();
        let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, 2, "incremental from now on");
        drop(conn);
        let store = SqliteStore::open(&db).unwrap();
        assert!(store.find_task("m", "seed-7").unwrap().is_some(), "what was there is there");
        drop(store);

        // Once incremental, the file is not rewritten again.
        let again = compact_database(&db).unwrap();
        assert!(again.iter().all(|f| !f.rewritten), "{again:?}");
    }

    #[test]
    fn a_backup_holds_what_the_store_holds_and_opens_as_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        let store = SqliteStore::open(&db).unwrap();
        for i in 0..20 {
            enqueue(&store, if i % 2 == 0 { "a" } else { "b" }, &format!("t{i}"));
        }
        assert!(claim_and_complete(&store, "a", "s1"));
        let dest = dir.path().join("copy.db");
        let mut steps = 0;
        let report = backup_database(&db, &dest, false, |p| {
            steps += 1;
            assert!(p.copied <= p.total);
        })
        .unwrap();
        assert!(steps >= 1);
        assert_eq!(report.path, dest);
        assert_eq!(report.integrity, "ok");
        assert_eq!(report.schema_version, LATEST_VERSION);
        assert_eq!(report.totals.meshes, 2);
        assert_eq!(report.totals.tasks, 20);
        assert_eq!(report.meshes[0].mesh_id, "a");
        assert_eq!(report.meshes[0].tasks.get("completed"), Some(&1));
        assert_eq!(report.meshes[0].tasks.get("pending"), Some(&9));
        assert!(report.totals.ledger_entries >= 22, "{:?}", report.totals);
        assert_eq!(report.bytes, fs::metadata(&dest).unwrap().len());
        // One file in rollback mode, nothing beside it, no temporary file left.
        let header = fs::read(&dest).unwrap();
        assert_eq!((header[18], header[19]), (1, 1), "the copy is not in WAL mode");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.starts_with("copy.db-") || n.contains(".tmp")), "{names:?}");
        assert_eq!(verify_database(&dest).unwrap(), report);
        let copy = SqliteStore::open(&dest).unwrap();
        assert!(copy.find_task("b", "t19").unwrap().is_some());
        assert_eq!(copy.pragma("journal_mode").unwrap(), "wal", "the store opens it in WAL mode");
    }

    #[test]
    fn a_backup_never_writes_over_its_own_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        let store = SqliteStore::open(&db).unwrap();
        enqueue(&store, "m", "t1");
        for name in [DB_FILE_NAME, "mesh-runtime.db-wal", "./mesh-runtime.db"] {
            let err = backup_database(&db, &dir.path().join(name), true, |_| {}).unwrap_err();
            assert!(matches!(err, StoreError::InvalidInput(_)), "{name}: {err:?}");
        }
        assert!(store.find_task("m", "t1").unwrap().is_some());
    }

    #[test]
    fn a_backup_never_replaces_a_file_unless_asked() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        let store = SqliteStore::open(&db).unwrap();
        enqueue(&store, "m", "t1");
        let dest = dir.path().join("copy.db");
        fs::write(&dest, "keep me").unwrap();
        let err = backup_database(&db, &dest, false, |_| {}).unwrap_err();
        assert_eq!(BackupRefusal::of(&err).map(BackupRefusal::code), Some("destination_exists"), "{err:?}");
        assert_eq!(fs::read_to_string(&dest).unwrap(), "keep me");
        backup_database(&db, &dest, true, |_| {}).unwrap();
        assert_eq!(verify_database(&dest).unwrap().totals.tasks, 1);
    }

    /// Writers commit all along; the copy ends, and holds one moment: every
    /// completed task with its ledger entry, and the same counts the copy's own
    /// check read.
    #[test]
    fn a_backup_under_continuous_writes_ends_and_is_one_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        let store = Arc::new(SqliteStore::open(&db).unwrap());
        // Enough pages that the copy takes many steps.
        seed(&store, "m", 3_000, 200);
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        enqueue(&store, "m", &format!("w{w}-{n}"));
                        claim_and_complete(&store, "m", &format!("s{w}"));
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let dest = dir.path().join("copy.db");
        let report =
            backup_database(&db, &dest, false, |_| std::thread::sleep(Duration::from_millis(2))).unwrap();
        stop.store(true, Ordering::Relaxed);
        let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
        assert!(written > 0);
        assert_eq!(completed_without_entry(&dest), 0);
        let completed = report.meshes[0].tasks.get("completed").copied().unwrap_or(0);
        assert!(completed > 0, "{report:?}");
        let live = verify_database(&db).unwrap();
        assert!(live.totals.tasks > report.totals.tasks, "the source went on after the snapshot");
    }

    #[test]
    fn files_that_are_not_agentmesh_databases_are_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let code = |path: &Path| {
            let err = verify_database(path).unwrap_err();
            (BackupRefusal::of(&err).map(BackupRefusal::code).unwrap_or("other"), err)
        };
        let text = dir.path().join("notes.txt");
        fs::write(&text, "x".repeat(4096)).unwrap();
        assert_eq!(code(&text).0, "not_a_database");
        let empty = dir.path().join("empty.db");
        fs::write(&empty, "").unwrap();
        assert_eq!(code(&empty).0, "not_a_database");
        assert_eq!(code(&dir.path().join("missing.db")).0, "not_a_database");
        let other = dir.path().join("other.db");
        Connection::open(&other).unwrap().execute_batch("CREATE TABLE things (x)").unwrap();
        let (found, err) = code(&other);
        assert_eq!(found, "not_an_agentmesh_database");
        assert!(crate::with_causes(&err).contains("mesh_queue"), "{}", crate::with_causes(&err));

        // A database whose pages were overwritten in the middle.
        let db = dir.path().join("damaged.db");
        let store = SqliteStore::open(&db).unwrap();
        seed(&store, "m", 500, 300);
        drop(store);
        // Every page in the file itself, none left in a WAL to read instead.
        Connection::open(&db)
            .unwrap()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE")
            .unwrap();
        let mut bytes = fs::read(&db).unwrap();
        let page = 4096;
        assert!(bytes.len() > 20 * page);
        for b in &mut bytes[10 * page..12 * page] {
            *b = 0x5a;
        }
        fs::write(&db, bytes).unwrap();
        let (found, err) = code(&db);
        assert!(found == "integrity_check_failed", "{found}: {}", crate::with_causes(&err));

        // A newer agentmesh's.
        let newer = dir.path().join("newer.db");
        drop(SqliteStore::open(&newer).unwrap());
        Connection::open(&newer).unwrap().pragma_update(None, "user_version", LATEST_VERSION + 1).unwrap();
        let err = verify_database(&newer).unwrap_err();
        assert!(matches!(err, StoreError::SchemaTooNew { .. }), "{err:?}");
    }

    #[test]
    fn a_restore_keeps_the_old_database_and_starts_above_its_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let db = data.join(DB_FILE_NAME);
        let store = SqliteStore::open(&db).unwrap();
        enqueue(&store, "m", "before");
        let backup = dir.path().join("backup.db");
        backup_database(&db, &backup, false, |_| {}).unwrap();
        // After the backup: more claims and entries in the old database.
        for i in 0..5 {
            enqueue(&store, "m", &format!("after-{i}"));
            assert!(claim_and_complete(&store, "m", "s1"));
        }
        let old = verify_database(&db).unwrap();
        let old_seq = old.last_ledger_seq.unwrap();
        drop(store);

        let report = restore_database(&backup, &db, "20250101T000000Z", |_| {}).unwrap();
        let aside = data.join(format!("{DB_FILE_NAME}.before-restore-20250101T000000Z"));
        assert_eq!(report.previous.as_deref(), Some(aside.as_path()));
        assert!(report.moved_aside.contains(&aside));
        assert_eq!(verify_database(&aside).unwrap().totals, old.totals, "the old database is kept as it was");
        assert_eq!(report.restored.path, db);
        assert_eq!(report.restored.totals.tasks, 1);
        assert_ne!(report.restored.database_id, old.database_id, "a new origin for ledger followers");
        let above = report.numbers_above.unwrap();
        assert_eq!(above.ledger_seq, old_seq);
        assert!(above.epoch >= 1);
        let header = fs::read(&db).unwrap();
        assert_eq!((header[18], header[19]), (2, 2), "the restored file is in WAL mode");
        assert!(!with_suffix(&db, "-wal").exists());

        let store = SqliteStore::open(&db).unwrap();
        assert!(store.find_task("m", "before").unwrap().is_some());
        assert!(store.find_task("m", "after-0").unwrap().is_none());
        enqueue(&store, "m", "next");
        let seq = verify_database(&db).unwrap().last_ledger_seq.unwrap();
        assert!(seq > old_seq, "ledger numbers go on above the old database's: {seq} <= {old_seq}");
    }

    #[test]
    fn a_restore_refuses_a_database_another_connection_has_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        let store = SqliteStore::open(&db).unwrap();
        enqueue(&store, "m", "live");
        let backup = dir.path().join("backup.db");
        backup_database(&db, &backup, false, |_| {}).unwrap();
        let before: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        let err = restore_database(&backup, &db, "x", |_| {}).unwrap_err();
        assert_eq!(BackupRefusal::of(&err).map(BackupRefusal::code), Some("database_in_use"), "{err:?}");
        let after: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(before, after, "nothing was changed");
        enqueue(&store, "m", "still-writes");
    }

    #[test]
    fn a_restore_into_an_empty_data_dir_installs_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DB_FILE_NAME);
        let store = SqliteStore::open(&db).unwrap();
        enqueue(&store, "m", "t1");
        let backup = dir.path().join("backup.db");
        backup_database(&db, &backup, false, |_| {}).unwrap();
        let fresh = dir.path().join("fresh").join(DB_FILE_NAME);
        let report = restore_database(&backup, &fresh, "x", |_| {}).unwrap();
        assert_eq!(report.previous, None);
        assert!(report.moved_aside.is_empty());
        assert_eq!(report.numbers_above, None);
        assert!(SqliteStore::open(&fresh).unwrap().find_task("m", "t1").unwrap().is_some());
    }
}
