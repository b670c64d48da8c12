//! The coordinator inbox: `mesh_pending_events` holds every queued event (the
//! fingerprint and event-id history), `mesh_inbox_queue` the undrained ones in
//! drain-walk order, `mesh_inbox_drained` the event ids of the drained ones.
//! Queueing stamps and deduplicates; a drain routes every event inside its
//! transaction.
//!
//! A drain walks the mesh's queue entries oldest first, lane by lane, in pages
//! keyed by (queued_at, id). The daemon target and the `onlyEvents` filter are
//! applied in SQL from the queue entries; the v2 routing decision
//! ([`route_event`]) is taken per event. Only delivered, deduplicated and
//! quarantined events are taken off the queue; routed-away ones are stepped over
//! and stay queued, so a backlog for other coordinators costs a walk over queue
//! entries and never hides the drainer's own events. A drain never rewrites an
//! event row: it deletes queue entries and adds dedup records, small rows written
//! side by side.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::names::is_terminal_task_event;
use agentmesh_core::events::{
    Address, CoordinatorIdentity, DrainCounter, DrainRouter, EmitHint, PendingEvent, ProjectedRoute,
    QuarantineReason, RouteClass, RouteDecision, pending_event_fingerprint, project_route,
    read_completion_summary, refine_job_id, refine_terminal_fingerprint, stamp_event,
};
use agentmesh_core::{InvalidInput, LedgerEntry, Timestamp};
use agentmesh_store::{
    DrainOutcome, DrainRequest, DuplicateReason, InboxEvent, QueueOutcome, RawJson, StoreError,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::json;

use crate::{Fail, Res, ledger};

/// Accept-mode passes of events enforce mode would hold back are logged, once per
/// kind per process, so a log is told about them without being flooded.
static WARNED_V1_ACCEPTED: AtomicBool = AtomicBool::new(false);
static WARNED_INVALID_ACCEPTED: AtomicBool = AtomicBool::new(false);

fn warn_once(routed: &agentmesh_core::events::Routed, mesh_id: &str) {
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

/// Delivered events per drain when the request sets no limit.
const DEFAULT_DRAIN_LIMIT: u32 = 100;
/// Candidate rows read per page of a drain's walk.
const PAGE: i64 = 256;

/// Queues one event for a coordinator (stamped on the way in).
pub(crate) fn queue(
    conn: &Connection,
    mesh_id: &str,
    mut ev: PendingEvent,
    hint: &EmitHint,
    self_machine_id: Option<&str>,
    now: Timestamp,
) -> Res<QueueOutcome> {
    if ev.event.trim().is_empty() {
        return Err(Fail(StoreError::InvalidInput(InvalidInput::new("event", "must not be blank"))));
    }
    if ev.mesh_id != mesh_id {
        return Err(Fail(StoreError::InvalidInput(InvalidInput::new(
            "meshId",
            format!("the event belongs to mesh {:?}, not {mesh_id:?}", ev.mesh_id),
        ))));
    }
    stamp_event(&mut ev, hint, &ledger::new_entry_id(now), self_machine_id);
    if refine_terminal_fingerprint(&ev).is_some() && refine_terminal_pending(conn, &ev)? {
        return Ok(QueueOutcome::Duplicate(DuplicateReason::RefineTerminal));
    }
    let id = ledger::new_entry_id(now);
    let inserted = insert_row(conn, &id, &ev)?;
    if !inserted {
        return Ok(QueueOutcome::Duplicate(DuplicateReason::Fingerprint));
    }
    Ok(QueueOutcome::Queued { id, event: ev })
}

/// Stores an event, as it is, under `id`: the whole event in `payload`, its daemon
/// target, fingerprint, v2 envelope and projected routing inputs in their
/// columns. `false` when its fingerprint is already used in the mesh (nothing is
/// written).
pub(crate) fn insert_row(conn: &Connection, id: &str, ev: &PendingEvent) -> Res<bool> {
    let fingerprint = pending_event_fingerprint(ev);
    let fingerprint = (!fingerprint.is_empty()).then_some(fingerprint);
    let envelope = &ev.envelope;
    let identity =
        |i: &Option<agentmesh_core::events::CoordinatorIdentity>| i.as_ref().map(|i| i.to_json().to_string());
    let value = ev.to_value();
    let projected = project_route(&value);
    let columns = RouteColumns::of(projected.as_ref());
    let event_id = match &projected {
        Some(p) => Some(p.event_id.as_str()),
        None => envelope.event_id.as_deref(),
    };
    let target = ev.target_coordinator_daemon_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let lane = columns.lane(target);
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO mesh_pending_events
                 (id, mesh_id, coordinator_daemon_id, event, payload, fingerprint, queued_at,
                  protocol_version, event_id, scope, dispatched_by, intended_for,
                  route_class, to_machine, to_key, to_fallback, to_session, lane)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        )?
        .execute(params![
            id,
            ev.mesh_id,
            target,
            ev.event,
            value.to_string(),
            fingerprint,
            ev.queued_at.millis(),
            envelope.protocol_version.map(|v| v.as_str()),
            event_id,
            envelope.scope.map(|s| s.as_str()),
            identity(&envelope.dispatched_by),
            identity(&envelope.intended_for),
            columns.class,
            columns.machine,
            columns.key,
            columns.fallback,
            columns.session,
            lane,
        ])?;
    if inserted == 0 {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO mesh_inbox_queue (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_rowid)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![ev.mesh_id, lane, ev.queued_at.millis(), id, target, ev.event, conn.last_insert_rowid()])?;
    Ok(true)
}

/// Puts the stored event row `rowid` (back) on the queue; `false` when it was
/// queued already or there is no such row.
pub(crate) fn enqueue_stored(conn: &Connection, rowid: i64) -> Res<bool> {
    let queued = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO mesh_inbox_queue
                 (mesh_id, lane, queued_at, id, coordinator_daemon_id, event, event_rowid)
             SELECT mesh_id, lane, queued_at, id, coordinator_daemon_id, event, rowid
               FROM mesh_pending_events WHERE rowid = ?1",
        )?
        .execute([rowid])?;
    if queued > 0 {
        conn.prepare_cached(
            "DELETE FROM mesh_inbox_drained
              WHERE (mesh_id, event_id, id) = (SELECT mesh_id, event_id, id FROM mesh_pending_events WHERE rowid = ?1)",
        )?
        .execute([rowid])?;
    }
    Ok(queued > 0)
}

/// Records the event id of the stored, drained event row `rowid` (if it has one).
pub(crate) fn record_drained_stored(conn: &Connection, rowid: i64) -> Res<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO mesh_inbox_drained (mesh_id, event_id, id)
         SELECT mesh_id, event_id, id FROM mesh_pending_events WHERE rowid = ?1 AND event_id IS NOT NULL",
    )?
    .execute([rowid])?;
    Ok(())
}

/// `route_class` values (see migration 0007).
const CLASS_PAYLOAD: i64 = 0;
const CLASS_BROADCAST: i64 = 1;
const CLASS_SYSTEM: i64 = 2;
const CLASS_UNICAST: i64 = 3;
const CLASS_UNADDRESSED: i64 = 4;

/// The lane prefix of a unicast: the addressee's key follows, which starts with
/// its machine core and `|`.
const UNICAST_LANE: &str = "u:";
/// The lane prefix of any other event targeted at a daemon: the target's machine
/// core follows.
const TARGET_LANE: &str = "@";

/// A [`ProjectedRoute`] as the columns of `mesh_pending_events` hold it (the
/// event id lives in `event_id`).
#[derive(Debug, Default, PartialEq)]
struct RouteColumns {
    class: i64,
    machine: Option<String>,
    key: Option<String>,
    fallback: bool,
    session: Option<String>,
}

impl RouteColumns {
    fn of(projected: Option<&ProjectedRoute>) -> RouteColumns {
        let Some(projected) = projected else { return RouteColumns::default() };
        let class = match &projected.class {
            RouteClass::Broadcast => CLASS_BROADCAST,
            RouteClass::System => CLASS_SYSTEM,
            RouteClass::Unaddressed => CLASS_UNADDRESSED,
            RouteClass::Unicast(to) => {
                return RouteColumns {
                    class: CLASS_UNICAST,
                    // A daemon id that names no machine matches no drainer: '' is
                    // no drainer's machine.
                    machine: Some(to.machine.clone().unwrap_or_default()),
                    key: Some(to.key.clone()),
                    fallback: to.run_is_daemon_fallback,
                    session: to.session.clone(),
                };
            }
        };
        RouteColumns { class, ..RouteColumns::default() }
    }

    /// The row's lane (see migration 0007): who may take it. `target` is the
    /// row's daemon target (trimmed, non-blank).
    fn lane(&self, target: Option<&str>) -> String {
        match (&self.key, target) {
            (Some(key), _) if self.class == CLASS_UNICAST => format!("{UNICAST_LANE}{key}"),
            (_, Some(target)) => format!("{TARGET_LANE}{}", machine_core(target).unwrap_or(target)),
            _ => String::new(),
        }
    }

    /// The projection back, given the row's event id; `None` for rows routed
    /// from their payload.
    fn projected(self, event_id: Option<String>) -> Option<ProjectedRoute> {
        let event_id = event_id?;
        let class = match self.class {
            CLASS_BROADCAST => RouteClass::Broadcast,
            CLASS_SYSTEM => RouteClass::System,
            CLASS_UNADDRESSED => RouteClass::Unaddressed,
            CLASS_UNICAST => RouteClass::Unicast(Address {
                machine: self.machine.filter(|m| !m.is_empty()),
                key: self.key?,
                run_is_daemon_fallback: self.fallback,
                session: self.session,
            }),
            _ => return None,
        };
        Some(ProjectedRoute { event_id, class })
    }
}

/// Migration 0007's data step: projects the routing inputs of every stored event.
pub(crate) fn backfill_route_columns(tx: &rusqlite::Transaction<'_>) -> Res<()> {
    let rows: Vec<(i64, String, Option<String>)> = tx
        .prepare("SELECT rowid, payload, coordinator_daemon_id FROM mesh_pending_events")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut update = tx.prepare(
        "UPDATE mesh_pending_events
            SET route_class = ?2, to_machine = ?3, to_key = ?4, to_fallback = ?5, to_session = ?6,
                event_id = COALESCE(?7, event_id), lane = ?8
          WHERE rowid = ?1",
    )?;
    for (rowid, payload, target) in rows {
        let projected = project_route(&parse(&payload));
        let event_id = projected.as_ref().map(|p| p.event_id.clone());
        let c = RouteColumns::of(projected.as_ref());
        let lane = c.lane(target.as_deref().map(str::trim).filter(|t| !t.is_empty()));
        if c.class != CLASS_PAYLOAD || !lane.is_empty() {
            update
                .execute(params![rowid, c.class, c.machine, c.key, c.fallback, c.session, event_id, lane])?;
        }
    }
    Ok(())
}

/// Whether an undrained event of the same refine job and outcome is queued.
fn refine_terminal_pending(conn: &Connection, ev: &PendingEvent) -> Res<bool> {
    let Some(job) = refine_job_id(&ev.metadata_event) else { return Ok(false) };
    let mut stmt = conn.prepare_cached(
        "SELECT e.payload FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
          WHERE q.mesh_id = ?1 AND q.event = ?2",
    )?;
    let rows = stmt.query_map(params![ev.mesh_id, ev.event], |r| r.get::<_, String>(0))?;
    for payload in rows {
        let payload: serde_json::Value = serde_json::from_str(&payload?).unwrap_or_else(|_| json!({}));
        let metadata = payload.get("metadataEvent").and_then(|m| m.as_object());
        if metadata.and_then(refine_job_id) == Some(job) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One undrained row as a drain sees it.
struct Candidate {
    /// The lane whose queue entry it is.
    lane: String,
    id: String,
    /// The event's name.
    name: String,
    payload: String,
    fingerprint: Option<String>,
    queued_at: i64,
    /// The stored event id (a valid v2 event's, or the envelope's of one that is
    /// not valid): what a drain records as drained.
    event_id: Option<String>,
    /// The routing inputs, for a valid v2 event; `None`: route from the payload.
    projected: Option<ProjectedRoute>,
    /// Whether its event id is looked up in the dedup history although it is
    /// routed from its payload: a terminal task event (a broadcast one goes only
    /// to its dispatcher, which its payload names).
    payload_dedup: bool,
}

impl Candidate {
    /// The event as handed out: its stored text, unparsed.
    fn into_inbox_event(self) -> InboxEvent {
        InboxEvent {
            id: self.id,
            name: self.name,
            event: RawJson::from_stored(self.payload),
            fingerprint: self.fingerprint,
            queued_at_ms: self.queued_at,
        }
    }
}

/// The columns a drain reads of a candidate row.
const CANDIDATE_COLUMNS: &str = "q.lane, q.id, e.payload, e.fingerprint, q.queued_at, e.event_id,
                e.route_class, e.to_machine, e.to_key, e.to_fallback, e.to_session, q.event";

/// The SQL of one page of one lane of a drain's walk: the lane in ?2, after the
/// (queued_at, id) cursor in ?3, ?4, for `forms` daemon id forms and, when given,
/// `only` event names.
fn lane_sql(forms: usize, only: Option<usize>) -> String {
    let list =
        |start: usize, n: usize| (0..n).map(|i| format!("+?{}", start + i)).collect::<Vec<_>>().join(", ");
    let mut sql = format!(
        "SELECT {CANDIDATE_COLUMNS} FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
          WHERE q.mesh_id = +?1 AND q.lane = +?2 AND (q.queued_at, q.id) > (+?3, +?4)"
    );
    let first = 5;
    if forms > 0 {
        sql.push_str(&format!(
            " AND (q.coordinator_daemon_id IS NULL OR q.coordinator_daemon_id IN ({}))",
            list(first, forms)
        ));
    }
    if let Some(n) = only {
        sql.push_str(&format!(" AND q.event IN ({})", list(first + forms, n)));
    }
    sql.push_str(&format!(
        " ORDER BY q.queued_at ASC, q.id ASC LIMIT +?{}",
        first + forms + only.unwrap_or(0)
    ));
    sql
}

/// The next lane after ?2 and before ?3 that holds undrained events, with the
/// addressee columns of one of its rows (all rows of a unicast lane share them).
const NEXT_LANE: &str = "SELECT q.lane, e.to_machine, e.to_key, e.to_fallback, e.to_session
  FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
  WHERE q.mesh_id = +?1 AND q.lane > +?2 AND q.lane < +?3 ORDER BY q.lane ASC LIMIT 1";

/// The lanes a drain by `request.drainer` must read: the untargeted lane, the
/// lanes of its daemon targets, and the unicast lanes on its machine (and on the
/// machines of the other ids it answers to) whose addressee it takes
/// ([`DrainRouter::takes_unicast`]: by address, or by re-attribution when the
/// addressee is not live). Every row in any other lane is one routing would leave
/// queued.
fn drain_lanes(
    conn: &Connection,
    mesh_id: &str,
    request: &DrainRequest,
    router: &DrainRouter<'_>,
) -> Res<Vec<String>> {
    let mut lanes = vec![String::new()];
    let forms = request.drainer.daemon_forms();
    let mut next = conn.prepare_cached(NEXT_LANE)?;
    if forms.is_empty() {
        // A drainer with no daemon id form takes every target.
        let mut after = TARGET_LANE.to_owned();
        while let Some(lane) =
            next.query_row(params![mesh_id, after, "A"], |r| r.get::<_, String>(0)).optional()?
        {
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
        loop {
            let found = next
                .query_row(params![mesh_id, after, end], |r| {
                    let lane: String = r.get(0)?;
                    let columns = RouteColumns {
                        class: CLASS_UNICAST,
                        machine: r.get(1)?,
                        key: r.get(2)?,
                        fallback: r.get(3)?,
                        session: r.get(4)?,
                    };
                    Ok((lane, columns))
                })
                .optional()?;
            let Some((lane, columns)) = found else { break };
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
    buffered: std::collections::VecDeque<Candidate>,
    /// Whether the lane has no more rows past `after`.
    exhausted: bool,
}

/// Walks the drainer's lanes merged oldest first, page by page, until `visit`
/// returns `true`.
fn walk(
    conn: &Connection,
    mesh_id: &str,
    request: &DrainRequest,
    lanes: Vec<String>,
    first_page: i64,
    mut visit: impl FnMut(Candidate, &HashSet<String>) -> Res<bool>,
) -> Res<()> {
    let forms = request.drainer.daemon_forms();
    let only = request.only_events.as_deref().unwrap_or(&[]);
    let sql = lane_sql(forms.len(), request.only_events.as_ref().map(|_| only.len()));
    let mut args: Vec<Value> = vec![
        Value::Text(mesh_id.to_owned()),
        Value::Null,
        Value::Integer(i64::MIN),
        Value::Text(String::new()),
    ];
    args.extend(forms.iter().map(|f| Value::Text(f.clone())));
    args.extend(only.iter().map(|e| Value::Text(e.clone())));
    args.push(Value::Null);
    let mut cursors: Vec<LaneCursor> = lanes
        .into_iter()
        .map(|lane| LaneCursor {
            lane,
            after: (i64::MIN, String::new()),
            buffered: Default::default(),
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
            args[1] = Value::Text(cursor.lane.clone());
            args[2] = Value::Integer(cursor.after.0);
            args[3] = Value::Text(cursor.after.1.clone());
            *args.last_mut().expect("the limit is the last argument") = Value::Integer(page_size);
            let mut stmt = conn.prepare_cached(&sql)?;
            let page: Vec<Candidate> =
                stmt.query_map(params_from_iter(args.iter()), candidate)?.collect::<Result<_, _>>()?;
            cursor.exhausted = (page.len() as i64) < page_size;
            if let Some(last) = page.last() {
                cursor.after = (last.queued_at, last.id.clone());
            }
            drained.extend(drained_event_ids(conn, mesh_id, &page)?);
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

fn candidate(r: &rusqlite::Row<'_>) -> rusqlite::Result<Candidate> {
    let columns = RouteColumns {
        class: r.get(6)?,
        machine: r.get(7)?,
        key: r.get(8)?,
        fallback: r.get(9)?,
        session: r.get(10)?,
    };
    let event_id: Option<String> = r.get(5)?;
    let name: String = r.get(11)?;
    let mut projected = columns.projected(event_id.clone());
    // A broadcast terminal task event goes only to the coordinator that
    // dispatched it, which its payload names; rows stored before that rule
    // carry a plain broadcast projection.
    if projected.as_ref().is_some_and(|p| p.class == RouteClass::Broadcast) && is_terminal_task_event(&name) {
        projected = None;
    }
    let payload_dedup = projected.is_none() && event_id.is_some() && is_terminal_task_event(&name);
    Ok(Candidate {
        lane: r.get(0)?,
        id: r.get(1)?,
        name,
        payload: r.get(2)?,
        fingerprint: r.get(3)?,
        queued_at: r.get(4)?,
        projected,
        payload_dedup,
        event_id,
    })
}

/// Which event ids of a page's valid v2 events were drained before. (Unversioned
/// and invalid events are never deduplicated by event id.)
///
/// Our event ids are time-ordered, so a page of events queued one after another
/// spans a narrow range of ids, and the dedup records inside that range are few
/// (usually none: what a drain took before is older). One range read answers for
/// the whole page; a range holding more records than [`DEDUP_RANGE_MAX`] (random
/// ids relayed from elsewhere, a busy mesh) is asked id by id instead.
fn drained_event_ids(conn: &Connection, mesh_id: &str, page: &[Candidate]) -> Res<HashSet<String>> {
    let ids: HashSet<&str> = page
        .iter()
        .filter_map(|c| match &c.projected {
            Some(p) => Some(p.event_id.as_str()),
            None => c.event_id.as_deref().filter(|_| c.payload_dedup),
        })
        .collect();
    let (Some(low), Some(high)) = (ids.iter().min(), ids.iter().max()) else { return Ok(HashSet::new()) };
    let in_range: Vec<String> = conn
        .prepare_cached(
            "SELECT event_id FROM mesh_inbox_drained
              WHERE mesh_id = ?1 AND event_id >= ?2 AND event_id <= ?3 LIMIT ?4",
        )?
        .query_map(params![mesh_id, low, high, DEDUP_RANGE_MAX + 1], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if in_range.len() <= DEDUP_RANGE_MAX as usize {
        return Ok(in_range.into_iter().filter(|id| ids.contains(id.as_str())).collect());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT event_id FROM mesh_inbox_drained
          WHERE mesh_id = ?1 AND event_id IN (SELECT value FROM json_each(?2))",
    )?;
    let found = stmt
        .query_map(params![mesh_id, serde_json::to_string(&ids)?], |r| r.get::<_, String>(0))?
        .collect::<Result<HashSet<_>, _>>()?;
    Ok(found)
}

/// Dedup records a page's id range may hold before [`drained_event_ids`] asks id
/// by id.
const DEDUP_RANGE_MAX: i64 = 512;

fn parse(payload: &str) -> serde_json::Value {
    // An unparsable payload reads as `{}`, as in the original; routing then treats
    // it as an unversioned event.
    serde_json::from_str(payload).unwrap_or_else(|_| json!({}))
}

/// How long a coordinator's presence keeps it live after its last drain or
/// touch: [`agentmesh_store::COORDINATOR_PRESENCE_TTL_MS`].
const PRESENCE_TTL_MS: i64 = agentmesh_store::COORDINATOR_PRESENCE_TTL_MS;
/// A drain rewrites its own presence record only when it is older than this, so
/// most drains dirty no presence page.
const PRESENCE_REFRESH_MS: i64 = PRESENCE_TTL_MS / 8;

/// The presence of the coordinators on `machine` in a mesh.
struct Presence {
    /// Keys of the live coordinators other than `me`.
    live_others: Vec<String>,
    /// When `me` was last seen, if it is recorded and not ended.
    my_last_seen: Option<i64>,
}

fn presence(conn: &Connection, mesh_id: &str, machine: Option<&str>, me: &str, now_ms: i64) -> Res<Presence> {
    let mut out = Presence { live_others: Vec::new(), my_last_seen: None };
    let Some(machine) = machine else { return Ok(out) };
    let mut stmt = conn.prepare_cached(
        "SELECT coordinator_key, last_seen_ms FROM mesh_coordinator_presence
          WHERE mesh_id = ?1 AND machine = ?2 AND ended_at_ms IS NULL AND last_seen_ms >= ?3",
    )?;
    let rows = stmt.query_map(params![mesh_id, machine, now_ms.saturating_sub(PRESENCE_TTL_MS)], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (key, last_seen) = row?;
        if key == me {
            out.my_last_seen = Some(last_seen);
        } else {
            out.live_others.push(key);
        }
    }
    Ok(out)
}

/// Records that `identity` is live in the mesh as of `now` (a later record is
/// kept). An end recorded at or after `now` stands: a touch that was on its way
/// when the coordinator ended does not bring it back.
pub(crate) fn touch_coordinator(
    conn: &Connection,
    mesh_id: &str,
    identity: &CoordinatorIdentity,
    now: Timestamp,
) -> Res<()> {
    let address = Address::of(identity);
    conn.prepare_cached(
        "INSERT INTO mesh_coordinator_presence
             (mesh_id, coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms, ended_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)
         ON CONFLICT (mesh_id, coordinator_key) DO UPDATE
            SET last_seen_ms = MAX(last_seen_ms, excluded.last_seen_ms),
                ended_at_ms = CASE WHEN ended_at_ms >= excluded.last_seen_ms THEN ended_at_ms END,
                daemon_id = excluded.daemon_id",
    )?
    .execute(params![
        mesh_id,
        address.key,
        address.machine,
        identity.daemon_id,
        identity.coordinator_run_id,
        address.session,
        now.millis(),
    ])?;
    Ok(())
}

/// Records that `identity` ended (a graceful exit): from now on its unicasts go
/// to the next coordinator on its machine. `false` when it had no record.
pub(crate) fn end_coordinator(
    conn: &Connection,
    mesh_id: &str,
    identity: &CoordinatorIdentity,
    now: Timestamp,
) -> Res<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE mesh_coordinator_presence SET ended_at_ms = ?3
              WHERE mesh_id = ?1 AND coordinator_key = ?2",
        )?
        .execute(params![mesh_id, identity.key(), now.millis()])?
        > 0)
}

/// The lanes and the router of one drain or peek judged at `now_ms`.
fn router_for<'a>(
    conn: &Connection,
    mesh_id: &str,
    request: &'a DrainRequest,
    now_ms: i64,
) -> Res<(Vec<String>, DrainRouter<'a>, Presence)> {
    let me = request.drainer.address();
    let mine = presence(conn, mesh_id, me.machine.as_deref(), &me.key, now_ms)?;
    let mut live: HashSet<String> = mine.live_others.iter().cloned().collect();
    // The coordinators live on the machines of the other ids the drainer answers
    // to keep their unicasts too.
    for alias in request.drainer.aliases() {
        let machine = machine_core(&alias.daemon_id);
        live.extend(presence(conn, mesh_id, machine, &me.key, now_ms)?.live_others);
    }
    let router = DrainRouter::with_live(&request.drainer, request.enforce, live);
    let lanes = drain_lanes(conn, mesh_id, request, &router)?;
    Ok((lanes, router, mine))
}

/// Drains in the caller's transaction.
///
/// Counters: `v2RoutedAway` counts the events this drain's routing examined and
/// left queued: system events, broadcast terminal events of other
/// coordinators, and unicasts in a lane it reads that routing
/// still routes away (its addressee became live between the lane choice and the
/// routing cannot happen inside one transaction, so in practice: none). Unicasts
/// in lanes it does not read (for another machine, for a sibling session told
/// apart by session, for another live coordinator) count nowhere, as events
/// targeted at another daemon already did: they never reach this drain's
/// routing. For the same reason such a row is deduplicated by event id (and
/// marked drained) only by its own coordinator's drain.
pub(crate) fn drain(
    conn: &Connection,
    mesh_id: &str,
    request: &DrainRequest,
    now: Timestamp,
) -> Res<DrainOutcome> {
    let mut out = DrainOutcome::default();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(out);
    }
    let limit = request.limit.unwrap_or(DEFAULT_DRAIN_LIMIT) as usize;
    if limit == 0 {
        return Ok(out);
    }
    let (lanes, mut router, presence) = router_for(conn, mesh_id, request, now.millis())?;
    if presence.my_last_seen.is_none_or(|seen| seen < now.millis().saturating_sub(PRESENCE_REFRESH_MS)) {
        touch_coordinator(conn, mesh_id, request.drainer.identity(), now)?;
    }
    let mut taken: Vec<Taken> = Vec::new();
    walk(conn, mesh_id, request, lanes, limit as i64, |c, drained| {
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
                ledger::append(conn, &held_entry(mesh_id, &c.id, &raw, reason, c.queued_at, now))?;
                out.quarantined.push(c.id);
            }
        }
        Ok(out.events.len() >= limit)
    })?;
    take(conn, mesh_id, &taken)?;
    out.counters = router.counters();
    out.events = reconcile_refine(conn, mesh_id, std::mem::take(&mut out.events), now)?;
    out.events = drop_stale_alerts(conn, mesh_id, std::mem::take(&mut out.events))?;
    Ok(out)
}

/// The queue entry of an event a drain takes, and its event id.
struct Taken {
    lane: String,
    queued_at: i64,
    id: String,
    event_id: Option<String>,
}

impl Taken {
    fn of(c: &Candidate) -> Taken {
        Taken { lane: c.lane.clone(), queued_at: c.queued_at, id: c.id.clone(), event_id: c.event_id.clone() }
    }
}

/// The queue entries of one lane from (?3, ?4) to (?5, ?6), both included.
macro_rules! queue_range {
    () => {
        "mesh_id = ?1 AND lane = ?2 AND (queued_at, id) >= (?3, ?4) AND (queued_at, id) <= (?5, ?6)"
    };
}

/// Takes events off the queue, recording their event ids as drained (a drain's
/// delivered, deduplicated and quarantined events; an ack's events).
///
/// A lane whose taken events are all its queue holds between the first and the
/// last of them (the usual case: a coordinator taking its own events in a row)
/// loses them in one range delete; otherwise each entry goes on its own.
fn take(conn: &Connection, mesh_id: &str, taken: &[Taken]) -> Res<()> {
    let mut lanes: Vec<&str> = taken.iter().map(|t| t.lane.as_str()).collect();
    lanes.sort_unstable();
    lanes.dedup();
    for lane in lanes {
        let mut of_lane: Vec<&Taken> = taken.iter().filter(|t| t.lane == lane).collect();
        // A drain's walk hands them over in this order already; an ack need not.
        of_lane.sort_unstable_by(|a, b| (a.queued_at, &a.id).cmp(&(b.queued_at, &b.id)));
        let (first, last) = (of_lane[0], of_lane[of_lane.len() - 1]);
        let bounds = params![mesh_id, lane, first.queued_at, first.id, last.queued_at, last.id];
        let between: i64 = conn
            .prepare_cached(concat!("SELECT COUNT(*) FROM mesh_inbox_queue WHERE ", queue_range!()))?
            .query_row(bounds, |r| r.get(0))?;
        if between == of_lane.len() as i64 {
            conn.prepare_cached(concat!("DELETE FROM mesh_inbox_queue WHERE ", queue_range!()))?
                .execute(bounds)?;
        } else {
            let mut dequeue = conn.prepare_cached(
                "DELETE FROM mesh_inbox_queue WHERE mesh_id = ?1 AND lane = ?2 AND queued_at = ?3 AND id = ?4",
            )?;
            for t in of_lane {
                dequeue.execute(params![mesh_id, t.lane, t.queued_at, t.id])?;
            }
        }
    }
    // The dedup records go in statements of up to RECORDS_PER_INSERT rows each.
    let records: Vec<(&str, &str)> =
        taken.iter().filter_map(|t| t.event_id.as_deref().map(|e| (e, t.id.as_str()))).collect();
    for chunk in records.chunks(RECORDS_PER_INSERT) {
        let rows =
            (0..chunk.len()).map(|i| format!("(?1, ?{}, ?{})", 2 * i + 2, 2 * i + 3)).collect::<Vec<_>>();
        let mut insert = conn.prepare_cached(&format!(
            "INSERT OR IGNORE INTO mesh_inbox_drained (mesh_id, event_id, id) VALUES {}",
            rows.join(", ")
        ))?;
        insert.raw_bind_parameter(1, mesh_id)?;
        for (i, (event_id, id)) in chunk.iter().enumerate() {
            insert.raw_bind_parameter(2 * i + 2, event_id)?;
            insert.raw_bind_parameter(2 * i + 3, id)?;
        }
        insert.raw_execute()?;
    }
    Ok(())
}

/// Dedup records one statement of [`take`] inserts at most.
const RECORDS_PER_INSERT: usize = 50;

/// Applies the refine reconciliation to what a drain or peek hands out: a refine
/// job accepted in the batch whose terminal event is missing gets it rebuilt from
/// the ledger (found by job, however many newer entries there are), and accepted
/// events whose terminal is present are left out.
fn reconcile_refine(
    conn: &Connection,
    mesh_id: &str,
    events: Vec<InboxEvent>,
    now: Timestamp,
) -> Res<Vec<InboxEvent>> {
    use agentmesh_core::events::refine;
    if !events.iter().any(|e| e.name == agentmesh_core::events::names::REFINE_ACCEPTED) {
        return Ok(events);
    }
    // A batch with a refine acceptance is read as trees (the only kind of batch
    // whose payloads a drain itself looks into).
    let values: Vec<serde_json::Value> = events.iter().map(|e| e.event.parse()).collect();
    let missing = refine::jobs_missing_a_terminal(&values);
    let mut backfilled = Vec::new();
    for job in &missing {
        let mut stmt = conn.prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger
              WHERE mesh_id = ?1 AND kind IN ('task_completed', 'task_failed') AND json_valid(payload)
                AND json_extract(payload, '$.source') = ?2
                AND TRIM(json_extract(payload, '$.refineJob.jobId')) = ?3
              ORDER BY timestamp DESC, rowid DESC LIMIT 1",
        )?;
        let entry = stmt
            .query_row(params![mesh_id, refine::REFINE_SOURCE, job], ledger::entry_from_row)
            .optional()?;
        if let Some(entry) = entry.filter(|e| refine::is_refine_outcome(e, job)) {
            backfilled.push(refine::terminal_from_ledger(mesh_id, &entry, now));
        }
    }
    let paired: Vec<(InboxEvent, &serde_json::Value)> = events.into_iter().zip(&values).collect();
    let mut out: Vec<InboxEvent> =
        refine::drop_superseded(paired, |(_, v)| *v, &backfilled).into_iter().map(|(e, _)| e).collect();
    for event in backfilled {
        let job = agentmesh_core::events::read_refine_job_id(&event).unwrap_or_default().to_owned();
        let name = event.get("event").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
        // Rebuilt events are not rows: their id names where they came from.
        out.push(InboxEvent {
            id: format!("ledger:{name}:{job}"),
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
fn drop_stale_alerts(conn: &Connection, mesh_id: &str, events: Vec<InboxEvent>) -> Res<Vec<InboxEvent>> {
    use agentmesh_core::TaskStatus;
    use agentmesh_core::events::names::is_stale_task_droppable_event;
    use agentmesh_core::events::stale::{alert_is_stale, droppable_alert_task_id};
    if !events.iter().any(|e| is_stale_task_droppable_event(&e.name)) {
        return Ok(events);
    }
    let mut stmt = conn.prepare_cached("SELECT status FROM mesh_queue WHERE mesh_id = ?1 AND id = ?2")?;
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        if is_stale_task_droppable_event(&event.name) {
            let value = event.event.parse();
            if let Some(task_id) = droppable_alert_task_id(&event.name, &value) {
                let status: Option<String> =
                    stmt.query_row(params![mesh_id, task_id], |r| r.get(0)).optional()?;
                let status = status.and_then(|s| s.parse::<TaskStatus>().ok());
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

/// The `event_held` entry of a quarantined event: recoverable, with the whole event.
fn held_entry(
    mesh_id: &str,
    row_id: &str,
    raw: &serde_json::Value,
    reason: QuarantineReason,
    queued_at: i64,
    now: Timestamp,
) -> LedgerEntry {
    let metadata = raw.get("metadataEvent").and_then(|m| m.as_object());
    LedgerEntry {
        id: ledger::new_entry_id(now),
        mesh_id: mesh_id.to_owned(),
        timestamp: now.iso(),
        kind: "event_held".to_owned(),
        node_id: raw.get("nodeId").and_then(|v| v.as_str()).map(str::to_owned),
        session_id: None,
        provider_type: None,
        payload: json!({
            "event": raw.get("event").cloned().unwrap_or(serde_json::Value::Null),
            "reason": reason.as_str(),
            "recoverable": true,
            "nodeLabel": raw.get("nodeLabel").cloned().unwrap_or(json!("")),
            "workspace": raw.get("workspace").cloned(),
            "targetCoordinatorDaemonId": raw.get("targetCoordinatorDaemonId").cloned().unwrap_or(serde_json::Value::Null),
            "eventId": raw.get("eventId").cloned(),
            "queuedAt": queued_at,
            "finalSummary": metadata.and_then(read_completion_summary),
            "taskId": metadata.and_then(|m| m.get("taskId")).cloned(),
            "heldEvent": raw,
            "pendingEventId": row_id,
        }),
    }
}

/// What a drain would deliver, marking and counting nothing.
///
/// A peek reads no clock and writes nothing: it judges liveness at the newest
/// presence instant recorded for the mesh (the latest moment the store knows
/// of), and it does not refresh the drainer's presence.
pub(crate) fn peek(conn: &Connection, mesh_id: &str, request: &DrainRequest) -> Res<Vec<InboxEvent>> {
    let mut events = Vec::new();
    if request.only_events.as_ref().is_some_and(Vec::is_empty) {
        return Ok(events);
    }
    let limit = request.limit.unwrap_or(DEFAULT_DRAIN_LIMIT) as usize;
    let newest: Option<i64> = conn
        .prepare_cached("SELECT MAX(last_seen_ms) FROM mesh_coordinator_presence WHERE mesh_id = ?1")?
        .query_row([mesh_id], |r| r.get(0))?;
    let (lanes, mut router, _) = router_for(conn, mesh_id, request, newest.unwrap_or(i64::MIN))?;
    walk(conn, mesh_id, request, lanes, limit as i64, |c, drained| {
        let decision = match &c.projected {
            Some(projected) => router.route_projected(projected, |id| drained.contains(id)).decision,
            None => {
                let raw = parse(&c.payload);
                if router.route(&raw, |id| drained.contains(id)).decision == RouteDecision::Deliver {
                    events.push(c.into_inbox_event());
                }
                return Ok(events.len() >= limit);
            }
        };
        if decision == RouteDecision::Deliver {
            events.push(c.into_inbox_event());
        }
        Ok(events.len() >= limit)
    })?;
    // A peek reads no clock: a rebuilt terminal is dated like the newest event seen.
    let at = Timestamp::from_millis(events.iter().map(|e| e.queued_at_ms).max().unwrap_or(0));
    let events = reconcile_refine(conn, mesh_id, events, at)?;
    drop_stale_alerts(conn, mesh_id, events)
}

pub(crate) fn ack(conn: &Connection, mesh_id: &str, ids: &[String]) -> Res<u64> {
    let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut find = conn.prepare_cached(
        "SELECT q.lane, q.queued_at, q.id, e.event_id
           FROM mesh_pending_events e
           JOIN mesh_inbox_queue q ON q.mesh_id = e.mesh_id AND q.lane = e.lane
                                  AND q.queued_at = e.queued_at AND q.id = e.id
          WHERE e.mesh_id = ?1 AND e.id = ?2",
    )?;
    let mut taken = Vec::new();
    for id in ids {
        let queued = find
            .query_row(params![mesh_id, id], |r| {
                Ok(Taken { lane: r.get(0)?, queued_at: r.get(1)?, id: r.get(2)?, event_id: r.get(3)? })
            })
            .optional()?;
        taken.extend(queued);
    }
    take(conn, mesh_id, &taken)?;
    Ok(taken.len() as u64)
}

pub(crate) fn delete(conn: &Connection, mesh_id: &str, ids: &[String]) -> Res<u64> {
    let mut stmt = conn.prepare_cached("DELETE FROM mesh_pending_events WHERE mesh_id = ?1 AND id = ?2")?;
    let mut n = 0;
    for id in ids {
        n += stmt.execute(params![mesh_id, id])? as u64;
    }
    Ok(n)
}

pub(crate) fn retract_dispatch_blocked(conn: &Connection, mesh_id: &str, task_id: &str) -> Res<u64> {
    let task_id = task_id.trim();
    if task_id.is_empty() {
        return Ok(0);
    }
    Ok(conn
        .prepare_cached(
            "DELETE FROM mesh_pending_events
              WHERE rowid IN (SELECT event_rowid FROM mesh_inbox_queue
                               WHERE mesh_id = ?1 AND event = 'mesh:dispatch_blocked')
                AND json_valid(payload) AND TRIM(json_extract(payload, '$.metadataEvent.taskId')) = ?2",
        )?
        .execute(params![mesh_id, task_id])? as u64)
}

pub(crate) fn clear(conn: &Connection, mesh_id: &str) -> Res<u64> {
    // The durable completion dedup records of the mesh go with its events.
    conn.execute(
        "DELETE FROM mesh_completion_fingerprints WHERE mesh_id = ?1 AND fingerprint LIKE 'pending::%'",
        [mesh_id],
    )?;
    // Queue entries and dedup records first, so the delete trigger finds none.
    conn.execute("DELETE FROM mesh_inbox_queue WHERE mesh_id = ?1", [mesh_id])?;
    conn.execute("DELETE FROM mesh_inbox_drained WHERE mesh_id = ?1", [mesh_id])?;
    Ok(conn.execute("DELETE FROM mesh_pending_events WHERE mesh_id = ?1", [mesh_id])? as u64)
}

pub(crate) fn count(conn: &Connection, mesh_id: &str) -> Res<u64> {
    let mut stmt = conn.prepare_cached("SELECT COUNT(*) FROM mesh_inbox_queue WHERE mesh_id = ?1")?;
    Ok(stmt.query_row([mesh_id], |r| r.get::<_, i64>(0))? as u64)
}

/// Puts the event of an `event_held` entry back in the inbox, with its
/// `event_held_requeued` entry.
pub(crate) fn requeue_held(
    conn: &Connection,
    mesh_id: &str,
    held_entry_id: &str,
    now: Timestamp,
) -> Res<bool> {
    let entry = conn
        .prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger WHERE id = ?1 AND mesh_id = ?2 AND kind = 'event_held'",
        )?
        .query_row(params![held_entry_id, mesh_id], ledger::entry_from_row)
        .optional()?
        .ok_or_else(|| {
            Fail(StoreError::NotFound {
                kind: "held event",
                mesh_id: mesh_id.to_owned(),
                id: held_entry_id.to_owned(),
            })
        })?;
    let row_id = entry.payload.get("pendingEventId").and_then(serde_json::Value::as_str);
    let stored: Option<i64> = match row_id {
        Some(row) => conn
            .prepare_cached("SELECT rowid FROM mesh_pending_events WHERE id = ?1 AND mesh_id = ?2")?
            .query_row(params![row, mesh_id], |r| r.get(0))
            .optional()?,
        None => None,
    };
    let row_exists = stored.is_some();
    let mut requeued = match stored {
        Some(rowid) => enqueue_stored(conn, rowid)?,
        None => false,
    };
    if !row_exists {
        // Retention removed the row: queue the held event again (its envelope, and
        // so its event id, is kept).
        let held = entry.payload.get("heldEvent").cloned().unwrap_or(serde_json::Value::Null);
        let event = PendingEvent::from_value(held).map_err(|e| {
            Fail(StoreError::Corrupt {
                what: format!("held event of ledger entry {held_entry_id}"),
                problem: e.to_string(),
            })
        })?;
        requeued = matches!(
            queue(conn, mesh_id, event, &EmitHint::default(), None, now)?,
            QueueOutcome::Queued { .. }
        );
    }
    ledger::append(
        conn,
        &LedgerEntry {
            id: ledger::new_entry_id(now),
            mesh_id: mesh_id.to_owned(),
            timestamp: now.iso(),
            kind: "event_held_requeued".to_owned(),
            node_id: entry.node_id.clone(),
            session_id: None,
            provider_type: None,
            payload: json!({
                "heldEntryId": held_entry_id,
                "event": entry.payload.get("event"),
                "requeued": requeued,
                "taskId": entry.payload.get("taskId"),
                "reason": entry.payload.get("reason"),
            }),
        },
    )?;
    Ok(requeued)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drain page is a range of one lane of the queue in walk order, filtered
    /// from the queue entries themselves, each joined to its event row by rowid:
    /// no sort, however many events other coordinators have queued; and finding
    /// the next lane is one seek.
    #[test]
    fn a_drain_page_walks_one_lane_of_the_drain_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let plans = [(0, None), (3, None), (3, Some(2))].map(|(forms, only)| lane_sql(forms, only));
        for sql in plans.iter().map(String::as_str).chain([NEXT_LANE]) {
            let n = conn.prepare(sql).unwrap().parameter_count();
            let args: Vec<Value> = (0..n)
                .map(|i| if i == 2 { Value::Integer(0) } else { Value::Text(format!("v{i}")) })
                .collect();
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(params_from_iter(args.iter()), |r| r.get(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join(" | ");
            assert!(plan.contains("SEARCH q USING PRIMARY KEY (mesh_id=? AND lane"), "{sql}\n{plan}");
            assert!(plan.contains("SEARCH e USING INTEGER PRIMARY KEY"), "{sql}\n{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}\n{plan}");
        }
    }

    /// Event-id dedup holds whether a page's id range holds few dedup records
    /// (read as one range) or many (asked id by id).
    #[test]
    fn event_id_dedup_holds_across_a_wide_id_range() {
        use agentmesh_core::events::{CoordinatorIdentity, Drainer};
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let me = CoordinatorIdentity::new("mach_A", "run-1", None);
        let request = DrainRequest {
            drainer: Drainer::new(me.clone(), &[]),
            only_events: None,
            enforce: false,
            limit: Some(1000),
        };
        let queue = |conn: &Connection, task: &str, event_id: &str, at: i64| {
            let mut ev = PendingEvent::new(
                "agent:generating_completed",
                "m",
                "",
                serde_json::Map::from_iter([("taskId".to_owned(), json!(task))]),
                Timestamp::from_millis(at),
            );
            ev.target_coordinator_daemon_id = Some("mach_A".to_owned());
            let hint = EmitHint { coordinator_run_id: Some("run-1".to_owned()), ..EmitHint::default() };
            stamp_event(&mut ev, &hint, event_id, None);
            assert!(insert_row(conn, &format!("row-{task}"), &ev).unwrap());
        };
        let n = DEDUP_RANGE_MAX as usize + 100;
        for i in 0..n {
            queue(&conn, &format!("t{i}"), &format!("e{i:05}"), i as i64);
        }
        let first = drain(&conn, "m", &request, Timestamp::from_millis(10_000)).unwrap();
        assert_eq!(first.events.len(), n);
        // Copies of drained events (new content, known ids) at both ends of the
        // range, around a new one: the range holds every earlier record.
        queue(&conn, "copy-low", "e00000", 20_000);
        queue(&conn, "new", "e00300x", 20_001);
        queue(&conn, "copy-high", &format!("e{:05}", n - 1), 20_002);
        let wide = drain(&conn, "m", &request, Timestamp::from_millis(30_000)).unwrap();
        let ids: Vec<&str> = wide.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["row-new"]);
        assert_eq!((wide.counters.v2_delivered, wide.counters.v2_dedup_skipped), (1, 2));
        // A narrow range: one copy of a drained event next to its original's id.
        queue(&conn, "copy-narrow", "e00300x", 40_000);
        let narrow = drain(&conn, "m", &request, Timestamp::from_millis(50_000)).unwrap();
        assert!(narrow.events.is_empty());
        assert_eq!((narrow.counters.v2_delivered, narrow.counters.v2_dedup_skipped), (0, 1));
        assert_eq!(count(&conn, "m").unwrap(), 0);
    }

    /// Migration 0007's back-fill gives rows queued before it the routing columns
    /// and lane an insert writes now.
    #[test]
    fn the_backfill_projects_what_an_insert_writes() {
        use agentmesh_core::events::{CoordinatorIdentity, Scope};
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let to = CoordinatorIdentity::new("daemon_mach_A", "run-1", Some("s1".to_owned()));
        let events = [
            (Some(Scope::Unicast), Some("mach_A")),
            (Some(Scope::Broadcast), None),
            (Some(Scope::System), Some("mach_B")),
            (None, Some("standalone_mach_C")),
        ];
        for (i, (scope, target)) in events.into_iter().enumerate() {
            let mut ev = PendingEvent::new(
                "task_completed",
                "m",
                "",
                serde_json::Map::from_iter([("taskId".to_owned(), json!(format!("t{i}")))]),
                Timestamp::from_millis(i as i64),
            );
            ev.target_coordinator_daemon_id = target.map(str::to_owned);
            let hint = EmitHint {
                scope,
                dispatched_by: scope.map(|_| to.clone()),
                intended_for: Some(to.clone()),
                ..EmitHint::default()
            };
            stamp_event(&mut ev, &hint, &format!("e{i}"), None);
            assert!(insert_row(&conn, &format!("r{i}"), &ev).unwrap());
        }
        let columns = "SELECT route_class, to_machine, to_key, to_fallback, to_session, lane, event_id
                         FROM mesh_pending_events ORDER BY id";
        let read = |conn: &Connection| -> Vec<Vec<Value>> {
            conn.prepare(columns)
                .unwrap()
                .query_map([], |r| (0..7).map(|i| r.get::<_, Value>(i)).collect())
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let inserted = read(&conn);
        assert_eq!(inserted[0][0], Value::Integer(CLASS_UNICAST));
        assert_eq!(inserted[0][5], Value::Text("u:mach_A|run-1|s1".to_owned()));
        assert_eq!(inserted[2][5], Value::Text("@mach_B".to_owned()));
        assert_eq!(inserted[3][5], Value::Text("@mach_C".to_owned()));
        conn.execute_batch(
            "UPDATE mesh_pending_events SET route_class = 0, to_machine = NULL, to_key = NULL,
                    to_fallback = 0, to_session = NULL, lane = ''",
        )
        .unwrap();
        let tx = conn.transaction().unwrap();
        backfill_route_columns(&tx).unwrap();
        tx.commit().unwrap();
        assert_eq!(read(&conn), inserted);
    }
}
