//! [`Db`]: one connection inside one operation, with the statement calls the
//! backend's modules make. Every statement is prepared once per connection and
//! reused by its SQL text.

use std::cell::RefCell;

use postgres::Row;
use postgres::types::ToSql;

use crate::pool::Conn;
use crate::{Fail, Res};

/// Parameters of one statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// The connection of one operation: inside a transaction for writes and
/// snapshot reads, or running each statement by itself for point reads.
pub(crate) struct Db<'c> {
    conn: RefCell<&'c mut Conn>,
    /// The salt of this installation's advisory lock keys.
    salt: &'c str,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut Conn, salt: &'c str) -> Db<'c> {
        Db { conn: RefCell::new(conn), salt }
    }

    /// Every row `sql` returns.
    pub(crate) fn query(&self, sql: &str, params: Params<'_>) -> Res<Vec<Row>> {
        let mut conn = self.conn.borrow_mut();
        let statement = conn.statement(sql)?;
        Ok(conn.client.query(&statement, params)?)
    }

    /// The one row `sql` returns, if any (more than one is an error).
    pub(crate) fn query_opt(&self, sql: &str, params: Params<'_>) -> Res<Option<Row>> {
        let mut conn = self.conn.borrow_mut();
        let statement = conn.statement(sql)?;
        Ok(conn.client.query_opt(&statement, params)?)
    }

    /// The one row `sql` returns (none, or more than one, is an error).
    pub(crate) fn query_one(&self, sql: &str, params: Params<'_>) -> Res<Row> {
        let mut conn = self.conn.borrow_mut();
        let statement = conn.statement(sql)?;
        Ok(conn.client.query_one(&statement, params)?)
    }

    /// Runs `sql`; returns how many rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: Params<'_>) -> Res<u64> {
        let mut conn = self.conn.borrow_mut();
        let statement = conn.statement(sql)?;
        Ok(conn.client.execute(&statement, params)?)
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
