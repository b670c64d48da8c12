//! Claims: the claim streams (partial-index walks in claim order), the survey
//! that precedes them, and the diagnosis of a refusal.

use std::sync::LazyLock;

use agentmesh_core::claim::check_gates;
use agentmesh_core::effects::task as decide;
use agentmesh_core::{CandidateFacts, ClaimRefusal, Claimant, NodeLoad, TaskMode, Timestamp, daemon_id};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{ClaimOptions, ClaimOutcome};
use postgres::Row;
use postgres::types::ToSql;

use super::persist::persist;
use super::rows::{Loaded, corrupt, decode};
use crate::Res;
use crate::db::Db;

/// How many candidates a refusal diagnosis looks at per stream.
const DIAGNOSIS_LIMIT: usize = 256;

/// How many candidates the first fetch of a stream reads: the first candidate
/// usually wins, and each row read carries its payload.
const FIRST_PAGE: usize = 4;

/// How many candidates each later fetch of a stream reads.
const PAGE: usize = 64;

/// The candidate columns a claim reads, without the payload.
struct Candidate {
    id: String,
    required_tags: Vec<String>,
    not_before_ms: Option<i64>,
    task_mode: Option<TaskMode>,
    readonly: bool,
    target_node_id: Option<String>,
    target_session_id: Option<String>,
}

impl Candidate {
    fn facts(&self, hold: i64) -> CandidateFacts<'_> {
        CandidateFacts {
            required_tags: &self.required_tags,
            dependencies_met: hold != 1,
            not_before_ms: self.not_before_ms,
            parked: hold == 2,
            task_mode: self.task_mode,
            readonly: self.readonly,
            target_node_id: self.target_node_id.as_deref(),
            target_session_id: self.target_session_id.as_deref(),
        }
    }
}

/// One ordered stream of candidates: a claim tier at one hold value.
#[derive(Clone, Copy)]
enum Tier {
    Session,
    Node,
    Open,
}

const TIERS: [Tier; 3] = [Tier::Session, Tier::Node, Tier::Open];

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

/// What every stream of one claim shares.
struct ClaimScope<'a> {
    mesh_id: &'a str,
    claimant: &'a Claimant,
    /// The claimant's node in every id form.
    forms: &'a [String],
}

/// What a stream's visitor says of a candidate.
enum Visit {
    /// Go on to the next candidate.
    Next,
    /// Stop the walk.
    Stop,
    /// Stop the walk and load this candidate.
    Take,
}

/// The candidate in `row`, whose stream columns start at `base`.
fn candidate(row: &Row, base: usize) -> Res<Candidate> {
    let id: String = row.get(base);
    let tags: Option<String> = row.get(base + 1);
    let mode: Option<String> = row.get(base + 3);
    Ok(Candidate {
        required_tags: match tags {
            Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(&id, e))?,
            None => Vec::new(),
        },
        not_before_ms: row.get(base + 2),
        task_mode: mode.and_then(|m| m.parse().ok()),
        readonly: row.get::<_, i64>(base + 4) != 0,
        target_node_id: row.get(base + 5),
        target_session_id: row.get(base + 6),
        id,
    })
}

/// A page of a stream read ahead, by the survey: its rows, whose stream
/// columns start at `base`.
struct Page {
    rows: Vec<Row>,
    base: usize,
}

/// Walks one stream in claim order, a page at a time, calling `visit` until it
/// stops the walk or `limit` rows were seen. Returns the candidate `visit` took,
/// loaded from the row the walk already read (its payload is the only one decoded).
/// `first`, when given, is the stream's first page, already read.
fn scan(
    db: &Db<'_>,
    scope: &ClaimScope<'_>,
    (tier, hold, readonly_only): (Tier, i64, bool),
    limit: usize,
    mut first: Option<Page>,
    mut visit: impl FnMut(&Candidate) -> Visit,
) -> Res<Option<Loaded>> {
    let sql = &STREAMS[stream_index(tier, readonly_only)];
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
                    vec![&scope.mesh_id, &hold, &after.0, &after.1, &after.2, &page];
                match tier {
                    Tier::Session => params.push(&scope.claimant.session_id),
                    Tier::Node => params.push(&scope.forms),
                    Tier::Open => {}
                }
                Page { rows: db.query(sql, &params)?, base: 0 }
            }
        };
        for row in &rows {
            let candidate = candidate(row, base)?;
            seen += 1;
            match visit(&candidate) {
                Visit::Take => {
                    let task = decode(&candidate.id, row.get(base + 8))?;
                    return Ok(Some(Loaded {
                        task,
                        deps_unmet: row.get(base + 9),
                        row_id: row.get(base + 7),
                        dependents: None,
                    }));
                }
                Visit::Stop => return Ok(None),
                Visit::Next => {}
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

/// What a claim learns before it walks any candidates, in one statement.
struct Survey {
    /// The session holds an assigned task (the claim's first gate).
    session_assigned: bool,
    /// Some assigned task runs on the claimant's node (any id form).
    node_busy: bool,
    /// The session-pinned and node-pinned streams hold a candidate at hold 0:
    /// a stream without one is not walked.
    session_pinned: bool,
    node_pinned: bool,
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

fn survey(db: &Db<'_>, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<(Survey, Option<Page>)> {
    let mut rows = db.query(&SURVEY, &[&mesh_id, &claimant.session_id, &forms])?;
    let Some(first) = rows.first() else {
        return Err(crate::db::corrupt("the claim survey", "returned no row"));
    };
    let survey = Survey {
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

/// Whether the provider's parallel cap is reached on the claimant's node. All id
/// forms of the node count as one node.
fn cap_reached(db: &Db<'_>, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<bool> {
    let provider = claimant.provider_type.as_deref().map(str::trim).filter(|p| !p.is_empty());
    let (Some(provider), Some(max)) = (provider, claimant.provider_max_parallel) else { return Ok(false) };
    if forms.is_empty() {
        return Ok(false);
    }
    let row = db.query_one(
        "SELECT COUNT(*) FROM mesh_queue
          WHERE mesh_id = $1 AND status = 'assigned'
            AND assigned_node_id = ANY($2) AND assigned_provider_type = $3",
        &[&mesh_id, &forms, &provider],
    )?;
    Ok(row.get::<_, i64>(0) >= i64::from(max))
}

/// Claims the next task for `claimant` in the caller's transaction, which holds
/// the mesh's lock.
///
/// Candidates come tier by tier (session-pinned, node-pinned, open), each in
/// priority then age order, from the claim indexes and only among tasks whose
/// hold is 0. The first candidate that passes every gate wins; only its payload
/// is decoded. When none passes, a bounded look at the other candidates names
/// the reason of the one that got furthest.
pub(crate) fn claim(
    db: &Db<'_>,
    mesh_id: &str,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
) -> Res<ClaimOutcome> {
    decide::check_claimant(claimant)?;
    let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
    let (survey, mut open_page) = survey(db, mesh_id, claimant, &forms)?;
    if survey.session_assigned {
        return Ok(ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned));
    }
    let load =
        NodeLoad { node_busy: survey.node_busy, cap_reached: cap_reached(db, mesh_id, claimant, &forms)? };
    let scope = ClaimScope { mesh_id, claimant, forms: &forms };

    let mut best: Option<ClaimRefusal> = None;
    let mut winner: Option<Loaded> = None;
    if !load.cap_reached {
        for tier in TIERS {
            let empty = match tier {
                Tier::Session => !survey.session_pinned,
                Tier::Node => !survey.node_pinned,
                Tier::Open => false,
            };
            if empty {
                continue;
            }
            let first = if matches!(tier, Tier::Open) { open_page.take() } else { None };
            winner = scan(db, &scope, (tier, 0, load.node_busy), usize::MAX, first, |c| {
                // The streams select only this claimant's rows; gate 6 still
                // checks every pin exactly.
                match check_gates(&c.facts(0), claimant, load, now) {
                    Ok(()) => Visit::Take,
                    Err(reason) => {
                        best = Some(ClaimRefusal::furthest(best, reason));
                        Visit::Next
                    }
                }
            })?;
            if winner.is_some() {
                break;
            }
        }
    }
    if let Some(before) = winner {
        let decision = decide::claim(&before.task, claimant, opts.lease_ms, now, || mint_at(now))?;
        return Ok(ClaimOutcome::Claimed(persist(db, &before, decision, now)?));
    }
    Ok(ClaimOutcome::Refused(diagnose(db, &scope, load, now, best)?))
}

/// Names the refusal when no candidate passed: the reason of the candidate that got
/// furthest through the gates, looking at up to [`DIAGNOSIS_LIMIT`] candidates of
/// each stream the winner scan did not fully cover, deepest possible first.
fn diagnose(
    db: &Db<'_>,
    scope: &ClaimScope<'_>,
    load: NodeLoad,
    now: Timestamp,
    mut best: Option<ClaimRefusal>,
) -> Res<ClaimRefusal> {
    let depth = |b: &Option<ClaimRefusal>| b.map_or(0, |r| r.depth());
    // Streams by hold, with the deepest gate a candidate in them can reach.
    let ready_max = if load.cap_reached {
        ClaimRefusal::ParallelCapReached.depth()
    } else {
        ClaimRefusal::NodeBusyWithActiveAssignment.depth()
    };
    let ready_covered = !load.cap_reached && !load.node_busy;
    let streams = [
        (0, ready_max, ready_covered),
        (2, ClaimRefusal::TaskParked.depth(), false),
        (1, ClaimRefusal::DependenciesUnsatisfied.depth(), false),
    ];
    for (hold, max_depth, covered) in streams {
        if covered || depth(&best) >= max_depth {
            continue;
        }
        for tier in TIERS {
            scan(db, scope, (tier, hold, false), DIAGNOSIS_LIMIT, None, |c| {
                if let Err(reason) = check_gates(&c.facts(hold), scope.claimant, load, now) {
                    best = Some(ClaimRefusal::furthest(best, reason));
                }
                if depth(&best) >= max_depth { Visit::Stop } else { Visit::Next }
            })?;
            if depth(&best) >= max_depth {
                break;
            }
        }
    }
    Ok(best.unwrap_or(ClaimRefusal::NoPendingCandidates))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stream reads one mesh's pending rows and states the condition of
    /// its partial claim index, so the planner can walk that index.
    #[test]
    fn streams_state_their_claim_index_conditions() {
        for tier in TIERS {
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
        let url = std::env::var("AGENTMESH_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let schema = format!("am_test_{}", uuid::Uuid::new_v4().simple());
        let store = crate::PgStore::open(&crate::PgOptions::new(url.clone()).schema(schema.clone()))
            .expect("a fresh PostgreSQL store");
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
        drop(store);
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
        client.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")).expect("the schema dropped");
        assert!(plan.contains("idx_mesh_queue_claim_open"), "expected the claim index walked:\n{plan}");
        assert!(!plan.contains("Sort"), "expected no sort of the pending tasks:\n{plan}");
    }
}
