//! The inbox's queueing, drains, peeks and acks, run the same way by both
//! stores: the store supplies rows through [`InboxRows`] (a lane's next page,
//! the dedup history, the presence records, the ledger entry of a refine
//! outcome, a task's status), stores event rows and takes events off its
//! queue; the queueing checks and the refine-terminal dedup, which lanes a drainer reads,
//! the oldest-first walk over them, the routing (the core's
//! [`DrainRouter`]), the quarantine entries, the refine reconciliation and the
//! dropping of stale alerts are decided here, once.
//!
//! A drain walks the mesh's queue entries oldest first, lane by lane, in pages
//! keyed by (queued_at, id). The daemon target and the `onlyEvents` filter are
//! applied by the store's page read; the routing decision is taken per event.
//! Only delivered, deduplicated and quarantined events are taken off the queue;
//! routed-away ones are stepped over and stay queued, so a backlog for other
//! coordinators costs a walk over queue entries and never hides the drainer's
//! own events.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::held::{held_event, held_row_id, quarantine_entry, requeued_entry};
use agentmesh_core::events::names::is_terminal_task_event;
use agentmesh_core::events::presence::{drain_refreshes_presence, live_since};
use agentmesh_core::events::{
    CoordinatorIdentity, DrainCounter, DrainRouter, EmitHint, PendingEvent, ProjectedRoute, RouteClass,
    RouteDecision, Routed, refine_job_id, refine_terminal_fingerprint, stamp_event,
};
use agentmesh_core::{LedgerEntry, TaskStatus, Timestamp};
use serde_json::json;

use crate::ids::mint_at;
use crate::route_columns::{CLASS_UNICAST, RouteColumns, TARGET_LANE, UNICAST_LANE};
use crate::{
    DrainOutcome, DrainRequest, DuplicateReason, EventSettle, HeldRequeue, InboxEvent, QueueOutcome, RawJson,
    StoreError,
};

/// Candidate rows read per page of a drain's walk.
pub const PAGE: i64 = 256;

/// A store's inbox rows, inside one transaction (a drain's or ack's write, or
/// a peek's snapshot).
pub trait InboxRows {
    /// The store's error, which every error of a drain converts into.
    type Error: From<StoreError>;

    /// The first lane after `after` and before `before` (in byte order) that
    /// holds undrained events, with the addressee columns of one of its rows
    /// (all rows of a unicast lane share them).
    fn next_lane(
        &self,
        mesh_id: &str,
        after: &str,
        before: &str,
    ) -> Result<Option<(String, RouteColumns)>, Self::Error>;

    /// The undrained rows `page` asks for, oldest first.
    fn lane_page(&self, page: &LanePage<'_>) -> Result<Vec<QueuedRow>, Self::Error>;

    /// Which of the event ids `ids` were drained before.
    fn drained_among(&self, mesh_id: &str, ids: &[&str]) -> Result<HashSet<String>, Self::Error>;

    /// Takes the queue entries `taken` off the queue and records their event
    /// ids as drained.
    fn take(&self, mesh_id: &str, taken: &[Taken]) -> Result<(), Self::Error>;

    /// The queue entries of the undrained events among the row ids `ids`.
    fn queued(&self, mesh_id: &str, ids: &[&str]) -> Result<Vec<Taken>, Self::Error>;

    /// The coordinators recorded on `machine`, not ended and seen at or after
    /// `since_ms`, as (coordinator key, last seen).
    fn presence_on(
        &self,
        mesh_id: &str,
        machine: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, i64)>, Self::Error>;

    /// The newest presence instant recorded for the mesh.
    fn newest_presence(&self, mesh_id: &str) -> Result<Option<i64>, Self::Error>;

    /// Records that the coordinator was seen at `now`.
    fn touch_coordinator(
        &self,
        mesh_id: &str,
        identity: &CoordinatorIdentity,
        now: Timestamp,
    ) -> Result<(), Self::Error>;

    /// Records that the coordinator ended at `now`; `false` when it had no
    /// record.
    fn end_coordinator(
        &self,
        mesh_id: &str,
        identity: &CoordinatorIdentity,
        now: Timestamp,
    ) -> Result<bool, Self::Error>;

    /// The newest `task_completed`/`task_failed` entry of the refine job `job`
    /// (its payload's `source` is the refine source and its `refineJob.jobId`,
    /// trimmed, is `job`).
    fn refine_outcome(&self, mesh_id: &str, job: &str) -> Result<Option<LedgerEntry>, Self::Error>;

    /// The status of task `task_id`, when it exists (as stored: an unknown word
    /// reads as no status).
    fn task_status(&self, mesh_id: &str, task_id: &str) -> Result<Option<String>, Self::Error>;

    /// Appends a ledger entry.
    fn append(&self, entry: &LedgerEntry) -> Result<(), Self::Error>;

    /// The undrained events named `name`, as (event row id, payload text),
    /// for the refine terminal check and retractions. A store whose queueing
    /// otherwise runs beside drains makes this read wait for them.
    fn queued_named(&self, mesh_id: &str, name: &str) -> Result<Vec<(String, String)>, Self::Error>;

    /// Deletes the events of the row ids `ids`, drained or not, with their
    /// queue entries and dedup records; how many there were.
    fn delete_events(&self, mesh_id: &str, ids: &[String]) -> Result<u64, Self::Error>;

    /// Stores a stamped event under `id` with its queue entry; `false` when its
    /// fingerprint is already used in the mesh (nothing is written).
    fn insert_event(&self, id: &str, event: &PendingEvent) -> Result<bool, Self::Error>;

    /// The `event_held` ledger entry `entry_id`.
    fn held_entry(&self, mesh_id: &str, entry_id: &str) -> Result<Option<LedgerEntry>, Self::Error>;

    /// The store's handle of the event row `id`, while the row exists.
    fn stored_event(&self, mesh_id: &str, id: &str) -> Result<Option<i64>, Self::Error>;

    /// Puts the stored event row `stored` back on the queue and forgets that
    /// its event id was drained; `false` when it was queued already.
    fn requeue_stored(&self, mesh_id: &str, stored: i64) -> Result<bool, Self::Error>;
}

/// One page of one lane of a drain's walk ([`InboxRows::lane_page`]): up to
/// `limit` undrained rows of `lane` after the (queued_at, id) `after`, oldest
/// first, of those without a daemon target or targeted at one of `forms` (any
/// target when `forms` is empty), and named in `only` when it is given.
#[derive(Debug, Clone, Copy)]
pub struct LanePage<'a> {
    /// The mesh.
    pub mesh_id: &'a str,
    /// The lane.
    pub lane: &'a str,
    /// The (queued_at, id) the page starts after.
    pub after: (i64, &'a str),
    /// The drainer's daemon id forms.
    pub forms: &'a [String],
    /// The event names asked for (`onlyEvents`).
    pub only: Option<&'a [String]>,
    /// How many rows at most.
    pub limit: i64,
}

/// One undrained row as a store reads it for a drain.
#[derive(Debug, Clone)]
pub struct QueuedRow {
    /// The lane whose queue entry it is.
    pub lane: String,
    /// The event row's id.
    pub id: String,
    /// The event's name.
    pub name: String,
    /// The stored payload text.
    pub payload: String,
    /// The fingerprint it was queued with.
    pub fingerprint: Option<String>,
    /// When it was queued (milliseconds).
    pub queued_at: i64,
    /// The stored event id.
    pub event_id: Option<String>,
    /// Its routing columns.
    pub columns: RouteColumns,
}

/// One undrained row as a drain sees it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The lane whose queue entry it is.
    pub lane: String,
    /// The event row's id.
    pub id: String,
    /// The event's name.
    pub name: String,
    /// The stored payload text.
    pub payload: String,
    /// The fingerprint it was queued with.
    pub fingerprint: Option<String>,
    /// When it was queued (milliseconds).
    pub queued_at: i64,
    /// The stored event id (a valid v2 event's, or the envelope's of one that is
    /// not valid): what a drain records as drained.
    pub event_id: Option<String>,
    /// The routing inputs, for a valid v2 event; `None`: route from the payload.
    pub projected: Option<ProjectedRoute>,
    /// Whether its event id is looked up in the dedup history although it is
    /// routed from its payload: a terminal task event (a broadcast one goes only
    /// to its dispatcher, which its payload names).
    pub payload_dedup: bool,
}

impl Candidate {
    /// The candidate of a row read.
    pub fn of(row: QueuedRow) -> Candidate {
        let mut projected = row.columns.projected(row.event_id.clone());
        // A broadcast terminal task event goes only to the coordinator that
        // dispatched it, which its payload names; rows stored before that rule
        // carry a plain broadcast projection.
        if projected.as_ref().is_some_and(|p| p.class == RouteClass::Broadcast)
            && is_terminal_task_event(&row.name)
        {
            projected = None;
        }
        let payload_dedup =
            projected.is_none() && row.event_id.is_some() && is_terminal_task_event(&row.name);
        Candidate {
            lane: row.lane,
            id: row.id,
            name: row.name,
            payload: row.payload,
            fingerprint: row.fingerprint,
            queued_at: row.queued_at,
            event_id: row.event_id,
            projected,
            payload_dedup,
        }
    }

    /// The event as handed out: its stored text, unparsed.
    pub fn into_inbox_event(self) -> InboxEvent {
        InboxEvent {
            id: self.id,
            name: self.name,
            event: RawJson::from_stored(self.payload),
            fingerprint: self.fingerprint,
            queued_at_ms: self.queued_at,
        }
    }

    /// The event id looked up in the dedup history, if any: a valid v2
    /// event's, or a payload-routed terminal task event's. (Unversioned and
    /// invalid events are never deduplicated by event id.)
    fn dedup_id(&self) -> Option<&str> {
        match &self.projected {
            Some(p) => Some(p.event_id.as_str()),
            None => self.event_id.as_deref().filter(|_| self.payload_dedup),
        }
    }
}

/// The queue entry of an event a drain or ack takes, and its event id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The lane of the queue entry.
    pub lane: String,
    /// When the event was queued (milliseconds).
    pub queued_at: i64,
    /// The event row's id.
    pub id: String,
    /// The event id recorded as drained, if it has one.
    pub event_id: Option<String>,
}

impl Taken {
    fn of(c: &Candidate) -> Taken {
        Taken { lane: c.lane.clone(), queued_at: c.queued_at, id: c.id.clone(), event_id: c.event_id.clone() }
    }
}

/// A stored payload as JSON; an unparsable one reads as `{}`, which routing
/// treats as an unversioned event.
pub fn parse(payload: &str) -> serde_json::Value {
    serde_json::from_str(payload).unwrap_or_else(|_| json!({}))
}

/// An addressee: its daemon, run and session, each when the events name it.
type Addressee = (Option<String>, Option<String>, Option<String>);

/// A backend's group of undrained events: daemon, run, `intendedFor` session,
/// the payload when that session is absent, and how many.
pub type AddresseeGroup = (Option<String>, Option<String>, Option<String>, Option<String>, u64);

/// Undrained events counted by addressee, as a backend groups them: the
/// addressed daemon and run, the session of the v2 `intendedFor` identity, and
/// for a group without one the payload (JSON text) whose v1
/// `targetCoordinatorSessionId` names the session instead. Groups that name the
/// same addressee are merged; the 50 largest come back, ties in (daemon, run,
/// session) order with absent parts first.
pub fn count_by_addressee(groups: impl IntoIterator<Item = AddresseeGroup>) -> Vec<crate::PendingAddressee> {
    let mut counts: std::collections::BTreeMap<Addressee, u64> = std::collections::BTreeMap::new();
    for (daemon, run, session, payload, n) in groups {
        let session = session.or_else(|| {
            let payload = parse(payload.as_deref()?);
            payload.get("targetCoordinatorSessionId")?.as_str().map(str::to_owned)
        });
        *counts.entry((daemon, run, session)).or_default() += n;
    }
    let mut out: Vec<_> = counts
        .into_iter()
        .map(|((daemon_id, run_id, session_id), count)| crate::PendingAddressee {
            daemon_id,
            run_id,
            session_id,
            count,
        })
        .collect();
    out.sort_by_key(|a| std::cmp::Reverse(a.count)); // stable: key order within a count
    out.truncate(50);
    out
}

/// Whether a stored `mesh:dispatch_blocked` payload is about `task_id` (its
/// `metadataEvent.taskId`, trimmed, or a number written as one): what retracting
/// a task's blocked-dispatch notices matches on. A payload that is not JSON is
/// about no task.
pub fn is_about_task(payload: &str, task_id: &str) -> bool {
    match parse(payload).pointer("/metadataEvent/taskId") {
        Some(serde_json::Value::String(id)) => id.trim() == task_id,
        Some(serde_json::Value::Number(n)) => task_id == n.to_string(),
        _ => false,
    }
}

/// Queues one event for a coordinator, stamped on the way in: refused whole
/// when it is not queueable in the mesh; a duplicate (its refine outcome
/// already queued, or its fingerprint used) is dropped and named.
pub fn queue<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    event: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Result<QueueOutcome, R::Error> {
    let event = stamp(mesh_id, event, hint, self_machine_id, now)?;
    if refine_terminal_queued(rows, &event)? {
        return Ok(QueueOutcome::Duplicate(DuplicateReason::RefineTerminal));
    }
    let id = mint_at(now);
    if !rows.insert_event(&id, &event)? {
        return Ok(QueueOutcome::Duplicate(DuplicateReason::Fingerprint));
    }
    Ok(QueueOutcome::Queued { id, event })
}

/// Checks an event for `mesh_id` and stamps it (the v2 envelope, from `hint`),
/// reading nothing.
pub fn stamp(
    mesh_id: &str,
    mut event: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Result<PendingEvent, StoreError> {
    event.check_queueable(mesh_id)?;
    stamp_event(&mut event, hint, &mint_at(now), self_machine_id);
    Ok(event)
}

/// Whether the stamped `event` is a refine outcome whose job already has an
/// undrained event of the same name queued (the duplicate queueing drops).
pub fn refine_terminal_queued<R: InboxRows>(rows: &R, event: &PendingEvent) -> Result<bool, R::Error> {
    if refine_terminal_fingerprint(event).is_none() {
        return Ok(false);
    }
    let Some(job) = refine_job_id(&event.metadata_event) else { return Ok(false) };
    for (_, payload) in rows.queued_named(&event.mesh_id, &event.event)? {
        let payload = parse(&payload);
        let metadata = payload.get("metadataEvent").and_then(|m| m.as_object());
        if metadata.and_then(refine_job_id) == Some(job) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Puts the event of an `event_held` entry back in the inbox, with its
/// `event_held_requeued` entry: its row back on the queue, or, when retention
/// removed the row, the held event queued again (its envelope, and so its
/// event id, kept). When the row is gone and the held event cannot be read,
/// nothing is written: [`HeldRequeue::Unrecoverable`].
pub fn requeue_held<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    held_entry_id: &str,
    now: Timestamp,
) -> Result<HeldRequeue, R::Error> {
    let entry = rows.held_entry(mesh_id, held_entry_id)?.ok_or_else(|| StoreError::NotFound {
        kind: "held event",
        mesh_id: mesh_id.to_owned(),
        id: held_entry_id.to_owned(),
    })?;
    let stored = match held_row_id(&entry) {
        Some(row) => rows.stored_event(mesh_id, row)?,
        None => None,
    };
    let requeued = match stored {
        Some(stored) => rows.requeue_stored(mesh_id, stored)?,
        None => {
            let readable = PendingEvent::from_value(held_event(&entry))
                .and_then(|event| event.check_queueable(mesh_id).map(|()| event));
            let Ok(event) = readable else {
                return Ok(HeldRequeue::Unrecoverable);
            };
            matches!(
                queue(rows, mesh_id, event, &EmitHint::default(), None, now)?,
                QueueOutcome::Queued { .. }
            )
        }
    };
    rows.append(&requeued_entry(mesh_id, &entry, requeued, mint_at(now), now))?;
    Ok(if requeued { HeldRequeue::Requeued } else { HeldRequeue::NotNeeded })
}

/// Drains in the caller's transaction, which no other drain of the mesh runs
/// beside: every event it takes is taken by no other drain.
///
/// Counters: `v2RoutedAway` counts the events this drain's routing examined and
/// left queued (system events, broadcast terminal events of other
/// coordinators). Unicasts in lanes it does not read (for another machine, for
/// a sibling session, for another live coordinator) count nowhere: they never
/// reach this drain's routing, and such a row is deduplicated by event id (and
/// marked drained) only by its own coordinator's drain.
pub fn drain<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    request: &DrainRequest,
    now: Timestamp,
) -> Result<DrainOutcome, R::Error> {
    let mut out = DrainOutcome::default();
    let limit = request.effective_limit();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) || limit == 0 {
        return Ok(out);
    }
    let (lanes, mut router, my_last_seen) = router_for(rows, mesh_id, request, now.millis())?;
    if drain_refreshes_presence(my_last_seen, now.millis()) {
        rows.touch_coordinator(mesh_id, request.drainer.identity(), now)?;
    }
    let mut taken: Vec<Taken> = Vec::new();
    walk(rows, mesh_id, request, lanes, limit as i64, |c, drained| {
        if let Some(projected) = &c.projected {
            let routed = router.route_projected(projected, |event_id| drained.contains(event_id));
            match routed.decision {
                RouteDecision::RoutedAway { .. } => return Ok(false),
                RouteDecision::Deliver => {
                    taken.push(Taken::of(&c));
                    out.events.push(c.into_inbox_event());
                }
                RouteDecision::DedupSkipped | RouteDecision::Quarantine { .. } => taken.push(Taken::of(&c)),
            }
            return Ok(out.events.len() >= limit);
        }
        let raw = parse(&c.payload);
        let routed = router.route(&raw, |event_id| drained.contains(event_id));
        warn_once(&routed, mesh_id);
        match routed.decision {
            RouteDecision::RoutedAway { .. } => return Ok(false),
            RouteDecision::Deliver => {
                taken.push(Taken::of(&c));
                out.events.push(c.into_inbox_event());
            }
            RouteDecision::DedupSkipped => taken.push(Taken::of(&c)),
            RouteDecision::Quarantine { reason } => {
                taken.push(Taken::of(&c));
                let id = mint_at(now);
                rows.append(&quarantine_entry(mesh_id, &c.id, &raw, reason, c.queued_at, id, now))?;
                out.quarantined.push(c.id);
            }
        }
        Ok(out.events.len() >= limit)
    })?;
    if !taken.is_empty() {
        rows.take(mesh_id, &taken)?;
    }
    out.counters = router.counters();
    out.events = reconcile_refine(rows, mesh_id, std::mem::take(&mut out.events), now)?;
    out.events = drop_stale_alerts(rows, mesh_id, std::mem::take(&mut out.events))?;
    Ok(out)
}

/// What a drain would deliver, marking and counting nothing, in the caller's
/// snapshot.
///
/// A peek reads no clock and writes nothing: it judges liveness at the newest
/// presence instant recorded for the mesh (the latest moment the store knows
/// of), and it does not refresh the drainer's presence.
pub fn peek<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    request: &DrainRequest,
) -> Result<Vec<InboxEvent>, R::Error> {
    let mut events = Vec::new();
    let limit = request.effective_limit();
    // As a drain: no event names, or a limit of 0, hand out nothing.
    if request.only_events.as_ref().is_some_and(Vec::is_empty) || limit == 0 {
        return Ok(events);
    }
    let newest = rows.newest_presence(mesh_id)?;
    let (lanes, mut router, _) = router_for(rows, mesh_id, request, newest.unwrap_or(i64::MIN))?;
    walk(rows, mesh_id, request, lanes, limit as i64, |c, drained| {
        let decision = match &c.projected {
            Some(projected) => router.route_projected(projected, |id| drained.contains(id)).decision,
            None => router.route(&parse(&c.payload), |id| drained.contains(id)).decision,
        };
        if decision == RouteDecision::Deliver {
            events.push(c.into_inbox_event());
        }
        Ok(events.len() >= limit)
    })?;
    // A peek reads no clock: a rebuilt terminal is dated like the newest event seen.
    let at = Timestamp::from_millis(events.iter().map(|e| e.queued_at_ms).max().unwrap_or(0));
    let events = reconcile_refine(rows, mesh_id, events, at)?;
    drop_stale_alerts(rows, mesh_id, events)
}

/// Settles events of the mesh ([`EventSettle`]): an ack takes them off the
/// queue, a delete removes them whole, a retraction deletes the undrained
/// `mesh:dispatch_blocked` notices about a task. Answers how many events it
/// settled.
pub fn settle<R: InboxRows>(rows: &R, mesh_id: &str, settle: EventSettle<'_>) -> Result<u64, R::Error> {
    match settle {
        EventSettle::Ack(ids) => ack(rows, mesh_id, ids),
        EventSettle::Delete(ids) => rows.delete_events(mesh_id, ids),
        EventSettle::RetractDispatchBlocked(task_id) => {
            let task_id = task_id.trim();
            if task_id.is_empty() {
                return Ok(0);
            }
            let about: Vec<String> = rows
                .queued_named(mesh_id, "mesh:dispatch_blocked")?
                .into_iter()
                .filter(|(_, payload)| is_about_task(payload, task_id))
                .map(|(id, _)| id)
                .collect();
            if about.is_empty() { Ok(0) } else { rows.delete_events(mesh_id, &about) }
        }
    }
}

/// Records a coordinator's presence: seen at `now`, or, when `ended`, gone
/// (its unicasts go to the next coordinator on its machine). Answers whether
/// there was a record to end; a touch answers `true`.
pub fn record_presence<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    identity: &CoordinatorIdentity,
    ended: bool,
    now: Timestamp,
) -> Result<bool, R::Error> {
    if ended {
        rows.end_coordinator(mesh_id, identity, now)
    } else {
        rows.touch_coordinator(mesh_id, identity, now).map(|()| true)
    }
}

/// Takes the queued events of `ids` off the queue; how many were queued.
pub fn ack<R: InboxRows>(rows: &R, mesh_id: &str, ids: &[String]) -> Result<u64, R::Error> {
    let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    ids.sort_unstable();
    ids.dedup();
    let taken = rows.queued(mesh_id, &ids)?;
    if !taken.is_empty() {
        rows.take(mesh_id, &taken)?;
    }
    Ok(taken.len() as u64)
}

/// Accept-mode passes of events enforce mode would hold back are logged, once per
/// kind per process, so a log is told about them without being flooded.
static WARNED_V1_ACCEPTED: AtomicBool = AtomicBool::new(false);
static WARNED_INVALID_ACCEPTED: AtomicBool = AtomicBool::new(false);

fn warn_once(routed: &Routed, mesh_id: &str) {
    let flag = match routed.counter {
        Some(DrainCounter::V1BroadcastAccepted) => &WARNED_V1_ACCEPTED,
        Some(DrainCounter::V2ValidationFailedAccepted) => &WARNED_INVALID_ACCEPTED,
        _ => return,
    };
    if !flag.swap(true, Ordering::Relaxed) {
        match &routed.violation {
            Some(violation) => {
                tracing::warn!(mesh_id, %violation, "accepted an event that fails the v2 contract; enforce mode would hold it")
            }
            None => tracing::warn!(
                mesh_id,
                "accepted an unversioned event as a broadcast; enforce mode would hold it"
            ),
        }
    }
}

/// The lanes and the router of one drain or peek judged at `now_ms`, and when
/// the drainer was last seen (if it is recorded and not ended).
fn router_for<'a, R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    request: &'a DrainRequest,
    now_ms: i64,
) -> Result<(Vec<String>, DrainRouter<'a>, Option<i64>), R::Error> {
    let me = request.drainer.address();
    let (mut live, my_last_seen) = presence(rows, mesh_id, me.machine.as_deref(), &me.key, now_ms)?;
    // The coordinators live on the machines of the other ids the drainer answers
    // to keep their unicasts too.
    for alias in request.drainer.aliases() {
        let machine = machine_core(&alias.daemon_id);
        live.extend(presence(rows, mesh_id, machine, &me.key, now_ms)?.0);
    }
    let router = DrainRouter::with_live(&request.drainer, request.enforce, live);
    let lanes = drain_lanes(rows, mesh_id, request, &router)?;
    Ok((lanes, router, my_last_seen))
}

/// The live coordinators on `machine` at `now_ms` other than `me`, and when
/// `me` was last seen there (the liveness rule is the core's,
/// `agentmesh_core::events::presence`).
fn presence<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    machine: Option<&str>,
    me: &str,
    now_ms: i64,
) -> Result<(HashSet<String>, Option<i64>), R::Error> {
    let (mut live_others, mut my_last_seen) = (HashSet::new(), None);
    let Some(machine) = machine else { return Ok((live_others, my_last_seen)) };
    for (key, last_seen) in rows.presence_on(mesh_id, machine, live_since(now_ms))? {
        if key == me {
            my_last_seen = Some(last_seen);
        } else {
            live_others.insert(key);
        }
    }
    Ok((live_others, my_last_seen))
}

/// The lanes a drain by `request.drainer` must read: the untargeted lane, the
/// lanes of its daemon targets, and the unicast lanes on its machine (and on the
/// machines of the other ids it answers to) whose addressee it takes
/// ([`DrainRouter::takes_unicast`]: by address, or by re-attribution when the
/// addressee is not live). Every row in any other lane is one routing would leave
/// queued.
fn drain_lanes<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    request: &DrainRequest,
    router: &DrainRouter<'_>,
) -> Result<Vec<String>, R::Error> {
    let mut lanes = vec![String::new()];
    let forms = request.drainer.daemon_forms();
    if forms.is_empty() {
        // A drainer with no daemon id form takes every target.
        let mut after = TARGET_LANE.to_owned();
        while let Some((lane, _)) = rows.next_lane(mesh_id, &after, "A")? {
            after.clone_from(&lane);
            lanes.push(lane);
        }
    } else {
        for form in forms {
            let lane = format!("{TARGET_LANE}{}", machine_core(form).unwrap_or(form));
            if !lanes.contains(&lane) {
                lanes.push(lane);
            }
        }
    }
    for machine in request.drainer.machines() {
        let (mut after, end) = (format!("{UNICAST_LANE}{machine}|"), format!("{UNICAST_LANE}{machine}}}"));
        while let Some((lane, columns)) = rows.next_lane(mesh_id, &after, &end)? {
            let columns = RouteColumns { class: CLASS_UNICAST, ..columns };
            let takes = match columns.projected(Some(String::new())).map(|p| p.class) {
                Some(RouteClass::Unicast(to)) => router.takes_unicast(&to),
                _ => true,
            };
            if takes && !lanes.contains(&lane) {
                lanes.push(lane.clone());
            }
            after = lane;
        }
    }
    Ok(lanes)
}

/// One lane's position in a drain's walk.
struct LaneCursor {
    lane: String,
    /// The (queued_at, id) of the last row read.
    after: (i64, String),
    /// Rows read and not yet visited, oldest first.
    buffered: VecDeque<Candidate>,
    /// Whether the lane has no more rows past `after`.
    exhausted: bool,
}

/// Walks the drainer's lanes merged oldest first, page by page, until `visit`
/// returns `true`; `visit` is handed the event ids of the pages read so far
/// that were drained before.
fn walk<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    request: &DrainRequest,
    lanes: Vec<String>,
    first_page: i64,
    mut visit: impl FnMut(Candidate, &HashSet<String>) -> Result<bool, R::Error>,
) -> Result<(), R::Error> {
    let forms = request.drainer.daemon_forms();
    let only = request.only_events.as_deref();
    let mut cursors: Vec<LaneCursor> = lanes
        .into_iter()
        .map(|lane| LaneCursor {
            lane,
            after: (i64::MIN, String::new()),
            buffered: VecDeque::new(),
            exhausted: false,
        })
        .collect();
    let mut drained = HashSet::new();
    // The first page of a lane is as large as the drain needs when every event is
    // its own; later pages (past events routed away) are full size.
    let first_page = first_page.clamp(1, PAGE);
    loop {
        for cursor in cursors.iter_mut().filter(|c| c.buffered.is_empty() && !c.exhausted) {
            let page_size = if cursor.after.0 == i64::MIN { first_page } else { PAGE };
            let after = (cursor.after.0, cursor.after.1.as_str());
            let asked = LanePage { mesh_id, lane: &cursor.lane, after, forms, only, limit: page_size };
            let page: Vec<Candidate> = rows.lane_page(&asked)?.into_iter().map(Candidate::of).collect();
            cursor.exhausted = (page.len() as i64) < page_size;
            if let Some(last) = page.last() {
                cursor.after = (last.queued_at, last.id.clone());
            }
            let mut ids: Vec<&str> = page.iter().filter_map(Candidate::dedup_id).collect();
            ids.sort_unstable();
            ids.dedup();
            if !ids.is_empty() {
                drained.extend(rows.drained_among(mesh_id, &ids)?);
            }
            cursor.buffered.extend(page);
        }
        let oldest = (0..cursors.len())
            .filter_map(|i| cursors[i].buffered.front().map(|f| (f.queued_at, f.id.as_str(), i)))
            .min()
            .map(|(_, _, i)| i);
        let Some(candidate) = oldest.and_then(|i| cursors[i].buffered.pop_front()) else { return Ok(()) };
        if visit(candidate, &drained)? {
            return Ok(());
        }
    }
}

/// Applies the refine reconciliation to what a drain or peek hands out: a refine
/// job accepted in the batch whose terminal event is missing gets it rebuilt from
/// the ledger (found by job, however many newer entries there are), and accepted
/// events whose terminal is present are left out.
fn reconcile_refine<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    events: Vec<InboxEvent>,
    now: Timestamp,
) -> Result<Vec<InboxEvent>, R::Error> {
    use agentmesh_core::events::refine;
    if !events.iter().any(|e| e.name == agentmesh_core::events::names::REFINE_ACCEPTED) {
        return Ok(events);
    }
    // A batch with a refine acceptance is read as trees (the only kind of batch
    // whose payloads a drain itself looks into).
    let values: Vec<serde_json::Value> = events.iter().map(|e| e.event.parse()).collect();
    let mut backfilled = Vec::new();
    for job in &refine::jobs_missing_a_terminal(&values) {
        if let Some(entry) = rows.refine_outcome(mesh_id, job)?.filter(|e| refine::is_refine_outcome(e, job))
        {
            backfilled.push(refine::terminal_from_ledger(mesh_id, &entry, now));
        }
    }
    let paired: Vec<(InboxEvent, &serde_json::Value)> = events.into_iter().zip(&values).collect();
    let mut out: Vec<InboxEvent> =
        refine::drop_superseded(paired, |(_, v)| *v, &backfilled).into_iter().map(|(e, _)| e).collect();
    for event in backfilled {
        let (name, id) = refine::rebuilt_name_and_id(&event);
        out.push(InboxEvent {
            id,
            event: RawJson::from_value(&event),
            name,
            fingerprint: None,
            queued_at_ms: now.millis(),
        });
    }
    Ok(out)
}

/// Leaves out of what a drain or peek hands out the alerts about tasks that are
/// already finished ([`agentmesh_core::events::stale`]). A drain has taken them
/// off the queue with the rest: they are dropped, not left for later.
fn drop_stale_alerts<R: InboxRows>(
    rows: &R,
    mesh_id: &str,
    events: Vec<InboxEvent>,
) -> Result<Vec<InboxEvent>, R::Error> {
    use agentmesh_core::events::names::is_stale_task_droppable_event;
    use agentmesh_core::events::stale::{alert_is_stale, droppable_alert_task_id};
    if !events.iter().any(|e| is_stale_task_droppable_event(&e.name)) {
        return Ok(events);
    }
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        if is_stale_task_droppable_event(&event.name) {
            let value = event.event.parse();
            if let Some(task_id) = droppable_alert_task_id(&event.name, &value) {
                let status = rows.task_status(mesh_id, task_id)?.and_then(|s| s.parse::<TaskStatus>().ok());
                if alert_is_stale(status) {
                    tracing::debug!(mesh_id, task_id, event = %event.name, "dropped an alert about a finished task");
                    continue;
                }
            }
        }
        out.push(event);
    }
    Ok(out)
}
