//! The PostgreSQL inbox rows of one transaction (`agentmesh_store::inbox_writes`
//! decides queueing, drains, peeks, acks and held requeues over them): a
//! drain's walk (the next lane holding events, a lane's page, the dedup
//! history), taking events off the queue, presence, the records a refine
//! reconciliation and a held requeue read. A drain or ack runs under its mesh's
//! inbox lock, so every event it takes is taken by no other drain; a peek reads
//! one snapshot.

use std::collections::HashSet;

use agentmesh_core::events::presence::COORDINATOR_PRESENCE_TTL_MS;
use agentmesh_core::events::{Address, CoordinatorIdentity, PendingEvent};
use agentmesh_core::{LedgerEntry, Timestamp};
use agentmesh_store::inbox_writes::{InboxRows, LanePage, QueuedRow, Taken};
use agentmesh_store::route_columns::RouteColumns;
use postgres::Row;

use super::{queue, reconcile};
use crate::db::Db;
use crate::{Fail, Res, ledger};

// The core's presence rule and the store's promise name the same duration.
const _: () = assert!(COORDINATOR_PRESENCE_TTL_MS == agentmesh_store::COORDINATOR_PRESENCE_TTL_MS);

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

/// The `event_held` ledger entry `$2` of mesh `$1`.
static HELD_ENTRY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {} FROM mesh_event_ledger WHERE mesh_id = $1 AND id = $2 AND kind = 'event_held'",
        agentmesh_store::cells::LEDGER_COLUMNS
    )
});

/// The next lane after $2 and before $3 that holds undrained events, with the
/// addressee columns of one of its rows (all rows of a unicast lane share them).
const NEXT_LANE: &str = "SELECT q.lane, e.to_machine, e.to_key, e.to_fallback, e.to_session
   FROM mesh_inbox_queue q
   JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
  WHERE q.mesh_id = $1 AND q.lane > $2 AND q.lane < $3 ORDER BY q.lane ASC LIMIT 1";

/// The inbox rows of one transaction.
pub(super) struct Inbox<'a, 'c>(pub(super) &'a Db<'c>);

impl InboxRows for Inbox<'_, '_> {
    type Error = Fail;

    fn next_lane(&self, mesh_id: &str, after: &str, before: &str) -> Res<Option<(String, RouteColumns)>> {
        Ok(self.0.query_opt(NEXT_LANE, &[&mesh_id, &after, &before])?.map(|row| {
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

    fn lane_page(&self, page: &LanePage<'_>) -> Res<Vec<QueuedRow>> {
        let LanePage { mesh_id, lane, after, forms, only, limit } = *page;
        let rows = self.0.query(LANE_PAGE, &[&mesh_id, &lane, &after.0, &after.1, &forms, &only, &limit])?;
        Ok(rows.iter().map(queued_row).collect())
    }

    fn drained_among(&self, mesh_id: &str, ids: &[&str]) -> Res<HashSet<String>> {
        let rows = self.0.query(
            "SELECT DISTINCT event_id FROM mesh_inbox_drained WHERE mesh_id = $1 AND event_id = ANY($2)",
            &[&mesh_id, &ids],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn take(&self, mesh_id: &str, taken: &[Taken]) -> Res<()> {
        take(self.0, mesh_id, taken)
    }

    fn queued(&self, mesh_id: &str, ids: &[&str]) -> Res<Vec<Taken>> {
        let rows = self.0.query(
            "SELECT q.lane, q.queued_at, q.id, e.event_id
               FROM mesh_pending_events e
               JOIN mesh_inbox_queue q ON q.mesh_id = e.mesh_id AND q.lane = e.lane
                                      AND q.queued_at = e.queued_at AND q.id = e.id
              WHERE e.mesh_id = $1 AND e.id = ANY($2)",
            &[&mesh_id, &ids],
        )?;
        Ok(rows
            .iter()
            .map(|r| Taken { lane: r.get(0), queued_at: r.get(1), id: r.get(2), event_id: r.get(3) })
            .collect())
    }

    fn presence_on(&self, mesh_id: &str, machine: &str, since_ms: i64) -> Res<Vec<(String, i64)>> {
        let rows = self.0.query(
            "SELECT coordinator_key, last_seen_ms FROM mesh_coordinator_presence
              WHERE mesh_id = $1 AND machine = $2 AND ended_at_ms IS NULL AND last_seen_ms >= $3",
            &[&mesh_id, &machine, &since_ms],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Records that `identity` is live in the mesh as of `now` (a later record is
    /// kept). An end recorded at or after `now` stands: a touch that was on its way
    /// when the coordinator ended does not bring it back.
    fn touch_coordinator(&self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) -> Res<()> {
        let address = Address::of(identity);
        self.0.execute(
            "INSERT INTO mesh_coordinator_presence
                 (mesh_id, coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms, ended_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)
             ON CONFLICT (mesh_id, coordinator_key) DO UPDATE
                SET last_seen_ms = GREATEST(mesh_coordinator_presence.last_seen_ms, EXCLUDED.last_seen_ms),
                    ended_at_ms = CASE WHEN mesh_coordinator_presence.ended_at_ms >= EXCLUDED.last_seen_ms
                                    THEN mesh_coordinator_presence.ended_at_ms END,
                    daemon_id = EXCLUDED.daemon_id",
            &[
                &mesh_id,
                &address.key,
                &address.machine,
                &identity.daemon_id,
                &identity.coordinator_run_id,
                &address.session,
                &now.millis(),
            ],
        )?;
        Ok(())
    }

    /// Records that `identity` ended (a graceful exit): from now on its unicasts go
    /// to the next coordinator on its machine. `false` when it had no record.
    fn end_coordinator(&self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) -> Res<bool> {
        let ended = self.0.execute(
            "UPDATE mesh_coordinator_presence SET ended_at_ms = $3 WHERE mesh_id = $1 AND coordinator_key = $2",
            &[&mesh_id, &identity.key(), &now.millis()],
        )?;
        Ok(ended > 0)
    }

    fn newest_presence(&self, mesh_id: &str) -> Res<Option<i64>> {
        Ok(self
            .0
            .query_one(
                "SELECT MAX(last_seen_ms) FROM mesh_coordinator_presence WHERE mesh_id = $1",
                &[&mesh_id],
            )?
            .get(0))
    }

    fn refine_outcome(&self, mesh_id: &str, job: &str) -> Res<Option<LedgerEntry>> {
        reconcile::refine_outcome(self.0, mesh_id, job)
    }

    fn task_status(&self, mesh_id: &str, task_id: &str) -> Res<Option<String>> {
        Ok(self
            .0
            .query_opt("SELECT status FROM mesh_queue WHERE mesh_id = $1 AND id = $2", &[&mesh_id, &task_id])?
            .map(|r| r.get(0)))
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        ledger::append(self.0, entry).map(drop)
    }

    /// Read under the mesh's inbox lock (free when the caller holds it
    /// already): a drain beside it could take the event it looks for.
    fn queued_named(&self, mesh_id: &str, name: &str) -> Res<Vec<(String, String)>> {
        self.0.lock(mesh_id, crate::Lock::Inbox)?;
        let rows = self.0.query(
            "SELECT e.id, e.payload FROM mesh_inbox_queue q
               JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
              WHERE q.mesh_id = $1 AND q.event = $2",
            &[&mesh_id, &name],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), crate::payload::json(r.get(1)))).collect())
    }

    fn delete_events(&self, mesh_id: &str, ids: &[String]) -> Res<u64> {
        self.0
            .execute("DELETE FROM mesh_pending_events WHERE mesh_id = $1 AND id = ANY($2)", &[&mesh_id, &ids])
    }

    fn insert_event(&self, id: &str, event: &PendingEvent) -> Res<bool> {
        queue::insert(self.0, id, event)
    }

    fn held_entry(&self, mesh_id: &str, entry_id: &str) -> Res<Option<LedgerEntry>> {
        let row = self.0.query_opt(&HELD_ENTRY, &[&mesh_id, &entry_id])?;
        row.as_ref().map(crate::ledger::entry_from_row).transpose()
    }

    fn requeue_stored(&self, mesh_id: &str, stored: i64) -> Res<bool> {
        queue::enqueue_stored(self.0, mesh_id, stored)
    }

    fn stored_event(&self, mesh_id: &str, id: &str) -> Res<Option<i64>> {
        let row = self.0.query_opt(
            "SELECT row_id FROM mesh_pending_events WHERE mesh_id = $1 AND id = $2",
            &[&mesh_id, &id],
        )?;
        Ok(row.map(|r| r.get(0)))
    }
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

/// Takes events off the queue, recording their event ids as drained: one
/// statement for the queue entries, one for the dedup records.
fn take(db: &Db<'_>, mesh_id: &str, taken: &[Taken]) -> Res<()> {
    let lanes: Vec<&str> = taken.iter().map(|t| t.lane.as_str()).collect();
    let times: Vec<i64> = taken.iter().map(|t| t.queued_at).collect();
    let ids: Vec<&str> = taken.iter().map(|t| t.id.as_str()).collect();
    db.execute(
        "DELETE FROM mesh_inbox_queue q
          USING unnest($2::text[], $3::bigint[], $4::text[]) AS t(lane, queued_at, id)
          WHERE q.mesh_id = $1 AND q.lane = t.lane AND q.queued_at = t.queued_at AND q.id = t.id",
        &[&mesh_id, &lanes, &times, &ids],
    )?;
    let (event_ids, ids): (Vec<&str>, Vec<&str>) =
        taken.iter().filter_map(|t| t.event_id.as_deref().map(|e| (e, t.id.as_str()))).unzip();
    if !event_ids.is_empty() {
        db.execute(
            "INSERT INTO mesh_inbox_drained (mesh_id, event_id, id)
             SELECT $1, t.event_id, t.id FROM unnest($2::text[], $3::text[]) AS t(event_id, id)
             ON CONFLICT DO NOTHING",
            &[&mesh_id, &event_ids, &ids],
        )?;
    }
    Ok(())
}
