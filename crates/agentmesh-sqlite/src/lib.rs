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
//! Every write runs in a `BEGIN IMMEDIATE` transaction on one connection, so the
//! write lock is taken up front and a lock upgrade can never fail halfway. Several
//! processes may open the same file; SQLite's file locks and the busy timeout
//! serialize their writers.
//!
//! # Group commit
//!
//! A COMMIT costs more than most operations (it appends the transaction's pages to
//! the WAL), so writers that arrive together share one. Each writer runs its own
//! operation, on its own thread, while it holds the connection lock:
//!
//! 1. It announces itself (`writers_waiting`), takes the lock, and withdraws the
//!    announcement. If no transaction is open it begins one (`BEGIN IMMEDIATE`) and
//!    so opens a *batch*; otherwise it joins the open batch.
//! 2. It runs its operation: the one that opened the batch directly, a joiner inside
//!    `SAVEPOINT op`. A failed (or panicking) operation is undone alone (the whole
//!    transaction when it opened it, `ROLLBACK TO op` when it joined), so it leaves
//!    nothing and its batch-mates are unaffected.
//! 3. If other writers have announced themselves and the batch is still small
//!    (under `MAX_BATCH_WRITES` writes and `MAX_BATCH_AGE` old), it leaves the
//!    transaction open for them, releases the connection, and waits for its batch
//!    to close (on `Closings`, which has a lock of its own, so a writer learning
//!    that its batch committed never queues behind the next batch's writers).
//!    Otherwise it commits and wakes the batch.
//!
//! **Invariant:** a write returns only once the batch it ran in is closed: committed
//! (the caller gets its operation's own result) or failed (every caller in it gets
//! the error, whatever its operation returned). So when a write returns `Ok`, its
//! change is committed exactly as durably as a transaction of its own would be. An
//! answer computed from another writer's uncommitted change (a refused claim, say)
//! is never handed out unless that change committed too.
//!
//! **Invariant:** a read never sees uncommitted changes: a reader that finds a batch
//! open commits it before it reads.
//!
//! **Invariant:** a batch is open only while one of its writers holds the lock or
//! some announced writer is still to take it, so every batch is closed by one of
//! them (or by a reader) and nobody waits forever. An uncontended writer finds no
//! one announced and commits at once: it pays no wait and no savepoint.
//!
//! Other processes sharing the file see a batch as one transaction. It holds
//! SQLite's write lock for at most about `MAX_BATCH_AGE` plus one operation, far
//! within their busy timeout.

use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agentmesh_store::{StoreError, StoreResult};
use rusqlite::{Connection, ErrorCode};

mod adhdev_import;
mod inbox;
mod inbox_upkeep;
mod ledger;
mod migrations;
mod missions;
mod overview;
mod paths;
mod runtime;
mod store_impl;
mod tasks;

pub use adhdev_import::{OriginalDbReport, TableImport};
pub use migrations::LATEST_VERSION as SCHEMA_VERSION;
pub use paths::{DB_FILE_NAME, LEGACY_DB_FILE_NAME, resolve_db_path};

/// Writes between two checks of the WAL file's size.
const WAL_CHECK_INTERVAL: u32 = 500;
/// A WAL file larger than this is checkpointed and truncated.
const WAL_MAX_BYTES: u64 = 50 * 1024 * 1024;
/// How long a writer waits for another process's lock before giving up.
const BUSY_TIMEOUT_MS: u32 = 5_000;
/// A batch with this many writes is committed even when more writers wait.
const MAX_BATCH_WRITES: u32 = 32;
/// A batch open this long is committed by its next writer even when more wait, so a
/// stream of writers cannot hold the first one's answer (or another process's
/// writers) back for long.
const MAX_BATCH_AGE: Duration = Duration::from_millis(2);

/// A mesh runtime store on one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    /// The one connection and the write batch open on it. A `std` mutex: every
    /// critical section is a short, synchronous SQLite call, never held across an
    /// await.
    db: Mutex<Db>,
    /// Where the writers of a batch wait for it to close (shared with `db`, which
    /// announces the closings).
    closings: Arc<Closings>,
    /// Writers that are about to take the `db` lock. Incremented before locking and
    /// decremented once the lock is held, so a writer holding the lock that reads a
    /// non-zero count knows another writer will take the lock after it, and may
    /// leave its transaction open for that writer to join.
    writers_waiting: AtomicU32,
    /// Whether writers may share a commit (see the module docs); when off, every
    /// write commits on its own.
    group_commit: AtomicBool,
    /// `MAX_BATCH_AGE`, except in tests that hold a batch open on purpose and so
    /// must not depend on how fast the machine is.
    max_batch_age: Duration,
    /// Where legacy `<mesh>.queue.json` files are looked for, when opened on a
    /// directory.
    legacy_dir: Option<PathBuf>,
    /// Meshes whose legacy queue file was already considered, with the outcome.
    legacy_checked: Mutex<HashMap<String, LegacyQueueState>>,
    writes_since_wal_check: AtomicU32,
    /// Tool calls recorded, for the rate guard's periodic sweep.
    tool_calls: AtomicU64,
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
        Self::open_inner(path.as_ref(), None)
    }

    /// Opens the store of a data directory (created when missing): its
    /// `mesh-runtime.db`, or a legacy `beads.db` renamed to it. Legacy
    /// `<mesh>.queue.json` files in the directory are imported once per mesh, on the
    /// first operation on a mesh that has no tasks.
    pub fn open_data_dir(dir: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(backend)?;
        let path = resolve_db_path(dir, |from, to| std::fs::rename(from, to));
        Self::open_inner(&path, Some(dir.to_owned()))
    }

    fn open_inner(path: &Path, legacy_dir: Option<PathBuf>) -> StoreResult<SqliteStore> {
        Self::open_res(path, legacy_dir).map_err(|e| e.0)
    }

    fn open_res(path: &Path, legacy_dir: Option<PathBuf>) -> Res<SqliteStore> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(backend)?;
        }
        let mut conn = Connection::open(path)?;
        configure(&conn)?;
        migrations::migrate(&mut conn)?;
        let closings = Arc::new(Closings::default());
        Ok(SqliteStore {
            path: path.to_owned(),
            db: Mutex::new(Db::new(conn, Arc::clone(&closings))),
            closings,
            writers_waiting: AtomicU32::new(0),
            group_commit: AtomicBool::new(true),
            max_batch_age: MAX_BATCH_AGE,
            legacy_dir,
            legacy_checked: Mutex::new(HashMap::new()),
            writes_since_wal_check: AtomicU32::new(0),
            tool_calls: AtomicU64::new(0),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
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

    /// A connection to the database file at `path` with the store's pragmas and no
    /// schema: for measuring what SQLite itself costs on a machine (the
    /// benchmark's floor cases), never for storing mesh data.
    pub fn open_bare_connection(path: &Path) -> StoreResult<Connection> {
        let conn = Connection::open(path).map_err(classify)?;
        configure(&conn).map_err(|Fail(err)| err)?;
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

    fn lock(&self) -> MutexGuard<'_, Db> {
        // Operations run under `catch_unwind` and a panicking one is settled before
        // the lock is released, so only a panic in the bookkeeping below can poison
        // it; `Db::begin` and `Db::settle_for_read` undo a transaction such a panic
        // left behind, so a poisoned lock is safe to reuse.
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns group commit on (the default) or off. With it off every write commits
    /// on its own as soon as its operation returns.
    pub fn set_group_commit(&self, enabled: bool) {
        self.group_commit.store(enabled, Ordering::Relaxed);
    }

    /// How many writes this store committed, and in how many COMMITs.
    pub fn write_stats(&self) -> WriteStats {
        self.lock().stats
    }

    /// Runs `f` in an immediate transaction, possibly shared with other writers
    /// (see "Group commit" in the module docs), and returns once that transaction
    /// is committed (with `f`'s result) or has failed (with the failure).
    fn write<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> StoreResult<T> {
        self.write_inner(f).map_err(|e| e.0)
    }

    fn write_inner<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> Res<T> {
        self.writers_waiting.fetch_add(1, Ordering::SeqCst);
        let mut db = self.lock();
        self.writers_waiting.fetch_sub(1, Ordering::SeqCst);

        let opened = db.batch.is_none();
        if opened {
            // Nothing is open, so a failure to begin concerns this write alone.
            db.begin()?;
        }
        // The operation, under a savepoint when it joins a batch. A panic is caught
        // so that the batch is settled before the panic goes on.
        let savepoint = if opened { Ok(()) } else { db.exec("SAVEPOINT op") };
        let (mut result, panicked) = match savepoint {
            Ok(()) => {
                let (result, panicked) = match panic::catch_unwind(AssertUnwindSafe(|| f(&db.conn))) {
                    Ok(result) => (result, None),
                    Err(payload) => {
                        (Err(Fail(StoreError::Backend("the write operation panicked".into()))), Some(payload))
                    }
                };
                let ended = db.end_op(opened, result.as_ref().map(|_| ()).map_err(|e| &e.0));
                (ended.and(result), panicked)
            }
            // There is no savepoint: the operation did not run and left nothing.
            Err(err) => (Err(err), None),
        };

        if db.batch.is_some() {
            let batch = db.batch.as_mut().expect("checked just above");
            batch.writes += 1;
            if result.is_ok() {
                batch.succeeded += 1;
            }
            let keep_open = panicked.is_none()
                && self.group_commit.load(Ordering::Relaxed)
                && batch.writes < MAX_BATCH_WRITES
                && self.writers_waiting.load(Ordering::SeqCst) > 0
                && batch.opened_at.elapsed() < self.max_batch_age;
            if keep_open {
                // A writer has announced itself and will take the lock after this
                // one: leave the transaction open for it, and return once the
                // batch is closed by whoever commits it. The wait is not on the
                // connection's lock, so learning the outcome does not queue behind
                // the next batch.
                batch.waiting += 1;
                let id = db.open_batch;
                drop(db);
                if let Some(err) = self.closings.wait_for(id) {
                    result = Err(Fail(err));
                }
            } else {
                result = db.commit().and(result);
                drop(db);
            }
        } else {
            drop(db);
        }
        if let Some(payload) = panicked {
            panic::resume_unwind(payload);
        }
        if result.is_ok() {
            self.after_write();
        }
        result
    }

    /// Runs `f` on the connection outside any write transaction. A batch still open
    /// is committed first, so `f` sees only committed data.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Res<T>) -> StoreResult<T> {
        let mut db = self.lock();
        db.settle_for_read();
        f(&db.conn).map_err(|e| e.0)
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
        if !file.exists() {
            return LegacyQueueState::NotNeeded;
        }
        let result = std::fs::read_to_string(&file)
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

    /// Every few hundred writes, truncates a WAL that grew past 50 MB.
    fn after_write(&self) {
        if self.writes_since_wal_check.fetch_add(1, Ordering::Relaxed) + 1 < WAL_CHECK_INTERVAL {
            return;
        }
        self.writes_since_wal_check.store(0, Ordering::Relaxed);
        let _ = self.checkpoint_if_wal_exceeds(WAL_MAX_BYTES);
    }

    /// Checkpoints and truncates the WAL when it is larger than `max_bytes`; returns
    /// whether it did.
    pub fn checkpoint_if_wal_exceeds(&self, max_bytes: u64) -> StoreResult<bool> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        if size <= max_bytes {
            return Ok(false);
        }
        tracing::info!(wal_bytes = size, "WAL past its threshold; checkpointing");
        self.read(|conn| Ok(conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?))?;
        Ok(true)
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

/// The connection and the write batch open on it: what the store's mutex guards.
struct Db {
    conn: Connection,
    /// The batch whose transaction is open on `conn`; `None` outside a transaction.
    batch: Option<Batch>,
    /// The number of the open batch, or of the last one. Batches are numbered in
    /// the order they open, and only one is open at a time.
    open_batch: u64,
    /// Where closed batches are announced.
    closings: Arc<Closings>,
    stats: WriteStats,
}

/// One shared write transaction.
struct Batch {
    opened_at: Instant,
    /// Operations that ran in it, successful or not.
    writes: u32,
    /// Operations that succeeded: their changes commit with the batch.
    succeeded: u32,
    /// Writers waiting (in `Closings::wait_for`) for it to close.
    waiting: u32,
}

impl Db {
    fn new(conn: Connection, closings: Arc<Closings>) -> Db {
        Db { conn, batch: None, open_batch: 0, closings, stats: WriteStats::default() }
    }

    /// Runs one statement through the statement cache: `Transaction` would parse
    /// BEGIN and COMMIT again for every write.
    fn exec(&self, sql: &str) -> Res<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Opens a batch: `BEGIN IMMEDIATE`.
    fn begin(&mut self) -> Res<()> {
        if !self.conn.is_autocommit() {
            // A transaction no batch owns: a panic in this bookkeeping left it. Undo it.
            self.conn.execute_batch("ROLLBACK")?;
        }
        self.exec("BEGIN IMMEDIATE")?;
        self.open_batch += 1;
        self.batch = Some(Batch { opened_at: Instant::now(), writes: 0, succeeded: 0, waiting: 0 });
        Ok(())
    }

    /// Ends the operation that just ran in the open batch with `outcome`: keeps what
    /// a successful one wrote, and undoes a failed one alone (back to its savepoint,
    /// or the whole transaction when it opened the batch and so is alone in it).
    /// When that is impossible, or SQLite has rolled the whole transaction back
    /// already (some errors do), the batch fails. Returns the error when the batch
    /// failed although the operation succeeded.
    fn end_op(&mut self, opened: bool, outcome: Result<(), &StoreError>) -> Res<()> {
        if self.conn.is_autocommit() {
            let failure = match outcome {
                Err(cause) => BatchFailure::of(cause),
                Ok(()) => {
                    BatchFailure { busy: false, message: String::from("the transaction was rolled back") }
                }
            };
            let err = Fail(failure.error());
            self.fail(failure);
            return if outcome.is_ok() { Err(err) } else { Ok(()) };
        }
        let ended = match (opened, outcome) {
            (true, Ok(())) => Ok(()),
            (true, Err(cause)) => {
                self.fail(BatchFailure::of(cause));
                return Ok(());
            }
            (false, Ok(())) => self.exec("RELEASE op"),
            (false, Err(_)) => self.exec("ROLLBACK TO op").and_then(|()| self.exec("RELEASE op")),
        };
        ended.inspect_err(|err| self.fail(BatchFailure::of(&err.0)))
    }

    /// Commits the open batch and closes it; if the COMMIT fails, rolls it back and
    /// closes it as failed. Returns the COMMIT's result.
    fn commit(&mut self) -> Res<()> {
        match self.exec("COMMIT") {
            Ok(()) => {
                let batch = self.close(None);
                self.stats.commits += 1;
                self.stats.writes += u64::from(batch.succeeded);
                Ok(())
            }
            Err(err) => {
                self.fail(BatchFailure::of(&err.0));
                Err(err)
            }
        }
    }

    /// Rolls the open batch back (unless SQLite already did) and closes it as failed.
    fn fail(&mut self, failure: BatchFailure) {
        if !self.conn.is_autocommit()
            && let Err(err) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::error!(%err, "rollback failed");
        }
        self.close(Some(failure));
    }

    /// Closes the open batch and announces it (with its failure, if it failed) to
    /// the writers waiting for it.
    fn close(&mut self, failure: Option<BatchFailure>) -> Batch {
        let batch = self.batch.take().expect("a batch is open");
        self.closings.announce(self.open_batch, failure, batch.waiting);
        batch
    }

    /// Before a read: commits an open batch, so the read sees only committed data.
    /// Its writers are waiting for exactly that; a failed COMMIT is theirs to report.
    fn settle_for_read(&mut self) {
        if self.batch.is_some() {
            let _ = self.commit();
        } else if !self.conn.is_autocommit() {
            // A transaction no batch owns: a panic in this bookkeeping left it. Undo it.
            if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                tracing::error!(%err, "rollback failed");
            }
        }
    }
}

/// Where closed batches are announced to the writers waiting for them. It has its
/// own lock, so a writer learns its batch's outcome without queueing again for the
/// connection (behind the writers of the next batch). Lock order: the connection's
/// lock, then this one; a waiting writer holds only this one.
#[derive(Default)]
struct Closings {
    state: Mutex<Closed>,
    /// Notified when a batch that writers wait for closes.
    closed: Condvar,
}

#[derive(Default)]
struct Closed {
    /// Every batch numbered up to this one is closed (batches close in the order
    /// they open).
    through: u64,
    /// Why a failed batch failed, with how many of its waiting writers have yet to
    /// learn it, by batch number. Empty unless a COMMIT (or a whole batch) failed.
    failures: HashMap<u64, (BatchFailure, u32)>,
}

impl Closings {
    fn lock(&self) -> MutexGuard<'_, Closed> {
        // Nothing panics while holding it; and its state is valid after any step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Batch `id` closed; `waiting` writers wait for it.
    fn announce(&self, id: u64, failure: Option<BatchFailure>, waiting: u32) {
        let mut closed = self.lock();
        closed.through = id;
        if waiting == 0 {
            // Nobody to tell, and a notification costs a system call even then.
            return;
        }
        if let Some(failure) = failure {
            closed.failures.insert(id, (failure, waiting));
        }
        drop(closed);
        self.closed.notify_all();
    }

    /// Waits until batch `id` is closed; returns the error of this writer if it
    /// failed.
    fn wait_for(&self, id: u64) -> Option<StoreError> {
        let closed = self.lock();
        let mut closed =
            self.closed.wait_while(closed, |c| c.through < id).unwrap_or_else(|e| e.into_inner());
        let (failure, untold) = closed.failures.get_mut(&id)?;
        let err = failure.error();
        *untold -= 1;
        if *untold == 0 {
            closed.failures.remove(&id);
        }
        Some(err)
    }
}

/// Why a batch failed, kept for those of its writers that have not learnt it yet.
#[derive(Debug, Clone)]
struct BatchFailure {
    /// The cause was a busy or locked database, which callers may retry.
    busy: bool,
    /// The cause and its sources.
    message: String,
}

impl BatchFailure {
    fn of(cause: &StoreError) -> BatchFailure {
        let mut message = cause.to_string();
        let mut source = std::error::Error::source(cause);
        while let Some(err) = source {
            message.push_str(": ");
            message.push_str(&err.to_string());
            source = err.source();
        }
        BatchFailure { busy: matches!(cause, StoreError::Busy), message }
    }

    fn error(&self) -> StoreError {
        if self.busy {
            StoreError::Busy
        } else {
            StoreError::Backend(Box::new(BatchNotCommitted(self.message.clone())))
        }
    }
}

/// What a writer gets when the transaction it shared was not committed, because of
/// another write in it or of the COMMIT itself.
#[derive(Debug, thiserror::Error)]
#[error("the transaction this write ran in was not committed: {0}")]
struct BatchNotCommitted(String);

/// Sets the connection's pragmas. The settings are read back by tests, because
/// SQLite silently ignores a misspelled pragma.
fn configure(conn: &Connection) -> Res<()> {
    conn.busy_timeout(std::time::Duration::from_millis(u64::from(BUSY_TIMEOUT_MS)))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Fail(StoreError::Backend(format!("journal_mode is {mode}, not wal").into())));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Performance, not durability: a page cache that holds the hot index pages
    // across transactions, memory-mapped reads, and a WAL that is checkpointed
    // every ~40 MB instead of every 4 MB, so a page rewritten by many small commits
    // is copied back to the database once per checkpoint. (A background checkpoint
    // thread was measured too: on two cores it slowed the writer more than it
    // saved.)
    //
    // The cache is kept small (8 MiB, 2,048 pages) on purpose. When a b-tree page
    // splits, SQLite parks a page under a scratch number past the end of the file,
    // and the COMMIT then walks the whole page cache to drop pages beyond the end:
    // with 64 MiB that walk (16k pages, one cache miss each) took about 0.5 ms and
    // followed roughly one commit in ten, under the connection lock. Pages that are
    // not in the WAL are read through the memory map and never enter this cache, so
    // the smaller cache costs almost no extra reads (measured: +2% `pread` calls
    // under the HTTP claim/complete load).
    conn.pragma_update(None, "cache_size", -8_192)?;
    conn.pragma_update(None, "mmap_size", 268_435_456)?;
    conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

fn backend(err: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Box::new(err))
}

/// Classifies SQLite errors at the store boundary.
pub(crate) fn classify(err: rusqlite::Error) -> StoreError {
    match err.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy,
        _ => StoreError::Backend(Box::new(err)),
    }
}

/// The crate's internal error: a [`StoreError`] that `?` can build from SQLite and
/// core errors alike (the orphan rule forbids `From<rusqlite::Error>` for
/// `StoreError` here). Public methods unwrap it.
#[derive(Debug)]
pub(crate) struct Fail(pub(crate) StoreError);

/// Result of internal operations.
pub(crate) type Res<T> = Result<T, Fail>;

impl From<rusqlite::Error> for Fail {
    fn from(err: rusqlite::Error) -> Fail {
        Fail(classify(err))
    }
}

impl From<StoreError> for Fail {
    fn from(err: StoreError) -> Fail {
        Fail(err)
    }
}

impl From<agentmesh_core::InvalidInput> for Fail {
    fn from(err: agentmesh_core::InvalidInput) -> Fail {
        Fail(StoreError::InvalidInput(err))
    }
}

impl From<agentmesh_core::InvalidTransition> for Fail {
    fn from(err: agentmesh_core::InvalidTransition) -> Fail {
        Fail(StoreError::InvalidTransition(err))
    }
}

impl From<serde_json::Error> for Fail {
    fn from(err: serde_json::Error) -> Fail {
        Fail(StoreError::Corrupt { what: String::from("JSON value"), problem: err.to_string() })
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

#[cfg(test)]
mod tests {
    //! The group-commit protocol, step by step. Each test holds a batch open on
    //! purpose (an operation that returns only once another writer has announced
    //! itself), so which writes share a batch is decided by the test, never by
    //! timing; `max_batch_age` is lifted for the same reason.

    use std::sync::mpsc;
    use std::thread;

    use super::*;

    /// A store on a temp file with a `notes` table.
    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path().join(DB_FILE_NAME)).unwrap();
        store.max_batch_age = Duration::from_secs(24 * 3600);
        store.write(|c| Ok(c.execute_batch("CREATE TABLE notes (note TEXT PRIMARY KEY)")?)).unwrap();
        (dir, store)
    }

    fn note(c: &Connection, note: &str) -> Res<()> {
        c.execute("INSERT INTO notes (note) VALUES (?1)", [note])?;
        Ok(())
    }

    fn count_notes(c: &Connection) -> Res<i64> {
        Ok(c.query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?)
    }

    /// Returns once a writer has announced itself, so that the writer of the
    /// operation calling this leaves its batch open for that one.
    fn until_a_writer_waits(store: &SqliteStore) {
        while store.writers_waiting.load(Ordering::SeqCst) == 0 {
            thread::yield_now();
        }
    }

    /// Spawns a writer that notes `a` and then holds its batch open until another
    /// writer announces itself; returns once `a` is noted.
    fn open_batch_with_a<'scope>(
        s: &'scope thread::Scope<'scope, '_>,
        store: &'scope SqliteStore,
    ) -> thread::ScopedJoinHandle<'scope, StoreResult<()>> {
        let (running, ran) = mpsc::channel();
        let a = s.spawn(move || {
            store.write(|c| {
                note(c, "a")?;
                running.send(()).unwrap();
                until_a_writer_waits(store);
                Ok(())
            })
        });
        ran.recv().unwrap();
        a
    }

    /// The committed notes, read through a connection of their own.
    fn committed_notes(store: &SqliteStore) -> Vec<String> {
        let conn = Connection::open(store.path()).unwrap();
        let mut stmt = conn.prepare("SELECT note FROM notes ORDER BY note").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn an_uncontended_writer_commits_every_write_on_its_own() {
        let (_dir, store) = store();
        for n in ["a", "b", "c"] {
            store.write(|c| note(c, n)).unwrap();
            assert!(committed_notes(&store).contains(&n.to_owned()), "{n} is committed when write returns");
        }
        assert_eq!(store.write_stats(), WriteStats { writes: 4, commits: 4 });
    }

    #[test]
    fn a_failed_write_inside_a_shared_batch_leaves_nothing_and_its_batch_mates_commit() {
        let (_dir, store) = store();
        let (b_running, b_ran) = mpsc::channel();
        let (b_saw, b_seen) = mpsc::channel();
        thread::scope(|s| {
            let a = open_batch_with_a(s, &store);
            let b = s.spawn(|| {
                store.write(|c| {
                    note(c, "b")?;
                    b_saw.send(count_notes(c)?).unwrap();
                    b_running.send(()).unwrap();
                    until_a_writer_waits(&store);
                    note(c, "b") // A duplicate: the operation fails.
                })
            });
            b_ran.recv().unwrap();
            let c = s.spawn(|| store.write(|c| note(c, "c")));
            assert!(a.join().unwrap().is_ok());
            assert!(matches!(b.join().unwrap(), Err(StoreError::Backend(_))), "b's duplicate fails b");
            assert!(c.join().unwrap().is_ok());
        });
        assert_eq!(b_seen.recv().unwrap(), 2, "b ran in a's transaction and saw a's note beside its own");
        assert_eq!(committed_notes(&store), ["a", "c"]);
        assert_eq!(store.write_stats(), WriteStats { writes: 3, commits: 2 }, "a and c shared one commit");
    }

    #[test]
    fn a_read_commits_the_open_batch_before_it_reads() {
        let (_dir, store) = store();
        thread::scope(|s| {
            let a = open_batch_with_a(s, &store);
            // Stand in for a writer about to take the lock, so that a's writer leaves
            // its batch open and waits.
            store.writers_waiting.fetch_add(1, Ordering::SeqCst);
            {
                let db = store.lock();
                assert!(db.batch.is_some(), "a's writer left its batch open");
                assert!(committed_notes(&store).is_empty(), "a's note is not committed yet");
            }
            assert_eq!(store.read(count_notes).unwrap(), 1);
            assert_eq!(committed_notes(&store), ["a"], "what the read saw was committed");
            store.writers_waiting.fetch_sub(1, Ordering::SeqCst);
            assert!(a.join().unwrap().is_ok(), "a returns once the read committed its batch");
        });
        assert_eq!(store.write_stats(), WriteStats { writes: 2, commits: 2 });
    }

    #[test]
    fn a_panicking_write_is_undone_alone_and_leaves_no_batch_hanging() {
        let (_dir, store) = store();
        thread::scope(|s| {
            let a = open_batch_with_a(s, &store);
            let b = s.spawn(|| {
                store.write(|c| -> Res<()> {
                    note(c, "b")?;
                    panic!("b's operation panics inside a's batch");
                })
            });
            assert!(b.join().is_err(), "the panic reaches b's caller");
            assert!(a.join().unwrap().is_ok(), "b's writer committed a's batch before unwinding");
        });
        assert_eq!(committed_notes(&store), ["a"]);

        // A panic in the operation that opened its batch undoes the whole transaction.
        let alone = panic::catch_unwind(AssertUnwindSafe(|| {
            store.write(|c| -> Res<()> {
                note(c, "d")?;
                panic!("d's operation panics alone");
            })
        }));
        assert!(alone.is_err());
        assert!(!store.db.is_poisoned(), "a panicking operation does not poison the connection's lock");
        store.write(|c| note(c, "e")).unwrap();
        assert_eq!(committed_notes(&store), ["a", "e"]);
    }

    #[test]
    fn a_failed_commit_fails_every_write_of_its_batch() {
        let (_dir, store) = store();
        store
            .write(|c| {
                Ok(c.execute_batch(
                    "CREATE TABLE parents (id INTEGER PRIMARY KEY);
                     CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);",
                )?)
            })
            .unwrap();
        let (a_result, b_result) = thread::scope(|s| {
            let a = open_batch_with_a(s, &store);
            // A deferred foreign key is checked by COMMIT, so b's operation succeeds
            // and the COMMIT of the batch fails.
            let b =
                s.spawn(|| store.write(|c| Ok(c.execute("INSERT INTO children (parent) VALUES (42)", [])?)));
            (a.join().unwrap(), b.join().unwrap())
        });
        let a_err = a_result.expect_err("a's write shared the failed commit");
        assert!(b_result.is_err(), "the COMMIT b ran failed");
        let message = std::error::Error::source(&a_err).map(ToString::to_string).unwrap_or_default();
        assert!(message.contains("not committed") && message.contains("FOREIGN KEY"), "{message}");
        assert!(committed_notes(&store).is_empty());
        store.write(|c| note(c, "after")).unwrap();
        assert_eq!(committed_notes(&store), ["after"]);
    }

    #[test]
    fn with_group_commit_off_a_waiting_writer_does_not_hold_the_batch_open() {
        let (_dir, store) = store();
        store.set_group_commit(false);
        thread::scope(|s| {
            let a = open_batch_with_a(s, &store);
            let b = s.spawn(|| store.write(|c| note(c, "b")));
            assert!(a.join().unwrap().is_ok());
            assert!(b.join().unwrap().is_ok());
        });
        assert_eq!(committed_notes(&store), ["a", "b"]);
        assert_eq!(store.write_stats(), WriteStats { writes: 3, commits: 3 });
    }
}
