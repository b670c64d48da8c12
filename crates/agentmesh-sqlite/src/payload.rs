//! Task and event payloads in SQLite columns (see [`agentmesh_store::packed`]):
//! a deflated payload is a blob, one stored as JSON is text, so a row written
//! before payloads were packed reads as it did. Only [`Stored`] writes a
//! `payload` of `mesh_queue` or `mesh_pending_events`; a task's is read as
//! [`Bytes`] (and unpacked by `tasks::decode`), an event's as [`Json`]; no
//! statement looks inside them with SQLite's JSON functions.

use agentmesh_store::packed::{self, Packed};
use rusqlite::ToSql;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};

/// A payload bound for writing: its stored form.
pub(crate) struct Stored<'a>(Packed<'a>);

impl<'a> Stored<'a> {
    /// The stored form of the JSON text `json` (an event's).
    pub(crate) fn of(json: &'a str) -> Stored<'a> {
        Stored(packed::pack(json))
    }

    /// The stored form of a task's JSON text `json` in `status`.
    pub(crate) fn of_task(json: &'a str, status: agentmesh_core::TaskStatus) -> Stored<'a> {
        Stored(packed::pack_task(json, status))
    }
}

impl ToSql for Stored<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match &self.0 {
            Packed::Text(text) => ValueRef::Text(text.as_bytes()),
            Packed::Deflated(bytes) => ValueRef::Blob(bytes),
        }))
    }
}

/// A task payload as read: the stored bytes of either form, which
/// `tasks::rows::decode` unpacks (a damaged one is a corrupt task, named).
pub(crate) struct Bytes(pub(crate) Vec<u8>);

impl FromSql for Bytes {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Bytes> {
        match value {
            ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Ok(Bytes(bytes.to_vec())),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

/// An event payload as read: its JSON text, whichever form it was stored in
/// (one that cannot be unpacked reads as `{}`, see
/// [`agentmesh_store::packed::unpack_event`]).
pub(crate) struct Json(pub(crate) String);

impl FromSql for Json {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Json> {
        match value {
            ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Ok(Json(packed::unpack_event(bytes))),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

impl From<Json> for String {
    fn from(json: Json) -> String {
        json.0
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    #[test]
    fn a_payload_reads_back_from_either_stored_form() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, payload TEXT NOT NULL)").unwrap();
        let long = format!(r#"{{"message":"{}"}}"#, "refactor the module and report back; ".repeat(10));
        let short = r#"{"a":1}"#;
        for (k, json) in [(1, long.as_str()), (2, short)] {
            conn.execute("INSERT INTO t VALUES (?1, ?2)", rusqlite::params![k, Stored::of(json)]).unwrap();
        }
        // A row as the original (or an earlier agentmesh) wrote it: plain text.
        conn.execute("INSERT INTO t VALUES (3, ?1)", [&long]).unwrap();
        let kinds: Vec<(String, i64)> = conn
            .prepare("SELECT typeof(payload), length(CAST(payload AS BLOB)) FROM t ORDER BY k")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(kinds[0].0, "blob", "expected the long payload deflated");
        assert!(kinds[0].1 < long.len() as i64 / 2, "expected it stored in under half its length: {kinds:?}");
        assert_eq!(kinds[1].0, "text");
        let read =
            |k: i64| conn.query_row("SELECT payload FROM t WHERE k = ?1", [k], |r| r.get::<_, Json>(0));
        assert_eq!(read(1).unwrap().0, long);
        assert_eq!(read(2).unwrap().0, short);
        assert_eq!(read(3).unwrap().0, long);
        conn.execute("INSERT INTO t VALUES (4, x'01ffff')", []).unwrap();
        assert_eq!(read(4).unwrap().0, "", "a damaged event payload reads as no JSON");
        let bytes =
            |k: i64| conn.query_row("SELECT payload FROM t WHERE k = ?1", [k], |r| r.get::<_, Bytes>(0));
        assert_eq!(packed::unpack(&bytes(1).unwrap().0).unwrap(), long);
        assert!(packed::unpack(&bytes(4).unwrap().0).is_err(), "a damaged task payload is an error");
    }
}
