//! The archive: where finished tasks and old ledger entries go when the
//! retention policy ([`agentmesh_core::retention`]) says they have outlived
//! the hot database, and where the product still reads them.
//!
//! A backend moves rows in [`crate::ArchiveStore::archive_expired`] steps,
//! each bounded, and answers archive-only reads. What a reader sees of the
//! two together is decided here, once for both backends:
//!
//! - A task is looked up in the hot database first, then in the archive
//!   ([`find_task`]); an archived task is marked `archived`.
//! - A ledger page reads the archive before the hot ledger ([`slice()`]). A
//!   mesh's ledger leaves the hot database oldest first in sequence order, so
//!   every archived entry of a mesh has a smaller sequence number than every
//!   hot one, and a page by sequence is the archive's then the hot ledger's,
//!   in one order with nothing skipped. A page by time is the archive's
//!   entries in (time, id) order, then the hot ledger's: each entry once.
//! - A cursor before what an export dropped from the archive is
//!   [`StoreError::CursorExpired`], naming the oldest cursor still served.

use agentmesh_core::ledger::{SLICE_MAX_LIMIT, SLICE_PROTOCOL, SliceCursor, SliceSource};
use agentmesh_core::retention::{ArchiveMark, MeshRetention};
use agentmesh_core::{LedgerEntry, LedgerQuery, LedgerSlice, SliceQuery, Task};

use crate::{Store, StoreError, StoreResult};

/// What one archiving step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Finished tasks moved to the archive.
    pub tasks: u64,
    /// Ledger entries moved to the archive.
    pub ledger_entries: u64,
    /// Whether the step stopped at its limit with more left to move.
    pub more: bool,
}

impl ArchiveReport {
    /// Adds another step's counts to these.
    pub fn add(&mut self, other: ArchiveReport) {
        self.tasks += other.tasks;
        self.ledger_entries += other.ledger_entries;
        self.more = other.more;
    }
}

/// A page of a mesh's archived ledger: a slice as the hot ledger answers it
/// (its `has_more` speaks of the archive alone; a page by sequence walks no
/// further than the mesh's newest archived entry).
#[derive(Debug, Clone, PartialEq)]
pub struct ArchivedPage {
    /// The page.
    pub slice: LedgerSlice,
    /// Whether the query's `afterId` names an archived entry (`false` when it
    /// names none, or when the query has no `afterId`).
    pub cursor_archived: bool,
}

/// A mesh's archive and its retention settings.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveState {
    /// The mesh's own retention windows (empty: the daemon's).
    pub retention: MeshRetention,
    /// Archived tasks.
    pub tasks: u64,
    /// Archived ledger entries.
    pub ledger_entries: u64,
    /// The sequence number of the newest archived ledger entry (0: none).
    pub ledger_through: u64,
    /// The last sequence number an export dropped from the archive (0: none):
    /// a ledger cursor before it has expired.
    pub dropped_through: u64,
    /// Where the next export of the whole archive would end.
    pub end: ArchiveMark,
}

/// The task `task_id` of the mesh: the hot one, else the archived one
/// (marked `archived`).
pub fn find_task<S: Store + ?Sized>(store: &S, mesh_id: &str, task_id: &str) -> StoreResult<Option<Task>> {
    if let Some(task) = store.find_task(mesh_id, task_id)? {
        return Ok(Some(task));
    }
    let archived = store.archived_tasks(mesh_id, crate::ArchivedTasks::Id(task_id))?.pop();
    Ok(archived.map(|(_, task)| mark_archived(task)))
}

/// The newest entries about task `task_id` (at most `query.tail`, 200 when
/// unset; of `query.kinds`, from `query.since` on), oldest first, read from the
/// archive and the hot ledger alike; `None` when the mesh holds no such task,
/// hot or archived.
///
/// A task's entries are written from its creation on, so the walk pages by
/// time from there (or from `since`, when later): the archive's entries, then
/// the hot ledger's. An archived task changes no more, so the walk stops after
/// its last change instead of reading every entry since.
pub fn task_history<S: Store + ?Sized>(
    store: &S,
    mesh_id: &str,
    task_id: &str,
    query: &LedgerQuery,
) -> StoreResult<Option<Vec<LedgerEntry>>> {
    let Some(task) = find_task(store, mesh_id, task_id)? else {
        return Ok(None);
    };
    let until = task.archived.unwrap_or(false).then_some(task.updated_at.as_str());
    let since =
        query.since.clone().map_or(task.created_at.clone(), |since| since.max(task.created_at.clone()));
    let tail = query.tail.filter(|&t| t > 0).unwrap_or(200) as usize;
    let wanted = |entry: &LedgerEntry| {
        entry.task_id() == Some(task_id)
            && until.is_none_or(|until| entry.timestamp.as_str() <= until)
            && (query.kinds.is_empty() || query.kinds.contains(&entry.kind))
    };
    let mut page = SliceQuery { since: Some(since), limit: Some(SLICE_MAX_LIMIT), ..SliceQuery::default() };
    let mut found = std::collections::VecDeque::new();
    loop {
        let read = slice(store, mesh_id, &page)?;
        let past =
            until.is_some_and(|until| read.entries.last().is_some_and(|e| e.timestamp.as_str() > until));
        for entry in read.entries.into_iter().filter(|e| wanted(e)) {
            if found.len() == tail {
                found.pop_front();
            }
            found.push_back(entry);
        }
        match read.cursor.next_after_id {
            Some(next) if read.cursor.has_more && !past => page.after_id = Some(next),
            _ => return Ok(Some(found.into())),
        }
    }
}

/// `task` marked as read from the archive.
pub fn mark_archived(mut task: Task) -> Task {
    task.archived = Some(true);
    task
}

/// A page of the mesh's whole ledger, the archive's entries before the hot
/// ledger's (see the module docs). `archived` on the answer counts the
/// page's entries, from its first, that were read from the archive.
pub fn slice<S: Store + ?Sized>(store: &S, mesh_id: &str, query: &SliceQuery) -> StoreResult<LedgerSlice> {
    let limit = query.effective_limit() as usize;
    let ArchivedPage { slice: mut archived, cursor_archived } = store.archived_ledger(mesh_id, query)?;
    if query.after_id.is_some() && !cursor_archived {
        // The cursor is a hot entry (or none at all): the archive is behind it.
        return store.ledger_slice(mesh_id, query);
    }
    if archived.cursor.has_more {
        archived.archived = archived.entries.len() as u32;
        return Ok(archived);
    }
    if archived.entries.is_empty() && !cursor_archived {
        return store.ledger_slice(mesh_id, query);
    }
    // The archive ends on this page: the rest of the page from the hot
    // ledger's start (by sequence: after the mesh's last archived entry,
    // which every hot entry of the mesh follows).
    let mut rest = query.clone();
    rest.limit = Some(limit.saturating_sub(archived.entries.len()).max(1) as u32);
    rest.after_id = None;
    if let Some(after) = query.after_seq {
        rest.after_seq = Some(archived.seqs.last().copied().unwrap_or(after));
    }
    let mut hot = store.ledger_slice(mesh_id, &rest)?;
    if archived.entries.len() >= limit {
        // A full page of archived entries: the hot ledger's page only says
        // whether more follow.
        hot.entries.clear();
        hot.seqs.clear();
        hot.cursor.has_more = true;
        hot.cursor.next_after_seq = rest.after_seq;
    }
    let count = archived.entries.len() as u32;
    let mut entries = archived.entries;
    entries.append(&mut hot.entries);
    let mut seqs = Vec::new();
    if query.after_seq.is_some() {
        seqs = archived.seqs;
        seqs.append(&mut hot.seqs);
    }
    hot.cursor.limit = limit as u32;
    hot.cursor.after_id.clone_from(&query.after_id);
    hot.cursor.after_seq = query.after_seq;
    hot.cursor.next_after_id = entries.last().map(|e| e.id.clone()).or(hot.cursor.next_after_id);
    Ok(LedgerSlice { entries, seqs, archived: count, ..hot })
}

/// A page of archived entries (each with its sequence number) as a slice: by
/// sequence when the query has `afterSeq`, else by time; `has_more` speaks of
/// the archive alone; `source` names the backend and the table read.
pub fn page(
    mesh_id: &str,
    query: &SliceQuery,
    rows: Vec<(LedgerEntry, u64)>,
    has_more: bool,
    source: (&str, &str),
) -> LedgerSlice {
    let by_seq = query.after_seq.is_some();
    let seqs: Vec<u64> = rows.iter().map(|(_, seq)| *seq).collect();
    let entries: Vec<LedgerEntry> = rows.into_iter().map(|(e, _)| e).collect();
    LedgerSlice {
        protocol: SLICE_PROTOCOL.to_owned(),
        mesh_id: mesh_id.to_owned(),
        archived: entries.len() as u32,
        cursor: SliceCursor {
            after_id: query.after_id.clone(),
            next_after_id: entries.last().map(|e| e.id.clone()).or_else(|| query.after_id.clone()),
            limit: query.effective_limit(),
            has_more,
            after_seq: query.after_seq,
            next_after_seq: if by_seq { seqs.last().copied().or(query.after_seq) } else { None },
            head_seq: None,
        },
        seqs: if by_seq { seqs } else { Vec::new() },
        entries,
        source_of_truth: SliceSource {
            kind: source.0.to_owned(),
            table: source.1.to_owned(),
            bounded: true,
            max_limit: SLICE_MAX_LIMIT,
        },
        origin: None,
    }
}

/// The error of a cursor before what the archive still holds.
pub fn cursor_expired(mesh_id: &str, after_seq: u64, dropped_through: u64) -> StoreError {
    StoreError::CursorExpired { mesh_id: mesh_id.to_owned(), after_seq, dropped_through }
}
