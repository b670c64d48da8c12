//! Claim groups: the claims and completions of one mesh that wait together are
//! decided together, in the order they arrived, and their rows written in a few
//! statements. A completion that claims the next task (`complete_and_claim`,
//! the worker loop's call) is one request: its completion, then its claim only
//! if the completion was accepted, in its place in that order.
//!
//! Under load, the writes of a mesh queue up behind its lock, and each claim or
//! completion on its own would cost the server a survey, a row rewrite and its
//! ledger and event inserts, one after another. Here the first request of a
//! mesh leads: it takes every claim and completion waiting at that moment (up
//! to [`MAX_GROUP`]) and runs them in one transaction of their own under the
//! mesh lock (not in the mesh's write batch), in two round trips (a request
//! that finds nothing else waiting runs alone, in the batch, as every other
//! write of the mesh does):
//!
//! 1. One read gathers what the group's decisions need: each claimant's
//!    assigned tasks (by session and by node) and pinned work, the first page
//!    of the open claim stream, and the rows the completions name.
//! 2. Each request is decided in memory, in arrival order, by the same shared
//!    code as a lone request (`agentmesh_core::claim::walk`, the core's claim
//!    and completion decisions, `agentmesh_store::task_writes`), over rows that
//!    show what the requests before it in the group wrote ([`Stretch`]).
//! 3. The rows the decisions wrote go out with the COMMIT, as one rewrite of
//!    the task rows, one ledger append and one event insert, in decision order.
//!
//! A decision the gathered rows cannot answer exactly (a pinned task, a
//! parallel cap, dependents to update, a refusal to diagnose, a page read to
//! its end, a completion that names no task, ...) is not guessed: the rows
//! decided so far are written, and that request runs as a lone request would,
//! on the database, inside a savepoint of its own; the requests after it start
//! a new stretch with a fresh read. So every request gets exactly the outcome
//! it would have got running alone in that order, and a request that fails is
//! undone alone. When the group's transaction fails as a whole, each of its
//! requests runs again alone.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};

use agentmesh_core::claim::walk::{self, Candidate, Stream, Tier, Visit, Walked};
use agentmesh_core::effects::task as decide;
use agentmesh_core::events::{EmitHint, PendingEvent};
use agentmesh_core::{ClaimRefusal, Claimant, LedgerEntry, NodeLoad, Task, TaskStatus, Timestamp, daemon_id};
use agentmesh_store::ids::mint_at;
use agentmesh_store::task_writes::{TaskRows, complete, complete_then_claim, persist};
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, StoreError, StoreResult};
use postgres::Row;
use postgres::types::ToSql;

use super::claim::{CANDIDATE_COLUMNS, CLAIM_ORDER, FIRST_PAGE, OPEN_PIN, candidate, parallel_cap, show};
use super::rows::{Loaded, RowColumns, decode, update_row};
use crate::db::Db;
use crate::inbox::{EventColumns, EventRow};
use crate::ledger::{LedgerColumns, LedgerRow};
use crate::{Fail, PgStore, Res};

/// The most requests one group takes.
const MAX_GROUP: usize = 32;

/// How many assigned tasks the gathering read reads per session and per node
/// form: one more than a group can change, so a key with this many stays busy
/// whatever the group does.
const ASSIGNED_READ: usize = MAX_GROUP + 1;

/// A claim, a completion, or a completion and the claim that follows it, as a
/// group takes it.
pub(crate) enum Request {
    Claim { claimant: Claimant, opts: ClaimOptions, now: Timestamp },
    Complete { report: CompletionReport, now: Timestamp },
    CompleteAndClaim { report: CompletionReport, claimant: Claimant, opts: ClaimOptions, now: Timestamp },
}

/// What a request got: a claim's outcome, the task a completion stored, or
/// both.
pub(crate) enum Response {
    Claim(ClaimOutcome),
    Complete(Task),
    CompleteAndClaim(Box<(Task, ClaimOutcome)>),
}

impl Response {
    pub(crate) fn into_claim(self) -> StoreResult<ClaimOutcome> {
        match self {
            Response::Claim(outcome) => Ok(outcome),
            _ => Err(StoreError::Backend("a claim was answered as another request".into())),
        }
    }

    pub(crate) fn into_completed(self) -> StoreResult<Task> {
        match self {
            Response::Complete(task) => Ok(task),
            _ => Err(StoreError::Backend("a completion was answered as another request".into())),
        }
    }

    pub(crate) fn into_completed_and_claimed(self) -> StoreResult<(Task, ClaimOutcome)> {
        match self {
            Response::CompleteAndClaim(both) => Ok(*both),
            _ => Err(StoreError::Backend("a completion and claim was answered as another request".into())),
        }
    }
}

/// The requests waiting to be grouped, by mesh, and what the groups did.
#[derive(Default)]
pub(crate) struct Groups {
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    groups: AtomicU64,
    in_memory: AtomicU64,
    alone: AtomicU64,
    failed: AtomicU64,
}

/// What the claim and completion groups of a store did so far (see
/// [`PgStore::group_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Groups of two requests or more run.
    pub groups: u64,
    /// Requests decided in memory, from what their group read.
    pub in_memory: u64,
    /// Requests run alone on the database: one that found no other request
    /// waiting, or one its group's read could not answer (see the module
    /// docs).
    pub alone: u64,
    /// Groups whose transaction failed as a whole, so that each of their
    /// requests ran again alone.
    pub failed: u64,
}

#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    /// Requests not taken by a group yet, in arrival order.
    waiting: VecDeque<Arc<Ticket>>,
    /// A request's thread is leading a group of the mesh (or was told to).
    leading: bool,
}

/// One waiting request and how it ended.
struct Ticket {
    request: Request,
    state: Mutex<TicketState>,
    changed: Condvar,
}

enum TicketState {
    Waiting,
    /// Its thread leads the next group.
    Lead,
    Done(Box<StoreResult<Response>>),
}

impl Ticket {
    fn set(&self, state: TicketState) {
        *lock(&self.state) = state;
        self.changed.notify_one();
    }

    /// Waits until the request is answered (`Some`) or its thread is to lead (`None`).
    fn wait(&self) -> Option<StoreResult<Response>> {
        let mut state = lock(&self.state);
        loop {
            match std::mem::replace(&mut *state, TicketState::Waiting) {
                TicketState::Done(result) => return Some(*result),
                TicketState::Lead => return None,
                TicketState::Waiting => {
                    state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Groups {
    pub(crate) fn stats(&self) -> GroupStats {
        GroupStats {
            groups: self.groups.load(Ordering::Relaxed),
            in_memory: self.in_memory.load(Ordering::Relaxed),
            alone: self.alone.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    fn queue(&self, mesh_id: &str) -> Arc<Queue> {
        let mut queues = lock(&self.queues);
        if let Some(queue) = queues.get(mesh_id) {
            return Arc::clone(queue);
        }
        Arc::clone(queues.entry(mesh_id.to_owned()).or_default())
    }
}

impl PgStore {
    /// Runs `request` in a group of its mesh (see the module docs) and returns
    /// its answer, once the group's transaction has committed.
    pub(crate) fn grouped(&self, mesh_id: &str, request: Request) -> StoreResult<Response> {
        let queue = self.groups.queue(mesh_id);
        let ticket =
            Arc::new(Ticket { request, state: Mutex::new(TicketState::Waiting), changed: Condvar::new() });
        let lead = {
            let mut state = lock(&queue.state);
            state.waiting.push_back(Arc::clone(&ticket));
            !std::mem::replace(&mut state.leading, true)
        };
        if !lead && let Some(answer) = ticket.wait() {
            return answer;
        }
        // This request is first in line: lead a group of it and those behind it.
        let group: Vec<Arc<Ticket>> = {
            let mut state = lock(&queue.state);
            let n = state.waiting.len().min(MAX_GROUP);
            state.waiting.drain(..n).collect()
        };
        let requests: Vec<&Request> = group.iter().map(|t| &t.request).collect();

        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_group(mesh_id, &requests)));
        let mut own = None;
        let panicked = match run {
            Ok(answers) => {
                for (member, answer) in group.iter().zip(answers) {
                    if Arc::ptr_eq(member, &ticket) {
                        own = Some(answer);
                    } else {
                        member.set(TicketState::Done(Box::new(answer)));
                    }
                }
                None
            }
            Err(payload) => {
                for member in group.iter().filter(|m| !Arc::ptr_eq(m, &ticket)) {
                    let failed = Err(StoreError::Backend("the group's leader panicked".into()));
                    member.set(TicketState::Done(Box::new(failed)));
                }
                Some(payload)
            }
        };
        // Hand the lead on to the next request in line, if any.
        {
            let mut state = lock(&queue.state);
            match state.waiting.front() {
                Some(next) => next.set(TicketState::Lead),
                None => state.leading = false,
            }
        }
        if let Some(payload) = panicked {
            std::panic::resume_unwind(payload);
        }
        own.unwrap_or_else(|| Err(StoreError::Backend("the group lost its leader's request".into())))
    }

    /// Decides `requests` in one transaction of the mesh; when that
    /// transaction fails as a whole, runs each alone. A request that found
    /// nothing else waiting runs alone straight away.
    fn run_group(&self, mesh_id: &str, requests: &[&Request]) -> Vec<StoreResult<Response>> {
        let groups = &self.groups;
        if let [request] = requests {
            // Nothing else was waiting: the request runs as every other write
            // of the mesh does, in its batch, which costs a lone request less
            // than a group's read.
            groups.alone.fetch_add(1, Ordering::Relaxed);
            return vec![self.write(mesh_id, |db| alone(db, mesh_id, request)).and_then(|answer| answer)];
        }
        groups.groups.fetch_add(1, Ordering::Relaxed);
        match self.write_own(mesh_id, |db| decide_group(db, mesh_id, requests, groups)) {
            Ok(answers) => answers,
            Err(err) => {
                groups.failed.fetch_add(1, Ordering::Relaxed);
                // A statement the server cannot run is a bug of this module,
                // which running each request alone would hide.
                debug_assert!(!statement_error(&err), "a group's statement failed: {err:?}");
                requests
                    .iter()
                    .map(|request| {
                        self.write(mesh_id, |db| alone(db, mesh_id, request)).and_then(|answer| answer)
                    })
                    .collect()
            }
        }
    }

    /// What the claim and completion groups of this store did so far.
    pub fn group_stats(&self) -> GroupStats {
        self.groups.stats()
    }
}

/// Whether `err` is the server refusing a statement as written (SQLSTATE class
/// 42: syntax, an unknown column or operator, ...).
fn statement_error(err: &StoreError) -> bool {
    let StoreError::Backend(source) = err else { return false };
    source
        .downcast_ref::<postgres::Error>()
        .and_then(postgres::Error::code)
        .is_some_and(|code| code.code().starts_with("42"))
}

/// Runs `request` as a lone request runs, on the database.
fn alone(db: &Db<'_>, mesh_id: &str, request: &Request) -> Res<StoreResult<Response>> {
    match request {
        Request::Claim { claimant, opts, now } => {
            Ok(Ok(Response::Claim(super::claim(db, mesh_id, claimant, opts, *now)?)))
        }
        Request::Complete { report, now } => Ok(complete(db, mesh_id, report, *now)?.map(Response::Complete)),
        Request::CompleteAndClaim { report, claimant, opts, now } => {
            Ok(super::complete_then_claim(db, mesh_id, report, claimant, opts, *now)?
                .map(|both| Response::CompleteAndClaim(Box::new(both))))
        }
    }
}

/// Decides the requests in order: stretches in memory, each request the
/// gathered rows cannot answer alone on the database (see the module docs).
fn decide_group(
    db: &Db<'_>,
    mesh_id: &str,
    requests: &[&Request],
    counts: &Groups,
) -> Res<Vec<StoreResult<Response>>> {
    let mut answers = Vec::with_capacity(requests.len());
    let mut next = 0;
    while next < requests.len() {
        let rest = &requests[next..];
        let stretch = Stretch::gather(db, mesh_id, rest)?;
        let mut unanswered = None;
        for (i, request) in rest.iter().enumerate() {
            match stretch.decide(request) {
                Some(answer) => {
                    counts.in_memory.fetch_add(1, Ordering::Relaxed);
                    answers.push(answer);
                }
                None => {
                    unanswered = Some(next + i);
                    break;
                }
            }
        }
        stretch.write()?;
        let Some(k) = unanswered else { break };
        counts.alone.fetch_add(1, Ordering::Relaxed);
        answers.push(alone_in_savepoint(db, mesh_id, requests[k])?);
        next = k + 1;
    }
    Ok(answers)
}

/// Runs `request` alone inside a savepoint, so that its failure undoes only it.
fn alone_in_savepoint(db: &Db<'_>, mesh_id: &str, request: &Request) -> Res<StoreResult<Response>> {
    db.execute("SAVEPOINT agentmesh_group_request", &[])?;
    match alone(db, mesh_id, request) {
        Ok(answer) => Ok(answer),
        Err(Fail(err)) => {
            drop(db.take_deferred());
            db.execute("ROLLBACK TO SAVEPOINT agentmesh_group_request", &[])?;
            Ok(Err(err))
        }
    }
}

/// What the claims of a stretch read together.
struct ClaimFacts {
    /// Assigned tasks by session: `(session, task id)`.
    by_session: Vec<(String, String)>,
    /// Assigned tasks by node id form: `(form, task id)`.
    by_node: Vec<(String, String)>,
    /// Sessions with pending work pinned to them.
    pinned_sessions: HashSet<String>,
    /// Node id forms with pending work pinned to them.
    pinned_nodes: HashSet<String>,
    /// The open stream's first page at hold 0, in claim order.
    page: Vec<(Candidate, Row)>,
    /// The page was read to its limit: the stream may go on past it.
    page_full: bool,
}

/// A task row as a request of the stretch wrote it.
struct Written {
    row_id: i64,
    deps_unmet: i64,
    task: Task,
}

/// Where the stretch's buffers stood before a request, to undo it.
struct Mark {
    written: usize,
    ledger: usize,
    events: usize,
}

/// One stretch of a group: the rows read for it, and the writes of the
/// requests decided so far, not yet sent. Its [`TaskRows`] show a request the
/// rows as the requests before it left them; a read they cannot answer marks
/// the request for the database ([`Stretch::unanswerable`]).
struct Stretch<'a, 'c> {
    db: &'a Db<'c>,
    mesh_id: &'a str,
    claims: Option<ClaimFacts>,
    /// The rows the completions name, as read; ids read and not found are absent.
    loaded: HashMap<String, Loaded>,
    asked: HashSet<String>,
    written: RefCell<Vec<Written>>,
    ledger: RefCell<Vec<LedgerEntry>>,
    events: RefCell<Vec<(String, PendingEvent)>>,
    /// The request being decided needs the database.
    unanswerable: Cell<bool>,
}

impl<'a, 'c> Stretch<'a, 'c> {
    /// Reads what `requests` need, in at most two statements.
    fn gather(db: &'a Db<'c>, mesh_id: &'a str, requests: &[&Request]) -> Res<Stretch<'a, 'c>> {
        let mut sessions: Vec<&str> = Vec::new();
        let mut forms: Vec<String> = Vec::new();
        let mut claims = 0;
        let mut ids: Vec<&str> = Vec::new();
        for request in requests {
            let (report, claimant) = match request {
                Request::Claim { claimant, .. } => (None, Some(claimant)),
                Request::Complete { report, .. } => (Some(report), None),
                Request::CompleteAndClaim { report, claimant, .. } => (Some(report), Some(claimant)),
            };
            if let Some(id) = report.and_then(|r| r.task_id.as_ref()) {
                ids.push(id);
            }
            if let Some(claimant) = claimant {
                claims += 1;
                sessions.push(&claimant.session_id);
                forms.extend(daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]));
            }
        }
        sessions.sort_unstable();
        sessions.dedup();
        forms.sort_unstable();
        forms.dedup();
        ids.sort_unstable();
        ids.dedup();
        // Both reads go out in one round trip when the stretch needs both.
        let size = page_size(claims);
        let facts_params: [&(dyn ToSql + Sync); 3] = [&mesh_id, &sessions, &forms];
        let rows_params: [&(dyn ToSql + Sync); 2] = [&mesh_id, &ids];
        let (facts, rows) = match (claims > 0, !ids.is_empty()) {
            (true, true) => {
                let (facts, rows) =
                    db.query_pair((&CLAIM_FACTS[size], &facts_params), (READ_ROWS, &rows_params))?;
                (Some(facts), rows)
            }
            (true, false) => (Some(db.query(&CLAIM_FACTS[size], &facts_params)?), Vec::new()),
            (false, true) => (None, db.query(READ_ROWS, &rows_params)?),
            (false, false) => (None, Vec::new()),
        };
        let claims = facts.map(|rows| claim_facts(rows, PAGE_SIZES[size])).transpose()?;
        let loaded = loaded_rows(rows)?;
        Ok(Stretch {
            db,
            mesh_id,
            claims,
            loaded,
            asked: ids.into_iter().map(str::to_owned).collect(),
            written: RefCell::new(Vec::new()),
            ledger: RefCell::new(Vec::new()),
            events: RefCell::new(Vec::new()),
            unanswerable: Cell::new(false),
        })
    }

    /// Decides `request` in memory: its answer, or `None` when it has to run on
    /// the database (nothing of it is kept then).
    fn decide(&self, request: &Request) -> Option<StoreResult<Response>> {
        let mark = self.mark();
        self.unanswerable.set(false);
        let outcome = match request {
            Request::Claim { claimant, opts, now } => {
                self.claim(claimant, opts, *now).map(|outcome| Ok(Response::Claim(outcome)))
            }
            Request::Complete { report, now } => {
                complete(self, self.mesh_id, report, *now).map(|answer| answer.map(Response::Complete))
            }
            Request::CompleteAndClaim { report, claimant, opts, now } => {
                complete_then_claim(self, self.mesh_id, report, *now, || self.claim(claimant, opts, *now))
                    .map(|answer| answer.map(|both| Response::CompleteAndClaim(Box::new(both))))
            }
        };
        if self.unanswerable.get() {
            self.undo(mark);
            return None;
        }
        match outcome {
            Ok(answer) => Some(answer),
            Err(Fail(err)) => {
                self.undo(mark);
                Some(Err(err))
            }
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            written: self.written.borrow().len(),
            ledger: self.ledger.borrow().len(),
            events: self.events.borrow().len(),
        }
    }

    fn undo(&self, mark: Mark) {
        self.written.borrow_mut().truncate(mark.written);
        self.ledger.borrow_mut().truncate(mark.ledger);
        self.events.borrow_mut().truncate(mark.events);
    }

    /// Marks the request being decided for the database; the error only ends
    /// its decision.
    fn unanswerable(&self) -> Fail {
        self.unanswerable.set(true);
        Fail(StoreError::Backend("the group cannot decide this request in memory".into()))
    }

    /// The latest row the stretch wrote for task `id`.
    fn written(&self, id: &str) -> Option<(i64, i64, Task)> {
        let written = self.written.borrow();
        written.iter().rev().find(|w| w.task.id == id).map(|w| (w.row_id, w.deps_unmet, w.task.clone()))
    }

    /// Whether a task the stretch wrote is assigned as `held` says.
    fn written_assigned(&self, held: impl Fn(&Task) -> bool) -> bool {
        let written = self.written.borrow();
        let mut seen = HashSet::new();
        written
            .iter()
            .rev()
            .filter(|w| seen.insert(w.task.id.as_str()))
            .any(|w| w.task.status == TaskStatus::Assigned && held(&w.task))
    }

    /// Whether any of `assigned` (read for the stretch) is still assigned: not
    /// rewritten by the stretch since.
    fn still_assigned<'k>(&self, assigned: impl Iterator<Item = &'k String>) -> bool {
        let written = self.written.borrow();
        let rewritten: HashSet<&str> = written.iter().map(|w| w.task.id.as_str()).collect();
        assigned.into_iter().any(|id| !rewritten.contains(id.as_str()))
    }

    /// A claim, decided as `super::claim` decides it on the database.
    fn claim(&self, claimant: &Claimant, opts: &ClaimOptions, now: Timestamp) -> Res<ClaimOutcome> {
        decide::check_claimant(claimant)?;
        let Some(facts) = &self.claims else { return Err(self.unanswerable()) };
        let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
        if parallel_cap(claimant, &forms).is_some() {
            return Err(self.unanswerable());
        }
        let session = claimant.session_id.as_str();
        let on_node = |node: &str| forms.iter().any(|f| f == node);
        let survey = walk::Survey {
            session_assigned: self
                .still_assigned(facts.by_session.iter().filter(|(s, _)| s == session).map(|(_, id)| id))
                || self.written_assigned(|t| t.assigned_session_id.as_deref() == Some(session)),
            node_busy: self
                .still_assigned(facts.by_node.iter().filter(|(n, _)| on_node(n)).map(|(_, id)| id))
                || self.written_assigned(|t| t.assigned_node_id.as_deref().is_some_and(on_node)),
            session_pinned: facts.pinned_sessions.contains(session),
            node_pinned: forms.iter().any(|f| facts.pinned_nodes.contains(f)),
        };
        if survey.session_assigned {
            return Ok(ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned));
        }
        if survey.session_pinned || survey.node_pinned {
            return Err(self.unanswerable());
        }
        let load = NodeLoad { node_busy: survey.node_busy, cap_reached: false };
        let mut streams = Page { stretch: self, facts };
        match walk::walk(&mut streams, &survey, claimant, load, now)? {
            Walked::Take(before) => {
                let decision = decide::claim(&before.task, claimant, opts.lease_ms, now, || mint_at(now))?;
                Ok(ClaimOutcome::Claimed(persist(self, &before, decision, now)?))
            }
            Walked::Refused(reason) => Ok(ClaimOutcome::Refused(reason)),
        }
    }

    /// Queues the stretch's writes on the operation, to go out with its next
    /// statement: each row rewritten once (as last written), then the ledger
    /// entries and the events in decision order. A single row, entry or event
    /// goes out as the lone write's statement, which costs the server less.
    fn write(self) -> Res<()> {
        let written = self.written.into_inner();
        let mut seen = HashSet::new();
        let latest: Vec<&Written> = written.iter().rev().filter(|w| seen.insert(w.row_id)).collect();
        if let [only] = latest[..] {
            update_row(self.db, &only.task, only.deps_unmet, only.row_id);
        } else {
            let mut rows = RowColumns::default();
            for w in latest {
                rows.push(&w.task, w.deps_unmet, w.row_id);
            }
            rows.defer(self.db, self.mesh_id);
        }
        let entries = self.ledger.into_inner();
        if let [entry] = &entries[..] {
            crate::ledger::append_later(self.db, entry)?;
        } else {
            let mut ledger = LedgerColumns::default();
            for entry in &entries {
                ledger.push(LedgerRow::of(entry)?);
            }
            ledger.defer(self.db, self.mesh_id);
        }
        let events = self.events.into_inner();
        if let [(id, event)] = &events[..] {
            crate::inbox::insert_later(self.db, id, event);
        } else {
            let mut columns = EventColumns::default();
            for (id, event) in &events {
                columns.push(EventRow::of(id, event));
            }
            columns.defer(self.db, self.mesh_id);
        }
        Ok(())
    }
}

impl TaskRows for Stretch<'_, '_> {
    type Loaded = Loaded;
    type Error = Fail;

    fn task(loaded: &Loaded) -> &Task {
        &loaded.task
    }

    fn load(&self, mesh_id: &str, task_id: &str) -> Res<Option<Loaded>> {
        if mesh_id != self.mesh_id {
            return Err(self.unanswerable());
        }
        if let Some((row_id, deps_unmet, task)) = self.written(task_id) {
            return Ok(Some(Loaded { task, deps_unmet, row_id, dependents: None }));
        }
        match self.loaded.get(task_id) {
            Some(row) => Ok(Some(Loaded {
                task: row.task.clone(),
                deps_unmet: row.deps_unmet,
                row_id: row.row_id,
                dependents: row.dependents.clone(),
            })),
            None if self.asked.contains(task_id) => Ok(None),
            None => Err(self.unanswerable()),
        }
    }

    fn assigned_to_session(&self, _mesh_id: &str, _session_id: &str) -> Res<Vec<Task>> {
        Err(self.unanswerable())
    }

    fn dependents(&self, loaded: &Loaded) -> Res<Vec<String>> {
        loaded.dependents.clone().ok_or_else(|| self.unanswerable())
    }

    /// Keeps the row; a row that becomes pending again, or whose change of
    /// completed-ness moves dependents, needs the database.
    fn save(&self, before: &Loaded, task: &Task) -> Res<()> {
        if task.status == TaskStatus::Pending || task.mesh_id != self.mesh_id {
            return Err(self.unanswerable());
        }
        let completed_changes =
            (before.task.status == TaskStatus::Completed) != (task.status == TaskStatus::Completed);
        if completed_changes && !before.dependents.as_ref().is_some_and(Vec::is_empty) {
            return Err(self.unanswerable());
        }
        self.written.borrow_mut().push(Written {
            row_id: before.row_id,
            deps_unmet: before.deps_unmet,
            task: task.clone(),
        });
        Ok(())
    }

    fn append(&self, entry: &LedgerEntry) -> Res<()> {
        if entry.mesh_id != self.mesh_id {
            return Err(self.unanswerable());
        }
        self.ledger.borrow_mut().push(entry.clone());
        Ok(())
    }

    fn queue_event(&self, mesh_id: &str, event: PendingEvent, hint: &EmitHint, now: Timestamp) -> Res<()> {
        if mesh_id != self.mesh_id {
            return Err(self.unanswerable());
        }
        let event = crate::inbox::stamp(mesh_id, event, hint, None, now)?;
        if crate::inbox::needs_refine_check(&event) {
            return Err(self.unanswerable());
        }
        self.events.borrow_mut().push((mint_at(now), event));
        Ok(())
    }
}

/// The open stream's first page as the stretch left it, for the core's walk:
/// the only stream a claim of the stretch reads.
struct Page<'s, 'a, 'c> {
    stretch: &'s Stretch<'a, 'c>,
    facts: &'s ClaimFacts,
}

impl walk::Streams for Page<'_, '_, '_> {
    type Taken = Loaded;
    type Error = Fail;

    fn scan(
        &mut self,
        Stream { tier, hold, readonly_only }: Stream,
        limit: usize,
        visit: &mut dyn FnMut(&Candidate) -> Visit,
    ) -> Res<Option<Loaded>> {
        if tier != Tier::Open || hold != 0 {
            return Err(self.stretch.unanswerable());
        }
        let written = self.stretch.written.borrow();
        let mut seen = 0;
        for (candidate, row) in &self.facts.page {
            if seen == limit {
                return Ok(None);
            }
            if readonly_only && !candidate.readonly {
                continue;
            }
            // A task the stretch wrote is no longer pending (see `save`).
            if written.iter().any(|w| w.task.id == candidate.id) {
                continue;
            }
            seen += 1;
            if let Some(answer) = show(candidate, row, FACTS_PAGE_BASE, visit) {
                return answer;
            }
        }
        if self.facts.page_full {
            // The stream goes on past what was read.
            return Err(self.stretch.unanswerable());
        }
        Ok(None)
    }
}

/// The sizes the open page is read in: the claims of the stretch and the
/// first-page read-ahead of each, rounded up (a few sizes, so that each
/// statement text is planned once per connection).
const PAGE_SIZES: [usize; 4] = [8, 16, 32, 64];

/// The gathering read of claims (see [`ClaimFacts`]), per page size: `$1`
/// mesh, `$2` the sessions, `$3` the node id forms, each key looked up by
/// itself through its index.
///
/// Every array parameter of the group's statements is read through a
/// sub-select (`unnest((SELECT $2::text[]))`): the planner then estimates its
/// length the same way whatever the values, so the server settles on one
/// plan per connection. Given the array itself, it would plan each call anew
/// for its length, which costs more than running these statements.
static CLAIM_FACTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    PAGE_SIZES
        .iter()
        .map(|page| {
            format!(
                "SELECT sa.keys, sa.ids, na.keys, na.ids, sp.keys, np.keys, c.*
  FROM (SELECT array_agg(k.key) AS keys, array_agg(t.id) AS ids
          FROM unnest((SELECT $2::text[])) AS k(key)
          CROSS JOIN LATERAL (SELECT id FROM mesh_queue
                               WHERE mesh_id = $1 AND status = 'assigned' AND assigned_session_id = k.key
                               LIMIT {ASSIGNED_READ}) t) sa,
       (SELECT array_agg(k.key) AS keys, array_agg(t.id) AS ids
          FROM unnest((SELECT $3::text[])) AS k(key)
          CROSS JOIN LATERAL (SELECT id FROM mesh_queue
                               WHERE mesh_id = $1 AND status = 'assigned' AND assigned_node_id = k.key
                               LIMIT {ASSIGNED_READ}) t) na,
       (SELECT array_agg(k.key) AS keys FROM unnest((SELECT $2::text[])) AS k(key)
          CROSS JOIN LATERAL (SELECT 1 FROM mesh_queue
                               WHERE mesh_id = $1 AND status = 'pending' AND hold = 0
                                 AND target_session_id = k.key LIMIT 1) t) sp,
       (SELECT array_agg(k.key) AS keys FROM unnest((SELECT $3::text[])) AS k(key)
          CROSS JOIN LATERAL (SELECT 1 FROM mesh_queue
                               WHERE mesh_id = $1 AND status = 'pending' AND hold = 0
                                 AND target_session_id IS NULL AND target_node_id IS NOT NULL
                                 AND target_node_id = k.key LIMIT 1) t) np
  LEFT JOIN LATERAL (
       SELECT {CANDIDATE_COLUMNS} FROM mesh_queue
        WHERE mesh_id = $1 AND status = 'pending' AND hold = 0 AND {OPEN_PIN}
        ORDER BY {CLAIM_ORDER} LIMIT {page}) c ON TRUE"
            )
        })
        .collect()
});

/// Where the open page's columns start in a [`CLAIM_FACTS`] row.
const FACTS_PAGE_BASE: usize = 6;

/// The index in [`PAGE_SIZES`] of the page that `claims` claims read.
fn page_size(claims: usize) -> usize {
    let want = claims + FIRST_PAGE;
    PAGE_SIZES.iter().position(|&p| p >= want).unwrap_or(PAGE_SIZES.len() - 1)
}

/// The claim facts in the rows of a [`CLAIM_FACTS`] read with page size `limit`.
fn claim_facts(rows: Vec<Row>, limit: usize) -> Res<ClaimFacts> {
    let Some(first) = rows.first() else {
        return Err(crate::db::corrupt("the claim group's read", "returned no row"));
    };
    let pairs = |column: usize| -> Vec<(String, String)> {
        let keys: Option<Vec<String>> = first.get(column);
        let ids: Option<Vec<String>> = first.get(column + 1);
        keys.unwrap_or_default().into_iter().zip(ids.unwrap_or_default()).collect()
    };
    let set = |column: usize| -> HashSet<String> {
        first.get::<_, Option<Vec<String>>>(column).unwrap_or_default().into_iter().collect()
    };
    let (by_session, by_node, pinned_sessions, pinned_nodes) = (pairs(0), pairs(2), set(4), set(5));
    let mut page = Vec::with_capacity(rows.len());
    for row in rows {
        // No candidate joins as one row of NULLs.
        if row.get::<_, Option<&str>>(FACTS_PAGE_BASE).is_none() {
            continue;
        }
        let candidate = candidate(&row, FACTS_PAGE_BASE)?;
        page.push((candidate, row));
    }
    let page_full = page.len() == limit;
    Ok(ClaimFacts { by_session, by_node, pinned_sessions, pinned_nodes, page, page_full })
}

/// The rows of the tasks `$2` of mesh `$1`, each with the ids of its
/// dependents.
const READ_ROWS: &str = "SELECT q.id, q.payload, q.deps_unmet, q.row_id,
            ARRAY(SELECT d.task_id FROM mesh_task_deps d
                   WHERE d.mesh_id = $1 AND d.depends_on_id = q.id ORDER BY d.task_id)
       FROM unnest((SELECT $2::text[])) AS k(id)
       JOIN mesh_queue q ON q.mesh_id = $1 AND q.id = k.id";

/// The rows of a [`READ_ROWS`] read, by id.
fn loaded_rows(rows: Vec<Row>) -> Res<HashMap<String, Loaded>> {
    let mut loaded = HashMap::with_capacity(rows.len());
    for row in rows {
        let id: String = row.get(0);
        let task = decode(&id, row.get(1))?;
        let dependents = Some(row.get(4));
        loaded.insert(id, Loaded { task, deps_unmet: row.get(2), row_id: row.get(3), dependents });
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    use agentmesh_core::NewTask;
    use agentmesh_store::prelude::*;
    use agentmesh_store::{CompletionReport, Outcome};

    const MESH: &str = "m";
    const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

    fn task(id: &str, edit: impl FnOnce(&mut NewTask)) -> NewTask {
        let mut new =
            NewTask { id: Some(id.to_owned()), message: format!("work on {id}"), ..NewTask::default() };
        edit(&mut new);
        new
    }

    fn claimant(session: &str, node: &str) -> Claimant {
        Claimant { node_id: node.to_owned(), session_id: session.to_owned(), ..Claimant::default() }
    }

    fn claim(session: &str, node: &str) -> Request {
        Request::Claim { claimant: claimant(session, node), opts: ClaimOptions::default(), now: NOW }
    }

    fn complete(session: &str, task_id: Option<&str>, failed: bool) -> Request {
        Request::Complete { report: report(session, task_id, failed), now: NOW }
    }

    fn complete_and_claim(session: &str, node: &str, task_id: Option<&str>) -> Request {
        Request::CompleteAndClaim {
            report: report(session, task_id, false),
            claimant: claimant(session, node),
            opts: ClaimOptions::default(),
            now: NOW,
        }
    }

    fn report(session: &str, task_id: Option<&str>, failed: bool) -> CompletionReport {
        let outcome = if failed {
            Outcome::Failed { reason: "broken".to_owned(), summary: None }
        } else {
            Outcome::Completed { summary: Some("done".to_owned()) }
        };
        CompletionReport {
            session_id: session.to_owned(),
            task_id: task_id.map(str::to_owned),
            epoch: None,
            occurred_at: None,
            outcome,
        }
    }

    /// What a request got, without the ids and times a run mints.
    fn shape(answer: &StoreResult<Response>) -> String {
        let claimed = |outcome: &ClaimOutcome| match outcome {
            ClaimOutcome::Claimed(task) => format!("claimed {}", task.id),
            ClaimOutcome::Refused(reason) => format!("refused {reason:?}"),
        };
        match answer {
            Ok(Response::Claim(outcome)) => claimed(outcome),
            Ok(Response::Complete(task)) => format!("{} {:?}", task.id, task.status),
            Ok(Response::CompleteAndClaim(both)) => {
                format!("{} {:?}, {}", both.0.id, both.0.status, claimed(&both.1))
            }
            Err(err) => format!("error {err}"),
        }
    }

    /// The mesh's rows, ledger and events, without the ids and times a run mints.
    fn state(store: &PgStore) -> Vec<String> {
        store
            .read(|db| {
                let mut out = Vec::new();
                for row in db.query(
                    "SELECT id, status, assigned_session_id, hold FROM mesh_queue WHERE mesh_id = $1 ORDER BY id",
                    &[&MESH],
                )? {
                    let (id, status, session, hold): (String, String, Option<String>, i64) =
                        (row.get(0), row.get(1), row.get(2), row.get(3));
                    out.push(format!("row {id} {status} {session:?} hold {hold}"));
                }
                for row in db.query(
                    "SELECT kind, payload FROM mesh_event_ledger WHERE mesh_id = $1 ORDER BY seq",
                    &[&MESH],
                )? {
                    let (kind, payload): (String, String) = (row.get(0), row.get(1));
                    let payload: serde_json::Value = serde_json::from_str(&payload).unwrap_or_default();
                    out.push(format!("ledger {kind} {}", payload["taskId"]));
                }
                for row in db.query(
                    "SELECT e.event, e.payload FROM mesh_inbox_queue q
                       JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
                      WHERE q.mesh_id = $1 ORDER BY q.event_row_id",
                    &[&MESH],
                )? {
                    let (event, payload): (String, String) = (row.get(0), row.get(1));
                    let payload: serde_json::Value = serde_json::from_str(&payload).unwrap_or_default();
                    out.push(format!("event {event} {}", payload["taskId"]));
                }
                Ok(out)
            })
            .expect("the mesh's state")
    }

    /// Runs `rounds` of requests on a fresh mesh holding `tasks`, on the server
    /// at `url`: each round as one group, or each request alone; returns every
    /// answer and the end state.
    fn run(
        url: &str,
        tasks: &[NewTask],
        rounds: &[Vec<Request>],
        grouped: bool,
    ) -> (Vec<String>, Vec<String>, GroupStats) {
        let fresh = crate::testing::FreshStore::new(url);
        let store = &fresh.store;
        store.enqueue_batch(MESH, tasks, NOW).expect("the tasks");
        let mut answers = Vec::new();
        for round in rounds {
            let requests: Vec<&Request> = round.iter().collect();
            if grouped {
                let got = store
                    .write(MESH, |db| decide_group(db, MESH, &requests, &store.groups))
                    .expect("the group commits");
                answers.extend(got.iter().map(shape));
            } else {
                for request in requests {
                    let got = store.write(MESH, |db| alone(db, MESH, request)).and_then(|answer| answer);
                    answers.push(shape(&got));
                }
            }
        }
        (answers, state(store), store.group_stats())
    }

    /// Every request of a group gets what it would have got alone, in the same
    /// order, and leaves the same rows, ledger and events: claims that see the
    /// claims before them in the group (a taken task, a session already
    /// assigned, a node now busy), a pinned task, completions that free a
    /// session or unblock a dependent, a failure that blocks one, refusals.
    #[test]
    fn a_group_decides_every_request_as_it_would_be_decided_alone_in_order() {
        let url = agentmesh_test_support::require_postgres!();
        let tasks = vec![
            task("a-urgent", |t| t.priority = Some("high".to_owned())),
            task("b", |_| {}),
            task("c-readonly", |t| t.readonly = Some(true)),
            task("d-pinned", |t| t.target_session_id = Some("s3".to_owned())),
            task("e-after-a", |t| t.depends_on = vec!["a-urgent".to_owned()]),
            task("f", |_| {}),
            task("g-after-f", |t| t.depends_on = vec!["f".to_owned()]),
            task("h", |_| {}),
            task("i-tagged", |t| t.required_tags = vec!["gpu".to_owned()]),
        ];
        let rounds = vec![
            vec![
                claim("s1", "n1"),
                claim("s2", "n1"),
                claim("s3", "n3"),
                claim("s1", "n1"),
                claim("s4", "n4"),
            ],
            vec![
                complete("s2", Some("c-readonly"), false),
                claim("s2", "n1"),
                complete("s1", Some("a-urgent"), false),
                claim("s5", "n5"),
                complete("s4", Some("b"), false),
                complete("s9", Some("nope"), false),
                complete("s4", Some("b"), false),
                claim("s4", "n4"),
            ],
            vec![
                complete("s3", None, false),
                complete("s5", Some("e-after-a"), false),
                claim("s6", "n6"),
                complete("s4", Some("f"), true),
                claim("s7", "n7"),
                claim("s8", "n8"),
            ],
        ];
        let (alone_answers, alone_state, _) = run(&url, &tasks, &rounds, false);
        let (group_answers, group_state, stats) = run(&url, &tasks, &rounds, true);
        assert_eq!(group_answers, alone_answers);
        assert_eq!(group_state, alone_state);
        assert!(stats.in_memory > 0 && stats.alone > 0, "{stats:?}");
        assert_eq!(stats.failed, 0);
        // The first round's claims are what the rules say, so the oracle is no
        // accident of both runs being wrong alike.
        assert_eq!(
            &alone_answers[..5],
            [
                "claimed a-urgent",
                "claimed c-readonly",
                "claimed d-pinned",
                "refused SessionAlreadyAssigned",
                "claimed b",
            ]
        );
    }

    /// A completion that claims the next task in the same request is decided
    /// in a group as the two would be one after the other alone: the claim
    /// sees its own completion (the session is free again) and every request
    /// before it; a refused completion claims nothing, and one whose claim is
    /// malformed keeps nothing of its completion.
    #[test]
    fn a_group_decides_completions_that_claim_the_next_task_as_alone() {
        let url = agentmesh_test_support::require_postgres!();
        let tasks: Vec<NewTask> = ["a", "b", "c", "d", "e", "f"].iter().map(|id| task(id, |_| {})).collect();
        let rounds = vec![
            vec![claim("s1", "n1"), claim("s2", "n2"), claim("s3", "n3")],
            vec![
                complete_and_claim("s1", "n1", Some("a")),
                complete_and_claim("s2", "n2", Some("b")),
                complete_and_claim("s9", "n9", Some("c")),
                claim("s1", "n1"),
                complete_and_claim("s3", "n3", Some("c")),
                complete_and_claim("s1", "n1", Some("nope")),
                complete_and_claim("s2", " ", Some("e")),
                complete_and_claim("s2", "n2", Some("e")),
                complete_and_claim("s3", "n3", Some("f")),
            ],
        ];
        let (alone_answers, alone_state, _) = run(&url, &tasks, &rounds, false);
        let (group_answers, group_state, stats) = run(&url, &tasks, &rounds, true);
        assert_eq!(group_answers, alone_answers);
        assert_eq!(group_state, alone_state);
        assert!(stats.in_memory >= 9, "{stats:?}");
        assert_eq!(stats.failed, 0);
        assert_eq!(
            alone_answers[3..],
            [
                "a Completed, claimed d",
                "b Completed, claimed e",
                "error task c is not assigned to session s9",
                "refused SessionAlreadyAssigned",
                "c Completed, claimed f",
                "error task nope not found in mesh m",
                "error invalid nodeId: must not be blank",
                "e Completed, refused NoPendingCandidates",
                "f Completed, refused NoPendingCandidates",
            ]
        );
    }
}
