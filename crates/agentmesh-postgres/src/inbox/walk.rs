//! A drain's walk: the lanes it reads, merged oldest first, page by page, with
//! the event ids drained before.

use std::collections::{HashSet, VecDeque};

use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::names::is_terminal_task_event;
use agentmesh_core::events::{DrainRouter, ProjectedRoute, RouteClass};
use agentmesh_store::{DrainRequest, InboxEvent, RawJson};
use postgres::Row;
use serde_json::json;

use crate::Res;
use crate::db::Db;
use agentmesh_store::route_columns::{CLASS_UNICAST, RouteColumns, TARGET_LANE, UNICAST_LANE};

/// Candidate rows read per page of a drain's walk.
const PAGE: i64 = 256;

/// One undrained row as a drain sees it.
pub(super) struct Candidate {
    /// The lane whose queue entry it is.
    pub(super) lane: String,
    pub(super) id: String,
    /// The event's name.
    pub(super) name: String,
    pub(super) payload: String,
    pub(super) fingerprint: Option<String>,
    pub(super) queued_at: i64,
    /// The stored event id (a valid v2 event's, or the envelope's of one that is
    /// not valid): what a drain records as drained.
    pub(super) event_id: Option<String>,
    /// The routing inputs, for a valid v2 event; `None`: route from the payload.
    pub(super) projected: Option<ProjectedRoute>,
    /// Whether its event id is looked up in the dedup history although it is
    /// routed from its payload: a terminal task event (a broadcast one goes only
    /// to its dispatcher, which its payload names).
    payload_dedup: bool,
}

impl Candidate {
    /// The event as handed out: its stored text, unparsed.
    pub(super) fn into_inbox_event(self) -> InboxEvent {
        InboxEvent {
            id: self.id,
            name: self.name,
            event: RawJson::from_stored(self.payload),
            fingerprint: self.fingerprint,
            queued_at_ms: self.queued_at,
        }
    }

    fn of(r: &Row) -> Candidate {
        let columns = RouteColumns {
            class: r.get(6),
            machine: r.get(7),
            key: r.get(8),
            fallback: r.get::<_, i64>(9) != 0,
            session: r.get(10),
        };
        let event_id: Option<String> = r.get(5);
        let name: String = r.get(11);
        let mut projected = columns.projected(event_id.clone());
        // A broadcast terminal task event goes only to the coordinator that
        // dispatched it, which its payload names.
        if projected.as_ref().is_some_and(|p| p.class == RouteClass::Broadcast)
            && is_terminal_task_event(&name)
        {
            projected = None;
        }
        let payload_dedup = projected.is_none() && event_id.is_some() && is_terminal_task_event(&name);
        Candidate {
            lane: r.get(0),
            id: r.get(1),
            name,
            payload: r.get(2),
            fingerprint: r.get(3),
            queued_at: r.get(4),
            projected,
            payload_dedup,
            event_id,
        }
    }
}

/// One page of one lane of a drain's walk: the lane in $2, after the
/// (queued_at, id) cursor in $3, $4; with the drainer's daemon id forms in $5
/// (empty: every target) and the `onlyEvents` names in $6 (NULL: every name).
const LANE_PAGE: &str = "SELECT q.lane, q.id, e.payload, e.fingerprint, q.queued_at, e.event_id,
        e.route_class, e.to_machine, e.to_key, e.to_fallback, e.to_session, q.event
   FROM mesh_inbox_queue q
   JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
  WHERE q.mesh_id = $1 AND q.lane = $2 AND (q.queued_at, q.id) > ($3, $4)
    AND (cardinality($5::text[]) = 0 OR q.coordinator_daemon_id IS NULL
         OR q.coordinator_daemon_id = ANY($5::text[]))
    AND ($6::text[] IS NULL OR q.event = ANY($6::text[]))
  ORDER BY q.queued_at ASC, q.id ASC LIMIT $7";

/// The next lane after $2 and before $3 that holds undrained events, with the
/// addressee columns of one of its rows (all rows of a unicast lane share them).
const NEXT_LANE: &str = "SELECT q.lane, e.to_machine, e.to_key, e.to_fallback, e.to_session
   FROM mesh_inbox_queue q
   JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
  WHERE q.mesh_id = $1 AND q.lane > $2 AND q.lane < $3 ORDER BY q.lane ASC LIMIT 1";

/// The lanes a drain by `request.drainer` must read: the untargeted lane, the
/// lanes of its daemon targets, and the unicast lanes on its machine (and on the
/// machines of the other ids it answers to) whose addressee it takes
/// ([`DrainRouter::takes_unicast`]: by address, or by re-attribution when the
/// addressee is not live). Every row in any other lane is one routing would leave
/// queued.
pub(super) fn drain_lanes(
    db: &Db<'_>,
    mesh_id: &str,
    request: &DrainRequest,
    router: &DrainRouter<'_>,
) -> Res<Vec<String>> {
    let mut lanes = vec![String::new()];
    let forms = request.drainer.daemon_forms();
    if forms.is_empty() {
        // A drainer with no daemon id form takes every target.
        let mut after = TARGET_LANE.to_owned();
        while let Some(row) = db.query_opt(NEXT_LANE, &[&mesh_id, &after, &"A"])? {
            let lane: String = row.get(0);
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
        while let Some(row) = db.query_opt(NEXT_LANE, &[&mesh_id, &after, &end])? {
            let lane: String = row.get(0);
            let columns = RouteColumns {
                class: CLASS_UNICAST,
                machine: row.get(1),
                key: row.get(2),
                fallback: row.get::<_, i64>(3) != 0,
                session: row.get(4),
            };
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
/// returns `true`.
pub(super) fn walk(
    db: &Db<'_>,
    mesh_id: &str,
    request: &DrainRequest,
    lanes: Vec<String>,
    first_page: i64,
    mut visit: impl FnMut(Candidate, &HashSet<String>) -> Res<bool>,
) -> Res<()> {
    let forms: &[String] = request.drainer.daemon_forms();
    let only: Option<&[String]> = request.only_events.as_deref();
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
            let rows = db.query(
                LANE_PAGE,
                &[&mesh_id, &cursor.lane, &cursor.after.0, &cursor.after.1, &forms, &only, &page_size],
            )?;
            let page: Vec<Candidate> = rows.iter().map(Candidate::of).collect();
            cursor.exhausted = (page.len() as i64) < page_size;
            if let Some(last) = page.last() {
                cursor.after = (last.queued_at, last.id.clone());
            }
            drained.extend(drained_event_ids(db, mesh_id, &page)?);
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

/// Which event ids of a page's valid v2 events (and payload-routed terminal task
/// events) were drained before. Unversioned and invalid events are never
/// deduplicated by event id.
fn drained_event_ids(db: &Db<'_>, mesh_id: &str, page: &[Candidate]) -> Res<HashSet<String>> {
    let ids: Vec<&str> = page
        .iter()
        .filter_map(|c| match &c.projected {
            Some(p) => Some(p.event_id.as_str()),
            None => c.event_id.as_deref().filter(|_| c.payload_dedup),
        })
        .collect();
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let rows = db.query(
        "SELECT DISTINCT event_id FROM mesh_inbox_drained WHERE mesh_id = $1 AND event_id = ANY($2)",
        &[&mesh_id, &ids],
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A stored payload as JSON; an unparsable one reads as `{}`, which routing
/// treats as an unversioned event.
pub(super) fn parse(payload: &str) -> serde_json::Value {
    serde_json::from_str(payload).unwrap_or_else(|_| json!({}))
}
