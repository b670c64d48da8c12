//! The undrained events counted.

use rusqlite::Connection;

use crate::Res;

pub(crate) fn count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt = conn.prepare_cached("SELECT COUNT(*) FROM mesh_inbox_queue WHERE mesh_id = ?1")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
}
