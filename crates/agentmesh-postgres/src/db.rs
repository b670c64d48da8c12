//! [`Db`]: one connection inside one operation, with the statement calls the
//! backend's modules make. Every statement is prepared once per connection and
//! reused by its SQL text.
//!
//! A `Db` sends what it can in one round trip: the transaction's opening (or a
//! savepoint) goes out with the operation's first statement, and writes whose
//! outcome nothing later reads ([`Db::defer`]) go out with the next statement,
//! or with [`Db::finish`] at the end of the operation.

use std::cell::RefCell;

use agentmesh_store::StoreError;
use futures_util::future::join_all;
use postgres::Row;
use postgres::types::ToSql;

use crate::pool::Conn;
use crate::{Fail, Res};

/// Parameters of one statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// An owned parameter of a deferred statement.
pub(crate) type Owned = Box<dyn ToSql + Sync + Send>;

/// A write sent later: its SQL, its parameters, and the error to report when it
/// changes no row (`None`: changing none is fine).
struct Deferred {
    sql: &'static str,
    params: Vec<Owned>,
    unless_none: Option<StoreError>,
}

/// What the statement that carries the pending work returns.
enum Want<'a> {
    Rows(&'a str, Params<'a>),
    Count(&'a str, Params<'a>),
    Nothing,
}

enum Reply {
    Rows(Vec<Row>),
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
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut Conn, salt: &'c str) -> Db<'c> {
        Db { conn: RefCell::new(conn), salt, prefix: RefCell::new(None), deferred: RefCell::new(Vec::new()) }
    }

    /// The same, with `prefix` sent ahead of the first statement the operation
    /// sends (nothing is sent when it sends none).
    pub(crate) fn with_prefix(conn: &'c mut Conn, salt: &'c str, prefix: String) -> Db<'c> {
        let db = Db::new(conn, salt);
        *db.prefix.borrow_mut() = Some(prefix);
        db
    }

    /// Every row `sql` returns.
    pub(crate) fn query(&self, sql: &str, params: Params<'_>) -> Res<Vec<Row>> {
        match self.exchange(Want::Rows(sql, params), None)? {
            Reply::Rows(rows) => Ok(rows),
            _ => unreachable!("a query replies with rows"),
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

    /// Queues a write whose outcome nothing in the operation reads: it goes out
    /// with the next statement, or with [`Db::finish`]. When it changes no row
    /// and `unless_none` is given, that error is the operation's.
    pub(crate) fn defer(&self, sql: &'static str, params: Vec<Owned>, unless_none: Option<StoreError>) {
        self.deferred.borrow_mut().push(Deferred { sql, params, unless_none });
    }

    /// Sends what is still pending, with `suffix` (statements without
    /// parameters, such as the COMMIT) after it, when given. Returns whether
    /// the prefix went out at some point: whether the operation began anything
    /// that has to be ended.
    ///
    /// A COMMIT on a transaction a failed statement aborted rolls it back, so
    /// a suffix goes out with the deferred writes only when none of them is
    /// checked for the rows it changed: a check that fails after its COMMIT
    /// would report an error for a committed write.
    pub(crate) fn finish(&self, suffix: Option<&str>) -> Res<bool> {
        let (pending, checked) = {
            let deferred = self.deferred.borrow();
            (!deferred.is_empty(), deferred.iter().any(|d| d.unless_none.is_some()))
        };
        if pending && checked {
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

    /// Sends the prefix, the deferred writes, `want`'s statement and `suffix`,
    /// in that order and in one round trip, and returns what `want` asked for.
    /// The first error among them is the exchange's.
    fn exchange(&self, want: Want<'_>, suffix: Option<&str>) -> Res<Reply> {
        let mut conn = self.conn.borrow_mut();
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        let mut statements = Vec::with_capacity(deferred.len());
        for d in &deferred {
            statements.push(conn.statement(d.sql)?);
        }
        let main = match &want {
            Want::Rows(sql, _) | Want::Count(sql, _) => Some(conn.statement(sql)?),
            Want::Nothing => None,
        };
        let prefix = self.prefix.borrow_mut().take();
        let client = &conn.client;
        let (first, counts, reply, last) = conn.block_on(async {
            let first = async {
                match &prefix {
                    Some(p) => client.batch_execute(p).await,
                    None => Ok(()),
                }
            };
            let writes = join_all(deferred.iter().zip(&statements).map(|(d, statement)| {
                let params: Vec<&(dyn ToSql + Sync)> =
                    d.params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
                async move { client.execute(statement, &params).await }
            }));
            let reply = async {
                match (&want, &main) {
                    (Want::Rows(_, params), Some(statement)) => {
                        client.query(statement, params).await.map(Reply::Rows)
                    }
                    (Want::Count(_, params), Some(statement)) => {
                        client.execute(statement, params).await.map(Reply::Count)
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
        first?;
        for (d, count) in deferred.into_iter().zip(counts) {
            if count? == 0
                && let Some(err) = d.unless_none
            {
                return Err(Fail(err));
            }
        }
        let reply = reply?;
        last?;
        Ok(reply)
    }

    /// Takes the advisory lock of `mesh_id` until the transaction ends: the
    /// writes of one mesh that decide on what they read run one at a time (see
    /// ARCHITECTURE.md). Taking it again in the same transaction is free.
    pub(crate) fn lock_mesh(&self, mesh_id: &str) -> Res<()> {
        let key = mesh_lock_key(self.salt, mesh_id);
        self.execute("SELECT pg_advisory_xact_lock($1)", &[&key]).map(drop)
    }
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
