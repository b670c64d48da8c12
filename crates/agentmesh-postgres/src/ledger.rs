//! The event ledger (`mesh_event_ledger`): append-only entries, newest-first and
//! append-order reads, and slice paging.
//!
//! Every entry has a sequence number (`seq`) from one database sequence and the
//! id of the transaction that wrote it (`txid`). Writers of one mesh run at once
//! and take no lock for the ledger, so numbers are handed out in one order and
//! become visible in another: a reader that moved past 101 could miss 100
//! committing after it. A page by sequence (`afterSeq`) therefore reads the
//! mesh's entries in `(txid, seq)` order, and only those written by
//! transactions older than the oldest one still running
//! (`pg_snapshot_xmin(pg_current_snapshot())`): every such transaction has
//! ended, and every transaction that may still commit has a larger id, so
//! that prefix of the order only ever grows at its end. A reader paging it
//! sees every committed entry exactly once, in one order; a transaction that
//! stays open holds back what comes after it (never skips it). The cursor a
//! page hands out is the `seq` of the last entry it read (the entry's place in
//! that order); the first page starts after 0. A sequence never hands out a
//! number twice, so the numbers of deleted entries are never reused. Every page
//! names the database's id (`agentmesh_meta`'s `database_id`) as its origin.
//!
//! Append order is (timestamp, seq). The slice protocol of the original's peers
//! pages in (timestamp, id) order through `idx_mesh_event_ledger_slice`.

use std::sync::LazyLock;

use agentmesh_core::ledger::{LedgerSlice, kinds};
use agentmesh_core::{LedgerEntry, LedgerQuery, SliceQuery};
use agentmesh_store::{StoreError, StoreResult};
use postgres::Row;
use postgres::types::ToSql;

use crate::columns::statement_row;
use crate::db::{Db, unsigned};
use crate::{PgStore, Res};

use agentmesh_store::cells::LEDGER_COLUMNS as COLUMNS;

/// The kinds the kind index leaves out: one entry per task enqueued, claimed or
/// completed. They are most of a ledger, so a filter on them walks the mesh's
/// time order instead.
const UNINDEXED_KINDS: [&str; 3] = [kinds::TASK_DISPATCHED, kinds::TASK_CLAIMED, kinds::TASK_COMPLETED];

/// The kind index's condition, word for word: the planner uses a partial index
/// only for a query whose `WHERE` implies its condition, which a bound list of
/// kinds cannot show, so a filter on indexed kinds states it.
const INDEXED_KIND: &str =
    "kind <> 'task_dispatched' AND kind <> 'task_claimed' AND kind <> 'task_completed'";

/// Which filters a read applies; each combination has its own fixed statement.
#[derive(Clone, Copy)]
struct Filter {
    /// `timestamp >= since`.
    since: bool,
    /// A kind filter.
    kind: bool,
    /// Every kind asked for is in the kind index.
    indexed: bool,
}

impl Filter {
    /// Every combination, in the order of [`Filter::index`].
    fn all() -> impl Iterator<Item = Filter> {
        (0..8).map(|i| Filter { since: i & 1 != 0, kind: i & 2 != 0, indexed: i & 4 != 0 })
    }

    fn index(self) -> usize {
        usize::from(self.since) | usize::from(self.kind) << 1 | usize::from(self.indexed) << 2
    }

    fn new(since: bool, kinds: &[&str]) -> Filter {
        Filter {
            since,
            kind: !kinds.is_empty(),
            indexed: !kinds.is_empty() && kinds.iter().all(|k| !UNINDEXED_KINDS.contains(k)),
        }
    }

    /// The `WHERE` terms after `mesh_id = $1`, numbering parameters from `$next`
    /// (the kind term binds `kind_op`: `= ANY($n)` or `= $n`); returns the terms
    /// and the next free parameter number.
    fn terms(self, mut next: usize, kind_op: &str) -> (String, usize) {
        let mut sql = String::new();
        if self.since {
            sql.push_str(&format!(" AND timestamp >= ${next}"));
            next += 1;
        }
        if self.kind {
            sql.push_str(&format!(" AND kind {}", kind_op.replace("$n", &format!("${next}"))));
            next += 1;
            if self.indexed {
                sql.push_str(" AND ");
                sql.push_str(INDEXED_KIND);
            }
        }
        (sql, next)
    }
}

/// One fixed statement per [`Filter`], built once.
type Statements = LazyLock<Vec<String>>;

static ORDERED: Statements = LazyLock::new(|| {
    Filter::all()
        .map(|f| {
            let (terms, _) = f.terms(2, "= ANY($n)");
            format!(
                "SELECT {COLUMNS} FROM mesh_event_ledger WHERE mesh_id = $1{terms}
                 ORDER BY timestamp ASC, seq ASC"
            )
        })
        .collect()
});

static ORDERED_TAIL: Statements = LazyLock::new(|| {
    Filter::all()
        .map(|f| {
            let (terms, limit) = f.terms(2, "= ANY($n)");
            format!(
                "SELECT {COLUMNS} FROM (
                     SELECT {COLUMNS}, seq FROM mesh_event_ledger WHERE mesh_id = $1{terms}
                     ORDER BY timestamp DESC, seq DESC LIMIT ${limit}
                 ) AS tail ORDER BY timestamp ASC, seq ASC"
            )
        })
        .collect()
});

/// A page by sequence: `$2` is the cursor (the `seq` of the last entry read, 0
/// before the first); the last parameter the limit. Entries come in `(txid,
/// seq)` order below the horizon (see the module docs); a cursor whose entry is
/// gone stands for the last entry numbered below it.
static SLICE_BY_SEQ: Statements = LazyLock::new(|| {
    Filter::all()
        .map(|f| {
            let (terms, limit) = f.terms(3, "= $n");
            format!(
                "SELECT {COLUMNS}, seq FROM mesh_event_ledger
                 WHERE mesh_id = $1
                   AND (txid, seq) > ({CURSOR_TXID}, $2)
                   AND txid < pg_snapshot_xmin(pg_current_snapshot()){terms}
                 ORDER BY txid ASC, seq ASC LIMIT ${limit}"
            )
        })
        .collect()
});

/// The `txid` of the entry numbered `$seq` in mesh `$1`: the hot entry, else
/// the archived one (every archived entry of a mesh comes before every hot
/// one in page order, so a cursor on the archive's last entry reads on in the
/// hot ledger), else the entry an export dropped last (the oldest cursor still
/// served, see `archive`); a number no entry has any more stands for the last
/// hot entry numbered below it; `0` for the start.
macro_rules! cursor_txid {
    ($seq:literal) => {
        concat!(
            "COALESCE((SELECT c.txid FROM mesh_event_ledger c WHERE c.mesh_id = $1 AND c.seq = ",
            $seq,
            "),
             (SELECT a.txid FROM mesh_event_ledger_archive a WHERE a.mesh_id = $1 AND a.seq = ",
            $seq,
            "),
             (SELECT t.value::text::xid8 FROM mesh_archive_meta t
               WHERE t.mesh_id = $1 AND t.key = 'dropped_txid'
                 AND EXISTS (SELECT 1 FROM mesh_archive_meta d
                              WHERE d.mesh_id = $1 AND d.key = 'dropped_through' AND d.value = ",
            $seq,
            ")),
             (SELECT c.txid FROM mesh_event_ledger c
               WHERE c.mesh_id = $1 AND c.seq <= ",
            $seq,
            " ORDER BY c.seq DESC LIMIT 1),
             '0'::xid8)"
        )
    };
}
pub(crate) use cursor_txid;

/// The `txid` of the cursor `$2`'s entry in mesh `$1` (`0` for the start).
const CURSOR_TXID: &str = cursor_txid!("$2");

/// A page by time from the start of the mesh's ledger.
static SLICE_FROM_START: Statements = LazyLock::new(|| {
    Filter::all()
        .map(|f| {
            let (terms, limit) = f.terms(2, "= $n");
            format!(
                "SELECT {COLUMNS}, seq FROM mesh_event_ledger WHERE mesh_id = $1{terms}
                 ORDER BY timestamp ASC, id ASC LIMIT ${limit}"
            )
        })
        .collect()
});

/// A page by time after the entry `$2` (none when the mesh has no such entry:
/// the row comparison with NULL is never true).
static SLICE_AFTER_ID: Statements = LazyLock::new(|| {
    Filter::all()
        .map(|f| {
            let (terms, limit) = f.terms(3, "= $n");
            format!(
                "SELECT {COLUMNS}, seq FROM mesh_event_ledger
                 WHERE mesh_id = $1
                   AND (timestamp, id) > (SELECT c.timestamp, c.id FROM mesh_event_ledger c
                                           WHERE c.mesh_id = $1 AND c.id = $2){terms}
                 ORDER BY timestamp ASC, id ASC LIMIT ${limit}"
            )
        })
        .collect()
});

/// The mesh's head (the `seq` of the last entry below the horizon, in page
/// order), the database's id (the origin of its pages), and whether committed
/// entries after the cursor `$2` wait above the horizon (held back by a
/// transaction still running).
static HEAD_AND_ORIGIN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT (SELECT seq FROM mesh_event_ledger
                  WHERE mesh_id = $1 AND txid < pg_snapshot_xmin(pg_current_snapshot())
                  ORDER BY txid DESC, seq DESC LIMIT 1),
                (SELECT value FROM agentmesh_meta WHERE key = 'database_id'),
                EXISTS (SELECT 1 FROM mesh_event_ledger
                         WHERE mesh_id = $1 AND (txid, seq) > ({CURSOR_TXID}, $2)
                           AND txid >= pg_snapshot_xmin(pg_current_snapshot()))"
    )
});

/// How long a page by sequence waits, at most, for entries held back by
/// transactions still running (those are short: a write of another daemon)
/// before it answers with what is final.
const HELD_BACK_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

pub(crate) fn entry_from_row(row: &Row) -> crate::Res<LedgerEntry> {
    crate::db::record(row, agentmesh_store::cells::ledger_entry)
}

/// Inserts one entry unless its id exists in its mesh; returns whether it was
/// new. Its number and transaction id place it in the page order (see the
/// module docs).
pub(crate) fn append(db: &crate::db::Db<'_>, entry: &LedgerEntry) -> crate::Res<bool> {
    Ok(db.execute_owned(APPEND, &append_values(entry)?)? > 0)
}

/// Appends as [`append`] does, for a caller that does not read whether the
/// entry was new: the row goes out with the operation's next statement (see
/// [`crate::db::Db::defer`]), in the order of the appends.
pub(crate) fn append_later(db: &crate::db::Db<'_>, entry: &LedgerEntry) -> crate::Res<()> {
    db.defer_write(&APPEND_LATER, append_values(entry)?, None);
    Ok(())
}

const APPEND: &str =
    "INSERT INTO mesh_event_ledger (mesh_id, id, timestamp, kind, node_id, session_id, provider_type, payload)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (mesh_id, id) DO NOTHING";

/// [`APPEND`] for an import: an entry whose id the mesh's archive holds is
/// skipped too.
const IMPORT: &str =
    "INSERT INTO mesh_event_ledger (mesh_id, id, timestamp, kind, node_id, session_id, provider_type, payload)
     SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text
      WHERE NOT EXISTS (SELECT 1 FROM mesh_event_ledger_archive a WHERE a.mesh_id = $1 AND a.id = $2)
     ON CONFLICT (mesh_id, id) DO NOTHING";

/// Inserts one imported entry unless its id exists in its mesh, hot or
/// archived; returns whether it was new.
pub(crate) fn append_imported(db: &crate::db::Db<'_>, entry: &LedgerEntry) -> crate::Res<bool> {
    Ok(db.execute_owned(IMPORT, &append_values(entry)?)? > 0)
}

/// [`APPEND`] as a write that shares a statement with the writes next to it.
static APPEND_LATER: crate::db::Write = crate::db::Write { bodies: &[APPEND], checked: false };

fn append_values(entry: &LedgerEntry) -> crate::Res<Vec<crate::db::Owned>> {
    Ok(LedgerRow::of(entry)?.values(&entry.mesh_id))
}

statement_row! {
    /// One ledger entry's columns after its mesh, in [`APPEND`]'s parameter
    /// order.
    pub(crate) struct LedgerRow {
        id: String,
        timestamp: String,
        kind: String,
        node_id: Option<String>,
        session_id: Option<String>,
        provider_type: Option<String>,
        payload: String,
    }
}

impl LedgerRow {
    /// The row of `entry`.
    pub(crate) fn of(entry: &LedgerEntry) -> crate::Res<LedgerRow> {
        Ok(LedgerRow {
            id: entry.id.clone(),
            timestamp: entry.timestamp.clone(),
            kind: entry.kind.clone(),
            node_id: entry.node_id.clone(),
            session_id: entry.session_id.clone(),
            provider_type: entry.provider_type.clone(),
            payload: serde_json::to_string(&entry.payload)?,
        })
    }
}

/// The kinds a query asks for, blank ones left out.
fn query_kinds(query: &LedgerQuery) -> Vec<String> {
    query.kinds.iter().filter(|k| !k.trim().is_empty()).cloned().collect()
}

/// Runs one of `statements` for `query`'s filters, with `limit` bound last when
/// given.
fn read_filtered(
    db: &Db<'_>,
    statements: &Statements,
    mesh_id: &str,
    query: &LedgerQuery,
    limit: Option<i64>,
) -> Res<Vec<LedgerEntry>> {
    let kinds = query_kinds(query);
    let kind_refs: Vec<&str> = kinds.iter().map(String::as_str).collect();
    let filter = Filter::new(query.since.is_some(), &kind_refs);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&mesh_id];
    if let Some(since) = &query.since {
        params.push(since);
    }
    if filter.kind {
        params.push(&kinds);
    }
    if let Some(limit) = &limit {
        params.push(limit);
    }
    let rows = db.query(&statements[filter.index()], &params)?;
    rows.iter().map(entry_from_row).collect()
}

/// Append order; with a tail, the newest `tail` entries in append order.
pub(crate) fn read_ordered(db: &Db<'_>, mesh_id: &str, query: &LedgerQuery) -> Res<Vec<LedgerEntry>> {
    match query.tail {
        Some(tail) if tail > 0 => read_filtered(db, &ORDERED_TAIL, mesh_id, query, Some(i64::from(tail))),
        _ => read_filtered(db, &ORDERED, mesh_id, query, None),
    }
}

/// Imports entries in the order given, each taking the next number; an id
/// already in its mesh, hot or archived, is skipped. Takes the lock of every mesh named, in mesh
/// order. Returns how many were new.
pub(crate) fn import(db: &Db<'_>, entries: &[LedgerEntry]) -> Res<u64> {
    let mut meshes: Vec<&str> = entries.iter().map(|e| e.mesh_id.as_str()).collect();
    meshes.sort_unstable();
    meshes.dedup();
    for mesh_id in meshes {
        db.lock(mesh_id, crate::Lock::Mesh)?;
    }
    let mut imported = 0;
    for entry in entries {
        imported += u64::from(append_imported(db, entry)?);
    }
    Ok(imported)
}

/// One slice page: by sequence with `after_seq`, else in (timestamp, id) order,
/// and whether a page by sequence ended short of committed entries a running
/// transaction holds back. Its statements must see one snapshot (the page and
/// the head agree).
pub(crate) fn slice(db: &Db<'_>, mesh_id: &str, query: &SliceQuery) -> Res<(LedgerSlice, bool)> {
    let kind = query.kind.as_deref().filter(|k| !k.trim().is_empty());
    let filter = Filter::new(query.since.is_some(), kind.as_slice());
    let limit = query.effective_limit();
    let fetch = i64::from(limit) + 1;
    let after_id = query.after_id.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    let after_seq = query.after_seq.map(|s| i64::try_from(s).unwrap_or(i64::MAX));

    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&mesh_id];
    let statement = match (&after_seq, &after_id) {
        (Some(seq), _) => {
            params.push(seq);
            &SLICE_BY_SEQ[filter.index()]
        }
        (None, Some(id)) => {
            params.push(id);
            &SLICE_AFTER_ID[filter.index()]
        }
        (None, None) => &SLICE_FROM_START[filter.index()],
    };
    if let Some(since) = &query.since {
        params.push(since);
    }
    if let Some(kind) = &kind {
        params.push(kind);
    }
    params.push(&fetch);
    let mut rows: Vec<(LedgerEntry, i64)> = db
        .query(statement, &params)?
        .iter()
        .map(|r| Ok((entry_from_row(r)?, r.get(8))))
        .collect::<crate::Res<_>>()?;
    let full = rows.len() > limit as usize;
    rows.truncate(limit as usize);

    let cursor = after_seq.unwrap_or(0);
    let head_and_origin = db.query_one(&HEAD_AND_ORIGIN, &[&mesh_id, &cursor])?;
    let head: Option<i64> = head_and_origin.get(0);
    let origin: Option<String> = head_and_origin.get(1);
    let held_back: bool = after_seq.is_some() && !full && head_and_origin.get(2);

    let next_after_id = rows.last().map(|(e, _)| e.id.clone());
    let mut page = match query.after_seq {
        Some(after) => {
            // Positions are places in the page order, not numbers to compare.
            let last_read = rows.last().map_or(after, |(_, seq)| unsigned(*seq));
            let head = head.map_or(last_read, unsigned);
            let next_after_seq = if full { last_read } else { head };
            let seqs = rows.iter().map(|(_, seq)| unsigned(*seq)).collect();
            let entries = rows.into_iter().map(|(e, _)| e).collect();
            let mut page =
                LedgerSlice::by_time(mesh_id, entries, None, next_after_id, limit, full, "postgres");
            page.seqs = seqs;
            page.cursor.after_seq = Some(after);
            page.cursor.next_after_seq = Some(next_after_seq);
            page.cursor.head_seq = Some(head);
            page
        }
        None => {
            let next = next_after_id.or_else(|| after_id.clone());
            let entries = rows.into_iter().map(|(e, _)| e).collect();
            LedgerSlice::by_time(mesh_id, entries, after_id, next, limit, full, "postgres")
        }
    };
    page.origin = origin;
    Ok((page, held_back))
}

impl agentmesh_store::LedgerStore for PgStore {
    fn read_ledger_ordered(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>> {
        self.read(|db| read_ordered(db, mesh_id, query))
    }

    fn import_ledger(&self, entries: &[LedgerEntry]) -> StoreResult<u64> {
        LedgerEntry::validate_all(entries).map_err(StoreError::InvalidInput)?;
        self.write_unlocked(|db| import(db, entries))
    }

    /// A page by sequence that ended short of committed entries held back by a
    /// running transaction is read again after a short pause, for up to
    /// `HELD_BACK_WAIT`: a reader then sees what was committed before it asked
    /// (its own writes included) unless some transaction stays open longer.
    fn ledger_slice(&self, mesh_id: &str, query: &SliceQuery) -> StoreResult<LedgerSlice> {
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_micros(200);
        loop {
            let (page, held_back) = self.snapshot(|db| slice(db, mesh_id, query))?;
            if !held_back || started.elapsed() >= HELD_BACK_WAIT {
                return Ok(page);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The condition a filter states is the kind index's own, and leaves out
    /// exactly the unindexed kinds.
    #[test]
    fn the_kind_filter_states_the_kind_index_condition() {
        let stated: Vec<String> = UNINDEXED_KINDS.iter().map(|k| format!("kind <> '{k}'")).collect();
        assert_eq!(INDEXED_KIND, stated.join(" AND "));
        let schema = include_str!("../migrations/0001_schema.sql");
        assert!(schema.contains(&format!("WHERE {INDEXED_KIND};")), "{schema}");
        let terms = |kinds: &[&str]| Filter::new(false, kinds).terms(2, "= ANY($n)").0;
        assert_eq!(terms(&["task_failed", "note"]), format!(" AND kind = ANY($2) AND {INDEXED_KIND}"));
        assert_eq!(terms(&["task_failed", "task_completed"]), " AND kind = ANY($2)");
        assert_eq!(terms(&[]), "");
        let (both, next) = Filter::new(true, &["note"]).terms(3, "= $n");
        assert_eq!(both, format!(" AND timestamp >= $3 AND kind = $4 AND {INDEXED_KIND}"));
        assert_eq!(next, 5);
    }

    /// Every statement reads one mesh.
    #[test]
    fn every_statement_filters_by_mesh() {
        for statements in [&ORDERED, &ORDERED_TAIL, &SLICE_BY_SEQ, &SLICE_FROM_START, &SLICE_AFTER_ID] {
            for sql in statements.iter() {
                assert!(sql.contains("WHERE mesh_id = $1"), "{sql}");
            }
        }
    }
}
