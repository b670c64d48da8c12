//! The connection pool: connections opened as needed up to a bound, each with
//! its prepared statements, handed out one caller at a time and returned when
//! the caller is done. A connection the server closed is dropped, not returned.
//!
//! A pooled connection is asynchronous underneath (`tokio-postgres`), driven by
//! a runtime of its own on the calling thread, so that several statements can
//! go to the server in one round trip ([`Conn::block_on`] over joined futures):
//! the store's operations send what they can together (see `db`).

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use agentmesh_store::{StoreError, deadline};
use tokio_postgres::{Client, NoTls, Statement};

use crate::{Fail, Res, ServerTimeouts};

/// One server connection, the runtime that drives it, and the statements
/// prepared on it, by SQL text.
pub(crate) struct Conn {
    /// `None` only while the connection is dropped.
    runtime: Option<tokio::runtime::Runtime>,
    pub(crate) client: Client,
    statements: HashMap<String, Statement>,
    /// Set when a round trip was given up mid-way (its deadline passed): what
    /// the server does with it is unknown, so the connection is closed.
    broken: Cell<bool>,
    /// How long a round trip without a deadline may take: two statement
    /// timeouts and a margin (a round trip may carry several statements).
    round_trip_limit: Duration,
}

/// A store may be dropped from an asynchronous task (the daemon's last handle
/// goes at shutdown), where a runtime may not wait for its tasks: the
/// connection's runtime stops without waiting, which closes its socket.
impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Conn {
    /// Runs `future` (statements on [`Conn::client`]) to its end on this
    /// thread, or until the deadline of the operation ([`deadline`]) passes:
    /// then the connection is marked broken (the server may still be working
    /// on what was sent, or never have received it) and the answer is
    /// [`StoreError::Unavailable`].
    ///
    /// Without a deadline (the upkeep, migrations, imports) a round trip
    /// still ends: after its round-trip limit, by when the server would
    /// have cancelled what it was running.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Res<F::Output> {
        let Some(runtime) = &self.runtime else {
            unreachable!("a connection's runtime lives until the connection is dropped")
        };
        let left = deadline::remaining().unwrap_or(self.round_trip_limit);
        match runtime.block_on(async { tokio::time::timeout(left, future).await }) {
            Ok(out) => Ok(out),
            Err(_) => {
                self.broken.set(true);
                Err(Fail(StoreError::Unavailable(format!(
                    "the database did not answer within {} ms (what was left of the request's deadline)",
                    left.as_millis()
                ))))
            }
        }
    }

    /// Runs `sql` (one or more statements without parameters) by the simple
    /// query protocol.
    pub(crate) fn batch_execute(&self, sql: &str) -> Res<()> {
        Ok(self.block_on(self.client.batch_execute(sql))??)
    }

    /// Undoes what an operation that failed had begun (`began`) on this
    /// connection; a ROLLBACK after a COMMIT that failed only warns. `false`
    /// when the connection could not say so: it has to be closed.
    pub(crate) fn undo(&self, began: bool) -> bool {
        !began || (!self.broken.get() && self.batch_execute("ROLLBACK").is_ok())
    }

    /// Whether the server closed the connection, or a round trip on it was
    /// given up.
    pub(crate) fn is_closed(&self) -> bool {
        self.broken.get() || self.client.is_closed()
    }

    /// The prepared form of `sql`, prepared on first use.
    pub(crate) fn statement(&mut self, sql: &str) -> Res<Statement> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        crate::shard::record(sql);
        let statement = self.block_on(self.client.prepare(sql))??;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// What the pool needs to open a connection.
#[derive(Clone)]
pub(crate) struct Target {
    /// With the client's timeouts in place (see [`with_link_timeouts`]).
    pub(crate) config: tokio_postgres::Config,
    /// The schema every statement runs in (`search_path`), quoted.
    pub(crate) quoted_schema: String,
    /// What the server gives up on, for the pooled connections.
    pub(crate) timeouts: ServerTimeouts,
}

/// How long a connection attempt may take, unless the URL says.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A link quiet this long is probed (TCP keepalive), unless the URL says.
pub(crate) const KEEPALIVES_IDLE: Duration = Duration::from_secs(10);
/// How far apart the probes go, unless the URL says.
pub(crate) const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(5);
/// How many probes go unanswered before the link counts as dead, unless the URL says.
pub(crate) const KEEPALIVES_RETRIES: u32 = 3;
/// How long sent data may stay unacknowledged before the link counts as dead
/// (`TCP_USER_TIMEOUT`), unless the URL says.
pub(crate) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// `config` with the client's side of a link that can die: a connect timeout,
/// TCP keepalives and a TCP user timeout, each where the URL left it unset.
pub(crate) fn with_link_timeouts(mut config: tokio_postgres::Config) -> tokio_postgres::Config {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    // The library's own default idle time is two hours.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVES_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVES_RETRIES);
    }
    config
}

/// `duration` as a PostgreSQL setting in milliseconds (`0` turns it off).
fn millis(duration: Duration) -> u128 {
    duration.as_millis()
}

impl Target {
    /// The settings every connection starts with: the installation's schema; a
    /// statement of a client that went away (a daemon killed while its
    /// transaction waits for a lock) cancelled within a second, so the locks it
    /// holds are not kept until its own wait ends; and the server's side of a
    /// client whose link died (TCP keepalives).
    fn common_settings(&self) -> String {
        format!(
            "SET search_path TO {}; SET client_connection_check_interval = '1s';
             SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; SET tcp_keepalives_count = {}",
            self.quoted_schema,
            KEEPALIVES_IDLE.as_secs(),
            KEEPALIVES_INTERVAL.as_secs(),
            KEEPALIVES_RETRIES
        )
    }

    /// A pooled connection's settings: [`Target::common_settings`] and the
    /// server's timeouts, so that a lock wait ends before the request that
    /// waits does, a runaway statement ends, and a transaction whose client
    /// stopped talking (its link dead) gives its locks back.
    fn pooled_settings(&self) -> String {
        format!(
            "{}; SET lock_timeout = {}; SET statement_timeout = {}; SET idle_in_transaction_session_timeout = {}",
            self.common_settings(),
            millis(self.timeouts.lock),
            millis(self.timeouts.statement),
            millis(self.timeouts.idle_in_transaction)
        )
    }

    /// Opens a pooled connection in the installation's schema, within the
    /// connect timeout and what is left of the operation's deadline.
    pub(crate) fn connect(&self) -> Res<Conn> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
            Fail(agentmesh_store::StoreError::Backend(
                format!("could not start a connection runtime: {e}").into(),
            ))
        })?;
        let connecting = self.config.connect(NoTls);
        let (client, connection) = match deadline::remaining() {
            None => runtime.block_on(connecting)?,
            Some(left) => {
                runtime.block_on(async { tokio::time::timeout(left, connecting).await }).map_err(|_| {
                    Fail(StoreError::Unavailable(String::from(
                        "could not connect to the database within the request's deadline",
                    )))
                })??
            }
        };
        // The connection's socket is driven whenever its runtime runs a statement.
        runtime.spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "a pooled PostgreSQL connection ended");
            }
        });
        let conn = Conn {
            runtime: Some(runtime),
            client,
            statements: HashMap::new(),
            broken: Cell::new(false),
            round_trip_limit: self.timeouts.statement * 2 + Duration::from_secs(10),
        };
        conn.batch_execute(&self.pooled_settings())?;
        Ok(conn)
    }

    /// Opens a blocking connection in the installation's schema, for a
    /// listener, a leader lock or the migrations, which hold their connection
    /// for as long as they live. Its statements have no timeout (a migration
    /// may take long), and its lock waits give up after 30 s.
    pub(crate) fn session(&self) -> Res<postgres::Client> {
        let mut client = postgres::Config::from(self.config.clone()).connect(postgres::NoTls)?;
        client.batch_execute(&format!(
            "{}; SET statement_timeout = 0; SET lock_timeout = '30s'",
            self.common_settings()
        ))?;
        Ok(client)
    }
}

/// Connections to one database and schema, at most `max` open at once.
pub(crate) struct Pool {
    target: Target,
    max: usize,
    state: Mutex<State>,
    returned: Condvar,
}

struct State {
    idle: Vec<Conn>,
    open: usize,
}

/// How long a caller waits for a connection when all are in use.
const CHECKOUT_WAIT: Duration = Duration::from_secs(30);

/// A wait for a connection longer than this is logged: the pool is too small
/// for the load, or connections are held for long.
const SLOW_CHECKOUT: Duration = Duration::from_secs(1);

impl Pool {
    pub(crate) fn new(target: Target, max: usize) -> Pool {
        Pool {
            target,
            max: max.max(1),
            state: Mutex::new(State { idle: Vec::new(), open: 0 }),
            returned: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection for the caller alone until the guard drops.
    pub(crate) fn get(&self) -> Res<Pooled<'_>> {
        Ok(Pooled { pool: self, conn: Some(self.checkout()?) })
    }

    /// A connection the caller owns until it gives it back ([`Pool::checkin`]) or
    /// drops it ([`Pool::forget`]).
    pub(crate) fn checkout(&self) -> Res<Conn> {
        let began = std::time::Instant::now();
        let mut state = self.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                let waited = began.elapsed();
                if waited > SLOW_CHECKOUT {
                    tracing::warn!(
                        waited_ms = waited.as_millis() as u64,
                        open = state.open,
                        max = self.max,
                        "waited for a free PostgreSQL connection"
                    );
                }
                return Ok(conn);
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return match self.target.connect() {
                    Ok(conn) => Ok(conn),
                    Err(err) => {
                        self.forget();
                        Err(err)
                    }
                };
            }
            // The wait ends with the operation's deadline, if that comes first.
            let wait = deadline::remaining().map_or(CHECKOUT_WAIT, |left| left.min(CHECKOUT_WAIT));
            let (next, timeout) = self.returned.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner());
            state = next;
            if timeout.timed_out() && state.idle.is_empty() && state.open >= self.max {
                return Err(Fail(StoreError::Busy));
            }
        }
    }

    /// Gives a checked-out connection back; one the server closed is dropped.
    pub(crate) fn checkin(&self, conn: Conn) {
        if conn.is_closed() {
            drop(conn);
            self.forget();
            return;
        }
        self.lock().idle.push(conn);
        self.returned.notify_one();
    }

    /// Counts a checked-out connection as closed (its state is unknown, and it
    /// was dropped).
    pub(crate) fn forget(&self) {
        self.lock().open -= 1;
        self.returned.notify_one();
    }

    /// What the pool connects to.
    pub(crate) fn target(&self) -> &Target {
        &self.target
    }
}

/// A connection checked out of the pool.
pub(crate) struct Pooled<'p> {
    pool: &'p Pool,
    conn: Option<Conn>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("a pooled connection until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("a pooled connection until dropped")
    }
}

impl Pooled<'_> {
    /// Closes the connection instead of returning it (its state is unknown).
    pub(crate) fn discard(mut self) {
        self.conn = None;
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        match self.conn.take() {
            Some(conn) => self.pool.checkin(conn),
            None => self.pool.forget(),
        }
    }
}
