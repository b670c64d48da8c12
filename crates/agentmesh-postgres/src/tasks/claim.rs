//! Claims: the claim streams (partial-index walks in claim order) and the
//! survey that precedes them, for the core's claim walk
//! ([`agentmesh_core::claim::walk`]).

use std::sync::LazyLock;

use agentmesh_core::claim::walk::{self, Candidate, Stream, Tier, Visit, Walked};
use agentmesh_core::effects::task as decide;
use agentmesh_core::{ClaimRefusal, Claimant, NodeLoad, Timestamp, daemon_id};
use agentmesh_store::ids::mint_at;
use agentmesh_store::task_writes::persist;
use agentmesh_store::{ClaimOptions, ClaimOutcome};
use postgres::Row;
use postgres::types::ToSql;

use super::rows::{Loaded, corrupt, decode};
use crate::db::Db;
use crate::{Fail, Res};

/// How many candidates the first fetch of a stream reads: the first candidate
/// usually wins, and each row read carries its payload.
pub(super) const FIRST_PAGE: usize = 4;

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
pub(super) const CANDIDATE_COLUMNS: &str = "id, required_tags, not_before_ms, task_mode, readonly, target_node_id, \
     target_session_id, row_id, payload, deps_unmet, priority_rank, created_at";

/// The pin condition of the open stream (neither a session nor a node).
pub(super) const OPEN_PIN: &str = "target_session_id IS NULL AND target_node_id IS NULL";

/// Claim order: priority, then age, then insertion.
pub(super) const CLAIM_ORDER: &str = "priority_rank DESC, created_at ASC, row_id ASC";

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

/// The candidate in `row`, whose stream columns start at `base`.
pub(super) fn candidate(row: &Row, base: usize) -> Res<Candidate> {
    Candidate::from_columns(
        row.get(base),
        row.get(base + 1),
        row.get(base + 2),
        row.get(base + 3),
        row.get::<_, i64>(base + 4) != 0,
        row.get(base + 5),
        row.get(base + 6),
    )
    .map_err(|bad| corrupt(&bad.id, bad.error))
}

/// Shows `candidate` (from its stream row, whose stream columns start at
/// `base`) to a walk's `visit`: `Some` with the scan's answer when the walk took
/// it or stopped, `None` to go on to the next.
pub(super) fn show(
    candidate: &Candidate,
    row: &Row,
    base: usize,
    visit: &mut dyn FnMut(&Candidate) -> Visit,
) -> Option<Res<Option<Loaded>>> {
    match visit(candidate) {
        Visit::Take => Some(taken(candidate, row, base).map(Some)),
        Visit::Stop => Some(Ok(None)),
        Visit::Next => None,
    }
}

/// The task of `candidate`, taken by a walk, from its stream row (whose stream
/// columns start at `base`): only the taken candidate's payload is decoded.
pub(super) fn taken(candidate: &Candidate, row: &Row, base: usize) -> Res<Loaded> {
    Ok(Loaded {
        task: decode(&candidate.id, row.get(base + 8))?,
        deps_unmet: row.get(base + 9),
        row_id: row.get(base + 7),
        dependents: None,
    })
}

/// A page of a stream read ahead, by the survey: its rows, whose stream
/// columns start at `base`.
struct Page {
    rows: Vec<Row>,
    base: usize,
}

/// The claim streams of one claim, in the caller's transaction, with the
/// survey's read-ahead of the open stream.
struct Streams<'a, 'c> {
    db: &'a Db<'c>,
    mesh_id: &'a str,
    claimant: &'a Claimant,
    /// The claimant's node in every id form.
    forms: &'a [String],
    /// The open stream's first page at hold 0, when the survey read it.
    open_page: Option<Page>,
}

impl walk::Streams for Streams<'_, '_> {
    type Taken = Loaded;
    type Error = Fail;

    /// Reads the stream a page at a time ([`FIRST_PAGE`], then [`PAGE`]), the
    /// open stream's first page from the survey when it read it; only the taken
    /// candidate's payload is decoded, from the row the walk already read.
    fn scan(
        &mut self,
        Stream { tier, hold, readonly_only }: Stream,
        limit: usize,
        visit: &mut dyn FnMut(&Candidate) -> Visit,
    ) -> Res<Option<Loaded>> {
        let sql = &STREAMS[stream_index(tier, readonly_only)];
        let mut first =
            if tier == Tier::Open && hold == 0 && !readonly_only { self.open_page.take() } else { None };
        // The key before every row: ranks are small, so every row comes after i64::MAX.
        let mut after: (i64, String, i64) = (i64::MAX, String::new(), 0);
        let mut seen = 0;
        while seen < limit {
            let want = if seen == 0 { FIRST_PAGE } else { PAGE }.min(limit - seen);
            let Page { rows, base } = match first.take() {
                Some(page) => page,
                None => {
                    let page = i64::try_from(want).unwrap_or(i64::MAX);
                    let mut params: Vec<&(dyn ToSql + Sync)> =
                        vec![&self.mesh_id, &hold, &after.0, &after.1, &after.2, &page];
                    match tier {
                        Tier::Session => params.push(&self.claimant.session_id),
                        Tier::Node => params.push(&self.forms),
                        Tier::Open => {}
                    }
                    Page { rows: self.db.query(sql, &params)?, base: 0 }
                }
            };
            for row in &rows {
                seen += 1;
                if let Some(answer) = show(&candidate(row, base)?, row, base, visit) {
                    return answer;
                }
            }
            match rows.last() {
                Some(last) if rows.len() == want => {
                    after = (last.get(base + 10), last.get(base + 11), last.get(base + 7))
                }
                _ => break,
            }
        }
        Ok(None)
    }
}

/// `$1` mesh, `$2` session, `$3` the node's id forms. One
/// row of the four facts, joined with the first page of the open stream at
/// hold 0 when that is the stream the claim walks first (nothing is assigned to
/// the session or its node, and nothing is pinned to either): the common claim
/// reads everything it needs in this one statement. The page size is written
/// out ([`FIRST_PAGE`]): with it a parameter, the server would plan the
/// statement anew for every claim, which costs more than running it.
static SURVEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT s.session_assigned, s.node_busy, s.session_pinned, s.node_pinned, c.*
  FROM (SELECT
       EXISTS (SELECT 1 FROM mesh_queue
                WHERE mesh_id = $1 AND status = 'assigned' AND assigned_session_id = $2) AS session_assigned,
       EXISTS (SELECT 1 FROM mesh_queue
                WHERE mesh_id = $1 AND status = 'assigned' AND assigned_node_id = ANY($3)) AS node_busy,
       EXISTS (SELECT 1 FROM mesh_queue
                WHERE mesh_id = $1 AND status = 'pending' AND hold = 0 AND target_session_id = $2)
           AS session_pinned,
       EXISTS (SELECT 1 FROM mesh_queue
                WHERE mesh_id = $1 AND status = 'pending' AND hold = 0
                  AND target_session_id IS NULL AND target_node_id IS NOT NULL
                  AND target_node_id = ANY($3)) AS node_pinned) s
  LEFT JOIN LATERAL (
       SELECT {CANDIDATE_COLUMNS} FROM mesh_queue
        WHERE NOT (s.session_assigned OR s.node_busy OR s.session_pinned OR s.node_pinned)
          AND mesh_id = $1 AND status = 'pending' AND hold = 0 AND {OPEN_PIN}
        ORDER BY {CLAIM_ORDER} LIMIT {FIRST_PAGE}) c ON TRUE"
    )
});

/// Where the open stream's columns start in a [`SURVEY`] row.
const SURVEY_OPEN_BASE: usize = 4;

fn survey(
    db: &Db<'_>,
    mesh_id: &str,
    claimant: &Claimant,
    forms: &[String],
) -> Res<(walk::Survey, Option<Page>)> {
    let mut rows = db.query(&SURVEY, &[&mesh_id, &claimant.session_id, &forms])?;
    let Some(first) = rows.first() else {
        return Err(crate::db::corrupt("the claim survey", "returned no row"));
    };
    let survey = walk::Survey {
        session_assigned: first.get(0),
        node_busy: first.get(1),
        session_pinned: first.get(2),
        node_pinned: first.get(3),
    };
    let open_read =
        !(survey.session_assigned || survey.node_busy || survey.session_pinned || survey.node_pinned);
    // No candidate joins as one row of NULLs.
    rows.retain(|row| row.get::<_, Option<&str>>(SURVEY_OPEN_BASE).is_some());
    Ok((survey, open_read.then_some(Page { rows, base: SURVEY_OPEN_BASE })))
}

/// The claimant's provider and its parallel cap, when a cap applies to it: it
/// names both and has a node.
pub(super) fn parallel_cap<'a>(claimant: &'a Claimant, forms: &[String]) -> Option<(&'a str, u32)> {
    let provider = claimant.provider_type.as_deref().map(str::trim).filter(|p| !p.is_empty())?;
    let max = claimant.provider_max_parallel?;
    (!forms.is_empty()).then_some((provider, max))
}

/// Whether the provider's parallel cap is reached on the claimant's node. All id
/// forms of the node count as one node.
fn cap_reached(db: &Db<'_>, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<bool> {
    let Some((provider, max)) = parallel_cap(claimant, forms) else { return Ok(false) };
    let row = db.query_one(
        "SELECT COUNT(*) FROM mesh_queue
          WHERE mesh_id = $1 AND status = 'assigned'
            AND assigned_node_id = ANY($2) AND assigned_provider_type = $3",
        &[&mesh_id, &forms, &provider],
    )?;
    Ok(row.get::<_, i64>(0) >= i64::from(max))
}

/// Claims the next task for `claimant` in the caller's transaction, which holds
/// the mesh's lock: the survey (which reads the open stream's first page too),
/// the node's load, then the core's walk over the streams; the winner's claim
/// is decided by the core and persisted, or the walk's refusal returned.
pub(crate) fn claim(
    db: &Db<'_>,
    mesh_id: &str,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
) -> Res<ClaimOutcome> {
    decide::check_claimant(claimant)?;
    let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
    let (survey, open_page) = survey(db, mesh_id, claimant, &forms)?;
    if survey.session_assigned {
        return Ok(ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned));
    }
    let load =
        NodeLoad { node_busy: survey.node_busy, cap_reached: cap_reached(db, mesh_id, claimant, &forms)? };
    let mut streams = Streams { db, mesh_id, claimant, forms: &forms, open_page };
    match walk::walk(&mut streams, &survey, claimant, load, now)? {
        Walked::Take(before) => {
            let decision = decide::claim(&before.task, claimant, opts.lease_ms, now, || mint_at(now))?;
            Ok(ClaimOutcome::Claimed(persist(db, &before, decision, now)?))
        }
        Walked::Refused(reason) => Ok(ClaimOutcome::Refused(reason)),
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
        assert!(SURVEY.matches("mesh_id = $1").count() == 5, "{}", *SURVEY);
        // The page size is written out, not a parameter (see SURVEY).
        assert!(SURVEY.contains(&format!("LIMIT {FIRST_PAGE})")), "{}", *SURVEY);
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
