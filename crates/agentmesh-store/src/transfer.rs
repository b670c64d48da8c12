//! Copying meshes from one store to another, losslessly and on either backend:
//! what `agentmesh migrate` runs.
//!
//! [`TransferStore`] is the backend's part: a paged export of one mesh's records
//! of one [`RecordKind`], in a stable order (the source's own row order, so the
//! target stores them in the same order), and an import of such a page that
//! inserts what the target lacks, by key, and reports what it inserted, what it
//! found already and what it could not insert ([`ImportReport`]). Records are
//! copied as stored: no validation beyond the mesh, no ledger entry of their own
//! (an import never goes through the operations that record entries).
//!
//! [`copy_kind`] is the backend-neutral loop: page after page from the source
//! into the target, with a progress callback. Since an import skips what is
//! there, running a copy again copies nothing, and a copy interrupted half way
//! completes when run again.
//!
//! [`copy_archive`] copies what retention moved out of the source's hot
//! database: its archived tasks and ledger entries go into the target's hot
//! tables as ordinary records (they are finished and old, so the target's own
//! retention archives them again at its next step). A copy takes the archive
//! before the hot kinds, so the archived entries take the target's first
//! sequence numbers, before the hot ones, as they stood in the source.

use agentmesh_core::events::{PendingEvent, pending_event_fingerprint, project_route};
use agentmesh_core::{
    CompletionConflict, CompletionFingerprint, DirectDispatch, IdleSession, LedgerEntry, Mission,
    SessionDelivery, Task,
};
use serde::Serialize;

use crate::route_columns::RouteColumns;
use crate::{RecordedToolCall, Store, StoreResult};

/// What a page holds: one kind of record of one mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RecordKind {
    /// Tasks, as stored (their payload, unknown fields included).
    Tasks,
    /// Missions with their creation and update times.
    Missions,
    /// Ledger entries, in the source's append order.
    Ledger,
    /// Coordinator inbox events, drained or not.
    InboxEvents,
    /// The round-robin scheduler cursor.
    SchedulerCursor,
    /// Direct dispatches.
    DirectDispatches,
    /// Session deliveries.
    SessionDeliveries,
    /// Idle session reports.
    IdleSessions,
    /// Completion fingerprints with their expiry.
    CompletionFingerprints,
    /// Completion conflicts.
    CompletionConflicts,
    /// The rate guard's tool-call log.
    ToolCalls,
    /// Coordinator presence records.
    CoordinatorPresence,
}

impl RecordKind {
    /// Every kind, in the order a copy takes them: tasks before the ledger and
    /// the inbox that name them.
    pub const ALL: [RecordKind; 12] = [
        RecordKind::Tasks,
        RecordKind::Missions,
        RecordKind::Ledger,
        RecordKind::InboxEvents,
        RecordKind::SchedulerCursor,
        RecordKind::DirectDispatches,
        RecordKind::SessionDeliveries,
        RecordKind::IdleSessions,
        RecordKind::CompletionFingerprints,
        RecordKind::CompletionConflicts,
        RecordKind::ToolCalls,
        RecordKind::CoordinatorPresence,
    ];

    /// The kind's name, as `--json` and progress lines give it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Tasks => "tasks",
            RecordKind::Missions => "missions",
            RecordKind::Ledger => "ledger",
            RecordKind::InboxEvents => "inboxEvents",
            RecordKind::SchedulerCursor => "schedulerCursor",
            RecordKind::DirectDispatches => "directDispatches",
            RecordKind::SessionDeliveries => "sessionDeliveries",
            RecordKind::IdleSessions => "idleSessions",
            RecordKind::CompletionFingerprints => "completionFingerprints",
            RecordKind::CompletionConflicts => "completionConflicts",
            RecordKind::ToolCalls => "toolCalls",
            RecordKind::CoordinatorPresence => "coordinatorPresence",
        }
    }

    /// The kind in words, for people.
    pub fn label(self) -> &'static str {
        match self {
            RecordKind::Tasks => "tasks",
            RecordKind::Missions => "missions",
            RecordKind::Ledger => "ledger entries",
            RecordKind::InboxEvents => "inbox events",
            RecordKind::SchedulerCursor => "scheduler cursor",
            RecordKind::DirectDispatches => "direct dispatches",
            RecordKind::SessionDeliveries => "session deliveries",
            RecordKind::IdleSessions => "idle sessions",
            RecordKind::CompletionFingerprints => "completion fingerprints",
            RecordKind::CompletionConflicts => "completion conflicts",
            RecordKind::ToolCalls => "tool calls",
            RecordKind::CoordinatorPresence => "coordinator presence",
        }
    }
}

impl std::fmt::Display for RecordKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A coordinator inbox event as stored: the event row with its routing columns,
/// and whether it was drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The row id.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// The daemon the event targets, if any.
    pub coordinator_daemon_id: Option<String>,
    /// The event's name.
    pub name: String,
    /// The whole event (JSON text), as stored.
    pub payload: String,
    /// Its content fingerprint, if it has one.
    pub fingerprint: Option<String>,
    /// When it was queued (epoch milliseconds).
    pub queued_at_ms: i64,
    /// It was drained (delivered, deduplicated or quarantined); an undrained one
    /// waits in the inbox.
    pub drained: bool,
    /// The routing inputs projected when it was queued.
    pub route: EventRoute,
}

impl StoredEvent {
    /// The row queueing stores for the event `ev` under `id`, undrained: the
    /// whole event as JSON text, its daemon target (trimmed, when not blank),
    /// fingerprint, event id (the projected route's, else the envelope's),
    /// addressee and routing columns, and its lane.
    pub fn queued(id: &str, ev: &PendingEvent) -> StoredEvent {
        let fingerprint = pending_event_fingerprint(ev);
        let value = ev.to_value();
        let projected = project_route(&value);
        let columns = RouteColumns::of(projected.as_ref());
        let target = ev.target_coordinator_daemon_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let lane = columns.lane(target);
        StoredEvent {
            id: id.to_owned(),
            mesh_id: ev.mesh_id.clone(),
            coordinator_daemon_id: target.map(str::to_owned),
            name: ev.event.clone(),
            payload: value.to_string(),
            fingerprint: (!fingerprint.is_empty()).then_some(fingerprint),
            queued_at_ms: ev.queued_at.millis(),
            drained: false,
            route: EventRoute {
                event_id: match projected {
                    Some(p) => Some(p.event_id),
                    None => ev.envelope.event_id.clone(),
                },
                intended_for: ev.envelope.intended_for.as_ref().map(|i| i.to_json().to_string()),
                route_class: columns.class,
                to_machine: columns.machine,
                to_key: columns.key,
                to_fallback: i64::from(columns.fallback),
                to_session: columns.session,
                lane,
            },
        }
    }
}

/// The routing columns of a stored event (see the inbox's `project_route`), kept
/// as they were written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventRoute {
    /// The v2 event id.
    pub event_id: Option<String>,
    /// The addressed coordinator (JSON).
    pub intended_for: Option<String>,
    /// The route class.
    pub route_class: i64,
    /// The addressee's machine.
    pub to_machine: Option<String>,
    /// The addressee's key.
    pub to_key: Option<String>,
    /// The stand-in run flag.
    pub to_fallback: i64,
    /// The addressee's session.
    pub to_session: Option<String>,
    /// The lane a drain reads it from.
    pub lane: String,
}

/// A coordinator's presence record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceRecord {
    /// The coordinator's key.
    pub coordinator_key: String,
    /// Its machine.
    pub machine: Option<String>,
    /// Its daemon id.
    pub daemon_id: String,
    /// Its run id.
    pub run_id: String,
    /// Its session.
    pub session_id: Option<String>,
    /// When it was last seen (epoch milliseconds).
    pub last_seen_ms: i64,
    /// When it ended, if it did (epoch milliseconds).
    pub ended_at_ms: Option<i64>,
}

/// A logged tool call with its occurrence: the log has no key of its own, so a
/// call is the `occurrence`-th (from 1, in log order) of the mesh's calls with
/// the same tool, session, role and instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRecord {
    /// The call.
    pub call: RecordedToolCall,
    /// Which of the identical calls it is.
    pub occurrence: u32,
}

/// One page of records of one kind. Every record belongs to the mesh the page
/// was exported from or is imported into.
#[derive(Debug, Clone, PartialEq)]
pub enum Records {
    /// Tasks.
    Tasks(Vec<Task>),
    /// Missions.
    Missions(Vec<Mission>),
    /// Ledger entries, in append order.
    Ledger(Vec<LedgerEntry>),
    /// Inbox events.
    InboxEvents(Vec<StoredEvent>),
    /// The scheduler cursor (none, or one value).
    SchedulerCursor(Vec<u64>),
    /// Direct dispatches.
    DirectDispatches(Vec<DirectDispatch>),
    /// Session deliveries.
    SessionDeliveries(Vec<SessionDelivery>),
    /// Idle sessions.
    IdleSessions(Vec<IdleSession>),
    /// Completion fingerprints (the page's mesh).
    CompletionFingerprints(Vec<CompletionFingerprint>),
    /// Completion conflicts.
    CompletionConflicts(Vec<CompletionConflict>),
    /// Tool calls (the page's mesh).
    ToolCalls(Vec<ToolCallRecord>),
    /// Coordinator presence (the page's mesh).
    CoordinatorPresence(Vec<PresenceRecord>),
}

impl Records {
    /// An empty page of `kind`.
    pub fn empty(kind: RecordKind) -> Records {
        match kind {
            RecordKind::Tasks => Records::Tasks(Vec::new()),
            RecordKind::Missions => Records::Missions(Vec::new()),
            RecordKind::Ledger => Records::Ledger(Vec::new()),
            RecordKind::InboxEvents => Records::InboxEvents(Vec::new()),
            RecordKind::SchedulerCursor => Records::SchedulerCursor(Vec::new()),
            RecordKind::DirectDispatches => Records::DirectDispatches(Vec::new()),
            RecordKind::SessionDeliveries => Records::SessionDeliveries(Vec::new()),
            RecordKind::IdleSessions => Records::IdleSessions(Vec::new()),
            RecordKind::CompletionFingerprints => Records::CompletionFingerprints(Vec::new()),
            RecordKind::CompletionConflicts => Records::CompletionConflicts(Vec::new()),
            RecordKind::ToolCalls => Records::ToolCalls(Vec::new()),
            RecordKind::CoordinatorPresence => Records::CoordinatorPresence(Vec::new()),
        }
    }

    /// The kind of the records.
    pub fn kind(&self) -> RecordKind {
        match self {
            Records::Tasks(_) => RecordKind::Tasks,
            Records::Missions(_) => RecordKind::Missions,
            Records::Ledger(_) => RecordKind::Ledger,
            Records::InboxEvents(_) => RecordKind::InboxEvents,
            Records::SchedulerCursor(_) => RecordKind::SchedulerCursor,
            Records::DirectDispatches(_) => RecordKind::DirectDispatches,
            Records::SessionDeliveries(_) => RecordKind::SessionDeliveries,
            Records::IdleSessions(_) => RecordKind::IdleSessions,
            Records::CompletionFingerprints(_) => RecordKind::CompletionFingerprints,
            Records::CompletionConflicts(_) => RecordKind::CompletionConflicts,
            Records::ToolCalls(_) => RecordKind::ToolCalls,
            Records::CoordinatorPresence(_) => RecordKind::CoordinatorPresence,
        }
    }

    /// How many records the page holds.
    pub fn len(&self) -> usize {
        match self {
            Records::Tasks(v) => v.len(),
            Records::Missions(v) => v.len(),
            Records::Ledger(v) => v.len(),
            Records::InboxEvents(v) => v.len(),
            Records::SchedulerCursor(v) => v.len(),
            Records::DirectDispatches(v) => v.len(),
            Records::SessionDeliveries(v) => v.len(),
            Records::IdleSessions(v) => v.len(),
            Records::CompletionFingerprints(v) => v.len(),
            Records::CompletionConflicts(v) => v.len(),
            Records::ToolCalls(v) => v.len(),
            Records::CoordinatorPresence(v) => v.len(),
        }
    }

    /// Whether the page holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that every record that names its mesh names `mesh_id`; the error
    /// names the first that does not (`records[i].meshId`).
    pub fn check_mesh(&self, mesh_id: &str) -> Result<(), agentmesh_core::InvalidInput> {
        let meshes: Vec<&str> = match self {
            Records::Tasks(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::Missions(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::Ledger(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::InboxEvents(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::DirectDispatches(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::SessionDeliveries(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::IdleSessions(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::CompletionConflicts(v) => v.iter().map(|r| r.mesh_id.as_str()).collect(),
            Records::SchedulerCursor(_)
            | Records::CompletionFingerprints(_)
            | Records::ToolCalls(_)
            | Records::CoordinatorPresence(_) => Vec::new(),
        };
        match meshes.iter().position(|m| *m != mesh_id) {
            Some(i) => Err(agentmesh_core::InvalidInput::new(
                format!("records[{i}].meshId"),
                format!("belongs to mesh {:?}, not {mesh_id:?}", meshes[i]),
            )),
            None => Ok(()),
        }
    }
}

/// Where the next page starts: the key of the last record of a page, in the
/// exporting store's order. Opaque: it is only ever handed back to the store
/// that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageKey(String);

impl PageKey {
    /// A key that is a row number (a rowid, a sequence number).
    pub fn number(n: i64) -> PageKey {
        PageKey(n.to_string())
    }

    /// A key made of text parts (a natural key).
    pub fn text(parts: &[&str]) -> PageKey {
        PageKey(serde_json::to_string(parts).expect("strings serialize"))
    }

    /// The row number of a [`PageKey::number`] key.
    pub fn as_number(&self) -> Option<i64> {
        self.0.parse().ok()
    }

    /// The parts of a [`PageKey::text`] key.
    pub fn as_text(&self) -> Option<Vec<String>> {
        serde_json::from_str(&self.0).ok()
    }

    /// The key as text (for messages).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The error of a key a store did not make.
pub fn bad_key(key: &PageKey) -> crate::StoreError {
    crate::StoreError::InvalidInput(agentmesh_core::InvalidInput::new(
        "after",
        format!("{:?} is not a page key of this store and kind", key.as_str()),
    ))
}

/// One exported page.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportPage {
    /// The records, in the store's order.
    pub records: Records,
    /// Where the next page starts; `None` when this page was the last.
    pub next: Option<PageKey>,
}

impl ExportPage {
    /// A page of `records` that asked for `limit`: another may follow only when
    /// it is full, after `last`.
    pub fn new(records: Records, limit: u32, last: Option<PageKey>) -> ExportPage {
        let full = limit > 0 && records.len() >= limit as usize;
        ExportPage { records, next: if full { last } else { None } }
    }
}

/// A record an import could not insert because its key is held by something
/// else: a record of another mesh (where the target keeps ids unique per
/// database), or another record of the mesh with the same unique value (an
/// inbox event's fingerprint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferConflict {
    /// The kind of record.
    pub kind: RecordKind,
    /// The record's key (its id).
    pub id: String,
    /// Why it was not inserted.
    pub reason: String,
}

/// What importing one page did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Records inserted.
    pub inserted: u64,
    /// Records whose key the target holds already for this mesh (left as they
    /// are).
    pub existing: u64,
    /// Records not inserted because their key is held by something else.
    pub conflicts: Vec<TransferConflict>,
}

impl ImportReport {
    /// Counts one record whose insert changed `changed` rows: inserted when
    /// it changed any, else one the target holds already.
    pub fn tally(&mut self, changed: u64) {
        if changed > 0 {
            self.inserted += 1;
        } else {
            self.existing += 1;
        }
    }
}

/// A store meshes can be copied out of and into: the backend's part of
/// `agentmesh migrate`.
///
/// An import writes only what it inserts, adds no ledger entry of its own, and
/// commits a page all or nothing. A ledger page is appended in the page's
/// order under the mesh's write serialization, so the target's sequence numbers
/// follow the source's append order.
pub trait TransferStore: Store {
    /// Every mesh that has a record of any [`RecordKind`], sorted.
    fn transfer_meshes(&self) -> StoreResult<Vec<String>>;

    /// The records of `kind` of the mesh after `after` (from the first when
    /// `None`), at most `limit`, in a stable order: the store's own row order
    /// (append order for the ledger), or the natural key where a table has no row
    /// order. One page is read in one snapshot.
    fn export_page(
        &self,
        mesh_id: &str,
        kind: RecordKind,
        after: Option<&PageKey>,
        limit: u32,
    ) -> StoreResult<ExportPage>;

    /// Inserts the records of the page the mesh does not hold yet, by key, as
    /// they are (tasks keep their status, epoch, lease, assignment, dependencies
    /// and unknown fields; readiness is counted anew), in one transaction. A
    /// record that names another mesh is refused ([`StoreError::InvalidInput`],
    /// nothing imported).
    ///
    /// [`StoreError::InvalidInput`]: crate::StoreError::InvalidInput
    fn import_page(&self, mesh_id: &str, records: &Records) -> StoreResult<ImportReport>;
}

/// What copying one kind of one mesh did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindTally {
    /// Records read from the source.
    pub read: u64,
    /// Records the target did not hold, now copied.
    pub copied: u64,
    /// Records the target held already.
    pub existing: u64,
    /// Records that could not be copied (see [`TransferConflict`]).
    pub conflicts: Vec<TransferConflict>,
}

/// Copies every record of `kind` of the mesh from `source` into `target`, a
/// page of `page_size` at a time, calling `progress` with the tally so far after
/// each page. Only one page is held at a time.
pub fn copy_kind(
    source: &dyn TransferStore,
    target: &dyn TransferStore,
    mesh_id: &str,
    kind: RecordKind,
    page_size: u32,
    progress: &mut dyn FnMut(&KindTally),
) -> StoreResult<KindTally> {
    let mut tally = KindTally::default();
    let mut after: Option<PageKey> = None;
    loop {
        let page = source.export_page(mesh_id, kind, after.as_ref(), page_size.max(1))?;
        if !page.records.is_empty() {
            tally.add(page.records.len(), target.import_page(mesh_id, &page.records)?);
            progress(&tally);
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(tally),
        }
    }
}

/// What copying one mesh's archive did: its tasks and its ledger entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveTally {
    /// The archived tasks.
    pub tasks: KindTally,
    /// The archived ledger entries.
    pub ledger: KindTally,
}

/// Copies the mesh's archive in `source` into `target`'s hot tables (see the
/// module docs), a page of `page_size` at a time (ledger pages at most the
/// slice protocol's largest), tasks first, then the ledger in sequence order,
/// calling `progress` with the tally so far after each page.
pub fn copy_archive(
    source: &dyn Store,
    target: &dyn TransferStore,
    mesh_id: &str,
    page_size: u32,
    progress: &mut dyn FnMut(&ArchiveTally),
) -> StoreResult<ArchiveTally> {
    let mut tally = ArchiveTally::default();
    let page_size = page_size.max(1);
    let mut after = 0;
    loop {
        let page = source.archived_tasks(mesh_id, crate::ArchivedTasks::After { after, limit: page_size })?;
        let Some(&(last, _)) = page.last() else { break };
        let full = page.len() >= page_size as usize;
        let tasks: Vec<Task> = page.into_iter().map(|(_, task)| Task { archived: None, ..task }).collect();
        let read = tasks.len();
        tally.tasks.add(read, target.import_page(mesh_id, &Records::Tasks(tasks))?);
        progress(&tally);
        if !full {
            break;
        }
        after = last;
    }
    let mut query = agentmesh_core::SliceQuery {
        after_seq: Some(0),
        limit: Some(page_size.min(agentmesh_core::ledger::SLICE_MAX_LIMIT)),
        ..Default::default()
    };
    loop {
        let page = source.archived_ledger(mesh_id, &query)?.slice;
        let (Some(&next), true) = (page.seqs.last(), page.seqs.len() == page.entries.len()) else {
            return Ok(tally);
        };
        let read = page.entries.len();
        tally.ledger.add(read, target.import_page(mesh_id, &Records::Ledger(page.entries))?);
        progress(&tally);
        if !page.cursor.has_more {
            return Ok(tally);
        }
        query.after_seq = Some(next);
    }
}

impl KindTally {
    /// Adds one page of `read` records, imported as `report` says.
    fn add(&mut self, read: usize, report: ImportReport) {
        self.read += read as u64;
        self.copied += report.inserted;
        self.existing += report.existing;
        self.conflicts.extend(report.conflicts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        assert_eq!(PageKey::number(42).as_number(), Some(42));
        let key = PageKey::text(&["node \"a\"", "s,1"]);
        assert_eq!(key.as_text().unwrap(), ["node \"a\"", "s,1"]);
        assert_eq!(key.as_number(), None);
    }

    #[test]
    fn only_a_full_page_has_a_next_one() {
        let full = ExportPage::new(Records::SchedulerCursor(vec![1]), 1, Some(PageKey::number(1)));
        assert_eq!(full.next, Some(PageKey::number(1)));
        let short = ExportPage::new(Records::SchedulerCursor(vec![1]), 2, Some(PageKey::number(1)));
        assert_eq!(short.next, None);
    }

    #[test]
    fn every_kind_has_a_page_and_a_name() {
        let mut names = std::collections::BTreeSet::new();
        for kind in RecordKind::ALL {
            assert_eq!(Records::empty(kind).kind(), kind);
            assert!(names.insert(kind.as_str()));
        }
    }

    #[test]
    fn a_record_of_another_mesh_is_named() {
        let mission = |mesh: &str| Mission {
            id: "m".into(),
            mesh_id: mesh.into(),
            title: "t".into(),
            goal: String::new(),
            status: "active".into(),
            source: None,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            updated_at: "2026-01-01T00:00:00.000Z".into(),
        };
        let page = Records::Missions(vec![mission("a"), mission("b")]);
        assert_eq!(page.check_mesh("a").unwrap_err().field, "records[1].meshId");
        assert!(Records::Missions(vec![mission("a")]).check_mesh("a").is_ok());
    }
}
