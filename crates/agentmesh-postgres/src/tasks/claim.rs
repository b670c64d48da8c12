//! Claims: the claim streams (partial-index walks in claim order) and the
//! survey that precedes them, for the core's claim walk
//! ([`agentmesh_core::claim::walk`]).
//!
//! What makes a claim safe beside other writes of its mesh:
//!
//! - The claim's transaction holds the advisory locks of the claimant's session
//!   and node (see `locks`): the gates (the session holds nothing, the node is
//!   not busy, the per-(node, provider) cap) count assigned rows, and only a
//!   claim adds one, so what the survey counted stays true until the commit.
//! - The task it takes is locked `FOR NO KEY UPDATE SKIP LOCKED` and read again
//!   as it is locked: a row another claim holds is stepped over, never waited
//!   for, and a row that changed since the walk read it is not taken.
//! - The ledger pages in the order of the writing transactions' ids (see
//!   `ledger`), so a claim acts only on what committed before its transaction
//!   took an id: the gates are counted by a statement that runs before its
//!   first write, and a task whose current row was written by a younger
//!   transaction is stepped over. A claim that follows a completion in the same
//!   transaction (`complete_and_claim`) took its id with the completion; it
//!   counts its gates before the completion and takes the completed task out
//!   of them ([`Gates::without`]).

use std::sync::LazyLock;

use agentmesh_core::claim::walk::{self, Candidate, Stream, Tier, Visit, Visitor, Walked};
use agentmesh_core::effects::task as decide;
use agentmesh_core::{ClaimRefusal, Claimant, NodeLoad, Task, Timestamp, daemon_id};
use agentmesh_store::ids::mint_at;
use agentmesh_store::reservation_writes;
use agentmesh_store::task_writes::{self, persist};
use agentmesh_store::{ClaimOptions, ClaimOutcome, CompletionReport, StoreError};
use postgres::Row;
use postgres::types::ToSql;

use super::persist::Rows;
use super::remembered::Held;
use super::rows::{Dependents, Loaded, corrupt, decode};
use crate::db::Db;
use crate::{Fail, Lock, Res};

/// How many candidates the first fetch of a stream reads: the first candidate
/// usually wins, and each row read carries its payload.
const FIRST_PAGE: usize = 4;

/// How many candidates each later fetch of a stream reads.
const PAGE: usize = 64;

/// The SQL of one stream: `$1` mesh, `$2` hold, `$3`..`$5` the claim-order key
/// (priority rank, created_at, row_id) the page starts after, `$6` the page
/// size, and `$7` the session (session tier) or the node's id forms (node tier).
fn stream_sql(tier: Tier, readonly_only: bool) -> String {
    let mut sql = format!(
        "SELECT {CANDIDATE_COLUMNS} FROM mesh_queue WHERE mesh_id = $1 AND status = 'pending' AND hold = $2 AND "
    );
    sql.push_str(match tier {
        Tier::Session => "target_session_id = $7",
        Tier::Node => "target_session_id IS NULL AND target_node_id IS NOT NULL AND target_node_id = ANY($7)",
        Tier::Open => OPEN_PIN,
    });
    if readonly_only {
        sql.push_str(" AND readonly = 1");
    }
    sql.push_str(&format!(
        " AND (priority_rank < $3 OR (priority_rank = $3
               AND (created_at > $4 OR (created_at = $4 AND row_id > $5))))
         ORDER BY {CLAIM_ORDER} LIMIT $6"
    ));
    sql
}

/// The columns a stream reads of a candidate, in the order [`candidate`] and
/// [`scan`] read them.
const CANDIDATE_COLUMNS: &str = "id, required_tags, not_before_ms, task_mode, readonly, target_node_id, \
     target_session_id, row_id, payload, deps_unmet, priority_rank, created_at";

/// The pin condition of the open stream (neither a session nor a node).
const OPEN_PIN: &str = "target_session_id IS NULL AND target_node_id IS NULL";

/// Claim order: priority, then age, then insertion.
const CLAIM_ORDER: &str = "priority_rank DESC, created_at ASC, row_id ASC";

/// Every stream's SQL, by [`stream_index`].
static STREAMS: LazyLock<[String; 6]> = LazyLock::new(|| {
    [
        stream_sql(Tier::Session, false),
        stream_sql(Tier::Session, true),
        stream_sql(Tier::Node, false),
        stream_sql(Tier::Node, true),
        stream_sql(Tier::Open, false),
        stream_sql(Tier::Open, true),
    ]
});

fn stream_index(tier: Tier, readonly_only: bool) -> usize {
    let t = match tier {
        Tier::Session => 0,
        Tier::Node => 2,
        Tier::Open => 4,
    };
    t + usize::from(readonly_only)
}

/// The candidate in `row`, whose stream columns start at `base`, with its
/// difficulty when `claimant` takes only some.
fn candidate(row: &Row, base: usize, claimant: &Claimant) -> Res<Candidate> {
    let mut candidate = Candidate::from_columns(
        row.get(base),
        row.get(base + 1),
        row.get(base + 2),
        row.get(base + 3),
        row.get::<_, i64>(base + 4) != 0,
        row.get(base + 5),
        row.get(base + 6),
    )
    .map_err(|bad| corrupt(&bad.id, bad.error))?;
    if claimant.allowed_difficulties.is_some() {
        candidate.read_difficulty(
            claimant,
            &agentmesh_store::packed::unpack(row.get(base + 8)).unwrap_or_default(),
        );
    }
    Ok(candidate)
}

/// Whether the row a statement locked was written by a transaction younger
/// than the locking one (see the module): such a row is not taken. `age()`
/// counts back from the next transaction id, so a younger one is less old; a
/// frozen row is as old as can be.
const YOUNGER: &str = "age(xmin) < age(pg_current_xact_id()::xid)";

/// Locks a candidate the walk took, by its `row_id` (`$2`) in mesh `$1`, if it
/// is still pending at hold `$3` and nobody holds it: its payload and
/// readiness count as locked, and whether a younger transaction wrote it.
static LOCK_CANDIDATE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT payload, deps_unmet, {YOUNGER} FROM mesh_queue
          WHERE mesh_id = $1 AND row_id = $2 AND status = 'pending' AND hold = $3
          FOR NO KEY UPDATE SKIP LOCKED"
    )
});

/// The task of `candidate` from its stream row (whose stream columns start at
/// `base`), when this transaction may take it: locked already by the survey
/// (`locked`: whether a younger transaction wrote it), or locked now. `None`
/// when another claim holds it, it changed since the walk read it, or a younger
/// transaction wrote it. Only a taken candidate's payload is decoded.
fn take(
    db: &Db<'_>,
    mesh_id: &str,
    hold: i64,
    candidate: &Candidate,
    row: &Row,
    base: usize,
    locked: Option<bool>,
) -> Res<Option<Loaded>> {
    let payload: &[u8] = row.get(base + 8);
    let row_id: i64 = row.get(base + 7);
    let deps_unmet = match locked {
        Some(true) => return Ok(None),
        Some(false) => row.get(base + 9),
        None => {
            let Some(now) = db.query_opt(&LOCK_CANDIDATE, &[&mesh_id, &row_id, &hold])? else {
                return Ok(None);
            };
            if now.get::<_, bool>(2) || now.get::<_, &[u8]>(0) != payload {
                return Ok(None);
            }
            now.get(1)
        }
    };
    Ok(Some(Loaded {
        task: decode(&candidate.id, payload)?,
        deps_unmet,
        row_id,
        dependents: Dependents::Unread,
    }))
}

/// The survey's head of the open stream: its one row, whose stream columns
/// start at `base`, locked by the survey, and whether a younger transaction
/// wrote it.
struct Head {
    row: Row,
    base: usize,
    younger: bool,
}

/// The claim streams of one claim, in the caller's transaction, with the
/// survey's locked head of the open stream.
struct Streams<'a, 'c> {
    db: &'a Db<'c>,
    mesh_id: &'a str,
    claimant: &'a Claimant,
    /// The claimant's node in every id form.
    forms: &'a [String],
    /// The open stream's first ready row, when the survey locked it.
    head: Option<Head>,
    now: Timestamp,
    /// A candidate was stepped over for another holder's path reservation.
    paths_reserved: bool,
}

impl Streams<'_, '_> {
    /// Whether the claimant may take `taken` as far as path reservations go:
    /// a task that declares paths is checked under the mesh's reservations
    /// lock (held until the claim commits, so the reservation the claim then
    /// takes is checked against every other); one another holder's
    /// reservation overlaps is stepped over, recorded as
    /// `reservation_denied`.
    fn paths_clear(&mut self, taken: &Loaded) -> Res<bool> {
        if taken.task.paths.is_none() {
            return Ok(true);
        }
        self.db.lock(self.mesh_id, Lock::Reservations)?;
        let rows = crate::reservations::Rows(self.db);
        let found = reservation_writes::blocking(&rows, &taken.task, &self.claimant.session_id, self.now)?;
        if found.is_empty() {
            return Ok(true);
        }
        reservation_writes::skipped(&rows, &taken.task, self.claimant, &found, self.now)?;
        self.paths_reserved = true;
        Ok(false)
    }
}

impl walk::Streams for Streams<'_, '_> {
    type Taken = Loaded;
    type Error = Fail;

    /// Reads the stream a page at a time ([`FIRST_PAGE`], then [`PAGE`]),
    /// after the survey's head when this is its stream; a candidate the walk
    /// takes is locked (see [`take`]), and when it cannot be, the walk goes on
    /// with the next one.
    fn scan(&mut self, stream: Stream, limit: usize, visit: Visitor<'_>) -> Res<Option<Loaded>> {
        let Stream { tier, hold, readonly_only } = stream;
        let sql = &STREAMS[stream_index(tier, readonly_only)];
        // The key before every row: ranks are small, so every row comes after i64::MAX.
        let mut after: (i64, String, i64) = (i64::MAX, String::new(), 0);
        let mut seen = 0;
        if tier == Tier::Open
            && hold == 0
            && !readonly_only
            && let Some(Head { row, base, younger }) = self.head.take()
        {
            seen += 1;
            let candidate = candidate(&row, base, self.claimant)?;
            match visit(&candidate) {
                Visit::Take => {
                    let taken = take(self.db, self.mesh_id, hold, &candidate, &row, base, Some(younger))?;
                    if let Some(taken) = taken
                        && self.paths_clear(&taken)?
                    {
                        return Ok(Some(taken));
                    }
                }
                Visit::Stop => return Ok(None),
                Visit::Next => {}
            }
            after = (row.get(base + 10), row.get(base + 11), row.get(base + 7));
        }
        while seen < limit {
            let want = if seen == 0 { FIRST_PAGE } else { PAGE }.min(limit - seen);
            let page = i64::try_from(want).unwrap_or(i64::MAX);
            let mut params: Vec<&(dyn ToSql + Sync)> =
                vec![&self.mesh_id, &hold, &after.0, &after.1, &after.2, &page];
            match tier {
                Tier::Session => params.push(&self.claimant.session_id),
                Tier::Node => params.push(&self.forms),
                Tier::Open => {}
            }
            let rows = self.db.query(sql, &params)?;
            for row in &rows {
                seen += 1;
                let candidate = candidate(row, 0, self.claimant)?;
                match visit(&candidate) {
                    Visit::Take => {
                        if let Some(taken) = take(self.db, self.mesh_id, hold, &candidate, row, 0, None)?
                            && self.paths_clear(&taken)?
                        {
                            return Ok(Some(taken));
                        }
                    }
                    Visit::Stop => return Ok(None),
                    Visit::Next => {}
                }
            }
            match rows.last() {
                Some(last) if rows.len() == want => after = (last.get(10), last.get(11), last.get(7)),
                _ => break,
            }
        }
        Ok(None)
    }
}

/// A claim's gates as counts of assigned rows: of the claimant's session, of
/// its node (every id form), and of its node with its provider.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Gates {
    session: i64,
    node: i64,
    provider: i64,
}

impl Gates {
    /// The gates of the assigned rows `rows` of [`ASSIGNED`], leaving out the
    /// task `completed` (which the caller's transaction has just ended).
    fn without(rows: &[Row], completed: &str) -> Gates {
        let mut gates = Gates::default();
        for row in rows.iter().filter(|r| r.get::<_, &str>(0) != completed) {
            gates.session += i64::from(row.get::<_, bool>(1));
            gates.node += i64::from(row.get::<_, bool>(2));
            gates.provider += i64::from(row.get::<_, bool>(3));
        }
        gates
    }
}

/// `$1` mesh, `$2` session, `$3` the node's id forms, `$4` the provider (or
/// NULL): the assigned rows of the session or the node, each with whether it
/// is the session's, the node's, and the node's of the provider.
const ASSIGNED: &str = "SELECT id, assigned_session_id = $2, COALESCE(assigned_node_id = ANY($3), FALSE),
        COALESCE(assigned_node_id = ANY($3) AND assigned_provider_type = $4, FALSE)
   FROM mesh_queue
  WHERE mesh_id = $1 AND status = 'assigned' AND (assigned_session_id = $2 OR assigned_node_id = ANY($3))";

/// `$1` mesh, `$2` session, `$3` the node's id forms, `$4` the provider (or
/// NULL), `$5` its cap (or NULL). One row: the gates' counts and whether each
/// pinned stream holds a ready task, joined with the open stream's first ready
/// row, locked `FOR NO KEY UPDATE SKIP LOCKED`, when that is the stream the
/// claim walks first (no gate is shut and nothing is pinned to the session or
/// node): the common claim reads and locks what it takes in this one
/// statement, before its transaction has an id. (`OFFSET 0` keeps the
/// counts one subquery, run once, instead of repeated in the lateral's filter.)
static SURVEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT s.session_assigned, s.node_assigned, s.provider_assigned, s.session_pinned, s.node_pinned,
        c.younger, c.*
  FROM (SELECT
       (SELECT COUNT(*) FROM mesh_queue
         WHERE mesh_id = $1 AND status = 'assigned' AND assigned_session_id = $2) AS session_assigned,
       (SELECT COUNT(*) FROM mesh_queue
         WHERE mesh_id = $1 AND status = 'assigned' AND assigned_node_id = ANY($3)) AS node_assigned,
       (SELECT COUNT(*) FROM mesh_queue
         WHERE mesh_id = $1 AND status = 'assigned' AND assigned_node_id = ANY($3)
           AND assigned_provider_type = $4) AS provider_assigned,
       EXISTS (SELECT 1 FROM mesh_queue
                WHERE mesh_id = $1 AND status = 'pending' AND hold = 0 AND target_session_id = $2)
           AS session_pinned,
       EXISTS (SELECT 1 FROM mesh_queue
                WHERE mesh_id = $1 AND status = 'pending' AND hold = 0
                  AND target_session_id IS NULL AND target_node_id IS NOT NULL
                  AND target_node_id = ANY($3)) AS node_pinned
       OFFSET 0) s
  LEFT JOIN LATERAL (
       SELECT {YOUNGER} AS younger, {CANDIDATE_COLUMNS} FROM mesh_queue
        WHERE s.session_assigned = 0 AND s.node_assigned = 0 AND NOT s.session_pinned AND NOT s.node_pinned
          AND NOT COALESCE(s.provider_assigned >= $5::BIGINT, FALSE)
          AND mesh_id = $1 AND status = 'pending' AND hold = 0 AND {OPEN_PIN}
        ORDER BY {CLAIM_ORDER} LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED) c ON TRUE"
    )
});

/// Where the open stream's columns start in a [`SURVEY`] row.
const SURVEY_OPEN_BASE: usize = 7;

/// What the survey saw: the gates' counts, the pinned streams, the locked head.
struct Surveyed {
    gates: Gates,
    session_pinned: bool,
    node_pinned: bool,
    head: Option<Head>,
}

fn survey(
    db: &Db<'_>,
    mesh_id: &str,
    claimant: &Claimant,
    forms: &[String],
    cap: Option<(&str, u32)>,
) -> Res<Surveyed> {
    let provider = cap.map(|(p, _)| p);
    let max = cap.map(|(_, m)| i64::from(m));
    let mut rows = db.query(&SURVEY, &[&mesh_id, &claimant.session_id, &forms, &provider, &max])?;
    let Some(row) = rows.pop() else {
        return Err(crate::db::corrupt("the claim survey", "returned no row"));
    };
    let gates = Gates { session: row.get(0), node: row.get(1), provider: row.get(2) };
    // No candidate joins as one row of NULLs.
    let younger: Option<bool> = row.get(5);
    let (session_pinned, node_pinned) = (row.get(3), row.get(4));
    let head = younger.map(|younger| Head { row, base: SURVEY_OPEN_BASE, younger });
    Ok(Surveyed { gates, session_pinned, node_pinned, head })
}

/// The locks a claim of `claimant` holds: its session's and its node's.
pub(crate) fn claim_locks(claimant: &Claimant) -> [Lock<'_>; 2] {
    [Lock::Session(&claimant.session_id), Lock::Node(&claimant.node_id)]
}

/// A claim's outcome, with the claimed row for the store to remember once the
/// claim commits (see `remembered`).
pub(crate) type Claimed = (ClaimOutcome, Option<Held>);

/// Claims the next task for `claimant` in the caller's transaction, which holds
/// [`claim_locks`]: the survey (which locks the open stream's first ready row
/// too), then the core's walk over the streams; the winner's claim is decided
/// by the core and persisted, or the walk's refusal returned, with the claimed
/// row for the store to remember once the claim commits (see `remembered`).
/// `gates`, when given, were counted before the transaction took an id, and
/// stand for the survey's.
pub(crate) fn claim(
    db: &Db<'_>,
    mesh_id: &str,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
    gates: Option<Gates>,
) -> Res<Claimed> {
    decide::check_claimant(claimant)?;
    let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
    let cap = claimant.parallel_cap().filter(|_| !forms.is_empty());
    let surveyed = survey(db, mesh_id, claimant, &forms, cap)?;
    let gates = gates.unwrap_or(surveyed.gates);
    if gates.session > 0 {
        return Ok((ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned), None));
    }
    let load = NodeLoad::from_counts(claimant, gates.node > 0, u64::try_from(gates.provider).unwrap_or(0));
    let survey = walk::Survey {
        session_assigned: false,
        node_busy: load.node_busy,
        session_pinned: surveyed.session_pinned,
        node_pinned: surveyed.node_pinned,
    };
    let mut streams =
        Streams { db, mesh_id, claimant, forms: &forms, head: surveyed.head, now, paths_reserved: false };
    match walk::walk(&mut streams, &survey, claimant, load, now)? {
        Walked::Take(before) => {
            let decision = decide::claim(&before.task, claimant, opts.lease_ms, now, || mint_at(now))?;
            let task = persist(&Rows::of(db), &before, decision, now)?;
            let held = Held::of(&before, task.clone());
            Ok((ClaimOutcome::Claimed(task), Some(held)))
        }
        Walked::Refused(reason) => {
            let reason = if streams.paths_reserved { ClaimRefusal::PathsReserved } else { reason };
            Ok((ClaimOutcome::Refused(reason), None))
        }
    }
}

/// A completion and, unless it was refused, the claim that follows it, in the
/// caller's transaction, which holds [`claim_locks`]. The completed task is
/// loaded through `rows` (which may remember it, see `remembered`). The
/// claim's gates are counted first, before the completion gives the
/// transaction an id (see the module), without the completed task. The outer
/// `Res` fails the transaction; the inner `Err` is the completion's recorded
/// refusal, which must still be committed.
pub(crate) fn complete_then_claim(
    rows: &Rows<'_, '_>,
    mesh_id: &str,
    report: &CompletionReport,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
) -> Res<Result<(Task, Claimed), StoreError>> {
    decide::check_claimant(claimant)?;
    let db = rows.db;
    let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
    let provider = claimant.parallel_cap().filter(|_| !forms.is_empty()).map(|(p, _)| p);
    let assigned = db.query(ASSIGNED, &[&mesh_id, &claimant.session_id, &forms, &provider])?;
    match task_writes::complete(rows, mesh_id, report, now)? {
        Ok(task) => {
            let gates = Gates::without(&assigned, &task.id);
            let claimed = claim(db, mesh_id, claimant, opts, now, Some(gates))?;
            Ok(Ok((task, claimed)))
        }
        Err(refused) => Ok(Err(refused)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stream reads one mesh's pending rows and states the condition of
    /// its partial claim index, so the planner can walk that index.
    #[test]
    fn streams_state_their_claim_index_conditions() {
        for tier in walk::TIERS {
            for readonly_only in [false, true] {
                let sql = &STREAMS[stream_index(tier, readonly_only)];
                assert!(sql.contains("mesh_id = $1 AND status = 'pending'"), "{sql}");
                assert_eq!(sql.contains("readonly = 1"), readonly_only, "{sql}");
                let pin = match tier {
                    Tier::Session => "target_session_id = $7",
                    Tier::Node => "target_session_id IS NULL AND target_node_id IS NOT NULL",
                    Tier::Open => "target_session_id IS NULL AND target_node_id IS NULL",
                };
                assert!(sql.contains(pin), "{sql}");
            }
        }
        assert!(SURVEY.matches("mesh_id = $1").count() == 6, "{}", *SURVEY);
        // The head is one row, locked, stepping over rows other claims hold.
        assert!(SURVEY.contains("LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED)"), "{}", *SURVEY);
    }

    /// The open stream reads its first page straight from its index, in claim
    /// order, however deep the queue: no sort of the pending tasks (what kept a
    /// claim's cost growing with the queue before the index carried `row_id`).
    #[test]
    fn the_open_stream_walks_its_index_without_sorting() {
        use agentmesh_store::prelude::*;
        let url = agentmesh_test_support::require_postgres!();
        let store = crate::testing::FreshStore::new(&url);
        let now = Timestamp::from_millis(1_780_000_000_000);
        let tasks: Vec<agentmesh_core::NewTask> = (0..3000)
            .map(|i| agentmesh_core::NewTask { message: format!("task {i}"), ..Default::default() })
            .collect();
        store.enqueue_batch("m", &tasks, now).expect("a deep queue");
        let plan = store
            .read(|db| {
                db.query("ANALYZE mesh_queue", &[])?;
                let rows = db.query(
                    &format!("EXPLAIN {}", STREAMS[stream_index(Tier::Open, false)]),
                    &[&"m", &0i64, &i64::MAX, &"", &0i64, &(FIRST_PAGE as i64)],
                )?;
                Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n"))
            })
            .expect("the plan");
        assert!(plan.contains("idx_mesh_queue_claim_open"), "expected the claim index walked:\n{plan}");
        assert!(!plan.contains("Sort"), "expected no sort of the pending tasks:\n{plan}");
    }
}
