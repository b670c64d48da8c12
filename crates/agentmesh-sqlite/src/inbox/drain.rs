//! The SQLite side of drains, peeks and acks (`agentmesh_store::inbox_writes`
//! decides them): the inbox rows of one transaction, and taking events off the
//! queue.

use std::collections::HashSet;

use agentmesh_core::events::{CoordinatorIdentity, PendingEvent};
use agentmesh_core::{LedgerEntry, Timestamp};
use agentmesh_store::inbox_writes::{self, InboxRows, QueuedRow, Taken};
use agentmesh_store::route_columns::RouteColumns;
use agentmesh_store::{DrainOutcome, DrainRequest, InboxEvent};
use rusqlite::{Connection, OptionalExtension, params};

use super::{held, presence, queue, reconcile, walk};
use crate::{Fail, Res, ledger};

/// Drains in the caller's transaction.
pub(crate) fn drain(
    conn: &Connection,
    mesh_id: &str,
    request: &DrainRequest,
    now: Timestamp,
) -> Res<DrainOutcome> {
    inbox_writes::drain(&Inbox(conn), mesh_id, request, now)
}

/// What a drain would deliver, marking and counting nothing.
pub(crate) fn peek(conn: &Connection, mesh_id: &str, request: &DrainRequest) -> Res<Vec<InboxEvent>> {
    inbox_writes::peek(&Inbox(conn), mesh_id, request)
}

/// Takes the queued events of `ids` off the queue; how many were queued.
pub(crate) fn ack(conn: &Connection, mesh_id: &str, ids: &[String]) -> Res<u64> {
    inbox_writes::ack(&Inbox(conn), mesh_id, ids)
}

/// The inbox rows of the transaction open on a connection.
pub(super) struct Inbox<'c>(pub(super) &'c Connection);

impl InboxRows for Inbox<'_> {
    type Error = Fail;

    fn next_lane(&self, mesh_id: &str, after: &str, before: &str) -> Res<Option<(String, RouteColumns)>> {
        walk::next_lane(self.0, mesh_id, after, before)
    }

    fn lane_page(
        &self,
        mesh_id: &str,
        lane: &str,
        after: (i64, &str),
        forms: &[String],
        only: Option<&[String]>,
        limit: i64,
    ) -> Res<Vec<QueuedRow>> {
        walk::lane_page(self.0, mesh_id, lane, after, forms, only, limit)
    }

    fn drained_among(&self, mesh_id: &str, ids: &[&str]) -> Res<HashSet<String>> {
        walk::drained_among(self.0, mesh_id, ids)
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
        presence::live_on(self.0, mesh_id, machine, since_ms)
    }

    fn newest_presence(&self, mesh_id: &str) -> Res<Option<i64>> {
        Ok(self
            .0
            .prepare_cached("SELECT MAX(last_seen_ms) FROM mesh_coordinator_presence WHERE mesh_id = ?1")?
            .query_row([mesh_id], |r| r.get(0))?)
    }

    fn touch_coordinator(&self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) -> Res<()> {
        presence::touch_coordinator(self.0, mesh_id, identity, now)
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

    fn queued_payloads(&self, mesh_id: &str, name: &str) -> Res<Vec<String>> {
        queue::queued_payloads(self.0, mesh_id, name)
    }

    fn insert_event(&self, id: &str, event: &PendingEvent) -> Res<bool> {
        queue::insert_row(self.0, id, event)
    }

    fn held_entry(&self, mesh_id: &str, entry_id: &str) -> Res<Option<LedgerEntry>> {
        held::held_entry(self.0, mesh_id, entry_id)
    }

    fn stored_event(&self, mesh_id: &str, id: &str) -> Res<Option<i64>> {
        held::stored_event(self.0, mesh_id, id)
    }

    fn requeue_stored(&self, _mesh_id: &str, stored: i64) -> Res<bool> {
        queue::enqueue_stored(self.0, stored)
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
}
