//! [`Db`]: one connection inside one operation, with the statement calls the
//! backend's modules make. Every statement is prepared once per connection and
//! reused by its SQL text.
//!
//! A `Db` sends what it can in one round trip: the transaction's opening (or a
//! savepoint) goes out with the operation's first statement, and writes whose
//! outcome nothing later reads ([`Db::defer`]) go out with the next statement,
//! or with [`Db::finish`] at the end of the operation. In a batch (see `batch`)
//! the writes an operation leaves pending may go out with the next operation's
//! first statement instead ([`Carried`]), each operation inside a savepoint of
//! its own, so one that fails there is undone alone.

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

/// The pending writes of an operation of a batch, handed on to go out with the
/// next operation's first statement: whose they are (`owner`) and the savepoint
/// that undoes them when one of them fails.
pub(crate) struct Carried {
    pub(crate) owner: u64,
    pub(crate) savepoint: String,
    pub(crate) writes: Vec<Deferred>,
}

/// Carried writes that failed: whose they were, and why. Their owner's savepoint
/// was rolled back.
pub(crate) struct CarryFailed {
    pub(crate) owner: u64,
    pub(crate) error: StoreError,
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
    /// Writes waiting to go out with the next statement.
    deferred: RefCell<Vec<Deferred>>,
    /// A previous operation's writes, to go out ahead of everything else.
    carried: RefCell<Option<Carried>>,
    /// What became of carried writes that failed.
    carry_failed: RefCell<Option<CarryFailed>>,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut Conn, salt: &'c str) -> Db<'c> {
        Db {
            conn: RefCell::new(conn),
            salt,
            prefix: RefCell::new(None),
            deferred: RefCell::new(Vec::new()),
            carried: RefCell::new(None),
            carry_failed: RefCell::new(None),
        }
    }

    /// The same, with `prefix` sent ahead of the first statement the operation
    /// sends (nothing is sent when it sends none).
    pub(crate) fn with_prefix(conn: &'c mut Conn, salt: &'c str, prefix: String) -> Db<'c> {
        let db = Db::new(conn, salt);
        *db.prefix.borrow_mut() = Some(prefix);
        db
    }

    /// The same, with a previous operation's writes sent ahead of the prefix.
    pub(crate) fn carrying(mut self, carried: Option<Carried>) -> Db<'c> {
        self.carried = RefCell::new(carried);
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
    /// does not commit it. Carried writes go out first, by themselves: one
    /// that fails is undone alone, by its owner's savepoint, and the rest still
    /// commits.
    pub(crate) fn finish(&self, suffix: Option<&str>) -> Res<bool> {
        if self.carried.borrow().is_some() {
            self.exchange(Want::Nothing, None)?;
        }
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

    /// The writes still pending, taken out to be carried by the next operation.
    pub(crate) fn take_deferred(&self) -> Vec<Deferred> {
        std::mem::take(&mut *self.deferred.borrow_mut())
    }

    /// The carried writes not sent (the operation sent nothing), handed back.
    pub(crate) fn take_carried(&self) -> Option<Carried> {
        self.carried.borrow_mut().take()
    }

    /// Carried writes that failed, if any did.
    pub(crate) fn take_carry_failed(&self) -> Option<CarryFailed> {
        self.carry_failed.borrow_mut().take()
    }

    /// Sends the carried writes, the prefix, the deferred writes, `want`'s
    /// statement and `suffix`, in that order and in one round trip, and returns
    /// what `want` asked for. The first error among them is the exchange's.
    ///
    /// When a carried write fails, its owner's savepoint is rolled back (which
    /// undoes everything sent after it too), the failure is kept for the batch,
    /// and the rest goes out again. When nothing could go out (a statement
    /// failed to prepare), everything pending stays pending.
    fn exchange(&self, want: Want<'_>, suffix: Option<&str>) -> Res<Reply> {
        let carried = self.carried.borrow_mut().take();
        let prefix = self.prefix.borrow_mut().take();
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        let writes = carried.as_ref().map_or(&[][..], |c| c.writes.as_slice());
        let (carry_outcome, rest) = match self.send(writes, prefix.as_deref(), &deferred, &want, suffix) {
            Ok(sent) => sent,
            Err(err) => {
                *self.carried.borrow_mut() = carried;
                *self.prefix.borrow_mut() = prefix;
                *self.deferred.borrow_mut() = deferred;
                return Err(err);
            }
        };
        let (Some(carried), Err(error)) = (carried, carry_outcome) else { return rest };
        *self.carry_failed.borrow_mut() = Some(CarryFailed { owner: carried.owner, error });
        self.conn.borrow().batch_execute(&format!("ROLLBACK TO SAVEPOINT {}", carried.savepoint))?;
        let (_, rest) = self.send(&[], prefix.as_deref(), &deferred, &want, suffix)?;
        rest
    }

    /// One round trip. Returns how the carried writes went, and the rest's
    /// outcome (an error of the rest is the first one among them; when a
    /// carried write failed, the rest's errors follow from it).
    #[allow(clippy::type_complexity)]
    fn send(
        &self,
        carried: &[Deferred],
        prefix: Option<&str>,
        deferred: &[Deferred],
        want: &Want<'_>,
        suffix: Option<&str>,
    ) -> Res<(Result<(), StoreError>, Res<Reply>)> {
        let mut conn = self.conn.borrow_mut();
        let mut carried_statements = Vec::with_capacity(carried.len());
        for d in carried {
            carried_statements.push(conn.statement(d.sql)?);
        }
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
        let (carried_counts, first, counts, reply, last) = conn.block_on(async {
            let carried_writes = execute_all(client, carried, &carried_statements);
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
            futures_util::join!(carried_writes, first, writes, reply, last)
        });
        let carry_outcome = checked(carried, carried_counts);
        let rest = (|| {
            first?;
            checked(deferred, counts).map_err(Fail)?;
            let reply = reply?;
            last?;
            Ok(reply)
        })();
        Ok((carry_outcome, rest))
    }

    /// Takes the advisory lock of `mesh_id` until the transaction ends: the
    /// writes of one mesh that decide on what they read run one at a time (see
    /// ARCHITECTURE.md). Taking it again in the same transaction is free.
    pub(crate) fn lock_mesh(&self, mesh_id: &str) -> Res<()> {
        let key = mesh_lock_key(self.salt, mesh_id);
        self.execute("SELECT pg_advisory_xact_lock($1)", &[&key]).map(drop)
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

/// The advisory lock key of a mesh: a 64-bit FNV-1a hash of the installation's
/// schema and the mesh id, the same in every daemon. Two meshes that share a key
/// only share a lock, which costs concurrency, never correctness.
pub(crate) fn mesh_lock_key(salt: &str, mesh_id: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in salt.bytes().chain([0u8]).chain(mesh_id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash as i64
}

/// A stored non-negative count or number as `u64`.
pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// `Fail` from a decode problem of a stored row.
pub(crate) fn corrupt(what: impl Into<String>, problem: impl std::fmt::Display) -> Fail {
    Fail(agentmesh_store::StoreError::Corrupt { what: what.into(), problem: problem.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_differ_by_mesh_and_installation_and_are_stable() {
        let a = mesh_lock_key("agentmesh", "mesh-a");
        assert_eq!(a, mesh_lock_key("agentmesh", "mesh-a"));
        assert_ne!(a, mesh_lock_key("agentmesh", "mesh-b"));
        assert_ne!(a, mesh_lock_key("other", "mesh-a"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(mesh_lock_key("ab", "c"), mesh_lock_key("a", "bc"));
    }
}
