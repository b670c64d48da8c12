//! The embedded SQLite backend of agentmesh: one database file,
//! `mesh-runtime.db`, holds every mesh's queue and ledger.
//!
//! - [`SqliteStore::open`] opens (or creates) a database file, sets the pragmas and
//!   migrates it; [`SqliteStore::open_data_dir`] resolves the file inside a data or
//!   ADHDev ledger directory (renaming a legacy `beads.db`) and enables the one-time
//!   import of legacy `<mesh>.queue.json` files.
//! - `tasks` holds the queue, claims and task lifecycle; `ledger` the event ledger;
//!   `migrations` the schema steps.
//!
//! Every write runs in a `BEGIN IMMEDIATE` transaction on one connection, owned by
//! one writer thread, so the write lock is taken up front and a lock upgrade can
//! never fail halfway. Writes that arrive together share a transaction and its
//! COMMIT (group commit); reads run on read-only connections beside it (see the
//! `writes` module). Several processes may open the same file; SQLite's file
//! locks and the busy timeout serialize their writers.
//!
//! Every index is paid for by every write, so a table has only the indexes a
//! read path needs. The ordered statements of the hot paths (the claim
//! streams, the ledger's filters, the inbox walk) bind their values as `+?`:
//! SQLite re-prepares an ordered statement whenever a value bound to an
//! equality term changes, which the statement cache would do on every reuse
//! (see `tasks::claim`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentmesh_store::{FullStorage, StoreError, StoreResult, Submitted};
use rusqlite::{Connection, ErrorCode};

mod adhdev_import;
mod archive;
mod backup;
mod cells;
mod checkpointer;
mod durability;
mod inbox;
mod inbox_upkeep;
mod ledger;
mod migrations;
mod missions;
mod overview;
mod paths;
mod payload;
mod reservations;
mod runtime;
mod space;
mod store_impl;
mod tasks;
mod transfer;
mod webhooks;
mod writes;

pub use adhdev_import::{OriginalDbReport, TableImport};
pub use backup::{
    ArchiveContents, BackupProgress, BackupRefusal, BackupReport, BackupTotals, CompactedFile, MeshContents,
    NumbersAbove, RestoreReport, backup_database, compact_database, names_database, restore_database,
    verify_database,
};
pub use durability::{Durability, OpenOptions};
pub use migrations::LATEST_VERSION as SCHEMA_VERSION;
pub use paths::{DB_FILE_NAME, LEGACY_DB_FILE_NAME, create_private_dir, resolve_db_path};
use writes::Writes;

/// How long a writer waits for another process's lock before giving up
/// (sooner when the request it serves has a deadline that comes first).
const BUSY_TIMEOUT_MS: u32 = 5_000;
/// The free space under which [`SqliteStore::probe_write`] reports the storage
/// nearly full, though its own write went through.
pub const PROBE_HEADROOM_BYTES: u64 = 1024 * 1024;
/// A mesh runtime store on one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    /// Checkpoints the WAL beside the writer: the store's one WAL policy.
    checkpointer: checkpointer::Checkpointer,
    /// The writer thread with the write connection, and the read connections.
    writes: Writes,
    /// Where legacy `<mesh>.queue.json` files are looked for, when opened on a
    /// directory.
    legacy_dir: Option<PathBuf>,
    /// Meshes whose legacy queue file was already considered, with the outcome.
    legacy_checked: Mutex<HashMap<String, LegacyQueueState>>,
    /// Tool calls recorded, for the rate guard's periodic sweep.
    tool_calls: AtomicU64,
    /// How the file was opened.
    options: OpenOptions,
    /// The numbers a rollback must not hand out twice (see `durability`).
    ceilings: Arc<durability::Ceilings>,
}

/// What happened to a mesh's legacy queue file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyQueueState {
    /// There was no file, or the mesh already had tasks.
    NotNeeded,
    /// This many tasks were imported and the file renamed to `*.imported`.
    Imported(u64),
    /// The file is malformed; it was left in place and nothing was imported.
    Rejected(String),
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens or creates the database file at `path` and migrates it.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// Opens or creates the database file at `path` with `options` (the
    /// durability, the VFS) and migrates it.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> StoreResult<SqliteStore> {
        Self::open_inner(path.as_ref(), None, options)
    }

    /// Opens the store of a data directory: its `mesh-runtime.db`, or a legacy
    /// `beads.db` renamed to it. Legacy `<mesh>.queue.json` files in the directory
    /// are imported once per mesh, on the first operation on a mesh that has no
    /// tasks.
    ///
    /// A missing directory is created readable by its owner only (0700), and a
    /// new database file likewise (0600, and so its `-wal` and `-shm`); an existing
    /// directory open to other users is used as it is, with a warning.
    pub fn open_data_dir(dir: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        Self::open_data_dir_with(dir, &OpenOptions::default())
    }

    /// [`SqliteStore::open_data_dir`] with `options`.
    pub fn open_data_dir_with(dir: impl AsRef<Path>, options: &OpenOptions) -> StoreResult<SqliteStore> {
        let dir = dir.as_ref();
        paths::create_private_dir(dir).map_err(io_error)?;
        let path = resolve_db_path(dir, |from, to| std::fs::rename(from, to));
        Self::open_inner(&path, Some(dir.to_owned()), options)
    }

    fn open_inner(
        path: &Path,
        legacy_dir: Option<PathBuf>,
        options: &OpenOptions,
    ) -> StoreResult<SqliteStore> {
        Self::open_res(path, legacy_dir, options).map_err(|e| settle_io(e.0, path))
    }

    /// Opens the file at `path`. Several processes may do this at once on a file
    /// that does not exist yet: each step is safe to race (the file is created
    /// with `O_EXCL`, the switch to WAL is retried while another process makes
    /// it, and each migration step reads the version under the write lock).
    fn open_res(path: &Path, legacy_dir: Option<PathBuf>, options: &OpenOptions) -> Res<SqliteStore> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty() && !p.is_dir()) {
            paths::create_private_dir(parent).map_err(io_error)?;
        }
        // A newer agentmesh's database is refused before any write can touch it.
        migrations::refuse_newer_file(path)?;
        paths::create_private_file(path).map_err(io_error)?;
        let mut conn = options.connect_rw(path)?;
        // A new file gives the pages the archive frees back to the file
        // system (see `archive`); the mode can only be chosen before the
        // first page is written.
        let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        if pages == 0 {
            conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
        }
        configure(&mut conn, options)?;
        // The write connection reads through its page cache, not the memory map:
        // inside a write transaction SQLite maps only the pages a read-only
        // cursor fetches, and looks each one up in the WAL's hash tables first, a
        // search that grows with the WAL and that a cached page skips. Reads that
        // gain from the map run on the read connections.
        conn.pragma_update(None, "mmap_size", 0)?;
        // Before the migrations: their data steps count readiness, which
        // reads the archive.
        archive::attach_writable(&conn, path, options.synchronous())?;
        migrations::migrate(&mut conn)?;
        let ceilings = Arc::new(durability::Ceilings::open(&conn, options.durability)?);
        let checkpointer = checkpointer::Checkpointer::start(path, &mut conn, options)?;
        Ok(SqliteStore {
            checkpointer,
            path: path.to_owned(),
            writes: Writes::new(conn, path, options, Arc::clone(&ceilings))?,
            legacy_dir,
            legacy_checked: Mutex::new(HashMap::new()),
            tool_calls: AtomicU64::new(0),
            options: options.clone(),
            ceilings,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What an acknowledged write of this store survives.
    pub fn durability(&self) -> Durability {
        self.options.durability
    }

    /// Reads a pragma's current value as text (for checks and diagnostics).
    pub fn pragma(&self, name: &str) -> StoreResult<String> {
        let value: rusqlite::types::Value =
            self.read(|conn| Ok(conn.pragma_query_value(None, name, |r| r.get(0))?))?;
        Ok(match value {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            rusqlite::types::Value::Real(r) => r.to_string(),
            rusqlite::types::Value::Null => String::new(),
            rusqlite::types::Value::Blob(_) => String::from("<blob>"),
        })
    }

    /// The version of the bundled SQLite library.
    pub fn sqlite_version() -> &'static str {
        rusqlite::version()
    }

    /// Sends an operation that does nothing through the writer thread, as every
    /// hot-path write is sent, and returns after its (empty) transaction: what a
    /// write costs here beyond its own SQL (the benchmark's writer floor case).
    pub fn writer_round_trip(&self) -> StoreResult<()> {
        self.write_queued(|_| Ok(()))
    }

    /// A connection to the database file at `path` with the store's pragmas and no
    /// schema: for measuring what SQLite itself costs on a machine (the
    /// benchmark's floor cases), never for storing mesh data.
    pub fn open_bare_connection(path: &Path, durability: Durability) -> StoreResult<Connection> {
        let options = OpenOptions::with_durability(durability);
        let mut conn = options.connect_rw(path).map_err(classify)?;
        configure(&mut conn, &options).map_err(|Fail(err)| err)?;
        Ok(conn)
    }

    /// Imports a legacy `<mesh>.queue.json` into `mesh_id`, all or nothing, skipping
    /// tasks whose id exists already. Returns how many were imported. A malformed
    /// file is refused with [`StoreError::LegacyFile`] naming the problem.
    pub fn import_legacy_queue_file(&self, mesh_id: &str, file: &Path) -> StoreResult<u64> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| StoreError::LegacyFile { path: file.to_owned(), problem: e.to_string() })?;
        let entries = agentmesh_store::legacy::parse_legacy_queue(file, &text, mesh_id)?;
        self.write(|tx| tasks::import_entries(tx, &entries))
    }

    /// Whether this tool call is due for the rate guard's sweep of old rows.
    fn tool_call_sweep_due(&self) -> bool {
        (self.tool_calls.fetch_add(1, Ordering::Relaxed) + 1)
            .is_multiple_of(agentmesh_core::rate_guard::SWEEP_EVERY_CALLS)
    }

    /// What became of the legacy queue file of `mesh_id`, once it was considered.
    pub fn legacy_queue_state(&self, mesh_id: &str) -> Option<LegacyQueueState> {
        self.legacy_checked.lock().unwrap_or_else(|e| e.into_inner()).get(mesh_id).cloned()
    }

    /// Turns group commit on (the default) or off. With it off every write commits
    /// on its own as soon as its operation returns.
    pub fn set_group_commit(&self, enabled: bool) {
        self.writes.set_group_commit(enabled);
    }

    /// How many writes this store committed, and in how many COMMITs.
    pub fn write_stats(&self) -> WriteStats {
        self.writes.stats()
    }

    /// Runs `f` in an immediate transaction of its own, on this thread with the
    /// connection the writer lends it (see the `writes` module), and returns once
    /// that transaction is committed (with `f`'s result) or has failed (with the
    /// failure).
    fn write<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> StoreResult<T> {
        self.writes.write(f).map_err(|e| settle_io(e.0, &self.path))
    }

    /// Like [`SqliteStore::write`], for an operation that owns what it needs, so
    /// that the writer thread runs it, in one transaction with the writes queued
    /// beside it: the hot paths, where writers arrive together.
    fn write_queued<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Res<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.writes.write_queued(f).map_err(|e| settle_io(e.0, &self.path))
    }

    /// Like [`SqliteStore::write_queued`], for an async caller: the write is queued
    /// at once and the future resolves once its transaction is closed, with what
    /// `write_queued` would have returned. The writer thread runs it and wakes
    /// the future, so no thread of the caller waits. The first write to a mesh
    /// whose legacy queue file was not considered yet runs on a thread of its
    /// own, which imports it.
    fn submit_queued<T: Send + 'static>(
        self: Arc<Self>,
        mesh_id: String,
        f: impl FnOnce(&Connection, &str) -> Res<T> + Send + 'static,
    ) -> Submitted<T> {
        if !self.legacy_considered(&mesh_id) {
            return agentmesh_store::submit::on_thread(move || {
                self.ensure_legacy_queue(&mesh_id);
                self.write_queued(move |tx| f(tx, &mesh_id))
            });
        }
        match self.writes.submit_queued(move |tx| f(tx, &mesh_id)) {
            Ok(submitted) => {
                let path = self.path.clone();
                Box::pin(async move { submitted.await.map_err(|e| settle_io(e.0, &path)) })
            }
            Err(Fail(err)) => Box::pin(std::future::ready(Err(err))),
        }
    }

    /// Runs `f` on a read-only connection, in one snapshot holding every write
    /// that returned; it waits for no write.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> StoreResult<T> {
        self.writes.read(f).map_err(|e| settle_io(e.0, &self.path))
    }

    /// Like [`SqliteStore::read`], for a read of many rows: it runs on the store's
    /// bulk-read thread, below the writers' CPU priority (see `Writes::read_bulk`).
    fn read_bulk<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Res<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.writes.read_bulk(f).map_err(|e| settle_io(e.0, &self.path))
    }

    /// Whether nothing is left to do about the mesh's legacy queue file.
    fn legacy_considered(&self, mesh_id: &str) -> bool {
        self.legacy_dir.is_none()
            || self.legacy_checked.lock().unwrap_or_else(|e| e.into_inner()).contains_key(mesh_id)
    }

    /// Imports the mesh's legacy queue file the first time the mesh is touched.
    fn ensure_legacy_queue(&self, mesh_id: &str) {
        let Some(dir) = &self.legacy_dir else { return };
        {
            let checked = self.legacy_checked.lock().unwrap_or_else(|e| e.into_inner());
            if checked.contains_key(mesh_id) {
                return;
            }
        }
        let state = self.import_legacy_queue_once(dir, mesh_id);
        if let LegacyQueueState::Rejected(problem) = &state {
            tracing::warn!(mesh_id, %problem, "legacy queue file not imported");
        }
        self.legacy_checked.lock().unwrap_or_else(|e| e.into_inner()).insert(mesh_id.to_owned(), state);
    }

    fn import_legacy_queue_once(&self, dir: &Path, mesh_id: &str) -> LegacyQueueState {
        let file = agentmesh_store::legacy::legacy_queue_path(dir, mesh_id);
        let text = match std::fs::read_to_string(&file) {
            // No file, or another process sharing the data dir imported and
            // renamed it a moment ago (its import is then in the database).
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return LegacyQueueState::NotNeeded,
            read => read,
        };
        let result = text
            .map_err(|e| StoreError::LegacyFile { path: file.clone(), problem: e.to_string() })
            .and_then(|text| agentmesh_store::legacy::parse_legacy_queue(&file, &text, mesh_id))
            .and_then(|entries| {
                self.write(|tx| {
                    if tasks::mesh_task_count(tx, mesh_id)? > 0 {
                        return Ok(None);
                    }
                    tasks::import_entries(tx, &entries).map(Some)
                })
            });
        match result {
            Ok(None) => LegacyQueueState::NotNeeded,
            Ok(Some(n)) => {
                let mut done = file.clone().into_os_string();
                done.push(".imported");
                if let Err(err) = std::fs::rename(&file, &done) {
                    tracing::warn!(file = %file.display(), %err, "imported legacy queue file could not be renamed");
                }
                LegacyQueueState::Imported(n)
            }
            Err(err) => LegacyQueueState::Rejected(err.to_string()),
        }
    }

    /// Checkpoints and truncates the WAL when it is larger than `max_bytes`; returns
    /// whether it did. (The store's checkpointer keeps the WAL small by itself;
    /// this is for tools and tests.)
    ///
    /// A checkpoint the filesystem has no room for is not started: one that ran
    /// out of space half way would use up the space writes need. The answer is
    /// then `false`, and writes go on appending to the WAL until there is room.
    pub fn checkpoint_if_wal_exceeds(&self, max_bytes: u64) -> StoreResult<bool> {
        self.checkpointer.checkpoint_if_wal_exceeds(max_bytes).map_err(|e| settle_io(e.0, &self.path))
    }

    /// Commits a transaction that rewrites the database header's `user_version`
    /// with the value it holds: one page appended to the WAL and committed, like
    /// any write, and no data changed. It fails as the writes would right now: on
    /// a full disk, or when another process holds the write lock past the busy
    /// timeout. A one-page write may still fit where a task's does not (a failed
    /// write leaves its partly written frames at the WAL's end for the next one),
    /// so it also fails, with [`FullStorage::NearlyFull`], when less than
    /// [`PROBE_HEADROOM_BYTES`] is left on the filesystem.
    pub fn probe_write(&self) -> StoreResult<()> {
        self.write(|tx| {
            let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            tx.execute_batch(&format!("PRAGMA user_version = {version}"))?;
            Ok(())
        })?;
        match space::available_bytes(&self.path) {
            Some(available_bytes) if available_bytes < PROBE_HEADROOM_BYTES => {
                Err(StoreError::StorageFull(FullStorage::NearlyFull { available_bytes }))
            }
            _ => Ok(()),
        }
    }
}

/// How a store's writes were committed; see [`SqliteStore::write_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Write operations that succeeded and were committed.
    pub writes: u64,
    /// COMMITs that succeeded. Fewer than `writes` when writers shared commits.
    pub commits: u64,
}

/// Sets the connection's pragmas. The settings are read back by tests, because
/// SQLite silently ignores a misspelled pragma.
fn configure(conn: &mut Connection, options: &OpenOptions) -> Res<()> {
    configure_connection(conn, options)?;
    switch_to_wal(conn, std::time::Duration::from_millis(u64::from(BUSY_TIMEOUT_MS)))?;
    // The store's write connection replaces the autocheckpoint with the
    // `checkpointer` module's WAL hook; the pragma holds for the other
    // connections configured here (the benchmark's bare ones).
    conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
    Ok(())
}

/// The settings each of the store's connections has, the read-only ones too.
fn configure_connection(conn: &mut Connection, options: &OpenOptions) -> Res<()> {
    conn.busy_handler(Some(wait_while_busy))?;
    conn.pragma_update(None, "synchronous", options.synchronous())?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Performance, not durability: a page cache that holds the hot index pages
    // across transactions, and memory-mapped reads.
    //
    // The cache is kept small (2 MiB, 512 pages) on purpose. When a b-tree split
    // leaves its new pages out of order, SQLite swaps their numbers through a
    // scratch number far past the end of the file (the lock-byte page), and the
    // COMMIT then walks the cache's whole hash table to drop pages beyond the end.
    // Under the claim/complete load that walk followed about one commit in three,
    // and its cost grows with the cache (one cache miss per page held): 0.5 ms at
    // 64 MiB, and 5% of the writer's time at 8 MiB. Pages that are not in the WAL
    // are read through the memory map and never enter this cache, so the smaller
    // cache costs few extra reads (measured: 8 MiB to 2 MiB, +16% `pread` calls,
    // 0.14 per task, under the same load).
    conn.pragma_update(None, "cache_size", -2_048)?;
    conn.pragma_update(None, "mmap_size", 268_435_456)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// SQLite's busy handler: whether to wait and try again for a lock another
/// connection holds, the `attempt`-th time in a row. It waits as SQLite's own
/// busy timeout does (short pauses growing to 100 ms), for up to
/// [`BUSY_TIMEOUT_MS`] in all, and never past the deadline of the request on
/// this thread ([`agentmesh_store::deadline`]): a writer frozen while it holds
/// the lock (a stopped process) costs a request its own budget, not more.
fn wait_while_busy(attempt: i32) -> bool {
    use std::cell::Cell;
    use std::time::{Duration, Instant};
    thread_local! {
        static SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    const PAUSES_MS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];
    let now = Instant::now();
    if attempt == 0 {
        SINCE.with(|since| since.set(Some(now)));
    }
    let waited = SINCE.with(Cell::get).map_or(Duration::ZERO, |since| now.duration_since(since));
    let mut left = Duration::from_millis(u64::from(BUSY_TIMEOUT_MS)).saturating_sub(waited);
    if let Some(budget) = agentmesh_store::deadline::remaining() {
        left = left.min(budget);
    }
    if left.is_zero() {
        return false;
    }
    let index = usize::try_from(attempt).unwrap_or(usize::MAX).min(PAUSES_MS.len() - 1);
    std::thread::sleep(Duration::from_millis(PAUSES_MS[index]).min(left));
    true
}

/// Puts the database in WAL mode (a no-op once it is).
///
/// On a file that is not in WAL mode yet (a new one), the switch writes the
/// header under a lock it takes after reading: when another process reads or
/// switches at the same moment, SQLite answers busy at once rather than waiting
/// (waiting there could deadlock two switchers). So a busy switch is tried again,
/// for as long as the busy timeout, by when the other process has made it.
fn switch_to_wal(conn: &Connection, busy_timeout: std::time::Duration) -> Res<()> {
    let deadline = std::time::Instant::now() + busy_timeout;
    let mut pause = std::time::Duration::from_millis(1);
    let mode: String = loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
            Err(err)
                if matches!(
                    err.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            answer => break answer?,
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Fail(StoreError::Backend(format!("journal_mode is {mode}, not wal").into())));
    }
    Ok(())
}

fn backend(err: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Box::new(err))
}

/// Classifies an I/O error of the store's own file handling: a full disk or
/// quota is [`StoreError::StorageFull`].
fn io_error(err: std::io::Error) -> StoreError {
    match FullStorage::of_io(&err) {
        Some(full) => StoreError::StorageFull(full),
        None => backend(err),
    }
}

/// Classifies SQLite errors at the store boundary. `SQLITE_FULL` (a write
/// refused with `ENOSPC`, or the database at its page limit) is
/// [`StoreError::StorageFull`]; other I/O errors are looked at again by
/// [`settle_io`], which knows the file.
pub(crate) fn classify(err: rusqlite::Error) -> StoreError {
    // A row mapping that failed with the store's own error (see `cells::record`).
    let err = match err {
        rusqlite::Error::FromSqlConversionFailure(i, kind, inner) => match inner.downcast::<StoreError>() {
            Ok(store) => return *store,
            Err(inner) => rusqlite::Error::FromSqlConversionFailure(i, kind, inner),
        },
        other => other,
    };
    match err.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy,
        Some(ErrorCode::DiskFull) => StoreError::StorageFull(FullStorage::NoSpace),
        _ => StoreError::Backend(Box::new(err)),
    }
}

/// Turns an I/O error SQLite reported on the database at `db` (itself, or as the
/// reason a shared transaction failed) into [`StoreError::StorageFull`] when the
/// filesystem refuses new data right now: SQLite says only "disk I/O error" when
/// growing its shared-memory index or a sync ran out of space, or a quota ran out.
fn settle_io(err: StoreError, db: &Path) -> StoreError {
    if !is_io_failure(&err) {
        return err;
    }
    match space::exhausted(db) {
        Some(full) => StoreError::StorageFull(full),
        None => err,
    }
}

/// An error and its causes, on one line.
pub(crate) fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether SQLite reported `err` as an I/O error.
fn is_io_failure(err: &StoreError) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let sqlite_io = cause
            .downcast_ref::<rusqlite::Error>()
            .is_some_and(|e| e.sqlite_error_code() == Some(ErrorCode::SystemIoFailure));
        if sqlite_io || cause.downcast_ref::<writes::BatchNotCommitted>().is_some_and(|b| b.io) {
            return true;
        }
        source = cause.source();
    }
    false
}

agentmesh_store::backend_fail!();

impl From<rusqlite::Error> for Fail {
    fn from(err: rusqlite::Error) -> Fail {
        Fail(classify(err))
    }
}

impl SqliteStore {
    /// Imports the original's `*.pending-events.jsonl` inboxes from `dir` (an
    /// ADHDev ledger directory), as its one-time migration did.
    ///
    /// Each file is claimed by renaming it to `<file>.migrating` (a file that cannot
    /// be renamed is held by another process and skipped), read, and imported in
    /// one transaction; then it is deleted. Blank lines are ignored; a line that is
    /// not an event (bad JSON, no string `meshId` or `event`) is skipped, counted
    /// and logged. Each event is stored as it was written (no stamping), for the
    /// coordinator daemon it names, undrained, with `queuedAt` kept (`now` when it
    /// is not a number); an event whose fingerprint the mesh already holds is not
    /// stored twice, so importing the same events again stores nothing. A file
    /// that cannot be read, or whose import fails, changes nothing and is put back
    /// under its name for the next run. A `<file>.migrating` left behind by an
    /// interrupted run is imported too.
    ///
    /// One bad file never fails the call: it is counted as retained and logged.
    /// Only a directory that exists but cannot be listed is an error
    /// ([`StoreError::LegacyFile`]); a missing one imports nothing.
    pub fn import_legacy_pending_events(
        &self,
        dir: &Path,
        now: agentmesh_core::Timestamp,
    ) -> StoreResult<agentmesh_store::legacy::LegacyEventsReport> {
        inbox_upkeep::import_legacy_dir(self, dir, now)
    }

    /// Writes the events of `mesh_id` to `out` as JSONL, one event per line in its
    /// stored JSON shape, oldest first; drained events too when `include_drained`.
    /// Returns how many lines were written. The lines are what
    /// [`SqliteStore::import_legacy_pending_events`] reads back (as undrained
    /// events: the drained state is not part of an event). A row whose payload is
    /// not a JSON object is left out and logged.
    pub fn export_pending_events(
        &self,
        mesh_id: &str,
        include_drained: bool,
        out: &mut dyn std::io::Write,
    ) -> StoreResult<u64> {
        inbox_upkeep::export(self, mesh_id, include_drained, out)
    }
}

/// SQLite's query plan of `sql` with `args` bound, its steps joined by ` | `: what
/// the tests of the read paths assert on.
#[cfg(test)]
pub(crate) fn query_plan(conn: &Connection, sql: &str, args: &[rusqlite::types::Value]) -> String {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).expect("the statement prepares");
    let rows: Vec<String> = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), |r| r.get(3))
        .and_then(Iterator::collect)
        .expect("the plan reads");
    rows.join(" | ")
}

#[cfg(test)]
mod tests {
    use agentmesh_core::{NewTask, Timestamp};
    use agentmesh_store::prelude::*;

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_735_689_600_000);

    /// A task whose message is `bytes` long and does not compress much (payloads
    /// are stored deflated), so its size is the room it takes.
    fn task(id: &str, bytes: usize) -> NewTask {
        let message = agentmesh_test_support::incompressible(bytes, 7);
        NewTask { id: Some(id.to_owned()), message, ..NewTask::default() }
    }

    /// Caps the database at its present size plus `extra_pages`: SQLite then
    /// refuses growth with `SQLITE_FULL`, as it does when the disk is full.
    fn cap(store: &SqliteStore, extra_pages: i64) {
        store
            .writes
            .write(|c| {
                let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                c.pragma_update(None, "max_page_count", pages + extra_pages)?;
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_write_refused_for_space_is_storage_full_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("full.db")).unwrap();
        store.enqueue("m", &task("kept", 10), NOW).unwrap();
        cap(&store, 2);
        let err = store.enqueue("m", &task("big", 200_000), NOW).unwrap_err();
        assert!(matches!(err, StoreError::StorageFull(FullStorage::NoSpace)), "{err:?}");
        assert_eq!(err.code(), "storage_full");
        assert!(!err.is_caller_error());
        assert_eq!(store.find_task("m", "big").unwrap(), None, "nothing of the refused write is kept");
        assert!(store.find_task("m", "kept").unwrap().is_some());
        cap(&store, 1_000_000);
        store.enqueue("m", &task("big", 200_000), NOW).expect("writes go on once there is room");
    }

    #[test]
    fn the_write_connection_truncates_a_wal_that_starts_over_to_64_mib() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("limit.db")).unwrap();
        let limit: i64 =
            store.writes.write(|c| Ok(c.query_row("PRAGMA journal_size_limit", [], |r| r.get(0))?)).unwrap();
        assert_eq!(limit, 64 * 1024 * 1024);
    }

    /// The write connection reads through its page cache; the read connections
    /// map the file.
    #[test]
    fn only_the_read_connections_map_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("mmap.db")).unwrap();
        let mmap = |c: &Connection| c.query_row("PRAGMA mmap_size", [], |r| r.get::<_, i64>(0));
        assert_eq!(store.writes.write(|c| Ok(mmap(c)?)).unwrap(), 0);
        assert_eq!(store.writes.read(|c| Ok(mmap(c)?)).unwrap(), 268_435_456);
    }

    #[test]
    fn a_probe_write_commits_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("probe.db")).unwrap();
        let version = store.pragma("user_version").unwrap();
        let before = store.write_stats();
        store.probe_write().unwrap();
        assert_eq!(store.write_stats().commits, before.commits + 1, "it is a committed write");
        assert_eq!(store.pragma("user_version").unwrap(), version);
        cap(&store, 0);
        store.probe_write().expect("a full database still takes a write that adds no page");
    }
}
