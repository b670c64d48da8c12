//! Background upkeep: the loops that run beside the routes.
//!
//! [`serve`](crate::serve) starts [`run`] with a child of its shutdown token, so
//! one cancellation stops the server and the loops together; a pass in flight
//! finishes first (each is one short store call or a few). Every job runs on its
//! own interval ([`UpkeepConfig`]), each pass on Tokio's blocking pool, and every
//! pass is logged: what it did, the counts and how long it took (`debug` when it
//! found nothing to do, `info` when it changed something, `warn` when it failed).
//! A store call that meets contention runs again after a short back-off
//! (`agentmesh_store::retry`). A failure is never fatal: the job tries again at
//! its next tick. A panic (in a pass or in the loop itself) is not fatal either: each loop runs under a
//! supervisor that logs the panic, counts it (`agentmesh_background_restarts_total`
//! in `/metrics`) and restarts the loop after a back-off (250 ms, doubling up
//! to 30 s while the panics keep coming).
//!
//! The jobs:
//! - `lease_reaper`: assigned tasks whose lease ran out go back to pending (or
//!   fail after too many reclaims) through the store's reclaim rule, which writes
//!   the `task_reclaimed` ledger entry and bumps the fencing epoch in the same
//!   transaction. Waiting watches are woken afterwards, as after any write.
//! - `fingerprints`, `idle_sessions`: expired completion fingerprints and idle
//!   session reports are deleted.
//! - `deliveries`: session deliveries past their expiry become `expired`.
//! - `tool_log`: rate-guard rows older than the guard's retention are deleted.
//! - `dispatches`: `dispatched` rows untouched for `stale_dispatch_after` become
//!   `stale`; finished rows older than `finished_dispatch_kept_for` are deleted.
//! - `inbox_retention`: drained events older than the retention policy's
//!   events window (1 day) are deleted, undrained ones older than 30 days move
//!   to the ledger (`event_held`, recoverable), as the original swept.
//! - `retention`: finished tasks and ledger entries past the retention policy's
//!   windows (7 and 30 days, or a mesh's own) move to the archive, in bounded
//!   steps (each one short transaction pair), for at most [`RETENTION_PASS`]
//!   a pass; what is left waits for the next tick.
//! - `checkpoint`: the WAL is checkpointed and truncated through a hook, when
//!   one is installed (the store trait knows nothing of WAL files; the SQLite
//!   store keeps its WAL by itself, so `agentmesh serve` installs none).
//!
//! Several daemons on one database run the upkeep in one of them at a time:
//! with a [`UpkeepConfig::leader`] hook, a pass runs only while the hook says
//! this daemon leads (a PostgreSQL installation's upkeep lock), and is skipped
//! otherwise; the next tick asks again, so a daemon takes over within one
//! interval of the leader's death.
//!
//! `deliveries` and `dispatches` are per-mesh store calls; they visit every mesh
//! that has deliveries or dispatches in the store. The other jobs sweep every mesh.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_core::retention::RetentionPolicy;
use agentmesh_core::{RateGuard, TaskStatus, Timestamp};
use agentmesh_store::retry::retrying;
use agentmesh_store::{DispatchChange, RuntimePrune, StoreError};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::AppState;

/// Checkpoints the database's WAL; `Ok(true)` when it did, `Ok(false)` when
/// there was nothing worth doing.
pub type CheckpointHook = Arc<dyn Fn() -> Result<bool, String> + Send + Sync>;

/// Whether this daemon runs the upkeep now (blocking; asked before every pass).
/// Several daemons on one database run it in one of them at a time.
pub type LeaderHook = Arc<dyn Fn() -> bool + Send + Sync>;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(60 * 60);
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Rows of each kind one retention step moves at most: one short pair of
/// transactions beside the writers.
const RETENTION_STEP: u32 = 500;
/// How long one retention pass goes on stepping while rows are left.
const RETENTION_PASS: Duration = Duration::from_secs(2);

/// How often each upkeep job runs, and the ages it sweeps by. A zero interval
/// turns its job off.
#[derive(Clone)]
pub struct UpkeepConfig {
    /// The lease reaper (default 5 s).
    pub lease_reaper_every: Duration,
    /// Expired completion fingerprints (default 1 min).
    pub fingerprints_every: Duration,
    /// Expired idle-session reports (default 1 min).
    pub idle_sessions_every: Duration,
    /// Expired session deliveries (default 1 min).
    pub deliveries_every: Duration,
    /// The rate guard's tool-call log (default 5 min).
    pub tool_log_every: Duration,
    /// Stale and finished direct dispatches (default 5 min).
    pub dispatches_every: Duration,
    /// Inbox retention (default 1 h).
    pub inbox_retention_every: Duration,
    /// Retention into the archive (default 1 min).
    pub retention_every: Duration,
    /// The daemon's retention policy (a mesh may set its own windows).
    pub retention: RetentionPolicy,
    /// Lapsed path reservations, removed with their ledger entries (default
    /// 1 min; a lapsed reservation denies nothing even before it is removed).
    pub reservations_every: Duration,
    /// The WAL checkpoint (default 5 min; runs only with a [`Self::checkpoint`] hook).
    pub checkpoint_every: Duration,
    /// A `dispatched` direct dispatch untouched this long becomes `stale` (default 1 h).
    pub stale_dispatch_after: Duration,
    /// Completed, failed and stale dispatches are deleted after this long (default 1 day).
    pub finished_dispatch_kept_for: Duration,
    /// Undrained inbox events move to the ledger after this long (default 30 days).
    pub undrained_events_kept_for: Duration,
    /// Checkpoints the WAL; `None` skips the checkpoint job.
    pub checkpoint: Option<CheckpointHook>,
    /// Asked before every pass; a pass runs only when it says this daemon leads.
    /// Without one, every pass runs (one daemon per database).
    pub leader: Option<LeaderHook>,
}

impl Default for UpkeepConfig {
    fn default() -> UpkeepConfig {
        UpkeepConfig {
            lease_reaper_every: Duration::from_secs(5),
            fingerprints_every: MINUTE,
            idle_sessions_every: MINUTE,
            deliveries_every: MINUTE,
            tool_log_every: 5 * MINUTE,
            dispatches_every: 5 * MINUTE,
            inbox_retention_every: HOUR,
            retention_every: MINUTE,
            retention: RetentionPolicy::default(),
            reservations_every: MINUTE,
            checkpoint_every: 5 * MINUTE,
            stale_dispatch_after: HOUR,
            finished_dispatch_kept_for: DAY,
            undrained_events_kept_for: 30 * DAY,
            checkpoint: None,
            leader: None,
        }
    }
}

impl std::fmt::Debug for UpkeepConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpkeepConfig")
            .field("lease_reaper_every", &self.lease_reaper_every)
            .field("fingerprints_every", &self.fingerprints_every)
            .field("idle_sessions_every", &self.idle_sessions_every)
            .field("deliveries_every", &self.deliveries_every)
            .field("tool_log_every", &self.tool_log_every)
            .field("dispatches_every", &self.dispatches_every)
            .field("inbox_retention_every", &self.inbox_retention_every)
            .field("reservations_every", &self.reservations_every)
            .field("checkpoint_every", &self.checkpoint_every)
            .field("stale_dispatch_after", &self.stale_dispatch_after)
            .field("finished_dispatch_kept_for", &self.finished_dispatch_kept_for)
            .field("retention_every", &self.retention_every)
            .field("retention", &self.retention)
            .field("undrained_events_kept_for", &self.undrained_events_kept_for)
            .field("checkpoint", &self.checkpoint.as_ref().map(|_| "<hook>"))
            .field("leader", &self.leader.as_ref().map(|_| "<hook>"))
            .finish()
    }
}

/// One upkeep job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    LeaseReaper,
    Fingerprints,
    IdleSessions,
    Deliveries,
    ToolLog,
    Dispatches,
    InboxRetention,
    Retention,
    Reservations,
    Checkpoint,
}

impl Job {
    const ALL: [Job; 10] = [
        Job::LeaseReaper,
        Job::Fingerprints,
        Job::IdleSessions,
        Job::Deliveries,
        Job::ToolLog,
        Job::Dispatches,
        Job::InboxRetention,
        Job::Retention,
        Job::Reservations,
        Job::Checkpoint,
    ];

    const fn name(self) -> &'static str {
        match self {
            Job::LeaseReaper => "lease_reaper",
            Job::Fingerprints => "fingerprints",
            Job::IdleSessions => "idle_sessions",
            Job::Deliveries => "deliveries",
            Job::ToolLog => "tool_log",
            Job::Dispatches => "dispatches",
            Job::InboxRetention => "inbox_retention",
            Job::Retention => "retention",
            Job::Reservations => "reservations",
            Job::Checkpoint => "checkpoint",
        }
    }

    /// The job's interval; `None` when it is turned off.
    fn interval(self, config: &UpkeepConfig) -> Option<Duration> {
        let every = match self {
            Job::LeaseReaper => config.lease_reaper_every,
            Job::Fingerprints => config.fingerprints_every,
            Job::IdleSessions => config.idle_sessions_every,
            Job::Deliveries => config.deliveries_every,
            Job::ToolLog => config.tool_log_every,
            Job::Dispatches => config.dispatches_every,
            Job::InboxRetention => config.inbox_retention_every,
            Job::Retention => config.retention_every,
            Job::Reservations => config.reservations_every,
            Job::Checkpoint if config.checkpoint.is_none() => Duration::ZERO,
            Job::Checkpoint => config.checkpoint_every,
        };
        (!every.is_zero()).then_some(every)
    }

    /// Runs one pass (blocking: store calls). Returns what it did as named counts.
    fn pass(self, state: &AppState, config: &UpkeepConfig) -> Result<Vec<(&'static str, u64)>, String> {
        let mesh = state.mesh();
        let store = mesh.store();
        let now = mesh.now();
        let store_err = |err: StoreError| err.to_string();
        match self {
            Job::LeaseReaper => reap_leases(state, now),
            Job::Fingerprints => Ok(vec![(
                "deleted",
                retrying(|| store.prune_runtime(RuntimePrune::Fingerprints(now))).map_err(store_err)?,
            )]),
            Job::IdleSessions => {
                let deleted = retrying(|| store.prune_runtime(RuntimePrune::IdleSessions(now)));
                Ok(vec![("deleted", deleted.map_err(store_err)?)])
            }
            Job::Deliveries => {
                let mut expired = 0;
                for mesh_id in retrying(|| store.meshes_with_deliveries_or_dispatches()).map_err(store_err)? {
                    expired += retrying(|| store.expire_stale_session_deliveries(&mesh_id, now))
                        .map_err(store_err)?;
                }
                Ok(vec![("expired", expired)])
            }
            Job::ToolLog => {
                let cutoff =
                    before(now, Duration::from_millis(RateGuard::default().retention_ms().unsigned_abs()));
                let deleted = retrying(|| store.prune_runtime(RuntimePrune::ToolCalls(cutoff)));
                Ok(vec![("deleted", deleted.map_err(store_err)?)])
            }
            Job::Dispatches => {
                let stale_cutoff = before(now, config.stale_dispatch_after);
                let mut stale = 0;
                for mesh_id in retrying(|| store.meshes_with_deliveries_or_dispatches()).map_err(store_err)? {
                    stale += retrying(|| {
                        store.change_direct_dispatches(&mesh_id, DispatchChange::MarkStale(stale_cutoff), now)
                    })
                    .map_err(store_err)?;
                }
                let finished_cutoff = before(now, config.finished_dispatch_kept_for);
                let deleted =
                    retrying(|| store.prune_runtime(RuntimePrune::EndedDispatches(finished_cutoff)))
                        .map_err(store_err)?;
                Ok(vec![("marked_stale", stale), ("deleted", deleted)])
            }
            Job::InboxRetention => {
                // A drained event kept forever is never older than the epoch.
                let drained_cutoff = config.retention.events.cutoff(now).unwrap_or(Timestamp::from_millis(0));
                let undrained_cutoff = before(now, config.undrained_events_kept_for);
                let report = retrying(|| store.prune_pending_events(drained_cutoff, undrained_cutoff, now))
                    .map_err(store_err)?;
                Ok(vec![
                    ("drained_deleted", report.drained_expired),
                    ("undrained_held", report.undrained_expired),
                    ("exempt", report.terminal_exempt),
                ])
            }
            Job::Retention => {
                let started = Instant::now();
                let mut total = agentmesh_store::archive::ArchiveReport::default();
                loop {
                    let step = retrying(|| store.archive_expired(&config.retention, now, RETENTION_STEP))
                        .map_err(store_err)?;
                    total.add(step);
                    if !step.more || started.elapsed() >= RETENTION_PASS {
                        break;
                    }
                }
                if total.tasks + total.ledger_entries > 0 {
                    state.metrics.archived(total.tasks, total.ledger_entries);
                }
                Ok(vec![
                    ("tasks_archived", total.tasks),
                    ("ledger_archived", total.ledger_entries),
                    ("more", u64::from(total.more)),
                ])
            }
            Job::Reservations => {
                Ok(vec![("expired", retrying(|| store.expire_reservations(now)).map_err(store_err)?)])
            }
            Job::Checkpoint => match &config.checkpoint {
                Some(hook) => Ok(vec![("checkpointed", u64::from(hook()?))]),
                None => Ok(Vec::new()),
            },
        }
    }
}

/// `now` less `age`, saturating.
fn before(now: Timestamp, age: Duration) -> Timestamp {
    let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_millis(now.millis().saturating_sub(age_ms))
}

/// One pass of the lease reaper.
///
/// The listing is one read; each reclaim re-checks the lease inside its own
/// transaction (`reclaim_if_lease_expired`), so a task whose lease a heartbeat
/// extended after the listing, or that completed or was cancelled meanwhile, is
/// left alone.
fn reap_leases(state: &AppState, now: Timestamp) -> Result<Vec<(&'static str, u64)>, String> {
    let mesh = state.mesh();
    let store = mesh.store();
    let expired = retrying(|| store.expired_leases(now)).map_err(|err| err.to_string())?;
    let (mut requeued, mut failed, mut skipped, mut errors) = (0, 0, 0, 0);
    for (mesh_id, task_id) in expired {
        state.metrics.note_mesh(&mesh_id);
        match retrying(|| store.reclaim_if_lease_expired(&mesh_id, &task_id, now)) {
            Ok(Some(task)) if task.status == TaskStatus::Failed => {
                failed += 1;
                state.metrics.lease_reclaim("failed");
                tracing::info!(mesh = %mesh_id, task = %task_id, "lease expired; reclaimed too often, task failed");
            }
            Ok(Some(_)) => {
                requeued += 1;
                state.metrics.lease_reclaim("requeued");
                tracing::info!(mesh = %mesh_id, task = %task_id, "lease expired; task back to pending");
            }
            // The lease moved on (a heartbeat) or the task did, since the listing.
            Ok(None) => skipped += 1,
            Err(err) => {
                tracing::warn!(mesh = %mesh_id, task = %task_id, error = %err, "lease reaper could not reclaim a task");
                errors += 1;
            }
        }
    }
    if requeued + failed > 0 {
        // Reclaims are writes: wake the watches (a failed task queued an event).
        mesh.wrote();
    }
    if errors > 0 && requeued + failed == 0 {
        return Err(format!("{errors} expired leases could not be reclaimed"));
    }
    Ok(vec![("requeued", requeued), ("failed", failed), ("skipped", skipped), ("errors", errors)])
}

/// Runs every enabled job on its interval until `shutdown` is cancelled; returns
/// once each job has finished its pass in flight. Each job's loop runs under
/// [`supervise`], which restarts it after a panic.
pub(crate) async fn run(state: AppState, config: Arc<UpkeepConfig>, shutdown: CancellationToken) {
    let mut jobs = JoinSet::new();
    for job in Job::ALL {
        if let Some(every) = job.interval(&config) {
            state.metrics.upkeep_job(job.name());
            jobs.spawn(supervise(job, every, state.clone(), Arc::clone(&config), shutdown.clone()));
        }
    }
    while let Some(done) = jobs.join_next().await {
        if let Err(err) = done {
            tracing::error!(error = %err, "an upkeep supervisor stopped unexpectedly");
        }
    }
}

/// The names of every background loop, as `/metrics` labels them.
pub(crate) fn loop_names() -> impl Iterator<Item = &'static str> {
    Job::ALL.into_iter().map(Job::name)
}

/// The wait before a panicked loop's first restart; it doubles with each panic
/// that follows a short run, up to [`RESTART_DELAY_MAX`].
const RESTART_DELAY_MIN: Duration = Duration::from_millis(250);
/// The longest wait before a restart. A loop that ran this long before it
/// panicked is restarted after [`RESTART_DELAY_MIN`] again.
const RESTART_DELAY_MAX: Duration = Duration::from_secs(30);

/// Runs `job`'s loop in a task of its own until `shutdown` is cancelled. A
/// panic anywhere in the loop (in a pass, or in its own code) ends that task;
/// the supervisor logs it, counts it in `/metrics`
/// (`agentmesh_background_restarts_total`) and starts the loop again after a
/// back-off, so one bad pass never stops the lease reaper or a sweep for good.
async fn supervise(
    job: Job,
    every: Duration,
    state: AppState,
    config: Arc<UpkeepConfig>,
    shutdown: CancellationToken,
) {
    let mut delay = RESTART_DELAY_MIN;
    loop {
        let started = Instant::now();
        let run = tokio::spawn(job_loop(job, every, state.clone(), Arc::clone(&config), shutdown.clone()));
        let panic = match run.await {
            Ok(()) => return,
            Err(err) if err.is_panic() => panic_text(err.into_panic().as_ref()),
            Err(err) => err.to_string(),
        };
        if started.elapsed() >= RESTART_DELAY_MAX {
            delay = RESTART_DELAY_MIN;
        }
        state.metrics.background_restart(job.name());
        let restart_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        tracing::error!(job = job.name(), panic, restart_in_ms, "an upkeep loop panicked; restarting it");
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(RESTART_DELAY_MAX);
    }
}

/// The message of a panic payload (a `&str` or a `String`; `?` otherwise).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| String::from("?"))
}

/// One job's loop: a pass at start, then one per `every` (a pass that overran
/// delays the next tick instead of bunching them).
async fn job_loop(
    job: Job,
    every: Duration,
    state: AppState,
    config: Arc<UpkeepConfig>,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let started = Instant::now();
        let (s, c) = (state.clone(), Arc::clone(&config));
        let led = move || match &c.leader {
            Some(leads) if !leads() => None,
            _ => Some(job.pass(&s, &c)),
        };
        let outcome = match tokio::task::spawn_blocking(led).await {
            Ok(Some(outcome)) => outcome,
            Ok(None) => {
                tracing::debug!(job = job.name(), "upkeep pass left to the daemon that leads the upkeep");
                continue;
            }
            // A panic in the pass is the loop's: the supervisor restarts it.
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(join) => Err(format!("the pass did not finish: {join}")),
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        state.metrics.upkeep_pass(job.name(), outcome.is_ok());
        match outcome {
            Ok(counts) => {
                let did = counts.iter().map(|(name, n)| format!("{name}={n}")).collect::<Vec<_>>().join(" ");
                if counts.iter().any(|(name, n)| *n > 0 && *name != "skipped") {
                    tracing::info!(job = job.name(), did, elapsed_ms, "upkeep pass");
                } else {
                    tracing::debug!(job = job.name(), did, elapsed_ms, "upkeep pass");
                }
            }
            Err(error) => tracing::warn!(job = job.name(), error, elapsed_ms, "upkeep pass failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_intervals_and_a_missing_hook_turn_jobs_off() {
        let config = UpkeepConfig { fingerprints_every: Duration::ZERO, ..UpkeepConfig::default() };
        assert_eq!(Job::Fingerprints.interval(&config), None);
        assert_eq!(Job::Checkpoint.interval(&config), None);
        assert_eq!(Job::LeaseReaper.interval(&config), Some(Duration::from_secs(5)));
        let hook: CheckpointHook = Arc::new(|| Ok(false));
        let config = UpkeepConfig { checkpoint: Some(hook), ..config };
        assert_eq!(Job::Checkpoint.interval(&config), Some(5 * MINUTE));
    }

    #[test]
    fn cutoffs_saturate() {
        let now = Timestamp::from_millis(10_000);
        assert_eq!(before(now, Duration::from_secs(4)).millis(), 6_000);
        assert_eq!(before(Timestamp::from_millis(i64::MIN + 1), DAY).millis(), i64::MIN);
    }
}
