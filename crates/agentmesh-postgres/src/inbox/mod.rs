//! The coordinator inbox: `mesh_pending_events` holds every queued event (the
//! fingerprint and event-id history), `mesh_inbox_queue` the undrained ones in
//! drain-walk order, `mesh_inbox_drained` the event ids of the drained ones.
//! Queueing stamps and deduplicates; a drain routes every event inside its
//! transaction.
//!
//! Every write here (queueing, drains, acks, presence, requeues, the sweep's
//! steps) runs under its mesh's inbox lock (`Lock::Inbox`), so two drains of
//! one mesh run one after the other and each event is handed to one of them;
//! peeks read one snapshot. Task writes queue their events without it: an
//! insert that a unique fingerprint or event id makes a no-op when it repeats
//! one, and that a drain after its commit finds. Only an event that needs the
//! refine-terminal check (it reads the queue) takes the inbox lock first.
//!
//! A drain walks the mesh's queue entries oldest first, lane by lane, in pages
//! keyed by (queued_at, id). The daemon target and the `onlyEvents` filter are
//! applied in SQL from the queue entries; the v2 routing decision
//! (`agentmesh_core::events::route_event`) is taken per event. Only delivered,
//! deduplicated and quarantined events are taken off the queue; routed-away ones
//! are stepped over and stay queued.
//!
//! - `queue`: queueing an event (stamp, dedup, the row and its queue entry,
//!   with the routing columns and lane of `agentmesh_store::route_columns`).
//! - `walk`: the lanes a drain reads and its oldest-first walk over them.
//! - `drain`: drain, peek and ack.
//! - `presence`: coordinator presence records.
//! - `reconcile`: refine terminals and stale alerts in what a drain hands out.
//! - `held`: requeueing a held event.
//! - `admin`: delete, retract, clear, count, the overview by addressee.
//! - `prune`: the retention sweep.
//!
//! Every ledger entry and event text is the core's (`agentmesh_core::events`).

use agentmesh_core::Timestamp;
use agentmesh_core::events::{CoordinatorIdentity, EmitHint, PendingEvent};
use agentmesh_store::{
    DrainOutcome, DrainRequest, InboxEvent, PendingAddressee, PruneReport, QueueOutcome, StoreResult,
};

use crate::PgStore;

mod admin;
mod drain;
mod held;
mod presence;
mod prune;
mod queue;
mod reconcile;
mod walk;

pub(crate) use admin::{clear, delete};
pub(crate) use queue::{queue, queue_later};

impl PgStore {
    /// Runs `op` as a write of `mesh_id`'s inbox (see the module).
    pub(crate) fn write_inbox<T>(
        &self,
        mesh_id: &str,
        op: impl FnOnce(&crate::Db<'_>) -> crate::Res<T>,
    ) -> StoreResult<T> {
        self.write_with(mesh_id, &[crate::Lock::Inbox], op)
    }
}

impl agentmesh_store::InboxStore for PgStore {
    fn queue_pending_event(
        &self,
        mesh_id: &str,
        event: &PendingEvent,
        hint: &EmitHint,
        self_machine_id: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome> {
        self.write_inbox(mesh_id, |db| queue(db, mesh_id, event.clone(), hint, self_machine_id, now))
    }

    fn drain_pending_events(
        &self,
        mesh_id: &str,
        request: &DrainRequest,
        now: Timestamp,
    ) -> StoreResult<DrainOutcome> {
        self.write_inbox(mesh_id, |db| drain::drain(db, mesh_id, request, now))
    }

    fn peek_pending_events(&self, mesh_id: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>> {
        self.snapshot(|db| drain::peek(db, mesh_id, request))
    }

    fn ack_pending_events(&self, mesh_id: &str, ids: &[String], _now: Timestamp) -> StoreResult<u64> {
        // No acknowledgement time is kept: retention goes by queue time.
        self.write_inbox(mesh_id, |db| drain::ack(db, mesh_id, ids))
    }

    fn retract_dispatch_blocked(&self, mesh_id: &str, task_id: &str) -> StoreResult<u64> {
        self.write_inbox(mesh_id, |db| admin::retract_dispatch_blocked(db, mesh_id, task_id))
    }

    fn pending_event_count(&self, mesh_id: &str) -> StoreResult<u64> {
        self.read(|db| admin::count(db, mesh_id))
    }

    fn touch_coordinator(
        &self,
        mesh_id: &str,
        identity: &CoordinatorIdentity,
        now: Timestamp,
    ) -> StoreResult<()> {
        self.write_inbox(mesh_id, |db| presence::touch_coordinator(db, mesh_id, identity, now))
    }

    fn end_coordinator(
        &self,
        mesh_id: &str,
        identity: &CoordinatorIdentity,
        now: Timestamp,
    ) -> StoreResult<bool> {
        self.write_inbox(mesh_id, |db| presence::end_coordinator(db, mesh_id, identity, now))
    }

    fn prune_pending_events(
        &self,
        drained_older_than: Timestamp,
        undrained_older_than: Timestamp,
        now: Timestamp,
    ) -> StoreResult<PruneReport> {
        prune::prune(self, drained_older_than, undrained_older_than, now)
    }

    fn requeue_held_event(&self, mesh_id: &str, held_entry_id: &str, now: Timestamp) -> StoreResult<bool> {
        self.write_inbox(mesh_id, |db| held::requeue_held(db, mesh_id, held_entry_id, now))
    }

    fn pending_events_by_addressee(&self, mesh_id: &str) -> StoreResult<Vec<PendingAddressee>> {
        self.read(|db| admin::pending_by_addressee(db, mesh_id))
    }
}
