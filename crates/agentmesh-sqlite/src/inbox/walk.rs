//! The SQL of a drain's walk (`agentmesh_store::inbox_writes` walks): the next
//! lane holding events, one page of a lane, and the dedup history of a page.

use agentmesh_store::inbox_writes::QueuedRow;
use agentmesh_store::route_columns::RouteColumns;

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

/// A drain page's row.
pub(super) fn queued_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<QueuedRow> {
    Ok(QueuedRow {
        lane: r.get(0)?,
        id: r.get(1)?,
        payload: r.get::<_, crate::payload::Json>(2)?.0,
        fingerprint: r.get(3)?,
        queued_at: r.get(4)?,
        event_id: r.get(5)?,
        columns: RouteColumns {
            class: r.get(6)?,
            machine: r.get(7)?,
            key: r.get(8)?,
            fallback: r.get(9)?,
            session: r.get(10)?,
        },
        name: r.get(11)?,
    })
}

/// Dedup records a page's id range may hold before `drained_among` asks id
/// by id.
pub(super) const DEDUP_RANGE_MAX: i64 = 512;

#[cfg(test)]
mod tests {
    use rusqlite::types::Value;
    use rusqlite::{Connection, params_from_iter};

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
