//! The PostgreSQL side of drains, peeks and acks (`agentmesh_store::inbox_writes`
//! decides them): the inbox rows of one transaction, and taking events off the
//! queue. A drain or ack runs under its mesh's inbox lock, so every event it
//! takes is taken by no other drain; a peek reads one snapshot.

use std::collections::HashSet;

use agentmesh_core::events::{CoordinatorIdentity, PendingEvent};
use agentmesh_core::{LedgerEntry, Timestamp};
use agentmesh_store::inbox_writes::{self, InboxRows, QueuedRow, Taken};
use agentmesh_store::route_columns::RouteColumns;
use agentmesh_store::{DrainOutcome, DrainRequest, InboxEvent};

use super::{held, presence, queue, reconcile, walk};
use crate::db::Db;
use crate::{Fail, Res, ledger};

/// Drains in the caller's transaction.
pub(crate) fn drain(db: &Db<'_>, mesh_id: &str, request: &DrainRequest, now: Timestamp) -> Res<DrainOutcome> {
    inbox_writes::drain(&Inbox(db), mesh_id, request, now)
}

/// What a drain would deliver, marking and counting nothing.
pub(crate) fn peek(db: &Db<'_>, mesh_id: &str, request: &DrainRequest) -> Res<Vec<InboxEvent>> {
    inbox_writes::peek(&Inbox(db), mesh_id, request)
}

/// Takes the queued events of `ids` off the queue; how many were queued.
pub(crate) fn ack(db: &Db<'_>, mesh_id: &str, ids: &[String]) -> Res<u64> {
    inbox_writes::ack(&Inbox(db), mesh_id, ids)
}

/// The inbox rows of one transaction.
pub(super) struct Inbox<'a, 'c>(pub(super) &'a Db<'c>);

impl InboxRows for Inbox<'_, '_> {
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
        presence::live_on(self.0, mesh_id, machine, since_ms)
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

    fn touch_coordinator(&self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) -> Res<()> {
        presence::touch_coordinator(self.0, mesh_id, identity, now)
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

    fn queued_payloads(&self, mesh_id: &str, name: &str) -> Res<Vec<String>> {
        queue::queued_payloads(self.0, mesh_id, name)
    }

    fn insert_event(&self, id: &str, event: &PendingEvent) -> Res<bool> {
        queue::insert(self.0, id, event)
    }

    fn held_entry(&self, mesh_id: &str, entry_id: &str) -> Res<Option<LedgerEntry>> {
        held::held_entry(self.0, mesh_id, entry_id)
    }

    fn stored_event(&self, mesh_id: &str, id: &str) -> Res<Option<i64>> {
        held::stored_event(self.0, mesh_id, id)
    }

    fn requeue_stored(&self, mesh_id: &str, stored: i64) -> Res<bool> {
        queue::enqueue_stored(self.0, mesh_id, stored)
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
