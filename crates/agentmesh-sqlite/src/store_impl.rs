//! The store traits for `SqliteStore`, one impl per group: each operation is one transaction (writes) or one
//! read on the connection, delegating to `tasks`, `ledger`, `runtime` and `missions`.

use agentmesh_store::inbox_writes;
use std::sync::Arc;

use agentmesh_core::{
    Claimant, CompletionConflict, CompletionFingerprint, DeliveryStatus, DirectDispatch, IdleSession,
    InflightHold, LedgerEntry, LedgerQuery, LedgerSlice, Mission, MissionProgress, NewDirectDispatch,
    NewDispatchedTask, NewMission, NewSessionDelivery, NewTask, RateGuard, RateVerdict, SessionDelivery,
    SliceQuery, Task, TaskStatus, Timestamp,
};
use agentmesh_store::{
    ActiveAssignment, ClaimOptions, ClaimOutcome, CompletionReport, DeliveryUpdate, Heartbeat,
    RecordedDispatch, RecordedToolCall, RuntimePrune, StatusCount, StoreError, StoreResult, Submitted,
    TaskCommand, TaskWrite, TaskWritten, ToolCall, task_writes,
};

use agentmesh_store::prelude::*;
use agentmesh_store::{
    DeliveryQuery, DispatchChange, DrainOutcome, DrainRequest, EventSettle, HoldWrite, IdleWrite, InboxEvent,
    MissionQuery, QueueOutcome, UpsertedMission,
};

use crate::durability::Ceilings;
use crate::tasks::Rows;
use crate::{Fail, Res, SqliteStore, inbox, ledger, missions, reservations, runtime, tasks, webhooks};
use agentmesh_store::{reservation_writes, webhook_writes};

impl Store for SqliteStore {
    fn mesh_summaries(&self) -> StoreResult<Vec<agentmesh_store::MeshSummary>> {
        self.read(crate::overview::mesh_summaries)
    }

    fn probe_write(&self) -> StoreResult<()> {
        SqliteStore::probe_write(self)
    }

    fn profile(&self) -> agentmesh_store::StoreProfile {
        agentmesh_store::StoreProfile {
            durability: SqliteStore::durability(self),
            id_scope: agentmesh_store::IdScope::Database,
        }
    }
}

impl QueueStore for SqliteStore {
    fn enqueue(&self, mesh_id: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task> {
        self.ensure_legacy_queue(mesh_id);
        let (mesh_id, new) = (mesh_id.to_owned(), new.clone());
        self.write_queued(move |tx| tasks::enqueue(tx, &mesh_id, &new, now))
    }

    fn record_dispatched_task(
        &self,
        mesh_id: &str,
        task: &NewDispatchedTask,
        now: Timestamp,
    ) -> StoreResult<RecordedDispatch> {
        self.ensure_legacy_queue(mesh_id);
        self.write(|tx| tasks::record_dispatched(tx, mesh_id, task, now))
    }

    fn enqueue_batch(&self, mesh_id: &str, new: &[NewTask], now: Timestamp) -> StoreResult<Vec<Task>> {
        self.ensure_legacy_queue(mesh_id);
        self.write(|tx| {
            new.iter()
                .enumerate()
                .map(|(i, n)| {
                    tasks::enqueue(tx, mesh_id, n, now)
                        .map_err(|Fail(err)| Fail(task_writes::in_batch(i, err)))
                })
                .collect()
        })
    }

    fn queue_entries(&self, mesh_id: &str, statuses: &[TaskStatus]) -> StoreResult<Vec<Task>> {
        self.ensure_legacy_queue(mesh_id);
        let (mesh_id, statuses) = (mesh_id.to_owned(), statuses.to_vec());
        self.read_bulk(move |c| tasks::entries(c, &mesh_id, &statuses))
    }

    fn find_task(&self, mesh_id: &str, task_id: &str) -> StoreResult<Option<Task>> {
        self.ensure_legacy_queue(mesh_id);
        self.read(|c| tasks::find(c, mesh_id, task_id))
    }

    fn stats_by_status(&self, mesh_id: &str) -> StoreResult<Vec<StatusCount>> {
        self.ensure_legacy_queue(mesh_id);
        let mesh_id = mesh_id.to_owned();
        self.read_bulk(move |c| tasks::stats(c, &mesh_id))
    }

    fn oldest_pending_created_at(&self, mesh_id: &str) -> StoreResult<Option<Timestamp>> {
        self.ensure_legacy_queue(mesh_id);
        self.read(|c| tasks::oldest_pending_created_at(c, mesh_id))
    }

    fn active_assignments(&self, mesh_id: &str) -> StoreResult<Vec<ActiveAssignment>> {
        self.ensure_legacy_queue(mesh_id);
        self.read(|c| tasks::active_assignments(c, mesh_id))
    }

    fn claim_next(
        &self,
        mesh_id: &str,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome> {
        self.ensure_legacy_queue(mesh_id);
        let (mesh_id, claimant, opts) = (mesh_id.to_owned(), claimant.clone(), opts.clone());
        let ceilings = Arc::clone(&self.ceilings);
        self.write_queued(move |tx| tasks::claim(tx, &ceilings, &mesh_id, &claimant, &opts, now))
    }

    fn complete_task(&self, mesh_id: &str, report: &CompletionReport, now: Timestamp) -> StoreResult<Task> {
        self.ensure_legacy_queue(mesh_id);
        let (mesh_id, report) = (mesh_id.to_owned(), report.clone());
        self.write_queued(move |tx| tasks::complete(&Rows(tx), &mesh_id, &report, now))?
    }

    fn complete_and_claim(
        &self,
        mesh_id: &str,
        report: &CompletionReport,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)> {
        self.ensure_legacy_queue(mesh_id);
        let (mesh_id, report, claimant, opts) =
            (mesh_id.to_owned(), report.clone(), claimant.clone(), opts.clone());
        let ceilings = Arc::clone(&self.ceilings);
        self.write_queued(move |tx| {
            complete_then_claim(tx, &ceilings, &mesh_id, &report, &claimant, &opts, now)
        })?
    }

    fn heartbeat(&self, mesh_id: &str, beat: &Heartbeat, now: Timestamp) -> StoreResult<Task> {
        self.ensure_legacy_queue(mesh_id);
        let (mesh_id, beat) = (mesh_id.to_owned(), beat.clone());
        self.write_queued(move |tx| tasks::heartbeat(&Rows(tx), &mesh_id, &beat, now))?
    }

    fn submit_task_write(
        self: Arc<Self>,
        mesh_id: String,
        write: TaskWrite,
        now: Timestamp,
    ) -> Submitted<TaskWritten> {
        let ceilings = Arc::clone(&self.ceilings);
        let submitted = self.submit_queued(mesh_id, move |tx, mesh| {
            Ok(match write {
                TaskWrite::Claim { claimant, opts } => {
                    Ok(TaskWritten::Claimed(tasks::claim(tx, &ceilings, mesh, &claimant, &opts, now)?))
                }
                TaskWrite::Complete(report) => {
                    tasks::complete(&Rows(tx), mesh, &report, now)?.map(TaskWritten::Task)
                }
                TaskWrite::Heartbeat(beat) => {
                    tasks::heartbeat(&Rows(tx), mesh, &beat, now)?.map(TaskWritten::Task)
                }
                TaskWrite::CompleteAndClaim { report, claimant, opts } => {
                    complete_then_claim(tx, &ceilings, mesh, &report, &claimant, &opts, now)?
                        .map(|(task, next)| TaskWritten::CompletedAndClaimed(task, next))
                }
            })
        });
        refusal_as_error(submitted)
    }

    fn task_command(
        &self,
        mesh_id: &str,
        task_id: &str,
        command: TaskCommand<'_>,
        now: Timestamp,
    ) -> StoreResult<Task> {
        self.ensure_legacy_queue(mesh_id);
        self.write(|tx| task_writes::command(&Rows(tx), mesh_id, task_id, command, now))
    }

    fn expired_leases(&self, now: Timestamp) -> StoreResult<Vec<(String, String)>> {
        self.read(|c| tasks::expired_leases(c, now))
    }

    fn reclaim_if_lease_expired(
        &self,
        mesh_id: &str,
        task_id: &str,
        now: Timestamp,
    ) -> StoreResult<Option<Task>> {
        self.ensure_legacy_queue(mesh_id);
        self.write(|tx| tasks::reclaim_if_lease_expired(&Rows(tx), mesh_id, task_id, now))
    }
}

impl LedgerStore for SqliteStore {
    fn read_ledger_ordered(&self, mesh_id: &str, query: &LedgerQuery) -> StoreResult<Vec<LedgerEntry>> {
        self.read(|c| ledger::read_ordered(c, mesh_id, query))
    }

    fn import_ledger(&self, entries: &[LedgerEntry]) -> StoreResult<u64> {
        LedgerEntry::validate_all(entries).map_err(StoreError::InvalidInput)?;
        self.write(|tx| {
            let mut imported = 0;
            for entry in entries {
                if !crate::archive::has_entry(tx, &entry.id)? {
                    imported += u64::from(ledger::append(tx, entry)?);
                }
            }
            Ok(imported)
        })
    }

    fn ledger_slice(&self, mesh_id: &str, query: &SliceQuery) -> StoreResult<LedgerSlice> {
        self.read(|c| ledger::slice(c, mesh_id, query))
    }
}

impl RuntimeStore for SqliteStore {
    fn record_direct_dispatch(
        &self,
        mesh_id: &str,
        dispatch: &NewDirectDispatch,
        now: Timestamp,
    ) -> StoreResult<DirectDispatch> {
        self.write(|tx| runtime::record_dispatch(tx, mesh_id, dispatch, now))
    }

    fn direct_dispatches(&self, mesh_id: &str, task_id: Option<&str>) -> StoreResult<Vec<DirectDispatch>> {
        self.read(|c| match task_id {
            Some(task_id) => Ok(runtime::dispatch(c, mesh_id, task_id)?.into_iter().collect()),
            None => runtime::active_dispatches(c, mesh_id),
        })
    }

    fn change_direct_dispatches(
        &self,
        mesh_id: &str,
        change: DispatchChange<'_>,
        now: Timestamp,
    ) -> StoreResult<u64> {
        self.write(|tx| match change {
            DispatchChange::Status { session_id, task_id, status } => {
                runtime::set_dispatch_status(tx, mesh_id, session_id, task_id, status, now)
            }
            DispatchChange::MarkStale(cutoff) => runtime::mark_stale_dispatches(tx, mesh_id, cutoff, now),
            DispatchChange::Delete(task_ids) => runtime::delete_dispatches_by_task(tx, mesh_id, task_ids),
        })
    }

    fn prune_runtime(&self, prune: RuntimePrune) -> StoreResult<u64> {
        self.write(|tx| match prune {
            RuntimePrune::EndedDispatches(cutoff) => runtime::cleanup_terminal_dispatches(tx, cutoff),
            RuntimePrune::IdleSessions(now) => runtime::prune_idle(tx, now),
            RuntimePrune::Fingerprints(now) => runtime::sweep_fingerprints(tx, now),
            RuntimePrune::ToolCalls(cutoff) => runtime::prune_tool_calls(tx, cutoff),
        })
    }

    fn insert_session_delivery(
        &self,
        mesh_id: &str,
        delivery: &NewSessionDelivery,
        now: Timestamp,
    ) -> StoreResult<SessionDelivery> {
        self.write(|tx| runtime::insert_delivery(tx, mesh_id, delivery, now))
    }

    fn set_session_delivery_status(
        &self,
        mesh_id: &str,
        id: &str,
        status: DeliveryStatus,
        update: &DeliveryUpdate,
        now: Timestamp,
    ) -> StoreResult<bool> {
        self.write(|tx| runtime::set_delivery_status(tx, mesh_id, id, status, update, now))
    }

    fn session_deliveries(
        &self,
        mesh_id: &str,
        query: DeliveryQuery<'_>,
    ) -> StoreResult<Vec<SessionDelivery>> {
        self.read(|c| match query {
            DeliveryQuery::Id(id) => Ok(runtime::load_delivery(c, mesh_id, id.trim())?.into_iter().collect()),
            DeliveryQuery::Confirmed(task_id) => runtime::confirmed_deliveries(c, mesh_id, task_id),
            DeliveryQuery::Waiting { session_id, now } => {
                runtime::active_deliveries(c, mesh_id, session_id, now)
            }
        })
    }

    fn expire_stale_session_deliveries(&self, mesh_id: &str, now: Timestamp) -> StoreResult<u64> {
        self.write(|tx| runtime::expire_deliveries(tx, mesh_id, now))
    }

    fn meshes_with_deliveries_or_dispatches(&self) -> StoreResult<Vec<String>> {
        self.read(runtime::meshes_with_deliveries_or_dispatches)
    }

    fn write_inflight_hold(
        &self,
        mesh_id: &str,
        write: HoldWrite<'_>,
        now: Timestamp,
    ) -> StoreResult<Option<InflightHold>> {
        self.write(|tx| match write {
            HoldWrite::Hold(hold) => runtime::upsert_inflight_hold(tx, mesh_id, hold, now).map(Some),
            HoldWrite::Release(task_id) => {
                let held = runtime::inflight_hold(tx, mesh_id, task_id)?;
                let released = held.is_some() && runtime::delete_inflight_hold(tx, mesh_id, task_id)?;
                Ok(held.filter(|_| released))
            }
        })
    }

    fn inflight_holds(&self, mesh_id: &str, task_id: Option<&str>) -> StoreResult<Vec<InflightHold>> {
        self.read(|c| match task_id {
            Some(task_id) => Ok(runtime::inflight_hold(c, mesh_id, task_id)?.into_iter().collect()),
            None => runtime::inflight_holds(c, mesh_id),
        })
    }

    fn write_idle_session(&self, write: IdleWrite<'_>) -> StoreResult<bool> {
        self.write(|tx| match write {
            IdleWrite::Report(session) => runtime::set_idle(tx, session).map(|()| true),
            IdleWrite::Forget { mesh_id, node_id, session_id } => {
                runtime::delete_idle(tx, mesh_id, node_id, session_id)
            }
        })
    }

    fn idle_sessions(&self, mesh_id: &str, now: Timestamp) -> StoreResult<Vec<IdleSession>> {
        self.read(|c| runtime::idle_sessions(c, mesh_id, now))
    }

    fn completion_fingerprints(
        &self,
        mesh_id: &str,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<CompletionFingerprint>> {
        self.read(|c| runtime::fingerprints(c, mesh_id, now, limit))
    }

    fn recent_completion_conflicts(
        &self,
        mesh_id: &str,
        window_ms: Option<i64>,
        now: Timestamp,
    ) -> StoreResult<Vec<CompletionConflict>> {
        let window = window_ms.unwrap_or(agentmesh_core::sessions::CONFLICT_WINDOW_MS);
        self.read(|c| runtime::recent_conflicts(c, mesh_id, window, now))
    }

    fn record_tool_call(
        &self,
        call: &ToolCall,
        guard: RateGuard,
        now: Timestamp,
    ) -> StoreResult<RateVerdict> {
        let sweep = self.tool_call_sweep_due();
        let call = call.clone();
        self.write_queued(move |tx| runtime::record_tool_call(tx, &call, guard, sweep, now))
    }

    fn recent_tool_calls(
        &self,
        mesh_id: &str,
        since: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<RecordedToolCall>> {
        self.read(|c| runtime::recent_tool_calls(c, mesh_id, since, limit))
    }
}

impl MissionStore for SqliteStore {
    fn upsert_mission(
        &self,
        mesh_id: &str,
        mission: &NewMission,
        now: Timestamp,
    ) -> StoreResult<UpsertedMission> {
        self.write(|tx| missions::upsert(tx, mesh_id, mission, now))
    }

    fn missions(&self, mesh_id: &str, query: MissionQuery<'_>) -> StoreResult<Vec<Mission>> {
        self.read(|c| match query {
            MissionQuery::Id(id) => Ok(missions::get(c, mesh_id, id)?.into_iter().collect()),
            MissionQuery::Statuses(statuses) => missions::list(c, mesh_id, statuses),
        })
    }

    fn mission_progress(&self, mesh_id: &str, id: &str) -> StoreResult<MissionProgress> {
        self.ensure_legacy_queue(mesh_id);
        self.read(|c| missions::progress(c, mesh_id, id))
    }

    fn bump_scheduler_cursor(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write(|tx| runtime::bump_cursor(tx, mesh_id))
    }
}

impl InboxStore for SqliteStore {
    fn queue_pending_event(
        &self,
        mesh_id: &str,
        event: &agentmesh_core::events::PendingEvent,
        hint: &agentmesh_core::events::EmitHint,
        self_machine_id: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome> {
        let (mesh_id, event, hint) = (mesh_id.to_owned(), event.clone(), hint.clone());
        let self_machine_id = self_machine_id.map(str::to_owned);
        self.write_queued(move |tx| {
            let inbox = inbox::Inbox(tx);
            inbox_writes::queue(&inbox, &mesh_id, event.clone(), &hint, self_machine_id.as_deref(), now)
        })
    }

    fn drain_pending_events(
        &self,
        mesh_id: &str,
        request: &DrainRequest,
        now: Timestamp,
    ) -> StoreResult<DrainOutcome> {
        let (mesh_id, request) = (mesh_id.to_owned(), request.clone());
        self.write_queued(move |tx| inbox_writes::drain(&inbox::Inbox(tx), &mesh_id, &request, now))
    }

    fn peek_pending_events(&self, mesh_id: &str, request: &DrainRequest) -> StoreResult<Vec<InboxEvent>> {
        self.read(|c| inbox_writes::peek(&inbox::Inbox(c), mesh_id, request))
    }

    fn settle_pending_events(&self, mesh_id: &str, settle: EventSettle<'_>) -> StoreResult<u64> {
        self.write(|tx| inbox_writes::settle(&inbox::Inbox(tx), mesh_id, settle))
    }

    fn pending_event_count(&self, mesh_id: &str) -> StoreResult<u64> {
        self.read(|c| inbox::count(c, mesh_id))
    }

    fn coordinator_presence(
        &self,
        mesh_id: &str,
        identity: &agentmesh_core::events::CoordinatorIdentity,
        ended: bool,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let (mesh_id, identity) = (mesh_id.to_owned(), identity.clone());
        self.write_queued(move |tx| {
            inbox_writes::record_presence(&inbox::Inbox(tx), &mesh_id, &identity, ended, now)
        })
    }

    fn prune_pending_events(
        &self,
        drained_older_than: Timestamp,
        undrained_older_than: Timestamp,
        now: Timestamp,
    ) -> StoreResult<agentmesh_store::PruneReport> {
        crate::inbox_upkeep::prune(self, drained_older_than, undrained_older_than, now)
    }

    fn requeue_held_event(
        &self,
        mesh_id: &str,
        held_entry_id: &str,
        now: Timestamp,
    ) -> StoreResult<agentmesh_store::HeldRequeue> {
        self.write(|tx| inbox_writes::requeue_held(&inbox::Inbox(tx), mesh_id, held_entry_id, now))
    }

    fn pending_events_by_addressee(
        &self,
        mesh_id: &str,
    ) -> StoreResult<Vec<agentmesh_store::PendingAddressee>> {
        self.read(|c| crate::overview::pending_by_addressee(c, mesh_id))
    }
}

/// A completion and, unless it was refused, the claim that follows it, in the
/// caller's transaction. The outer `Res` fails the transaction; the inner `Err`
/// is the completion's recorded refusal, which must still be committed.
fn complete_then_claim(
    tx: &rusqlite::Connection,
    ceilings: &Ceilings,
    mesh_id: &str,
    report: &CompletionReport,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
) -> Res<Result<(Task, ClaimOutcome), StoreError>> {
    agentmesh_store::task_writes::complete_then_claim(&Rows(tx), mesh_id, report, now, || {
        tasks::claim(tx, ceilings, mesh_id, claimant, opts, now)
    })
}

/// A submitted write whose operation may end in a refusal that was recorded (and
/// committed): the refusal becomes the write's error, as in the synchronous forms.
fn refusal_as_error<T: Send + 'static>(submitted: Submitted<Result<T, StoreError>>) -> Submitted<T> {
    Box::pin(async move { submitted.await? })
}

impl ReservationStore for SqliteStore {
    fn reserve(
        &self,
        mesh_id: &str,
        request: &agentmesh_core::NewReservation,
        now: Timestamp,
    ) -> StoreResult<agentmesh_store::Reserved> {
        self.write(|tx| reservation_writes::reserve(&reservations::Rows(tx), mesh_id, request, now))
    }

    fn reservation_command(
        &self,
        mesh_id: &str,
        id: &str,
        fence: &agentmesh_store::Fence,
        command: agentmesh_store::ReservationCommand,
        now: Timestamp,
    ) -> StoreResult<agentmesh_core::Reservation> {
        self.write(|tx| {
            reservation_writes::command(&reservations::Rows(tx), mesh_id, id, fence, command, now)
        })
    }

    fn reservations(
        &self,
        mesh_id: &str,
        query: agentmesh_store::ReservationQuery<'_>,
        now: Timestamp,
    ) -> StoreResult<Vec<agentmesh_core::Reservation>> {
        self.read(|c| match query {
            agentmesh_store::ReservationQuery::All(scope) => reservations::in_force(c, mesh_id, scope, now),
            agentmesh_store::ReservationQuery::Near { scope, patterns } => {
                reservation_writes::near_in_force(&reservations::Rows(c), mesh_id, scope, patterns, now)
            }
        })
    }

    fn expire_reservations(&self, now: Timestamp) -> StoreResult<u64> {
        self.write(|tx| reservations::expire(tx, now))
    }
}

impl WebhookStore for SqliteStore {
    fn add_webhook(
        &self,
        mesh_id: &str,
        valid: &agentmesh_core::webhook::ValidWebhook,
        secret: &str,
        now: Timestamp,
    ) -> StoreResult<agentmesh_core::Webhook> {
        self.write(|tx| webhook_writes::add(&webhooks::Rows(tx), mesh_id, valid, secret, now))
    }

    fn webhooks(&self, mesh_id: Option<&str>) -> StoreResult<Vec<agentmesh_core::Webhook>> {
        self.read(|c| webhooks::list(c, mesh_id))
    }

    fn webhook_secret(&self, mesh_id: &str, id: &str) -> StoreResult<Option<String>> {
        self.read(|c| webhooks::secret(c, mesh_id, id))
    }

    fn webhook_command(
        &self,
        mesh_id: &str,
        id: &str,
        command: agentmesh_store::WebhookCommand,
        now: Timestamp,
    ) -> StoreResult<agentmesh_core::Webhook> {
        self.write(|tx| webhook_writes::command(&webhooks::Rows(tx), mesh_id, id, command, now))
    }

    fn save_webhook_progress(
        &self,
        hook: &agentmesh_core::Webhook,
        now: Timestamp,
    ) -> StoreResult<Option<agentmesh_core::Webhook>> {
        self.write(|tx| webhook_writes::save_progress(&webhooks::Rows(tx), hook, now))
    }
}

impl agentmesh_store::ArchiveStore for SqliteStore {
    fn archive_expired(
        &self,
        policy: &agentmesh_core::retention::RetentionPolicy,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<agentmesh_store::archive::ArchiveReport> {
        crate::archive::step(self, policy, now, limit).map_err(|e| e.0)
    }

    fn archived_tasks(
        &self,
        mesh_id: &str,
        query: agentmesh_store::ArchivedTasks<'_>,
    ) -> StoreResult<Vec<(u64, Task)>> {
        use agentmesh_store::ArchivedTasks;
        self.read(|c| match query {
            ArchivedTasks::Id(task_id) => {
                Ok(crate::archive::task(c, mesh_id, task_id)?.into_iter().collect())
            }
            ArchivedTasks::After { after, limit } => crate::archive::tasks_page(c, mesh_id, after, limit),
        })
    }

    fn archived_ledger(
        &self,
        mesh_id: &str,
        query: &SliceQuery,
    ) -> StoreResult<agentmesh_store::archive::ArchivedPage> {
        let mut page = self.read(|c| crate::archive::ledger_page(c, mesh_id, query))?;
        if query.after_seq.is_some() {
            page.slice.origin = self.read(crate::ledger::database_id)?;
        }
        Ok(page)
    }

    fn drop_archived(
        &self,
        mesh_id: &str,
        through: &agentmesh_core::retention::ArchiveMark,
    ) -> StoreResult<agentmesh_core::retention::ArchiveMark> {
        self.write(|tx| crate::archive::drop_through(tx, mesh_id, through))
    }

    fn archive_state(
        &self,
        mesh_id: &str,
        set: Option<&agentmesh_core::retention::MeshRetention>,
        now: Timestamp,
    ) -> StoreResult<agentmesh_store::archive::ArchiveState> {
        if let Some(windows) = set {
            self.write(|tx| crate::archive::set_retention(tx, mesh_id, windows, now))?;
        }
        self.read(|c| crate::archive::state(c, mesh_id))
    }
}
