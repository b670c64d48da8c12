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
//! readiness it recounts). When this store claimed the task, a completion or a
//! heartbeat takes one: the check that the row is as the claim left it goes
//! out with the writes (see `tasks::remembered`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use agentmesh_store::StoreError;
use futures_util::future::join_all;
use postgres::Row;
use postgres::error::SqlState;
use postgres::types::ToSql;

use crate::pool::Conn;
use crate::{Fail, Res};

/// Parameters of one statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A write that may share one statement with the deferred writes next to it
/// (see [`Db::defer_write`]): its SQL as the bodies of a `WITH` list, each a
/// data-modifying statement, `$1`.. its own parameters, and `{0}` in a later
/// body the name of its first (a body that reads what the first returned).
///
/// Deferred writes in a row go out as one statement, `WITH` every body of
/// each, so the server runs, plans and answers one statement instead of one a
/// write. That is sound for the writes this store defers: inserts, and at
/// most one update of a row (at most one checked write a statement, and the
/// checked writes are the only updates), none reading what another wrote. A
/// statement of any other kind ends the run.
pub(crate) struct Write {
    pub(crate) bodies: &'static [&'static str],
    /// Whether the write must change a row: its last body returns one row per
    /// row it changed, and the statement fails when it returns none.
    pub(crate) checked: bool,
}

/// How many deferred writes share one statement at most (so that the number
/// of statement texts a connection prepares stays small).
const FUSED_MAX: usize = 4;

/// The SQL of a deferred statement.
#[derive(Clone, Copy)]
enum Sql {
    Text(&'static str),
    Write(&'static Write),
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
    sql: Sql,
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
    /// Writes waiting to go out with the next statement.
    deferred: RefCell<Vec<Deferred>>,
    /// Whether the write's commit is announced to other daemons (see
    /// `cluster`); an operation no waiter of theirs looks for turns it off.
    announce: std::cell::Cell<bool>,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut Conn, salt: &'c str) -> Db<'c> {
        Db {
            conn: RefCell::new(conn),
            salt,
            prefix: RefCell::new(None),
            deferred: RefCell::new(Vec::new()),
            announce: std::cell::Cell::new(true),
        }
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
        self.deferred.borrow_mut().push(Deferred { sql: Sql::Text(sql), params, unless_none });
    }

    /// Queues `write` as [`Db::defer`] queues a statement; it goes out in one
    /// statement with the deferred writes next to it (see [`Write`]). A
    /// checked write that changes no row fails the transaction on the server
    /// and is reported as `unless_none`'s error.
    pub(crate) fn defer_write(
        &self,
        write: &'static Write,
        params: Vec<Owned>,
        unless_none: Option<Missing>,
    ) {
        debug_assert_eq!(write.checked, unless_none.is_some(), "a checked write names its error");
        self.deferred.borrow_mut().push(Deferred { sql: Sql::Write(write), params, unless_none });
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

    /// Leaves this write's commit unannounced: no waiter of another daemon
    /// looks for what it wrote (a claim, a heartbeat; see `cluster`).
    pub(crate) fn unannounced(&self) {
        self.announce.set(false);
    }

    /// Whether this write's commit is announced.
    pub(crate) fn announces(&self) -> bool {
        self.announce.get()
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
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        match self.send(prefix.as_deref(), &deferred, &want, suffix) {
            Ok(reply) => reply,
            Err(err) => {
                *self.prefix.borrow_mut() = prefix;
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
        let units = units(deferred);
        let mut statements = Vec::with_capacity(units.len());
        for unit in &units {
            statements.push(conn.statement(unit.sql)?);
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
            let writes = execute_all(client, &units, &statements);
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
            checked(&units, counts).map_err(Fail)?;
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
pub(crate) fn refs(params: &[Owned]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
}

/// One statement of deferred work as it goes out: one deferred statement, or
/// a run of deferred writes in one statement.
struct Unit<'a> {
    sql: &'static str,
    params: Vec<&'a (dyn ToSql + Sync)>,
    /// The error of its checked write that changed no row, if it has one.
    unless_none: Option<&'a Missing>,
}

/// The statements `deferred` goes out as: each deferred write joins the run of
/// writes before it unless that run is full or both are checked (see
/// [`Write`]); every other statement goes out as it is.
fn units(deferred: &[Deferred]) -> Vec<Unit<'_>> {
    let mut units = Vec::with_capacity(deferred.len());
    let mut i = 0;
    while i < deferred.len() {
        let Sql::Write(_) = deferred[i].sql else {
            let d = &deferred[i];
            let Sql::Text(sql) = d.sql else { unreachable!("matched above") };
            units.push(Unit { sql, params: refs(&d.params), unless_none: d.unless_none.as_ref() });
            i += 1;
            continue;
        };
        let mut run: Vec<(&'static Write, usize)> = Vec::new();
        let mut params = Vec::new();
        let mut unless_none = None;
        while let Some(d) = deferred.get(i)
            && let Sql::Write(write) = d.sql
            && run.len() < FUSED_MAX
            && !(write.checked && unless_none.is_some())
        {
            run.push((write, d.params.len()));
            params.extend(refs(&d.params));
            unless_none = unless_none.or(d.unless_none.as_ref());
            i += 1;
        }
        units.push(Unit { sql: fused(&run), params, unless_none });
    }
    units
}

/// The statement text of the writes `run` (each with its number of
/// parameters) in one statement, made once per process and kept.
fn fused(run: &[(&'static Write, usize)]) -> &'static str {
    /// A run by the address of each write and its number of parameters, the
    /// unused places zero (no write lives at address zero); built without an
    /// allocation, since every write looks its statement up here.
    type Key = [(usize, usize); FUSED_MAX];
    static MADE: LazyLock<Mutex<HashMap<Key, &'static str>>> = LazyLock::new(Default::default);
    let mut key: Key = [(0, 0); FUSED_MAX];
    for (place, (write, params)) in key.iter_mut().zip(run) {
        *place = (std::ptr::from_ref(*write) as usize, *params);
    }
    let mut made = MADE.lock().unwrap_or_else(PoisonError::into_inner);
    made.entry(key).or_insert_with(|| Box::leak(fused_sql(run).into_boxed_str()))
}

/// [`fused`]'s text: `WITH` every body, its parameters shifted past those of
/// the writes before it, then a final `SELECT` that divides by the count of
/// the checked write's rows (a division by zero when it changed none).
fn fused_sql(run: &[(&'static Write, usize)]) -> String {
    let mut ctes = Vec::new();
    let mut check = None;
    let mut offset = 0;
    for (k, (write, params)) in run.iter().enumerate() {
        let first = format!("w{k}_0");
        for (j, body) in write.bodies.iter().enumerate() {
            let name = format!("w{k}_{j}");
            let body = shift_params(&body.replace("{0}", &first), offset);
            ctes.push(format!("{name} AS ({body})"));
            if write.checked && j + 1 == write.bodies.len() {
                check = Some(name);
            }
        }
        offset += params;
    }
    let tail = match check {
        Some(name) => format!("SELECT 1 / (SELECT count(*)::INT FROM {name})"),
        None => String::from("SELECT 1"),
    };
    format!("WITH {} {tail}", ctes.join(", "))
}

/// `sql` with every parameter `$n` renumbered `$(n + offset)`.
fn shift_params(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut digits = String::new();
        while let Some(&(_, d)) = chars.peek()
            && d.is_ascii_digit()
        {
            digits.push(d);
            chars.next();
        }
        match digits.parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&digits),
        }
    }
    out
}

/// Runs `units` (prepared as `statements`), each sent as soon as it is polled.
fn execute_all<'a>(
    client: &'a tokio_postgres::Client,
    units: &'a [Unit<'a>],
    statements: &'a [tokio_postgres::Statement],
) -> impl std::future::Future<Output = Vec<Result<u64, postgres::Error>>> + 'a {
    join_all(
        units.iter().zip(statements).map(move |(unit, statement)| client.execute(statement, &unit.params)),
    )
}

/// The first error among the answers to `units`: a failed statement, or a
/// checked write that changed no row (its statement's division by zero).
fn checked(units: &[Unit<'_>], counts: Vec<Result<u64, postgres::Error>>) -> Result<(), StoreError> {
    for (unit, count) in units.iter().zip(counts) {
        if let Err(err) = count {
            return Err(match unit.unless_none {
                Some(missing) if err.code() == Some(&SqlState::DIVISION_BY_ZERO) => missing(),
                _ => crate::classify(err),
            });
        }
    }
    Ok(())
}

/// The cells of one row, for the record readers both stores share
/// ([`agentmesh_store::cells`]).
pub(crate) struct PgCells<'r>(&'r Row);

impl agentmesh_store::cells::Cells for PgCells<'_> {
    fn text(&self, i: usize) -> agentmesh_store::StoreResult<String> {
        self.0.try_get(i).map_err(crate::classify)
    }
    fn opt_text(&self, i: usize) -> agentmesh_store::StoreResult<Option<String>> {
        self.0.try_get(i).map_err(crate::classify)
    }
    fn int(&self, i: usize) -> agentmesh_store::StoreResult<i64> {
        self.0.try_get(i).map_err(crate::classify)
    }
}

/// A record read from `row` by one of the shared readers.
pub(crate) fn record<'r, T>(
    row: &'r Row,
    read: impl FnOnce(&PgCells<'r>) -> agentmesh_store::StoreResult<T>,
) -> Res<T> {
    read(&PgCells(row)).map_err(Fail)
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

    static PLAIN: Write = Write { bodies: &["INSERT INTO t (mesh_id, a) VALUES ($1, $2)"], checked: false };
    static CHAINED: Write = Write {
        bodies: &[
            "INSERT INTO t (mesh_id, a) VALUES ($1, $2) RETURNING a",
            "INSERT INTO u (a) SELECT a FROM {0}",
        ],
        checked: false,
    };
    static CHECKED: Write =
        Write { bodies: &["UPDATE t SET a = $2 WHERE mesh_id = $1 AND id = $10 RETURNING 1"], checked: true };

    #[test]
    fn parameters_shift_past_the_writes_before_and_only_parameters_change() {
        assert_eq!(shift_params("a = $1 AND b = $10 AND c = '$'", 8), "a = $9 AND b = $18 AND c = '$'");
        assert_eq!(shift_params("x = $2", 0), "x = $2");
    }

    #[test]
    fn writes_in_a_row_share_one_statement_checked_by_its_one_checked_write() {
        let sql = fused_sql(&[(&CHECKED, 10), (&PLAIN, 2), (&CHAINED, 2)]);
        assert_eq!(
            sql,
            "WITH w0_0 AS (UPDATE t SET a = $2 WHERE mesh_id = $1 AND id = $10 RETURNING 1), \
             w1_0 AS (INSERT INTO t (mesh_id, a) VALUES ($11, $12)), \
             w2_0 AS (INSERT INTO t (mesh_id, a) VALUES ($13, $14) RETURNING a), \
             w2_1 AS (INSERT INTO u (a) SELECT a FROM w2_0) \
             SELECT 1 / (SELECT count(*)::INT FROM w0_0)"
        );
        assert!(fused_sql(&[(&PLAIN, 2)]).ends_with("SELECT 1"));
    }

    #[test]
    fn a_run_ends_at_a_second_checked_write_at_its_cap_and_at_any_other_statement() {
        let write = |w: &'static Write, n: usize| Deferred {
            sql: Sql::Write(w),
            params: (0..n).map(|i| Arc::new(i as i64) as Owned).collect(),
            unless_none: w.checked.then(|| Arc::new(|| StoreError::Busy) as Missing),
        };
        let deferred = vec![
            write(&CHECKED, 10),
            write(&PLAIN, 2),
            write(&CHECKED, 10),
            Deferred {
                sql: Sql::Text("SELECT 1 FROM t WHERE mesh_id = $1 FOR KEY SHARE"),
                params: vec![Arc::new("m")],
                unless_none: None,
            },
            write(&PLAIN, 2),
            write(&PLAIN, 2),
            write(&PLAIN, 2),
            write(&PLAIN, 2),
            write(&PLAIN, 2),
        ];
        let units = units(&deferred);
        let shape: Vec<(usize, bool)> =
            units.iter().map(|u| (u.params.len(), u.unless_none.is_some())).collect();
        assert_eq!(shape, [(12, true), (10, true), (1, false), (8, false), (2, false)]);
        // The same run, the same text: prepared once per connection.
        assert!(std::ptr::eq(units[3].sql, fused(&[(&PLAIN, 2); 4])));
    }
}
