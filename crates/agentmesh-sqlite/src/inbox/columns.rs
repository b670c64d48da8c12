//! Migration 0007's projection of the routing columns (their encoding is
//! `agentmesh_store::route_columns`).

use agentmesh_core::events::project_route;
use rusqlite::params;

use crate::Res;
use agentmesh_store::inbox_writes::parse;

pub(super) use agentmesh_store::route_columns::{CLASS_PAYLOAD, RouteColumns};

/// Migration 0007's data step: projects the routing inputs of every stored event.
pub(crate) fn backfill_route_columns(tx: &rusqlite::Transaction<'_>) -> Res<()> {
    let rows: Vec<(i64, crate::payload::Json, Option<String>)> = tx
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
        let projected = project_route(&parse(&payload.0));
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

#[cfg(test)]
mod tests {
    use super::*;
    use agentmesh_core::Timestamp;
    use agentmesh_core::events::{EmitHint, PendingEvent, stamp_event};
    use agentmesh_store::route_columns::CLASS_UNICAST;
    use rusqlite::Connection;
    use rusqlite::types::Value;
    use serde_json::json;

    use crate::inbox::insert_row;

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
