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
//! What queueing, drains, peeks, acks and held requeues decide (the checks and
//! dedup, the lanes and the oldest-first walk, routing, reconciliation) is
//! `agentmesh_store::inbox_writes`, over this module's `InboxRows`; here is the
//! SQL and the row mapping. A drain never rewrites an event row: it deletes
//! queue entries and adds dedup records, small rows written side by side.
//!
//! - `queue`: an event row with its queue entry (with the routing columns and
//!   lane of `agentmesh_store::route_columns`); requeueing a stored row.
//! - `drain`: the `InboxRows` of a transaction: a drain's walk (the next lane
//!   holding events, a lane's page, the dedup history), taking events off the
//!   queue, the rows a held event's requeue reads.
//! - `reconcile`: the ledger entry of a refine job's outcome.
//! - `admin`: the counts of undrained events, in all and by addressee.
//! - `prune`: the retention sweep.
//!
//! Every ledger entry and event text is the core's (`agentmesh_core::events`).

use agentmesh_core::Timestamp;
use agentmesh_core::events::{CoordinatorIdentity, EmitHint, PendingEvent};
use agentmesh_store::{
    DrainOutcome, DrainRequest, EventSettle, InboxEvent, PendingAddressee, PruneReport, QueueOutcome,
    StoreResult,
};

use agentmesh_store::inbox_writes;

use crate::PgStore;

mod admin;
mod drain;
mod prune;
mod queue;
mod reconcile;

use drain::Inbox;
pub(crate) use queue::{event_values, queue_later};

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
        self.write_inbox(mesh_id, |db| {
            inbox_writes::queue(&Inbox(db), mesh_id, event.clone(), hint, self_machine_id, now)
        })
    }

    fn drain_pending_events(
        &self,
        mesh_id: &str,
        request: &DrainRequest,
        now: Timestamp,
    ) -> StoreResult<DrainOutcome> {
        self.write_inbox(mesh_id, |db| inbox_writes::drain(&Inbox(db), mesh_id, request, now))
    }

    fn peek_pending_events(&self, mesh_id: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>> {
        self.snapshot(|db| inbox_writes::peek(&Inbox(db), mesh_id, request))
    }

    fn settle_pending_events(&self, mesh_id: &str, settle: EventSettle<'_>) -> StoreResult<u64> {
        self.write_inbox(mesh_id, |db| inbox_writes::settle(&Inbox(db), mesh_id, settle))
    }

    fn pending_event_count(&self, mesh_id: &str) -> StoreResult<u64> {
        self.read(|db| admin::count(db, mesh_id))
    }

    fn coordinator_presence(
        &self,
        mesh_id: &str,
        identity: &CoordinatorIdentity,
        ended: bool,
        now: Timestamp,
    ) -> StoreResult<bool> {
        self.write_inbox(mesh_id, |db| {
            inbox_writes::record_presence(&Inbox(db), mesh_id, identity, ended, now)
        })
    }

    fn prune_pending_events(
        &self,
        drained_older_than: Timestamp,
        undrained_older_than: Timestamp,
        now: Timestamp,
    ) -> StoreResult<PruneReport> {
        prune::prune(self, drained_older_than, undrained_older_than, now)
    }

    fn requeue_held_event(
        &self,
        mesh_id: &str,
        held_entry_id: &str,
        now: Timestamp,
    ) -> StoreResult<agentmesh_store::HeldRequeue> {
        self.write_inbox(mesh_id, |db| inbox_writes::requeue_held(&Inbox(db), mesh_id, held_entry_id, now))
    }

    fn pending_events_by_addressee(&self, mesh_id: &str) -> StoreResult<Vec<PendingAddressee>> {
        self.read(|db| admin::pending_by_addressee(db, mesh_id))
    }
}
