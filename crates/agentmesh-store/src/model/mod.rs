//! The reference model of a mesh: what a store does, stated plainly, in memory.
//!
//! [`Model`] keeps every table as an ordered map or list and answers each
//! operation by looking at all of it: a claim reads every pending task, a drain
//! every queued event, a dependency check every dependency. Nothing is indexed,
//! cached, projected or batched, so each rule can be read off the code. Where a
//! rule is the core's (the claim gates, the lifecycle, the ledger entries a change
//! writes, event stamping and routing), the model asks the core exactly as the
//! stores do: those rules are what the model holds the stores to. What a store
//! adds around them (which rows to load, in which order to look, what to write
//! and when) the model states again on its own, and that is what it checks.
//!
//! The [`check`] module runs random operation sequences against the model and a
//! store side by side and compares every answer and every view after each step;
//! [`history`] checks what several stores on one database did at once.
//!
//! Covered: enqueue (single and batch, with targets, tags, priority, `notBefore`,
//! dependencies, missions, coordinators), claims (every gate, tiers and claim
//! order, the refusal a claim names), heartbeat, lease expiry and reclaim with
//! fencing epochs, complete, fail, cancel, requeue with its budget, priority,
//! complete-and-claim, the coordinator inbox (queueing with fingerprint and
//! refine-terminal dedup, drains with routing, presence, event-id dedup,
//! enforce-mode quarantine, `onlyEvents` and limits, peeks, acks, alerts about
//! finished tasks), missions and their progress, and the ledger (append order,
//! paging by sequence and by `(timestamp, id)` cursor).
//!
//! Not modelled: refine reconciliation, retention sweeps, held-event requeues,
//! the records beside the queue (dispatches, deliveries, idle sessions, the rate
//! guard) and the MCP layer's `maxChars` budget (a peek, then a drain of as many
//! events as fit: both modelled here).

pub mod check;
pub mod history;
pub mod ops;

use std::collections::{BTreeMap, BTreeSet};

use agentmesh_core::claim::check_gates;
use agentmesh_core::effects::mission::{MissionRefusal, mission_id, upsert_mission};
use agentmesh_core::effects::task::{self as decide, Decision, Dependents, Refused, Report};
use agentmesh_core::events::held::quarantine_entry;
use agentmesh_core::events::presence::{drain_refreshes_presence, live_since};
use agentmesh_core::events::stale::{alert_is_stale, droppable_alert_task_id};
use agentmesh_core::events::{
    Address, CoordinatorIdentity, DrainRouter, EmitHint, EventToQueue, PendingEvent, ProjectedRoute,
    RouteClass, RouteDecision, pending_event_fingerprint, project_route, refine_job_id,
    refine_terminal_fingerprint, stamp_event,
};
use agentmesh_core::lifecycle::{LEASE_EXPIRED_REASON, match_completion};
use agentmesh_core::{
    CandidateFacts, ClaimRefusal, Claimant, InvalidInput, LedgerEntry, LedgerQuery, LedgerSlice, Mission,
    MissionProgress, NewMission, NewTask, NodeLoad, RequeueOptions, Requeued, SliceQuery, Task, TaskPriority,
    TaskStatus, Timestamp, daemon_id, enqueue,
};
use serde_json::Value;

use crate::ids::mint_at;
use crate::{
    ClaimOptions, ClaimOutcome, CompletionReport, DrainOutcome, DrainRequest, DuplicateReason, IdScope,
    InboxEvent, Outcome, QueueOutcome, RawJson, StoreError, StoreResult, UpsertedMission,
};

/// A task as the model keeps it: the task, and its place in enqueue order.
#[derive(Debug, Clone)]
struct Row {
    task: Task,
    order: u64,
}

/// An event as the model keeps it.
#[derive(Debug, Clone)]
struct Queued {
    /// The row id a drain hands out and an ack takes.
    id: String,
    name: String,
    /// The event as stored.
    value: Value,
    fingerprint: Option<String>,
    queued_at: i64,
    /// The idempotency key a drain records: the routed one of a valid v2 event,
    /// else the envelope's.
    event_id: Option<String>,
    /// The daemon it is targeted at (v1 scope), trimmed.
    target: Option<String>,
    drained: bool,
}

/// A coordinator's presence record.
#[derive(Debug, Clone)]
struct Presence {
    machine: Option<String>,
    last_seen: i64,
    ended_at: Option<i64>,
}

/// One mesh's tables.
#[derive(Debug, Clone, Default)]
struct Mesh {
    tasks: BTreeMap<String, Row>,
    ledger: Vec<LedgerEntry>,
    events: Vec<Queued>,
    /// Event ids of every event taken off the queue (the dedup history).
    drained_ids: BTreeSet<String>,
    presence: BTreeMap<String, Presence>,
    missions: BTreeMap<String, Mission>,
}

/// The reference model: every mesh of one database.
#[derive(Debug, Clone)]
pub struct Model {
    scope: IdScope,
    meshes: BTreeMap<String, Mesh>,
    /// Enqueue order, across the database.
    next_order: u64,
    /// Ledger sequence: (mesh, index in that mesh's ledger) in commit order.
    sequence: Vec<(String, usize)>,
}

/// A failed write: the error, and whether what it did before failing stays
/// (a refusal the ledger records) or goes (everything else).
type Write<T> = Result<T, StoreError>;

impl Model {
    /// An empty database whose task and mission ids are unique in `scope`.
    pub fn new(scope: IdScope) -> Model {
        Model { scope, meshes: BTreeMap::new(), next_order: 0, sequence: Vec::new() }
    }

    fn mesh(&self, mesh_id: &str) -> Option<&Mesh> {
        self.meshes.get(mesh_id)
    }

    fn mesh_mut(&mut self, mesh_id: &str) -> &mut Mesh {
        self.meshes.entry(mesh_id.to_owned()).or_default()
    }

    /// Runs a write: all of it, or (on error) none of it.
    fn atomically<T>(&mut self, write: impl FnOnce(&mut Model) -> Write<T>) -> StoreResult<T> {
        let before = self.clone();
        let result = write(self);
        if result.is_err() {
            *self = before;
        }
        result
    }

    fn append(&mut self, entry: LedgerEntry) {
        let mesh = self.mesh_mut(&entry.mesh_id);
        let index = mesh.ledger.len();
        let mesh_id = entry.mesh_id.clone();
        mesh.ledger.push(entry);
        self.sequence.push((mesh_id, index));
    }

    fn task(&self, mesh_id: &str, task_id: &str) -> Option<&Task> {
        self.mesh(mesh_id).and_then(|m| m.tasks.get(task_id)).map(|r| &r.task)
    }

    fn required(&self, mesh_id: &str, task_id: &str) -> Write<Task> {
        self.task(mesh_id, task_id).cloned().ok_or_else(|| StoreError::task_not_found(mesh_id, task_id))
    }

    /// The tasks of the mesh in enqueue order.
    fn tasks_in_order(&self, mesh_id: &str) -> Vec<&Row> {
        let mut rows: Vec<&Row> = self.mesh(mesh_id).map(|m| m.tasks.values().collect()).unwrap_or_default();
        rows.sort_by_key(|r| r.order);
        rows
    }

    /// The tasks of the mesh that list `task_id` among their dependencies, in
    /// id order: the order a change visits them (and a cycle's path is found in).
    fn dependents_of(&self, mesh_id: &str, task_id: &str) -> Vec<String> {
        let Some(mesh) = self.mesh(mesh_id) else { return Vec::new() };
        mesh.tasks
            .values()
            .filter(|r| r.task.dependencies().iter().any(|d| d == task_id))
            .map(|r| r.task.id.clone())
            .collect()
    }

    // ── Tasks ───────────────────────────────────────────────────────────────

    /// Enqueues one task.
    pub fn enqueue(&mut self, mesh_id: &str, new: &NewTask, now: Timestamp) -> StoreResult<Task> {
        self.atomically(|m| m.enqueue_one(mesh_id, new, now))
    }

    /// Enqueues several tasks, all or none; an invalid one is named by its index.
    pub fn enqueue_batch(
        &mut self,
        mesh_id: &str,
        new: &[NewTask],
        now: Timestamp,
    ) -> StoreResult<Vec<Task>> {
        self.atomically(|m| {
            new.iter()
                .enumerate()
                .map(|(i, n)| {
                    m.enqueue_one(mesh_id, n, now).map_err(|err| match err {
                        StoreError::InvalidInput(e) => {
                            StoreError::InvalidInput(e.within(format_args!("tasks[{i}]")))
                        }
                        other => other,
                    })
                })
                .collect()
        })
    }

    fn enqueue_one(&mut self, mesh_id: &str, new: &NewTask, now: Timestamp) -> Write<Task> {
        let task = enqueue::prepare_task(mesh_id, new, &mint_at(now), now)?;
        if let Some(path) = enqueue::find_dependency_cycle(&task.id, task.dependencies(), |id| {
            self.dependents_of(&task.mesh_id, id)
        }) {
            return Err(StoreError::DependencyCycle { path });
        }
        let holder = self.meshes.iter().find(|(id, mesh)| {
            mesh.tasks.contains_key(&task.id) && (self.scope == IdScope::Database || **id == task.mesh_id)
        });
        if let Some((holder, _)) = holder {
            return Err(StoreError::DuplicateTaskId {
                task_id: task.id.clone(),
                existing_mesh_id: holder.clone(),
                scope: self.scope,
            });
        }
        let order = self.next_order;
        self.next_order += 1;
        self.mesh_mut(&task.mesh_id).tasks.insert(task.id.clone(), Row { task: task.clone(), order });
        self.append(decide::dispatched(&task, mint_at(now), now));
        Ok(task)
    }

    /// One task.
    pub fn find_task(&self, mesh_id: &str, task_id: &str) -> Option<Task> {
        self.task(mesh_id, task_id).cloned()
    }

    /// Every task of the mesh, in creation order (enqueue order among equal
    /// creation times).
    pub fn queue_entries(&self, mesh_id: &str) -> Vec<Task> {
        let mut rows = self.tasks_in_order(mesh_id);
        rows.sort_by(|a, b| (&a.task.created_at, a.order).cmp(&(&b.task.created_at, b.order)));
        rows.into_iter().map(|r| r.task.clone()).collect()
    }

    /// What the gates read of a pending task, from the whole task and the
    /// statuses of its dependencies.
    fn facts<'a>(&self, task: &'a Task) -> CandidateFacts<'a> {
        let dependencies_met = task.blocked_reason.is_none()
            && task
                .dependencies()
                .iter()
                .all(|d| self.task(&task.mesh_id, d).is_some_and(|dep| dep.status == TaskStatus::Completed));
        CandidateFacts {
            required_tags: task.tags_required(),
            dependencies_met,
            not_before_ms: task.not_before_millis(),
            parked: task.is_parked(),
            task_mode: task.task_mode,
            readonly: task.is_readonly(),
            target_node_id: task.target_node_id.as_deref(),
            target_session_id: task.target_session_id.as_deref(),
            difficulty: task.difficulty.as_deref(),
        }
    }

    /// The claimant's node, counted from every assigned task of the mesh.
    fn node_load(&self, mesh_id: &str, claimant: &Claimant) -> NodeLoad {
        let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
        let on_node = |t: &Task| {
            t.status == TaskStatus::Assigned
                && t.assigned_node_id.as_ref().is_some_and(|n| forms.iter().any(|f| f == n))
        };
        let assigned: Vec<&Task> =
            self.tasks_in_order(mesh_id).into_iter().map(|r| &r.task).filter(|t| on_node(t)).collect();
        let of_provider = claimant.parallel_cap().map_or(0, |(provider, _)| {
            assigned.iter().filter(|t| t.assigned_provider_type.as_deref() == Some(provider)).count() as u64
        });
        NodeLoad::from_counts(claimant, !assigned.is_empty(), of_provider)
    }

    /// The pending tasks a claimant can be handed at all, tier by tier (pinned
    /// to its session, pinned to its node and no session, pinned to neither),
    /// each in claim order: higher priority, then older, then enqueued first.
    fn tiers(&self, mesh_id: &str, claimant: &Claimant) -> [Vec<&Task>; 3] {
        let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
        let mut pending: Vec<&Row> = self
            .tasks_in_order(mesh_id)
            .into_iter()
            .filter(|r| r.task.status == TaskStatus::Pending)
            .collect();
        pending.sort_by(|a, b| {
            (std::cmp::Reverse(a.task.priority_rank()), &a.task.created_at, a.order).cmp(&(
                std::cmp::Reverse(b.task.priority_rank()),
                &b.task.created_at,
                b.order,
            ))
        });
        let mut tiers: [Vec<&Task>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        for row in pending {
            let t = &row.task;
            match (&t.target_session_id, &t.target_node_id) {
                (Some(s), _) if *s == claimant.session_id => tiers[0].push(t),
                (Some(_), _) => {}
                (None, Some(n)) if forms.iter().any(|f| f == n) => tiers[1].push(t),
                (None, Some(_)) => {}
                (None, None) => tiers[2].push(t),
            }
        }
        tiers
    }

    /// Claims the next task for `claimant`, or says why not.
    pub fn claim_next(
        &mut self,
        mesh_id: &str,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<ClaimOutcome> {
        self.atomically(|m| m.claim_one(mesh_id, claimant, opts, now))
    }

    fn claim_one(
        &mut self,
        mesh_id: &str,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> Write<ClaimOutcome> {
        decide::check_claimant(claimant)?;
        let holds_one = self.tasks_in_order(mesh_id).iter().any(|r| {
            r.task.status == TaskStatus::Assigned
                && r.task.assigned_session_id.as_deref() == Some(claimant.session_id.as_str())
        });
        if holds_one {
            return Ok(ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned));
        }
        let load = self.node_load(mesh_id, claimant);
        let tiers = self.tiers(mesh_id, claimant);
        let winner =
            tiers.iter().flatten().find(|t| check_gates(&self.facts(t), claimant, load, now).is_ok());
        let Some(winner) = winner.map(|t| (*t).clone()) else {
            let refusal = tiers
                .iter()
                .flatten()
                .filter_map(|t| check_gates(&self.facts(t), claimant, load, now).err())
                .max_by_key(|r| r.depth())
                .unwrap_or(ClaimRefusal::NoPendingCandidates);
            return Ok(ClaimOutcome::Refused(refusal));
        };
        let decision = decide::claim(&winner, claimant, opts.lease_ms, now, || mint_at(now))?;
        Ok(ClaimOutcome::Claimed(self.persist(decision, now)))
    }

    /// Stores a decision: the row, its entry, its dependents (each with its
    /// entry), then its event.
    fn persist(&mut self, decision: Decision, now: Timestamp) -> Task {
        let Decision { task, ledger, dependents, event } = decision;
        self.save(&task);
        if let Some(entry) = ledger {
            self.append(entry);
        }
        if dependents != Dependents::Keep {
            for id in self.dependents_of(&task.mesh_id, &task.id) {
                let Some(dep) = self.find_task(&task.mesh_id, &id) else { continue };
                let changed = match dependents {
                    Dependents::Block => decide::block_dependent(&dep, &task, now, || mint_at(now)),
                    _ => decide::unblock_dependent(&dep, &task, now, || mint_at(now)),
                };
                if let Some((changed, entry)) = changed {
                    self.save(&changed);
                    self.append(entry);
                }
            }
        }
        if let Some(EventToQueue { event, hint }) = event {
            let mesh_id = task.mesh_id.clone();
            // A duplicate is not an error of the write that queued it.
            let _ = self.queue_event(&mesh_id, event, &hint, None, now);
        }
        task
    }

    fn save(&mut self, task: &Task) {
        if let Some(row) = self.mesh_mut(&task.mesh_id).tasks.get_mut(&task.id) {
            row.task = task.clone();
        }
    }

    /// Records a refusal's entry; the refusal is the answer, and the entry stays.
    fn refuse(&mut self, task: &Task, session_id: &str, refused: Refused) -> StoreError {
        self.append(refused.ledger);
        StoreError::of_holder_refusal(&task.id, session_id, refused.refusal)
    }

    /// A worker's completion or failure.
    pub fn complete_task(
        &mut self,
        mesh_id: &str,
        report: &CompletionReport,
        now: Timestamp,
    ) -> StoreResult<Task> {
        // A refusal changed nothing before it; its entry is committed on its own.
        match self.atomically(|m| m.complete_one(mesh_id, report, now))? {
            Ok(task) => Ok(task),
            Err(refused) => Err(refused.commit(self)),
        }
    }

    fn complete_one(
        &mut self,
        mesh_id: &str,
        report: &CompletionReport,
        now: Timestamp,
    ) -> Write<Result<Task, PendingRefusal>> {
        decide::check_session(&report.session_id)?;
        let before = match &report.task_id {
            Some(id) => self.required(mesh_id, id)?,
            None => {
                let session = report.session_id.trim();
                let assigned: Vec<Task> = self
                    .tasks_in_order(mesh_id)
                    .into_iter()
                    .filter(|r| {
                        r.task.status == TaskStatus::Assigned
                            && r.task.assigned_session_id.as_deref().map(str::trim) == Some(session)
                    })
                    .map(|r| r.task.clone())
                    .collect();
                let Some(found) = match_completion(&assigned, None, report.occurred_at.as_deref()) else {
                    return Err(StoreError::NoAssignedTask {
                        mesh_id: mesh_id.to_owned(),
                        session_id: report.session_id.clone(),
                    });
                };
                found.clone()
            }
        };
        let outcome = match &report.outcome {
            Outcome::Completed { summary } => Report::Completed { summary: summary.as_deref() },
            Outcome::Failed { reason, summary } => Report::Failed { reason, summary: summary.as_deref() },
        };
        match decide::complete(&before, &report.session_id, report.epoch, outcome, now, || mint_at(now))? {
            Ok(decision) => Ok(Ok(self.persist(decision, now))),
            Err(refused) => {
                Ok(Err(PendingRefusal { task: before, session_id: report.session_id.clone(), refused }))
            }
        }
    }

    /// A completion, then (when it was accepted) a claim, as one write.
    pub fn complete_and_claim(
        &mut self,
        mesh_id: &str,
        report: &CompletionReport,
        claimant: &Claimant,
        opts: &ClaimOptions,
        now: Timestamp,
    ) -> StoreResult<(Task, ClaimOutcome)> {
        let claimed = self.atomically(|m| match m.complete_one(mesh_id, report, now)? {
            Ok(task) => Ok(Ok((task, m.claim_one(mesh_id, claimant, opts, now)?))),
            Err(refused) => Ok(Err(refused)),
        })?;
        claimed.map_err(|refused| refused.commit(self))
    }

    /// A heartbeat.
    pub fn heartbeat(&mut self, mesh_id: &str, beat: &crate::Heartbeat, now: Timestamp) -> StoreResult<Task> {
        let before = self.required(mesh_id, &beat.task_id)?;
        let progress = beat.progress.as_ref();
        match decide::heartbeat(&before, &beat.session_id, beat.epoch, beat.lease_ms, progress, now, || {
            mint_at(now)
        })? {
            Ok(decision) => Ok(self.persist(decision, now)),
            Err(refused) => Err(self.refuse(&before, &beat.session_id, refused)),
        }
    }

    /// Cancels a task.
    pub fn cancel_task(
        &mut self,
        mesh_id: &str,
        task_id: &str,
        reason: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<Task> {
        let before = self.required(mesh_id, task_id)?;
        let decision = decide::cancel(&before, reason, now, || mint_at(now))?;
        Ok(self.persist(decision, now))
    }

    /// Changes a task's priority.
    pub fn set_task_priority(
        &mut self,
        mesh_id: &str,
        task_id: &str,
        priority: TaskPriority,
        reason: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<Task> {
        let before = self.required(mesh_id, task_id)?;
        let decision = decide::set_priority(&before, priority, reason, now, || mint_at(now))?;
        Ok(self.persist(decision, now))
    }

    /// Puts a task back in the queue, or fails it with its budget spent.
    pub fn requeue_task(
        &mut self,
        mesh_id: &str,
        task_id: &str,
        opts: &RequeueOptions,
        now: Timestamp,
    ) -> StoreResult<Requeued> {
        let before = self.required(mesh_id, task_id)?;
        let (decision, kind) = decide::requeue(&before, opts, now, || mint_at(now))?;
        Ok(kind.of(self.persist(decision, now)))
    }

    /// Assigned tasks whose lease ran out before `now`, in every mesh, sorted.
    pub fn expired_leases(&self, now: Timestamp) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .meshes
            .iter()
            .flat_map(|(mesh_id, mesh)| {
                mesh.tasks
                    .values()
                    .filter(|r| decide::lease_lapsed(&r.task, now))
                    .map(move |r| (mesh_id.clone(), r.task.id.clone()))
            })
            .collect();
        out.sort();
        out
    }

    /// Reclaims the task if its lease ran out before `now`.
    pub fn reclaim_if_lease_expired(
        &mut self,
        mesh_id: &str,
        task_id: &str,
        now: Timestamp,
    ) -> StoreResult<Option<Task>> {
        let Some(current) = self.find_task(mesh_id, task_id) else { return Ok(None) };
        if !decide::lease_lapsed(&current, now) {
            return Ok(None);
        }
        let decision = decide::reclaim(&current, LEASE_EXPIRED_REASON, now, || mint_at(now))?;
        Ok(Some(self.persist(decision, now)))
    }

    // ── Missions ────────────────────────────────────────────────────────────

    /// Creates or updates a mission.
    pub fn upsert_mission(
        &mut self,
        mesh_id: &str,
        new: &NewMission,
        now: Timestamp,
    ) -> StoreResult<UpsertedMission> {
        let id = mission_id(new).to_owned();
        let existing = self.meshes.values().find_map(|m| m.missions.get(&id)).cloned();
        let decision =
            upsert_mission(mesh_id, new, existing.as_ref(), now, || mint_at(now)).map_err(|refusal| {
                match refusal {
                    MissionRefusal::Invalid(err) => StoreError::InvalidInput(err),
                    MissionRefusal::InOtherMesh { id } => StoreError::IdInOtherMesh { kind: "mission", id },
                }
            })?;
        let mission = decision.mission;
        self.mesh_mut(&mission.mesh_id).missions.insert(mission.id.clone(), mission.clone());
        for entry in decision.ledger {
            self.append(entry);
        }
        Ok(UpsertedMission { mission, created: decision.created })
    }

    /// A mission's progress, counted from its tasks.
    pub fn mission_progress(&self, mesh_id: &str, id: &str) -> StoreResult<MissionProgress> {
        if self.mesh(mesh_id).is_none_or(|m| !m.missions.contains_key(id)) {
            return Err(StoreError::NotFound {
                kind: "mission",
                mesh_id: mesh_id.to_owned(),
                id: id.to_owned(),
            });
        }
        let mut counts: BTreeMap<&str, (TaskStatus, u64)> = BTreeMap::new();
        for row in self.tasks_in_order(mesh_id) {
            if row.task.mission_id.as_deref() == Some(id) {
                counts.entry(row.task.status.as_str()).or_insert((row.task.status, 0)).1 += 1;
            }
        }
        Ok(MissionProgress::from_counts(counts.into_values()))
    }

    // ── The ledger ──────────────────────────────────────────────────────────

    /// Every entry of the mesh in append order.
    pub fn ledger(&self, mesh_id: &str) -> Vec<LedgerEntry> {
        self.mesh(mesh_id).map(|m| m.ledger.clone()).unwrap_or_default()
    }

    /// Entries in append order, the newest `tail` only when given.
    pub fn read_ledger_ordered(&self, mesh_id: &str, query: &LedgerQuery) -> Vec<LedgerEntry> {
        let all: Vec<LedgerEntry> = self
            .ledger(mesh_id)
            .into_iter()
            .filter(|e| query.since.as_deref().is_none_or(|s| e.timestamp.as_str() >= s))
            .filter(|e| query.kinds.is_empty() || query.kinds.contains(&e.kind))
            .collect();
        match query.tail {
            Some(n) => all[all.len().saturating_sub(n as usize)..].to_vec(),
            None => all,
        }
    }

    /// The mesh's entries in `(timestamp, append order)`: the order of the
    /// slice protocol's `afterId` cursor (ids are minted in append order).
    fn by_time(&self, mesh_id: &str) -> Vec<LedgerEntry> {
        let mut entries: Vec<(usize, LedgerEntry)> = self.ledger(mesh_id).into_iter().enumerate().collect();
        entries.sort_by(|(i, a), (j, b)| (&a.timestamp, i).cmp(&(&b.timestamp, j)));
        entries.into_iter().map(|(_, e)| e).collect()
    }

    /// One page of the slice protocol: after the entry `after_id` in
    /// `(timestamp, id)` order, or after the sequence `after_seq` (the model's
    /// sequence numbers count every mesh's entries from 1).
    pub fn ledger_slice(&self, mesh_id: &str, query: &SliceQuery) -> LedgerSlice {
        let limit = query.effective_limit() as usize;
        let matches = |e: &LedgerEntry| {
            query.kind.as_ref().is_none_or(|k| *k == e.kind)
                && query.since.as_deref().is_none_or(|s| e.timestamp.as_str() >= s)
        };
        let (entries, seqs, has_more, next_seq) = match query.after_seq {
            Some(after) => {
                let rest: Vec<(u64, LedgerEntry)> = self
                    .sequence
                    .iter()
                    .enumerate()
                    .skip(after as usize)
                    .filter(|(_, (m, _))| m == mesh_id)
                    .map(|(seq, (m, i))| (seq as u64 + 1, self.meshes[m].ledger[*i].clone()))
                    .filter(|(_, e)| matches(e))
                    .collect();
                let page: Vec<(u64, LedgerEntry)> = rest.iter().take(limit).cloned().collect();
                let next = page.last().map_or(after, |(s, _)| *s);
                let seqs = page.iter().map(|(s, _)| *s).collect();
                (page.into_iter().map(|(_, e)| e).collect::<Vec<_>>(), seqs, rest.len() > limit, Some(next))
            }
            None => {
                let all: Vec<LedgerEntry> = self.by_time(mesh_id);
                let start = match &query.after_id {
                    None => 0,
                    Some(id) => match all.iter().position(|e| e.id == *id) {
                        Some(i) => i + 1,
                        None => all.len(),
                    },
                };
                let rest: Vec<LedgerEntry> = all[start..].iter().filter(|e| matches(e)).cloned().collect();
                let page: Vec<LedgerEntry> = rest.iter().take(limit).cloned().collect();
                (page, Vec::new(), rest.len() > limit, None)
            }
        };
        LedgerSlice {
            archived: 0,
            protocol: agentmesh_core::ledger::SLICE_PROTOCOL.to_owned(),
            mesh_id: mesh_id.to_owned(),
            cursor: agentmesh_core::ledger::SliceCursor {
                after_id: query.after_id.clone(),
                next_after_id: entries.last().map(|e| e.id.clone()),
                limit: limit as u32,
                has_more,
                after_seq: query.after_seq,
                next_after_seq: next_seq,
                head_seq: query.after_seq.map(|_| self.sequence.len() as u64),
            },
            entries,
            seqs,
            source_of_truth: agentmesh_core::ledger::SliceSource {
                kind: "model".to_owned(),
                table: "model".to_owned(),
                bounded: true,
                max_limit: agentmesh_core::ledger::SLICE_MAX_LIMIT,
            },
            origin: None,
        }
    }

    // ── The coordinator inbox ───────────────────────────────────────────────

    /// Queues an event for a coordinator.
    pub fn queue_pending_event(
        &mut self,
        mesh_id: &str,
        event: &PendingEvent,
        hint: &EmitHint,
        self_machine_id: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome> {
        self.queue_event(mesh_id, event.clone(), hint, self_machine_id, now)
    }

    fn queue_event(
        &mut self,
        mesh_id: &str,
        mut ev: PendingEvent,
        hint: &EmitHint,
        self_machine_id: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<QueueOutcome> {
        if ev.event.trim().is_empty() {
            return Err(InvalidInput::new("event", "must not be blank").into());
        }
        if ev.mesh_id != mesh_id {
            return Err(InvalidInput::new(
                "meshId",
                format!("the event belongs to mesh {:?}, not {mesh_id:?}", ev.mesh_id),
            )
            .into());
        }
        stamp_event(&mut ev, hint, &mint_at(now), self_machine_id);
        let mesh = self.mesh_mut(mesh_id);
        if refine_terminal_fingerprint(&ev).is_some()
            && let Some(job) = refine_job_id(&ev.metadata_event)
        {
            let pending_terminal = mesh.events.iter().any(|q| {
                !q.drained
                    && q.name == ev.event
                    && q.value.get("metadataEvent").and_then(|m| m.as_object()).and_then(refine_job_id)
                        == Some(job)
            });
            if pending_terminal {
                return Ok(QueueOutcome::Duplicate(DuplicateReason::RefineTerminal));
            }
        }
        let fingerprint = Some(pending_event_fingerprint(&ev)).filter(|f| !f.is_empty());
        if fingerprint.is_some() && mesh.events.iter().any(|q| q.fingerprint == fingerprint) {
            return Ok(QueueOutcome::Duplicate(DuplicateReason::Fingerprint));
        }
        let value = ev.to_value();
        let event_id = match project_route(&value) {
            Some(projected) => Some(projected.event_id),
            None => ev.envelope.event_id.clone(),
        };
        let id = mint_at(now);
        mesh.events.push(Queued {
            id: id.clone(),
            name: ev.event.clone(),
            value,
            fingerprint,
            queued_at: ev.queued_at.millis(),
            event_id,
            target: ev
                .target_coordinator_daemon_id
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            drained: false,
        });
        Ok(QueueOutcome::Queued { id, event: ev })
    }

    /// Records that a coordinator is live as of `now` (the later of two records
    /// stays; an end at or after `now` stands).
    pub fn touch_coordinator(&mut self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) {
        let address = Address::of(identity);
        let now = now.millis();
        let record = self.mesh_mut(mesh_id).presence.entry(address.key.clone()).or_insert(Presence {
            machine: address.machine.clone(),
            last_seen: now,
            ended_at: None,
        });
        record.last_seen = record.last_seen.max(now);
        record.ended_at = record.ended_at.filter(|ended| *ended >= now);
    }

    /// Records that a coordinator ended; `false` when it had no record.
    pub fn end_coordinator(&mut self, mesh_id: &str, identity: &CoordinatorIdentity, now: Timestamp) -> bool {
        match self.mesh_mut(mesh_id).presence.get_mut(&identity.key()) {
            Some(record) => {
                record.ended_at = Some(now.millis());
                true
            }
            None => false,
        }
    }

    /// The keys of the coordinators live at `now_ms` on the drainer's machines
    /// other than the drainer, and when the drainer was last seen (if live).
    fn presence(
        &self,
        mesh_id: &str,
        request: &DrainRequest,
        now_ms: i64,
    ) -> (BTreeSet<String>, Option<i64>) {
        let me = request.drainer.address();
        let mut machines: Vec<String> = me.machine.iter().cloned().collect();
        for alias in request.drainer.aliases() {
            machines.extend(daemon_id::machine_core(&alias.daemon_id).map(str::to_owned));
        }
        let mut live = BTreeSet::new();
        let mut mine = None;
        let Some(mesh) = self.mesh(mesh_id) else { return (live, mine) };
        for (key, record) in &mesh.presence {
            let on_machine = record.machine.as_ref().is_some_and(|m| machines.contains(m));
            if !on_machine || record.ended_at.is_some() || record.last_seen < live_since(now_ms) {
                continue;
            }
            if *key == me.key {
                if record.machine == me.machine {
                    mine = Some(record.last_seen);
                }
            } else {
                live.insert(key.clone());
            }
        }
        (live, mine)
    }

    /// Routes the queued events a drain by `request` looks at, oldest first,
    /// until `limit` were delivered; says what to do with each.
    fn route(
        &self,
        mesh_id: &str,
        request: &DrainRequest,
        now_ms: i64,
    ) -> (Vec<(usize, RouteDecision)>, agentmesh_core::events::DrainCounters) {
        let limit = request.effective_limit();
        let (live, _) = self.presence(mesh_id, request, now_ms);
        let mut router =
            DrainRouter::with_live(&request.drainer, request.enforce, live.into_iter().collect());
        let mut out = Vec::new();
        let Some(mesh) = self.mesh(mesh_id) else { return (out, router.counters()) };
        let mut order: Vec<usize> = (0..mesh.events.len()).filter(|i| !mesh.events[*i].drained).collect();
        order.sort_by(|a, b| {
            let (a, b) = (&mesh.events[*a], &mesh.events[*b]);
            (a.queued_at, &a.id).cmp(&(b.queued_at, &b.id))
        });
        let mut delivered = 0;
        for i in order {
            if delivered >= limit {
                break;
            }
            let q = &mesh.events[i];
            if request.only_events.as_ref().is_some_and(|only| !only.contains(&q.name)) {
                continue;
            }
            if !request.drainer.takes_target(q.target.as_deref()) {
                continue;
            }
            // A unicast is looked at only by a drain that takes its addressee's
            // events (by address, or by re-attribution): it is left to its own
            // coordinator, which alone deduplicates it by event id.
            if let Some(ProjectedRoute { class: RouteClass::Unicast(addressee), .. }) =
                project_route(&q.value)
                && !router.takes_unicast(&addressee)
            {
                continue;
            }
            let routed = router.route(&q.value, |id| mesh.drained_ids.contains(id));
            if routed.decision == RouteDecision::Deliver {
                delivered += 1;
            }
            out.push((i, routed.decision));
        }
        (out, router.counters())
    }

    /// Leaves out alerts about tasks that are finished.
    fn drop_stale_alerts(&self, mesh_id: &str, events: Vec<InboxEvent>) -> Vec<InboxEvent> {
        events
            .into_iter()
            .filter(|e| {
                let value = e.event.parse();
                match droppable_alert_task_id(&e.name, &value) {
                    Some(task_id) => !alert_is_stale(self.task(mesh_id, task_id).map(|t| t.status)),
                    None => true,
                }
            })
            .collect()
    }

    fn inbox_event(q: &Queued) -> InboxEvent {
        InboxEvent {
            id: q.id.clone(),
            name: q.name.clone(),
            event: RawJson::from_value(&q.value),
            fingerprint: q.fingerprint.clone(),
            queued_at_ms: q.queued_at,
        }
    }

    /// Takes an event off the queue, recording its event id as drained.
    fn take(&mut self, mesh_id: &str, index: usize) {
        let mesh = self.mesh_mut(mesh_id);
        let q = &mut mesh.events[index];
        q.drained = true;
        if let Some(id) = q.event_id.clone() {
            mesh.drained_ids.insert(id);
        }
    }

    /// Drains the drainer's events.
    pub fn drain_pending_events(
        &mut self,
        mesh_id: &str,
        request: &DrainRequest,
        now: Timestamp,
    ) -> StoreResult<DrainOutcome> {
        let mut out = DrainOutcome::default();
        if request.only_events.as_ref().is_some_and(Vec::is_empty) || request.effective_limit() == 0 {
            return Ok(out);
        }
        let (_, my_last_seen) = self.presence(mesh_id, request, now.millis());
        let (routed, counters) = self.route(mesh_id, request, now.millis());
        if drain_refreshes_presence(my_last_seen, now.millis()) {
            self.touch_coordinator(mesh_id, request.drainer.identity(), now);
        }
        for (i, decision) in routed {
            let q = self.meshes[mesh_id].events[i].clone();
            match decision {
                RouteDecision::RoutedAway { .. } => continue,
                RouteDecision::Deliver => out.events.push(Model::inbox_event(&q)),
                RouteDecision::DedupSkipped => {}
                RouteDecision::Quarantine { reason } => {
                    self.append(quarantine_entry(
                        mesh_id,
                        &q.id,
                        &q.value,
                        reason,
                        q.queued_at,
                        mint_at(now),
                        now,
                    ));
                    out.quarantined.push(q.id.clone());
                }
            }
            self.take(mesh_id, i);
        }
        out.counters = counters;
        out.events = self.drop_stale_alerts(mesh_id, out.events);
        Ok(out)
    }

    /// What a drain would deliver, judged at the newest presence instant the
    /// mesh records; changes nothing.
    pub fn peek_pending_events(&self, mesh_id: &str, request: &DrainRequest) -> Vec<InboxEvent> {
        if request.only_events.as_ref().is_some_and(Vec::is_empty) {
            return Vec::new();
        }
        let newest = self.mesh(mesh_id).and_then(|m| m.presence.values().map(|p| p.last_seen).max());
        let (routed, _) = self.route(mesh_id, request, newest.unwrap_or(i64::MIN));
        let events = routed
            .into_iter()
            .filter(|(_, d)| *d == RouteDecision::Deliver)
            .map(|(i, _)| Model::inbox_event(&self.meshes[mesh_id].events[i]))
            .collect();
        self.drop_stale_alerts(mesh_id, events)
    }

    /// Marks events drained by row id; returns how many were queued.
    pub fn ack_pending_events(&mut self, mesh_id: &str, ids: &[String]) -> u64 {
        let Some(mesh) = self.mesh(mesh_id) else { return 0 };
        let found: Vec<usize> = (0..mesh.events.len())
            .filter(|i| !mesh.events[*i].drained && ids.contains(&mesh.events[*i].id))
            .collect();
        for i in &found {
            self.take(mesh_id, *i);
        }
        found.len() as u64
    }

    /// Undrained events of the mesh.
    pub fn pending_event_count(&self, mesh_id: &str) -> u64 {
        self.mesh(mesh_id).map_or(0, |m| m.events.iter().filter(|q| !q.drained).count() as u64)
    }
}

/// A refused completion: its entry is committed on its own, after the rest of
/// the write was undone.
struct PendingRefusal {
    task: Task,
    session_id: String,
    refused: Refused,
}

impl PendingRefusal {
    fn commit(self, model: &mut Model) -> StoreError {
        model.refuse(&self.task, &self.session_id, self.refused)
    }
}
