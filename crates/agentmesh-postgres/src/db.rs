//! [`Db`]: one connection inside one operation, with the statement calls the
//! backend's modules make. Every statement is prepared once per connection and
//! reused by its SQL text.
//!
//! A `Db` sends what it can in one round trip: the transaction's opening (or a
//! savepoint) goes out with the operation's first statement, and writes whose
//! outcome nothing later reads ([`Db::defer`]) go out with the next statement,
//! or with [`Db::finish`] at the end of the operation, with its COMMIT.
//!
//! So an operation pays at most one round trip per statement whose answer it
//! reads (two that must run in order and whose answers are both needed go out
//! together: [`Db::query_pair`]). A claim that takes the open stream's first
//! ready task takes two round trips: the survey, which also locks that task,
//! sent with `BEGIN` and the claim's locks; then its writes with the COMMIT.
//! A completion takes two as well: the task locked with its dependents' ids;
//! then its writes with the COMMIT (and one more for each dependent whose
//! readiness it recounts).

use std::cell::RefCell;
use std::sync::Arc;

use agentmesh_store::StoreError;
use futures_util::future::join_all;
use postgres::Row;
use postgres::error::SqlState;
use postgres::types::ToSql;

use crate::pool::Conn;
use crate::{Fail, Res};

/// Parameters of one statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A statement with owned parameters, sent later (see [`Db::defer`]).
pub(crate) fn statement(sql: &'static str, params: Vec<Owned>) -> Deferred {
    Deferred { sql, params, unless_none: None }
}

/// An owned parameter of a deferred statement.
pub(crate) type Owned = Arc<dyn ToSql + Sync + Send>;

/// The error of a deferred write that had to change a row and changed none.
pub(crate) type Missing = Arc<dyn Fn() -> StoreError + Send + Sync>;

/// A write sent later: its SQL, its parameters, and the error to report when it
/// changes no row (`None`: changing none is fine). Such a write's statement
/// fails on the server when it changes no row, by a division by zero (see
/// [`Db::defer`]).
pub(crate) struct Deferred {
    sql: &'static str,
    params: Vec<Owned>,
    unless_none: Option<Missing>,
}

/// What the statement that carries the pending work returns.
enum Want<'a> {
    Rows(&'a str, Params<'a>),
    /// Two queries, sent together.
    Pair(&'a str, Params<'a>, &'a str, Params<'a>),
    Count(&'a str, Params<'a>),
    Nothing,
}

enum Reply {
    Rows(Vec<Row>),
    Pair(Vec<Row>, Vec<Row>),
    Count(u64),
    Nothing,
}

/// The connection of one operation: inside a transaction for writes and
/// snapshot reads, or running each statement by itself for point reads.
pub(crate) struct Db<'c> {
    conn: RefCell<&'c mut Conn>,
    /// The salt of this installation's advisory lock keys.
    salt: &'c str,
    /// Statements without parameters (`BEGIN` and a lock, a `SAVEPOINT`) that
    /// go out ahead of the operation's first statement; `None` once sent.
    prefix: RefCell<Option<String>>,
    /// Statements that go out right after the prefix, and only with it (the
    /// transaction's advisory locks).
    opening: RefCell<Vec<Deferred>>,
    /// Writes waiting to go out with the next statement.
    deferred: RefCell<Vec<Deferred>>,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut Conn, salt: &'c str) -> Db<'c> {
        Db {
            conn: RefCell::new(conn),
            salt,
            prefix: RefCell::new(None),
            opening: RefCell::new(Vec::new()),
            deferred: RefCell::new(Vec::new()),
        }
    }

    /// The same, with `prefix` sent ahead of the first statement the operation
    /// sends (nothing is sent when it sends none).
    pub(crate) fn with_prefix(conn: &'c mut Conn, salt: &'c str, prefix: String) -> Db<'c> {
        let db = Db::new(conn, salt);
        *db.prefix.borrow_mut() = Some(prefix);
        db
    }

    /// The same, with `opening` (prepared statements) sent right after the
    /// prefix, in order, and only with it.
    pub(crate) fn opening(self, opening: Vec<Deferred>) -> Db<'c> {
        *self.opening.borrow_mut() = opening;
        self
    }

    /// Every row `sql` returns.
    pub(crate) fn query(&self, sql: &str, params: Params<'_>) -> Res<Vec<Row>> {
        match self.exchange(Want::Rows(sql, params), None)? {
            Reply::Rows(rows) => Ok(rows),
            _ => unreachable!("a query replies with rows"),
        }
    }

    /// Every row each of two queries returns, both sent in one round trip
    /// (the second runs after the first).
    pub(crate) fn query_pair(
        &self,
        first: (&str, Params<'_>),
        second: (&str, Params<'_>),
    ) -> Res<(Vec<Row>, Vec<Row>)> {
        match self.exchange(Want::Pair(first.0, first.1, second.0, second.1), None)? {
            Reply::Pair(a, b) => Ok((a, b)),
            _ => unreachable!("a pair of queries replies with two row sets"),
        }
    }

    /// The one row `sql` returns, if any (more than one is an error).
    pub(crate) fn query_opt(&self, sql: &str, params: Params<'_>) -> Res<Option<Row>> {
        let mut rows = self.query(sql, params)?;
        match rows.len() {
            0 | 1 => Ok(rows.pop()),
            n => Err(Fail(StoreError::Backend(format!("expected at most one row, got {n}").into()))),
        }
    }

    /// The one row `sql` returns (none, or more than one, is an error).
    pub(crate) fn query_one(&self, sql: &str, params: Params<'_>) -> Res<Row> {
        let mut rows = self.query(sql, params)?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(Fail(StoreError::Backend(format!("expected one row, got {n}").into()))),
        }
    }

    /// Runs `sql`; returns how many rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: Params<'_>) -> Res<u64> {
        match self.exchange(Want::Count(sql, params), None)? {
            Reply::Count(n) => Ok(n),
            _ => unreachable!("an execute replies with a count"),
        }
    }

    /// Runs `sql` with owned parameters (as [`Db::defer`] takes them); returns
    /// how many rows it changed.
    pub(crate) fn execute_owned(&self, sql: &str, params: &[Owned]) -> Res<u64> {
        self.execute(sql, &refs(params))
    }

    /// Queues a write whose outcome nothing in the operation reads: it goes out
    /// with the next statement, or with [`Db::finish`]. With `unless_none`, the
    /// statement must fail by a division by zero when it changes no row
    /// (`WITH w AS (... RETURNING 1) SELECT 1 / count(*)::INT FROM w`): that
    /// failure aborts the transaction on the server, and is reported as
    /// `unless_none`'s error.
    pub(crate) fn defer(&self, sql: &'static str, params: Vec<Owned>, unless_none: Option<Missing>) {
        self.deferred.borrow_mut().push(Deferred { sql, params, unless_none });
    }

    /// Sends what is still pending, with `suffix` (statements without
    /// parameters, such as the COMMIT) after it, when given. Returns whether
    /// the prefix went out at some point: whether the operation began anything
    /// that has to be ended.
    ///
    /// The suffix goes out with the deferred writes: a write that fails, a
    /// checked one that changed no row included (see [`Db::defer`]), aborts
    /// the transaction on the server, and a COMMIT on an aborted transaction
    /// does not commit it.
    pub(crate) fn finish(&self, suffix: Option<&str>) -> Res<bool> {
        let pending = !self.deferred.borrow().is_empty();
        if pending || (suffix.is_some() && self.began()) {
            self.exchange(Want::Nothing, suffix)?;
        }
        Ok(self.began())
    }

    /// Whether the prefix went out (the operation sent a statement).
    pub(crate) fn began(&self) -> bool {
        self.prefix.borrow().is_none()
    }

    /// Sends the prefix, the deferred writes, `want`'s statement and `suffix`,
    /// in that order and in one round trip, and returns what `want` asked
    /// for. The first error among them is the exchange's. When nothing could
    /// go out (a statement failed to prepare), everything pending stays
    /// pending.
    fn exchange(&self, want: Want<'_>, suffix: Option<&str>) -> Res<Reply> {
        let prefix = self.prefix.borrow_mut().take();
        let opening =
            if prefix.is_some() { std::mem::take(&mut *self.opening.borrow_mut()) } else { Vec::new() };
        let mut deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        let split = opening.len();
        let mut writes = opening;
        writes.append(&mut deferred);
        match self.send(prefix.as_deref(), &writes, &want, suffix) {
            Ok(reply) => reply,
            Err(err) => {
                *self.prefix.borrow_mut() = prefix;
                let deferred = writes.split_off(split);
                *self.opening.borrow_mut() = writes;
                *self.deferred.borrow_mut() = deferred;
                Err(err)
            }
        }
    }

    /// One round trip. The outer `Res` fails when a statement could not be
    /// prepared (nothing was sent); the inner one is the first error among
    /// what was sent.
    fn send(
        &self,
        prefix: Option<&str>,
        deferred: &[Deferred],
        want: &Want<'_>,
        suffix: Option<&str>,
    ) -> Res<Res<Reply>> {
        let mut conn = self.conn.borrow_mut();
        let mut statements = Vec::with_capacity(deferred.len());
        for d in deferred {
            statements.push(conn.statement(d.sql)?);
        }
        let main = match want {
            Want::Rows(sql, _) | Want::Count(sql, _) | Want::Pair(sql, ..) => Some(conn.statement(sql)?),
            Want::Nothing => None,
        };
        let paired = match want {
            Want::Pair(_, _, sql, _) => Some(conn.statement(sql)?),
            _ => None,
        };
        let client = &conn.client;
        let joined = conn.block_on(async {
            let first = async {
                match prefix {
                    Some(p) => client.batch_execute(p).await,
                    None => Ok(()),
                }
            };
            let writes = execute_all(client, deferred, &statements);
            let reply = async {
                match (want, &main) {
                    (Want::Rows(_, params), Some(statement)) => {
                        client.query(statement, params).await.map(Reply::Rows)
                    }
                    (Want::Count(_, params), Some(statement)) => {
                        client.execute(statement, params).await.map(Reply::Count)
                    }
                    (Want::Pair(_, first, _, second), Some(statement)) => {
                        let Some(other) = &paired else { unreachable!("a pair prepares both statements") };
                        let (a, b) =
                            futures_util::join!(client.query(statement, first), client.query(other, second));
                        Ok(Reply::Pair(a?, b?))
                    }
                    _ => Ok(Reply::Nothing),
                }
            };
            let last = async {
                match suffix {
                    Some(s) => client.batch_execute(s).await,
                    None => Ok(()),
                }
            };
            futures_util::join!(first, writes, reply, last)
        });
        // A round trip given up at the deadline had (maybe) sent everything.
        let (first, counts, reply, last) = match joined {
            Ok(answers) => answers,
            Err(err) => return Ok(Err(err)),
        };
        Ok((|| {
            first?;
            checked(deferred, counts).map_err(Fail)?;
            let reply = reply?;
            last?;
            Ok(reply)
        })())
    }

    /// Takes `lock` of `mesh_id` until the transaction ends, for a write that
    /// learns what to lock as it goes (see `locks`). Taking it again in the
    /// same transaction is free.
    pub(crate) fn lock(&self, mesh_id: &str, lock: crate::Lock<'_>) -> Res<()> {
        let (key, exclusive) = lock.key(self.salt, mesh_id);
        let sql = if exclusive {
            "SELECT pg_advisory_xact_lock($1)"
        } else {
            "SELECT pg_advisory_xact_lock_shared($1)"
        };
        self.execute(sql, &[&key]).map(drop)
    }
}

/// Owned parameters as a statement takes them.
fn refs(params: &[Owned]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
}

/// Runs `writes` (prepared as `statements`), each sent as soon as it is polled.
fn execute_all<'a>(
    client: &'a tokio_postgres::Client,
    writes: &'a [Deferred],
    statements: &'a [tokio_postgres::Statement],
) -> impl std::future::Future<Output = Vec<Result<u64, postgres::Error>>> + 'a {
    join_all(writes.iter().zip(statements).map(move |(d, statement)| {
        let params = refs(&d.params);
        async move { client.execute(statement, &params).await }
    }))
}

/// The first error among the answers to `writes`: a failed statement, or a
/// checked write that changed no row (its statement's division by zero).
fn checked(writes: &[Deferred], counts: Vec<Result<u64, postgres::Error>>) -> Result<(), StoreError> {
    for (d, count) in writes.iter().zip(counts) {
        if let Err(err) = count {
            return Err(match &d.unless_none {
                Some(missing) if err.code() == Some(&SqlState::DIVISION_BY_ZERO) => missing(),
                _ => crate::classify(err),
            });
        }
    }
    Ok(())
}

/// A stored non-negative count or number as `u64`.
pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// `Fail` from a decode problem of a stored row.
pub(crate) fn corrupt(what: impl Into<String>, problem: impl std::fmt::Display) -> Fail {
    Fail(agentmesh_store::StoreError::Corrupt { what: what.into(), problem: problem.to_string() })
}
