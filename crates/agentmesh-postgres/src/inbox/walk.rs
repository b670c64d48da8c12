//! The SQL of a drain's walk (`agentmesh_store::inbox_writes` walks): the next
//! lane holding events, one page of a lane, and the dedup history of a page.

use std::collections::HashSet;

use agentmesh_store::inbox_writes::QueuedRow;
use agentmesh_store::route_columns::RouteColumns;
use postgres::Row;

use crate::Res;
use crate::db::Db;

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

/// The first lane after `after` and before `before` holding undrained events,
/// with the addressee columns of one of its rows.
pub(super) fn next_lane(
    db: &Db<'_>,
    mesh_id: &str,
    after: &str,
    before: &str,
) -> Res<Option<(String, RouteColumns)>> {
    Ok(db.query_opt(NEXT_LANE, &[&mesh_id, &after, &before])?.map(|row| {
        let columns = RouteColumns {
            class: 0,
            machine: row.get(1),
            key: row.get(2),
            fallback: row.get::<_, i64>(3) != 0,
            session: row.get(4),
        };
        (row.get(0), columns)
    }))
}

/// One page of one lane (see `InboxRows::lane_page`).
pub(super) fn lane_page(
    db: &Db<'_>,
    mesh_id: &str,
    lane: &str,
    after: (i64, &str),
    forms: &[String],
    only: Option<&[String]>,
    limit: i64,
) -> Res<Vec<QueuedRow>> {
    let rows = db.query(LANE_PAGE, &[&mesh_id, &lane, &after.0, &after.1, &forms, &only, &limit])?;
    Ok(rows.iter().map(queued_row).collect())
}

fn queued_row(r: &Row) -> QueuedRow {
    QueuedRow {
        lane: r.get(0),
        id: r.get(1),
        payload: crate::payload::json(r.get(2)),
        fingerprint: r.get(3),
        queued_at: r.get(4),
        event_id: r.get(5),
        columns: RouteColumns {
            class: r.get(6),
            machine: r.get(7),
            key: r.get(8),
            fallback: r.get::<_, i64>(9) != 0,
            session: r.get(10),
        },
        name: r.get(11),
    }
}

/// Which of the event ids `ids` were drained before.
pub(super) fn drained_among(db: &Db<'_>, mesh_id: &str, ids: &[&str]) -> Res<HashSet<String>> {
    let rows = db.query(
        "SELECT DISTINCT event_id FROM mesh_inbox_drained WHERE mesh_id = $1 AND event_id = ANY($2)",
        &[&mesh_id, &ids],
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
