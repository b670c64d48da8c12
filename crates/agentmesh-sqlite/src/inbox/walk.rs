//! A drain's walk: the lanes it reads, merged oldest first, page by page, with
//! the event ids drained before.

use std::collections::HashSet;

use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::names::is_terminal_task_event;
use agentmesh_core::events::{DrainRouter, ProjectedRoute, RouteClass};
use agentmesh_store::{DrainRequest, InboxEvent, RawJson};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::json;

use super::columns::{CLASS_UNICAST, RouteColumns, TARGET_LANE, UNICAST_LANE};
use crate::Res;

/// Candidate rows read per page of a drain's walk.
pub(super) const PAGE: i64 = 256;

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
    pub(super) payload_dedup: bool,
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
}

/// The columns a drain reads of a candidate row.
pub(super) const CANDIDATE_COLUMNS: &str = "q.lane, q.id, e.payload, e.fingerprint, q.queued_at, e.event_id,
                e.route_class, e.to_machine, e.to_key, e.to_fallback, e.to_session, q.event";

/// The SQL of one page of one lane of a drain's walk: the lane in ?2, after the
/// (queued_at, id) cursor in ?3, ?4, for `forms` daemon id forms and, when given,
/// `only` event names.
pub(super) fn lane_sql(forms: usize, only: Option<usize>) -> String {
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
pub(super) const NEXT_LANE: &str = "SELECT q.lane, e.to_machine, e.to_key, e.to_fallback, e.to_session
  FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
  WHERE q.mesh_id = +?1 AND q.lane > +?2 AND q.lane < +?3 ORDER BY q.lane ASC LIMIT 1";

/// The lanes a drain by `request.drainer` must read: the untargeted lane, the
/// lanes of its daemon targets, and the unicast lanes on its machine (and on the
/// machines of the other ids it answers to) whose addressee it takes
/// ([`DrainRouter::takes_unicast`]: by address, or by re-attribution when the
/// addressee is not live). Every row in any other lane is one routing would leave
/// queued.
pub(super) fn drain_lanes(
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
pub(super) struct LaneCursor {
    pub(super) lane: String,
    /// The (queued_at, id) of the last row read.
    pub(super) after: (i64, String),
    /// Rows read and not yet visited, oldest first.
    pub(super) buffered: std::collections::VecDeque<Candidate>,
    /// Whether the lane has no more rows past `after`.
    pub(super) exhausted: bool,
}

/// Walks the drainer's lanes merged oldest first, page by page, until `visit`
/// returns `true`.
pub(super) fn walk(
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

pub(super) fn candidate(r: &rusqlite::Row<'_>) -> rusqlite::Result<Candidate> {
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
pub(super) fn drained_event_ids(
    conn: &Connection,
    mesh_id: &str,
    page: &[Candidate],
) -> Res<HashSet<String>> {
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
pub(super) const DEDUP_RANGE_MAX: i64 = 512;

pub(super) fn parse(payload: &str) -> serde_json::Value {
    // An unparsable payload reads as `{}`, as in the original; routing then treats
    // it as an unversioned event.
    serde_json::from_str(payload).unwrap_or_else(|_| json!({}))
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
}
