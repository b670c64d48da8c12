//! The event ledger table `mesh_event_ledger`: append-only entries, newest-first
//! and append-order reads, and slice paging.
//!
//! Every entry has a sequence number (`seq`, the table's integer key since
//! migration 0013), one sequence for the whole database, taken in the
//! transaction that appends it: one past the highest number, and past the
//! highest number a deletion ever removed (`mesh_meta`), so a number is never
//! handed out twice. Transactions on one file are serial, so numbers increase
//! in commit order. A slice read by sequence (`afterSeq`) walks the table from
//! its cursor and keeps the mesh's entries; such a page never skips an entry
//! committed after the page before it, whatever its timestamp. Every page names
//! the database's id (`mesh_meta`) as its origin.
//!
//! Append order is (timestamp, seq): entries written in the same millisecond
//! keep the order they were written in. The slice protocol of the original's
//! peers pages in (timestamp, id) order through `idx_mesh_event_ledger_slice`,
//! seeking straight to the cursor, so a page costs the same at the start and at
//! the end of a million-entry ledger.

use agentmesh_core::ledger::{LedgerSlice, kinds};
use agentmesh_core::{LedgerEntry, LedgerQuery, SliceQuery};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use crate::Res;

use agentmesh_store::cells::LEDGER_COLUMNS as COLUMNS;

/// The kinds the kind index leaves out (migration 0010): one entry per task
/// enqueued, claimed or completed. They are most of a ledger, so a filter on them
/// walks the time order and finds its entries close together, and leaving them
/// out spares every enqueue, claim and completion one index insert.
const UNINDEXED_KINDS: [&str; 3] = [kinds::TASK_DISPATCHED, kinds::TASK_CLAIMED, kinds::TASK_COMPLETED];

/// The kind index's condition, word for word: SQLite uses a partial index only for
/// a query whose `WHERE` states its condition, so a filter on indexed kinds adds it.
const INDEXED_KIND: &str =
    "kind <> 'task_dispatched' AND kind <> 'task_claimed' AND kind <> 'task_completed'";

/// Adds the kind index's condition to a kind filter when every kind it asks for
/// is in the index.
fn push_kind_index_term<'a>(sql: &mut String, kinds: impl IntoIterator<Item = &'a str>) {
    let mut kinds = kinds.into_iter().peekable();
    if kinds.peek().is_some() && kinds.all(|k| !UNINDEXED_KINDS.contains(&k)) {
        sql.push_str(" AND ");
        sql.push_str(INDEXED_KIND);
    }
}

pub(crate) fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<LedgerEntry> {
    crate::cells::record(row, agentmesh_store::cells::ledger_entry)
}

/// The `mesh_meta` key of the database's id, the `origin` of its pages.
const DATABASE_ID: &str = "database_id";

/// The number a new entry takes: one past the highest in the database, and past
/// the highest a deletion removed (`seq` is the table's integer key, so the
/// highest is its last row).
pub(crate) const NEXT_SEQ: &str = "MAX(COALESCE((SELECT MAX(seq) FROM mesh_event_ledger), 0),
                       COALESCE((SELECT value FROM mesh_meta WHERE key = 'ledger_seq_floor'), 0)) + 1";

/// The statement [`append`] runs: a new entry takes the next number.
static APPEND_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "INSERT OR IGNORE INTO mesh_event_ledger
             (id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload, seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, {NEXT_SEQ})"
    )
});

/// Inserts one entry unless its id exists; returns whether it was new. A new entry
/// takes the database's next sequence number.
pub(crate) fn append(conn: &Connection, entry: &LedgerEntry) -> Res<bool> {
    let payload = serde_json::to_string(&entry.payload)?;
    let n = conn.prepare_cached(&APPEND_SQL)?.execute(params![
        entry.id,
        entry.mesh_id,
        entry.timestamp,
        entry.kind,
        entry.node_id,
        entry.session_id,
        entry.provider_type,
        payload,
    ])?;
    Ok(n > 0)
}

/// Migration 0012's data step: makes the database's id, numbers the entries
/// already here per mesh in append order, and builds the sequence index.
pub(crate) fn sequence_existing(tx: &rusqlite::Transaction<'_>) -> Res<()> {
    let database_id = agentmesh_store::ids::mint();
    tx.execute("INSERT INTO mesh_meta (key, value) VALUES (?1, ?2)", params![DATABASE_ID, database_id])?;
    tx.execute_batch(
        "UPDATE mesh_event_ledger SET seq = numbered.n
           FROM (SELECT rowid AS rid,
                        row_number() OVER (PARTITION BY mesh_id ORDER BY timestamp, rowid) AS n
                   FROM mesh_event_ledger) AS numbered
          WHERE mesh_event_ledger.rowid = numbered.rid;
         CREATE INDEX idx_mesh_event_ledger_seq ON mesh_event_ledger(mesh_id, seq);",
    )?;
    Ok(())
}

/// Migration 0013's data step: the entries were numbered anew, so the database
/// takes a new id, and a peer holding a number of the old kind sees a new origin.
pub(crate) fn renumbered(tx: &rusqlite::Transaction<'_>) -> Res<()> {
    tx.execute(
        "INSERT INTO mesh_meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![DATABASE_ID, agentmesh_store::ids::mint()],
    )?;
    Ok(())
}

/// The database's id, the origin of the entries it numbers.
pub(crate) fn database_id(conn: &Connection) -> Res<Option<String>> {
    let mut stmt = conn.prepare_cached("SELECT value FROM mesh_meta WHERE key = ?1")?;
    Ok(stmt.query_row([DATABASE_ID], |r| r.get(0)).optional()?)
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn filters(mesh_id: &str, query: &LedgerQuery) -> (String, Vec<Value>) {
    // `+?` keeps SQLite from re-preparing the ordered statement per binding (see
    // `tasks::stream_sql`).
    let mut sql = String::from("mesh_id = +?");
    let mut args = vec![text(mesh_id)];
    if let Some(since) = &query.since {
        sql.push_str(" AND timestamp >= ?");
        args.push(text(since));
    }
    let kinds: Vec<&String> = query.kinds.iter().filter(|k| !k.trim().is_empty()).collect();
    if !kinds.is_empty() {
        sql.push_str(" AND kind IN (");
        sql.push_str(&vec!["?"; kinds.len()].join(", "));
        sql.push(')');
        push_kind_index_term(&mut sql, kinds.iter().map(|k| k.as_str()));
        args.extend(kinds.into_iter().map(|k| text(k)));
    }
    (sql, args)
}

/// Append order; with a tail, the newest `tail` entries in append order.
pub(crate) fn read_ordered(conn: &Connection, mesh_id: &str, query: &LedgerQuery) -> Res<Vec<LedgerEntry>> {
    let (filter, mut args) = filters(mesh_id, query);
    let tail = query.tail.filter(|&tail| tail > 0);
    if let Some(tail) = tail {
        args.push(Value::Integer(i64::from(tail)));
    }
    let mut stmt = conn.prepare_cached(&ordered_sql(&filter, tail.is_some()))?;
    let rows = stmt.query_map(params_from_iter(args.iter()), entry_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// The statement of [`read_ordered`]: the filtered entries in append order, or
/// with `tail` the newest ones (the last parameter is their number).
fn ordered_sql(filter: &str, tail: bool) -> String {
    if tail {
        format!(
            "SELECT {COLUMNS} FROM (
                 SELECT * FROM mesh_event_ledger WHERE {filter}
                 ORDER BY timestamp DESC, seq DESC LIMIT ?
             ) ORDER BY timestamp ASC, seq ASC"
        )
    } else {
        format!("SELECT {COLUMNS} FROM mesh_event_ledger WHERE {filter} ORDER BY timestamp ASC, seq ASC")
    }
}

/// One slice page: by sequence with `after_seq`, else in (timestamp, id) order.
pub(crate) fn slice(conn: &Connection, mesh_id: &str, query: &SliceQuery) -> Res<LedgerSlice> {
    let mut page = match query.after_seq {
        Some(after_seq) => slice_by_sequence(conn, mesh_id, query, after_seq)?,
        None => slice_by_time(conn, mesh_id, query)?,
    };
    page.origin = database_id(conn)?;
    Ok(page)
}

/// The filters both slice orders apply after their cursor.
fn push_slice_filters(sql: &mut String, args: &mut Vec<Value>, query: &SliceQuery) {
    if let Some(kind) = query.kind.as_deref().filter(|k| !k.trim().is_empty()) {
        sql.push_str(" AND kind = ?");
        push_kind_index_term(sql, [kind]);
        args.push(text(kind));
    }
    if let Some(since) = &query.since {
        sql.push_str(" AND timestamp >= ?");
        args.push(text(since));
    }
}

/// Entries of a page, each with its sequence number.
type Sequenced = Vec<(LedgerEntry, Option<u64>)>;

/// Runs a page's statement, reading one entry past `limit` to tell whether more
/// follow; returns the page with each entry's sequence number.
fn read_page(conn: &Connection, sql: &str, args: &[Value], limit: u32) -> Res<(Sequenced, bool)> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt
        .query_map(params_from_iter(args.iter()), |row| {
            Ok((entry_from_row(row)?, row.get::<_, Option<i64>>(8)?.and_then(|s| u64::try_from(s).ok())))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let has_more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    Ok((rows, has_more))
}

/// Numbers a page by sequence walks at most: a page of a mesh whose entries are
/// few among many of other meshes stops there, says more may follow, and the
/// next page goes on from there, so no page walks the whole ledger.
const SEQ_WINDOW: u64 = 10_000;

/// A page in commit order: the entries of the mesh numbered after `after_seq`,
/// walking at most [`SEQ_WINDOW`] numbers. The last page's cursor moves to the
/// head: nothing of the mesh was found up to there, so the next page walks only
/// what is committed after it.
fn slice_by_sequence(
    conn: &Connection,
    mesh_id: &str,
    query: &SliceQuery,
    after_seq: u64,
) -> Res<LedgerSlice> {
    let limit = query.effective_limit();
    let window_end = after_seq.saturating_add(SEQ_WINDOW);
    // The table's key order is the sequence: the page walks it from the cursor
    // (no index, so no plan sorts), skipping other meshes' entries.
    let mut sql = format!(
        "SELECT {COLUMNS}, seq FROM mesh_event_ledger NOT INDEXED WHERE seq > ? AND seq <= ? AND mesh_id = ?"
    );
    let number = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let mut args: Vec<Value> = vec![number(after_seq), number(window_end), text(mesh_id)];
    push_slice_filters(&mut sql, &mut args, query);
    sql.push_str(" ORDER BY seq ASC LIMIT ?");
    args.push(Value::Integer(i64::from(limit) + 1));
    let (rows, full) = read_page(conn, &sql, &args, limit)?;
    let last_read = rows.last().and_then(|(_, seq)| *seq).unwrap_or(after_seq);
    let head: Option<i64> =
        conn.prepare_cached("SELECT MAX(seq) FROM mesh_event_ledger")?.query_row([], |r| r.get(0))?;
    let head = head.and_then(|h| u64::try_from(h).ok()).unwrap_or(0).max(last_read);
    let (next_after_seq, has_more) = if full {
        (last_read, true)
    } else if window_end < head {
        (window_end, true)
    } else {
        (head, false)
    };
    let next_after_id = rows.last().map(|(e, _)| e.id.clone());
    let seqs = rows.iter().filter_map(|(_, seq)| *seq).collect();
    let entries = rows.into_iter().map(|(e, _)| e).collect();
    let mut page = LedgerSlice::by_time(mesh_id, entries, None, next_after_id, limit, has_more, SOURCE);
    page.seqs = seqs;
    page.cursor.after_seq = Some(after_seq);
    page.cursor.next_after_seq = Some(next_after_seq);
    page.cursor.head_seq = Some(head);
    Ok(page)
}

/// The store a slice names as its source of truth.
const SOURCE: &str = "local_sqlite";

/// A page in the original's (timestamp, id) order. The cursor entry's timestamp
/// is looked up by primary key, then the page is a range scan of the slice index
/// starting right after it.
fn slice_by_time(conn: &Connection, mesh_id: &str, query: &SliceQuery) -> Res<LedgerSlice> {
    let limit = query.effective_limit();
    let after_id = query.after_id.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    let cursor_ts: Option<String> = match &after_id {
        Some(id) => {
            let mut stmt = conn
                .prepare_cached("SELECT timestamp FROM mesh_event_ledger WHERE id = ?1 AND mesh_id = ?2")?;
            let ts = stmt.query_row(params![id, mesh_id], |r| r.get(0)).optional()?;
            if ts.is_none() {
                // An unknown cursor gives an empty page, as the original's SQLite slice does.
                return Ok(LedgerSlice::by_time(
                    mesh_id,
                    Vec::new(),
                    after_id.clone(),
                    after_id,
                    limit,
                    false,
                    SOURCE,
                ));
            }
            ts
        }
        None => None,
    };
    let mut sql = format!("SELECT {COLUMNS}, seq FROM mesh_event_ledger WHERE mesh_id = +?");
    let mut args: Vec<Value> = vec![text(mesh_id)];
    if let (Some(ts), Some(id)) = (&cursor_ts, &after_id) {
        sql.push_str(" AND (timestamp, id) > (+?, +?)");
        args.push(text(ts));
        args.push(text(id));
    }
    push_slice_filters(&mut sql, &mut args, query);
    sql.push_str(" ORDER BY timestamp ASC, id ASC LIMIT ?");
    args.push(Value::Integer(i64::from(limit) + 1));
    let (rows, has_more) = read_page(conn, &sql, &args, limit)?;
    let entries: Vec<LedgerEntry> = rows.into_iter().map(|(e, _)| e).collect();
    let next = entries.last().map(|e| e.id.clone()).or_else(|| after_id.clone());
    Ok(LedgerSlice::by_time(mesh_id, entries, after_id, next, limit, has_more, SOURCE))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends number entries 1, 2, 3, ... across meshes in the order they are
    /// made; a taken id takes no number; taking the next number reads the
    /// table's last row and the floor, never scanning.
    #[test]
    fn appends_number_entries_in_order_across_meshes() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let entry = |i: usize| LedgerEntry {
            id: format!("e{i}"),
            mesh_id: format!("m{}", i % 4),
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            kind: "note".into(),
            node_id: None,
            session_id: None,
            provider_type: None,
            payload: serde_json::json!({}),
        };
        for i in 0..40 {
            assert!(append(&conn, &entry(i)).unwrap());
        }
        assert!(!append(&conn, &entry(3)).unwrap(), "a taken id takes no number");
        assert!(append(&conn, &entry(40)).unwrap());
        let seqs: Vec<(String, i64)> = conn
            .prepare("SELECT id, seq FROM mesh_event_ledger WHERE mesh_id = 'm0' ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let want: Vec<(String, i64)> = (0..=10).map(|k| (format!("e{}", 4 * k), 4 * k + 1)).collect();
        assert_eq!(seqs, want);
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN SELECT {NEXT_SEQ}"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(!plan.contains("SCAN mesh_event_ledger"), "{plan}");
    }

    /// The condition a filter adds is the kind index's own, and leaves out exactly
    /// the unindexed kinds.
    #[test]
    fn the_kind_filter_states_the_kind_index_condition() {
        let stated: Vec<String> = UNINDEXED_KINDS.iter().map(|k| format!("kind <> '{k}'")).collect();
        assert_eq!(INDEXED_KIND, stated.join(" AND "));
        let migration = include_str!("../migrations/0010_ledger_kind_index.sql");
        assert!(migration.contains(&format!("WHERE {INDEXED_KIND};")), "{migration}");
        let term = |kinds: &[&str]| {
            let mut sql = String::new();
            push_kind_index_term(&mut sql, kinds.iter().copied());
            sql
        };
        assert_eq!(term(&["task_failed", "note"]), format!(" AND {INDEXED_KIND}"));
        assert_eq!(term(&["task_failed", "task_completed"]), "");
        assert_eq!(term(&["task_claimed"]), "");
        assert_eq!(term(&[]), "");
    }

    /// A filter on an indexed kind seeks the kind index; a filter that asks for an
    /// unindexed kind walks the mesh's entries in time order through the slice
    /// index. Neither scans the table.
    #[test]
    fn kind_filters_read_through_an_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let plan = |kinds: &[&str]| {
            let query = LedgerQuery {
                kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
                ..LedgerQuery::default()
            };
            let (filter, mut args) = filters("m", &query);
            args.push(Value::Integer(10));
            crate::query_plan(&conn, &ordered_sql(&filter, true), &args)
        };
        let p = plan(&["task_failed"]);
        assert!(p.contains("idx_mesh_event_ledger_mesh_kind"), "{p}");
        for kinds in [&["task_completed"][..], &["task_claimed", "task_failed"]] {
            let p = plan(kinds);
            assert!(p.contains("idx_mesh_event_ledger_slice"), "{kinds:?}: {p}");
        }
    }
}
