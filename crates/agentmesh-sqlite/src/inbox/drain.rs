//! The SQLite inbox rows of one transaction (`agentmesh_store::inbox_writes`
//! decides queueing, drains, peeks, acks and held requeues over them): a
//! drain's walk (its SQL texts are `walk`'s), taking events off the queue,
//! presence, the records a refine reconciliation and a held requeue read.

use std::collections::HashSet;

use agentmesh_core::events::presence::COORDINATOR_PRESENCE_TTL_MS;
use agentmesh_core::events::{Address, CoordinatorIdentity, PendingEvent};
use agentmesh_core::{LedgerEntry, Timestamp};
use agentmesh_store::inbox_writes::{InboxRows, LanePage, QueuedRow, Taken};
use agentmesh_store::route_columns::RouteColumns;
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::walk::{DEDUP_RANGE_MAX, NEXT_LANE, lane_sql, queued_row};
use super::{queue, reconcile};
use crate::{Fail, Res, ledger};

// The core's presence rule and the store's promise name the same duration.
const _: () = assert!(COORDINATOR_PRESENCE_TTL_MS == agentmesh_store::COORDINATOR_PRESENCE_TTL_MS);

/// The inbox rows of the transaction open on a connection.
pub(crate) struct Inbox<'c>(pub(crate) &'c Connection);

impl InboxRows for Inbox<'_> {
    type Error = Fail;

    fn next_lane(&self, mesh_id: &str, after: &str, before: &str) -> Res<Option<(String, RouteColumns)>> {
        let mut next = self.0.prepare_cached(NEXT_LANE)?;
        let lane = next.query_row(params![mesh_id, after, before], |r| {
            let columns = RouteColumns {
                class: 0,
                machine: r.get(1)?,
                key: r.get(2)?,
                fallback: r.get(3)?,
                session: r.get(4)?,
            };
            Ok((r.get(0)?, columns))
        });
        Ok(lane.optional()?)
    }

    fn lane_page(&self, page: &LanePage<'_>) -> Res<Vec<QueuedRow>> {
        let sql = lane_sql(page.forms.len(), page.only.map(<[String]>::len));
        let mut args: Vec<Value> = vec![
            Value::Text(page.mesh_id.to_owned()),
            Value::Text(page.lane.to_owned()),
            Value::Integer(page.after.0),
            Value::Text(page.after.1.to_owned()),
        ];
        args.extend(page.forms.iter().map(|f| Value::Text(f.clone())));
        args.extend(page.only.unwrap_or(&[]).iter().map(|e| Value::Text(e.clone())));
        args.push(Value::Integer(page.limit));
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(args.iter()), queued_row)?.collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Our event ids are time-ordered, so a page of events queued one after
    /// another spans a narrow range of ids, and the dedup records inside that
    /// range are few (usually none: what a drain took before is older). One
    /// range read answers for the whole page; a range holding more records
    /// than [`DEDUP_RANGE_MAX`] (random ids relayed from elsewhere, a busy
    /// mesh) is asked id by id instead.
    fn drained_among(&self, mesh_id: &str, ids: &[&str]) -> Res<HashSet<String>> {
        let (Some(low), Some(high)) = (ids.iter().min(), ids.iter().max()) else { return Ok(HashSet::new()) };
        let in_range: Vec<String> = self
            .0
            .prepare_cached(
                "SELECT event_id FROM mesh_inbox_drained
                  WHERE mesh_id = ?1 AND event_id >= ?2 AND event_id <= ?3 LIMIT ?4",
            )?
            .query_map(params![mesh_id, low, high, DEDUP_RANGE_MAX + 1], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let wanted: HashSet<&str> = ids.iter().copied().collect();
        if in_range.len() <= DEDUP_RANGE_MAX as usize {
            return Ok(in_range.into_iter().filter(|id| wanted.contains(id.as_str())).collect());
        }
        let mut stmt = self.0.prepare_cached(
            "SELECT DISTINCT event_id FROM mesh_inbox_drained
              WHERE mesh_id = ?1 AND event_id IN (SELECT value FROM json_each(?2))",
        )?;
        let found = stmt
            .query_map(params![mesh_id, serde_json::to_string(ids)?], |r| r.get::<_, String>(0))?
            .collect::<Result<HashSet<_>, _>>()?;
        Ok(found)
    }

    fn take(&self, mesh_id: &str, taken: &[Taken]) -> Res<()> {
        take(self.0, mesh_id, taken)
    }

    fn queued(&self, mesh_id: &str, ids: &[&str]) -> Res<Vec<Taken>> {
        let mut find = self.0.prepare_cached(
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
        Ok(taken)
    }

    fn presence_on(&self, mesh_id: &str, machine: &str, since_ms: i64) -> Res<Vec<(String, i64)>> {
        let mut stmt = self.0.prepare_cached(
            "SELECT coordinator_key, last_seen_ms FROM mesh_coordinator_presence
              WHERE mesh_id = ?1 AND machine = ?2 AND ended_at_ms IS NULL AND last_seen_ms >= ?3",
        )?;
        let rows = stmt.query_map(params![mesh_id, machine, since_ms], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records that `identity` is live in the mesh as of `now` (a later record is
    /// kept). An end recorded at or after `now` stands: a touch that was on its way
    /// when the coordinator ended does not bring it back.
    fn touch_coordinator(&self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) -> Res<()> {
        let address = Address::of(identity);
        self.0
            .prepare_cached(
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
    fn end_coordinator(&self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) -> Res<bool> {
        Ok(self
            .0
            .prepare_cached(
                "UPDATE mesh_coordinator_presence SET ended_at_ms = ?3
                  WHERE mesh_id = ?1 AND coordinator_key = ?2",
            )?
            .execute(params![mesh_id, identity.key(), now.millis()])?
            > 0)
    }

    fn newest_presence(&self, mesh_id: &str) -> Res<Option<i64>> {
        Ok(self
            .0
            .prepare_cached("SELECT MAX(last_seen_ms) FROM mesh_coordinator_presence WHERE mesh_id = ?1")?
            .query_row([mesh_id], |r| r.get(0))?)
    }

    fn refine_outcome(&self, mesh_id: &str, job: &str) -> Res<Option<LedgerEntry>> {
        reconcile::refine_outcome(self.0, mesh_id, job)
    }

    fn task_status(&self, mesh_id: &str, task_id: &str) -> Res<Option<String>> {
        Ok(self
            .0
            .prepare_cached("SELECT status FROM mesh_queue WHERE mesh_id = ?1 AND id = ?2")?
            .query_row(params![mesh_id, task_id], |r| r.get(0))
            .optional()?)
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append(self.0, entry).map(drop)
    }

    fn queued_named(&self, mesh_id: &str, name: &str) -> Res<Vec<(String, String)>> {
        let mut stmt = self.0.prepare_cached(
            "SELECT e.id, e.payload FROM mesh_inbox_queue q JOIN mesh_pending_events e ON e.rowid = q.event_rowid
              WHERE q.mesh_id = ?1 AND q.event = ?2",
        )?;
        let rows = stmt.query_map(params![mesh_id, name], |r| {
            Ok((r.get(0)?, r.get::<_, crate::payload::Json>(1).map(String::from)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The delete trigger takes the events' queue entries and drained-event-id
    /// records with them.
    fn delete_events(&self, mesh_id: &str, ids: &[String]) -> Res<u64> {
        let mut stmt =
            self.0.prepare_cached("DELETE FROM mesh_pending_events WHERE id = ?1 AND mesh_id = ?2")?;
        let mut deleted = 0;
        for id in ids {
            deleted += stmt.execute(params![id, mesh_id])? as u64;
        }
        Ok(deleted)
    }

    fn insert_event(&self, id: &str, event: &PendingEvent) -> Res<bool> {
        queue::insert_row(self.0, id, event)
    }

    fn held_entry(&self, mesh_id: &str, entry_id: &str) -> Res<Option<LedgerEntry>> {
        let mut find = self.0.prepare_cached(
            "SELECT id, mesh_id, timestamp, kind, node_id, session_id, provider_type, payload
               FROM mesh_event_ledger WHERE id = ?1 AND mesh_id = ?2 AND kind = 'event_held'",
        )?;
        Ok(find.query_row(params![entry_id, mesh_id], ledger::entry_from_row).optional()?)
    }

    fn requeue_stored(&self, _mesh_id: &str, stored: i64) -> Res<bool> {
        queue::enqueue_stored(self.0, stored)
    }

    fn stored_event(&self, mesh_id: &str, id: &str) -> Res<Option<i64>> {
        let mut find =
            self.0.prepare_cached("SELECT rowid FROM mesh_pending_events WHERE id = ?1 AND mesh_id = ?2")?;
        Ok(find.query_row(params![id, mesh_id], |r| r.get(0)).optional()?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use agentmesh_core::events::{EmitHint, PendingEvent, stamp_event};
    use agentmesh_store::DrainRequest;
    use agentmesh_store::inbox_writes::drain;
    use serde_json::json;

    use super::super::walk::DEDUP_RANGE_MAX;
    use crate::inbox::{count, insert_row};
    use agentmesh_core::Timestamp;

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
        let first = drain(&Inbox(&conn), "m", &request, Timestamp::from_millis(10_000)).unwrap();
        assert_eq!(first.events.len(), n);
        // Copies of drained events (new content, known ids) at both ends of the
        // range, around a new one: the range holds every earlier record.
        queue(&conn, "copy-low", "e00000", 20_000);
        queue(&conn, "new", "e00300x", 20_001);
        queue(&conn, "copy-high", &format!("e{:05}", n - 1), 20_002);
        let wide = drain(&Inbox(&conn), "m", &request, Timestamp::from_millis(30_000)).unwrap();
        let ids: Vec<&str> = wide.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["row-new"]);
        assert_eq!((wide.counters.v2_delivered, wide.counters.v2_dedup_skipped), (1, 2));
        // A narrow range: one copy of a drained event next to its original's id.
        queue(&conn, "copy-narrow", "e00300x", 40_000);
        let narrow = drain(&Inbox(&conn), "m", &request, Timestamp::from_millis(50_000)).unwrap();
        assert!(narrow.events.is_empty());
        assert_eq!((narrow.counters.v2_delivered, narrow.counters.v2_dedup_skipped), (0, 1));
        assert_eq!(count(&conn, "m").unwrap(), 0);
    }
}
