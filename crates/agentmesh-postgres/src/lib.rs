//! The PostgreSQL backend of agentmesh: the [`Store`] on a server database that
//! several daemons share.
//!
//! [`PgStore::open`] connects to a database URL, creates the installation's
//! schema when it is missing and migrates it (several daemons may start at once:
//! the migration runs under a session advisory lock). Every statement runs in
//! that schema, so one database can hold several installations.
//!
//! How the isolation contract of [`Store`] holds here: each write locks what
//! its rule needs and nothing more (see `locks`): the task rows it changes,
//! the claimant's session and node for a claim, the dependency graph for an
//! enqueue with dependencies, the inbox for a drain. Writes that need none of
//! the same locks run at once, in one mesh as across meshes; PostgreSQL's own
//! group commit shares a WAL flush between them. Reads take no lock.
//! `locks` gives the locks of each operation.
//!
//! The trait is synchronous. Each pooled connection (`tokio-postgres`) is driven
//! from the calling thread by a runtime of its own, so that an operation can
//! send several statements in one round trip (see `db`). The daemon calls the
//! store from blocking threads, as it does for the embedded file.

use std::sync::Arc;
use std::time::Duration;

use agentmesh_store::{Durability, FullStorage, Store, StoreError, StoreResult};

mod archive;
mod cluster;
mod columns;
mod db;
mod inbox;
mod ledger;
mod locks;
mod migrations;
mod missions;
mod overview;
mod payload;
mod pool;
mod reservations;
mod runtime;
pub mod shard;
mod tasks;
#[cfg(test)]
mod testing;
mod transfer;
mod webhooks;

pub use cluster::{LEADER_LEASE, Listener, UpkeepLeader, database_now};
pub use migrations::LATEST_VERSION as SCHEMA_VERSION;
pub use transfer::{installation_exists, same_installation};

pub(crate) use db::Db;
pub(crate) use locks::Lock;
use pool::{Pool, Target};

/// The schema a store uses when none is given.
pub const DEFAULT_SCHEMA: &str = "agentmesh";

/// The connections a store opens at most, when not told otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// How to reach an installation.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// `postgres://user@host:port/database` (or key=value form).
    pub url: String,
    /// The schema that holds the installation's tables; created when missing.
    pub schema: String,
    /// The connections the store opens at most.
    pub max_connections: usize,
    /// What the server gives up on, set on every pooled connection.
    pub timeouts: ServerTimeouts,
}

/// The server's side of a request's deadline, set on each pooled connection
/// (`lock_timeout`, `statement_timeout`, `idle_in_transaction_session_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerTimeouts {
    /// How long a statement waits for a lock before it fails `lock_timeout`:
    /// shorter than the request's deadline, so the answer names the lock.
    pub lock: Duration,
    /// How long one statement may run.
    pub statement: Duration,
    /// How long a transaction may sit idle between its statements before the
    /// server ends its session and gives its locks back: a client whose link
    /// died mid-transaction holds them no longer.
    pub idle_in_transaction: Duration,
}

/// The request deadline the defaults of [`ServerTimeouts`] follow.
pub use agentmesh_store::deadline::DEFAULT_REQUEST_TIMEOUT;

impl ServerTimeouts {
    /// The timeouts for requests of `request_timeout`: a lock wait gives up at
    /// four fifths of it; a statement after 60 s; an idle transaction after 15 s.
    pub fn for_requests_of(request_timeout: Duration) -> ServerTimeouts {
        ServerTimeouts {
            lock: (request_timeout * 4 / 5).max(Duration::from_millis(1)),
            statement: Duration::from_secs(60),
            idle_in_transaction: Duration::from_secs(15),
        }
    }
}

impl Default for ServerTimeouts {
    fn default() -> ServerTimeouts {
        ServerTimeouts::for_requests_of(DEFAULT_REQUEST_TIMEOUT)
    }
}

impl PgOptions {
    /// The defaults for `url`: schema [`DEFAULT_SCHEMA`], [`DEFAULT_MAX_CONNECTIONS`],
    /// [`ServerTimeouts::default`].
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            timeouts: ServerTimeouts::default(),
        }
    }

    /// The same, with the server's timeouts following requests of `timeout`
    /// ([`ServerTimeouts::for_requests_of`]).
    pub fn request_timeout(mut self, timeout: Duration) -> PgOptions {
        self.timeouts = ServerTimeouts::for_requests_of(timeout);
        self
    }

    /// The same, in `schema`.
    pub fn schema(mut self, schema: impl Into<String>) -> PgOptions {
        self.schema = schema.into();
        self
    }
}

/// A mesh runtime store on a PostgreSQL database.
pub struct PgStore {
    pool: Arc<Pool>,
    schema: String,
    /// Announces this store's commits to every listener (see `cluster`).
    announcer: cluster::Announcer,
    /// Where the database is, without credentials, for messages.
    location: String,
    /// Tool calls recorded through this handle, for the rate guard's periodic sweep.
    tool_calls: std::sync::atomic::AtomicU64,
    /// The threads that run the submitted writes (`submit_*`), one per pooled
    /// connection: a write in flight never starts a thread of its own.
    workers: agentmesh_store::submit::Workers,
    /// What an acknowledged write survives, as the server is set.
    durability: Durability,
    /// The tasks this store claimed, until their completion (see `tasks`).
    claims: tasks::Claims,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("location", &self.location).field("schema", &self.schema).finish()
    }
}

/// Whether `url` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_database_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

impl PgStore {
    /// Connects to the installation `options` names, creating and migrating its
    /// schema as needed.
    pub fn open(options: &PgOptions) -> StoreResult<PgStore> {
        let config = pool::with_link_timeouts(parse_url(&options.url)?);
        validate_schema(&options.schema).map_err(StoreError::InvalidInput)?;
        let location = describe(&config);
        let target =
            Target { config, quoted_schema: quote_ident(&options.schema), timeouts: options.timeouts };
        let pool = Arc::new(Pool::new(target, options.max_connections));
        let channel = cluster::channel(&options.schema);
        let mut store = PgStore {
            announcer: cluster::Announcer::start(Arc::clone(&pool), channel),
            pool,
            schema: options.schema.clone(),
            location,
            tool_calls: std::sync::atomic::AtomicU64::new(0),
            workers: agentmesh_store::submit::Workers::new("agentmesh-pg-write", options.max_connections),
            durability: Durability::Full,
            claims: tasks::Claims::default(),
        };
        store.migrate().map_err(|Fail(e)| e)?;
        let relaxed = store.read(|db| {
            let row = db.query_one(
                "SELECT /* all meshes */ current_setting('synchronous_commit') = 'off'
                     OR current_setting('fsync') = 'off'",
                &[],
            )?;
            Ok(row.get::<_, bool>(0))
        })?;
        store.durability = if relaxed { Durability::ProcessCrashOnly } else { Durability::Full };
        Ok(store)
    }

    /// What an acknowledged write survives, as the server's `synchronous_commit`
    /// and `fsync` say (read on opening): `off` loses the last commits when the
    /// server crashes or loses power.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The schema this store runs in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Where the database is (host, port, database; never a password).
    pub fn location(&self) -> &str {
        &self.location
    }

    fn migrate(&self) -> Res<()> {
        let mut conn = self.pool.target().session()?;
        migrations::migrate(&mut conn, &self.schema)
    }

    /// Runs `op` with each statement committing by itself: for reads of one
    /// statement, which see one committed state anyway.
    pub(crate) fn read<T>(&self, op: impl FnOnce(&Db<'_>) -> Res<T>) -> StoreResult<T> {
        let mut conn = self.pool.get().map_err(|Fail(e)| e)?;
        let db = Db::new(&mut conn, &self.schema);
        op(&db).map_err(|Fail(e)| e)
    }

    /// Runs `op` in a read-only transaction that sees one snapshot: for reads of
    /// several statements that must agree.
    pub(crate) fn snapshot<T>(&self, op: impl FnOnce(&Db<'_>) -> Res<T>) -> StoreResult<T> {
        self.transaction(String::from("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"), None, op)
    }

    /// Runs `op` in a read-write transaction holding the advisory lock of
    /// `mesh_id` ([`Lock::Mesh`]): all of its effect commits, or none. For the
    /// runtime records, missions and the administrative writes.
    pub(crate) fn write<T>(&self, mesh_id: &str, op: impl FnOnce(&Db<'_>) -> Res<T>) -> StoreResult<T> {
        self.write_with(mesh_id, &[Lock::Mesh], op)
    }

    /// Runs `op` in a read-write transaction holding every lock of `mesh_id`
    /// ([`Lock::Mesh`], [`Lock::Inbox`], the graph exclusively): for the
    /// administrative writes that replace a mesh's tasks or events wholesale.
    pub(crate) fn write_exclusive<T>(
        &self,
        mesh_id: &str,
        op: impl FnOnce(&Db<'_>) -> Res<T>,
    ) -> StoreResult<T> {
        self.write_with(mesh_id, &[Lock::Mesh, Lock::Inbox, Lock::Graph { exclusive: true }], op)
    }

    /// Runs `op` in a read-write transaction of `mesh_id` holding `locks`
    /// (taken in key order as the transaction begins, with its first
    /// statement). The COMMIT goes out with its last writes, and the commit is
    /// announced to every listener once it is done, unless `op` said no waiter
    /// looks for it (`Db::unannounced`; see `cluster`).
    pub(crate) fn write_with<T>(
        &self,
        mesh_id: &str,
        locks: &[Lock<'_>],
        op: impl FnOnce(&Db<'_>) -> Res<T>,
    ) -> StoreResult<T> {
        let begin = format!("BEGIN{}", locks::opening(&self.schema, mesh_id, locks));
        self.transaction(begin, Some(mesh_id), op)
    }

    /// Runs `op` in one read-write transaction without a lock of its own: for
    /// writes whose outcome depends on nothing they read, and sweeps that lock
    /// each mesh they touch themselves.
    pub(crate) fn write_unlocked<T>(&self, op: impl FnOnce(&Db<'_>) -> Res<T>) -> StoreResult<T> {
        self.transaction(String::from("BEGIN"), None, op)
    }

    fn transaction<T>(
        &self,
        begin: String,
        notify: Option<&str>,
        op: impl FnOnce(&Db<'_>) -> Res<T>,
    ) -> StoreResult<T> {
        let mut conn = self.pool.get().map_err(|Fail(e)| e)?;
        // BEGIN (and the locks) go out with the first statement, the COMMIT
        // with the last writes.
        let (outcome, began, announce) = {
            let db = Db::with_prefix(&mut conn, &self.schema, begin);
            let outcome = op(&db).and_then(|value| db.finish(Some("COMMIT")).map(|_| value));
            (outcome, db.began(), db.announces())
        };
        match outcome {
            Ok(value) => {
                if let Some(mesh_id) = notify.filter(|_| announce) {
                    self.announcer.mark(mesh_id);
                }
                Ok(value)
            }
            Err(Fail(err)) => {
                // Whatever was begun is undone; a connection that cannot say
                // so is closed.
                if !conn.undo(began) {
                    conn.discard();
                }
                Err(err)
            }
        }
    }

    /// Commits a transaction that changes no data through the same path as every
    /// write: whether the database takes writes right now.
    pub fn probe_write(&self) -> StoreResult<()> {
        self.write_unlocked(|db| {
            db.execute(
                "INSERT INTO agentmesh_meta (key, value) VALUES ('probe', '') ON CONFLICT (key) DO UPDATE SET value = ''",
                &[],
            )
            .map(drop)
        })
    }
}

impl Store for PgStore {
    fn mesh_summaries(&self) -> StoreResult<Vec<agentmesh_store::MeshSummary>> {
        self.snapshot(overview::mesh_summaries)
    }

    fn probe_write(&self) -> StoreResult<()> {
        PgStore::probe_write(self)
    }

    fn profile(&self) -> agentmesh_store::StoreProfile {
        agentmesh_store::StoreProfile {
            durability: PgStore::durability(self),
            id_scope: agentmesh_store::IdScope::Mesh,
        }
    }
}

/// Checks a schema name: letters, digits and `_`, not starting with a digit, at
/// most 63 bytes (PostgreSQL's identifier length).
pub fn validate_schema(schema: &str) -> Result<(), agentmesh_core::InvalidInput> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(agentmesh_core::InvalidInput::new(
            "databaseSchema",
            format!("{schema:?} must be 1 to 63 letters, digits or underscores, not starting with a digit"),
        ))
    }
}

/// `name` as a quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Parses a database URL (`postgres://…` or key=value form); a bad one is
/// refused naming `databaseUrl`.
pub(crate) fn parse_url(url: &str) -> StoreResult<tokio_postgres::Config> {
    url.parse().map_err(|e: postgres::Error| {
        StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
            "databaseUrl",
            format!("is not a PostgreSQL connection string: {e}"),
        ))
    })
}

fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("(default)");
    format!("postgres://{host}:{port}/{db}")
}

/// Classifies PostgreSQL errors at the store boundary: serialization failures,
/// deadlocks and cancelled statements are contention ([`StoreError::Busy`]); a
/// lock wait past `lock_timeout` is [`StoreError::LockTimeout`]; a server that
/// cannot be reached, is shutting down or starting up, refuses more
/// connections or closed the connection is [`StoreError::Unavailable`]; a full
/// disk is [`StoreError::StorageFull`].
pub(crate) fn classify(err: postgres::Error) -> StoreError {
    use postgres::error::SqlState;
    match err.code() {
        Some(code)
            if *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::QUERY_CANCELED =>
        {
            StoreError::Busy
        }
        Some(code) if *code == SqlState::LOCK_NOT_AVAILABLE => StoreError::LockTimeout,
        Some(code) if *code == SqlState::DISK_FULL => StoreError::StorageFull(FullStorage::NoSpace),
        Some(code)
            if code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::TOO_MANY_CONNECTIONS
                || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT =>
        {
            StoreError::Unavailable(err.to_string())
        }
        Some(_) => StoreError::Backend(Box::new(err)),
        None if link_failed(&err) => StoreError::Unavailable(err.to_string()),
        None => StoreError::Backend(Box::new(err)),
    }
}

/// Whether an error the server did not send is the link's: the connection
/// closed, a socket error, or no answer to a connection attempt in time.
fn link_failed(err: &postgres::Error) -> bool {
    use std::error::Error as _;
    err.is_closed() || err.source().is_some_and(|source| source.is::<std::io::Error>()) || {
        let text = err.to_string();
        text.starts_with("timeout waiting for server") || text.starts_with("error connecting to server")
    }
}

agentmesh_store::backend_fail!();

impl From<postgres::Error> for Fail {
    fn from(err: postgres::Error) -> Fail {
        Fail(classify(err))
    }
}
