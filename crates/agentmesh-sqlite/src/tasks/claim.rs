//! Claims: the claim streams (index walks in claim order), the survey that
//! precedes them, and the diagnosis of a refusal.

use agentmesh_core::claim::check_gates;
use agentmesh_core::effects::task as decide;
use agentmesh_core::{CandidateFacts, ClaimRefusal, Claimant, NodeLoad, TaskMode, Timestamp, daemon_id};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{ClaimOptions, ClaimOutcome, StoreError};
use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use super::persist::persist;
use super::rows::{Loaded, corrupt, decode};
use crate::{Fail, Res};

/// How many candidates a refusal diagnosis looks at per stream.
const DIAGNOSIS_LIMIT: usize = 256;

/// The candidate columns a claim reads, without the payload.
struct Candidate {
    id: String,
    rowid: i64,
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

/// The SQL of one stream.
///
/// Written so that SQLite plans it once. In an ordered query SQLite compares the
/// value bound to an equality term while planning and re-prepares the statement
/// whenever that binding changes, which the statement cache does on every reuse.
/// So `hold` is a literal and the bound values are wrapped in a unary `+`, which
/// keeps them usable as index keys but out of that comparison.
fn stream_sql(tier: Tier, hold: i64, readonly_only: bool, forms: usize) -> String {
    let mut sql = format!(
        "SELECT id, required_tags, not_before_ms, task_mode, readonly, target_node_id, target_session_id, rowid,
                payload, deps_unmet
           FROM mesh_queue WHERE mesh_id = +?1 AND status = 'pending' AND hold = {hold} AND "
    );
    match tier {
        Tier::Session => sql.push_str("target_session_id = +?2"),
        Tier::Node => {
            sql.push_str("target_session_id IS NULL AND target_node_id IN (");
            sql.push_str(&in_list(2, forms));
            sql.push(')');
        }
        Tier::Open => sql.push_str("target_session_id IS NULL AND target_node_id IS NULL"),
    }
    if readonly_only {
        sql.push_str(" AND readonly = 1");
    }
    sql.push_str(" ORDER BY priority_rank DESC, created_at ASC, rowid ASC");
    sql
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

/// Walks one stream in claim order, calling `visit` until it stops the walk or
/// `limit` rows were seen. Returns the candidate `visit` took, loaded from the row
/// the walk already read (its payload is the only one decoded).
fn scan(
    conn: &Connection,
    scope: &ClaimScope<'_>,
    (tier, hold, readonly_only): (Tier, i64, bool),
    limit: usize,
    mut visit: impl FnMut(&Candidate) -> Visit,
) -> Res<Option<Loaded>> {
    let sql = stream_sql(tier, hold, readonly_only, scope.forms.len());
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut args: Vec<Value> = vec![Value::Text(scope.mesh_id.to_owned())];
    match tier {
        Tier::Session => args.push(Value::Text(scope.claimant.session_id.clone())),
        Tier::Node => args.extend(scope.forms.iter().map(|f| Value::Text(f.clone()))),
        Tier::Open => {}
    }
    let mut rows = stmt.query(params_from_iter(args.iter()))?;
    let mut seen = 0;
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        let tags: Option<String> = row.get(1)?;
        let mode: Option<String> = row.get(3)?;
        let candidate = Candidate {
            required_tags: match tags {
                Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(&id, e))?,
                None => Vec::new(),
            },
            not_before_ms: row.get(2)?,
            task_mode: mode.and_then(|m| m.parse().ok()),
            readonly: row.get(4)?,
            target_node_id: row.get(5)?,
            target_session_id: row.get(6)?,
            rowid: row.get(7)?,
            id,
        };
        seen += 1;
        match visit(&candidate) {
            Visit::Take => {
                let payload: String = row.get(8)?;
                let task = decode(&candidate.id, &payload)?;
                return Ok(Some(Loaded { task, deps_unmet: row.get(9)?, rowid: candidate.rowid }));
            }
            Visit::Stop => break,
            Visit::Next if seen >= limit => break,
            Visit::Next => {}
        }
    }
    Ok(None)
}

/// `+?start, +?start+1, ...`: parameters for an `IN` list (see [`stream_sql`] for the `+`).
fn in_list(start: usize, n: usize) -> String {
    (0..n).map(|i| format!("+?{}", start + i)).collect::<Vec<_>>().join(", ")
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

/// The SQL of [`survey`] for a node with `forms` id forms: `?1` mesh, `?2`
/// session, `?3...` the node's forms (bound as `+?`, see [`stream_sql`]).
fn survey_sql(forms: usize) -> String {
    let node = if forms == 0 { String::from("NULL") } else { in_list(3, forms) };
    format!(
        "SELECT
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
                    WHERE mesh_id = +?1 AND status = 'assigned' AND assigned_session_id = +?2),
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
                    WHERE mesh_id = +?1 AND status = 'assigned' AND assigned_node_id IN ({node})),
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_claim_session
                    WHERE mesh_id = +?1 AND status = 'pending' AND hold = 0 AND target_session_id = +?2),
           EXISTS (SELECT 1 FROM mesh_queue INDEXED BY idx_mesh_queue_claim_node
                    WHERE mesh_id = +?1 AND status = 'pending' AND hold = 0
                      AND target_session_id IS NULL AND target_node_id IN ({node}))"
    )
}

fn survey(conn: &Connection, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<Survey> {
    let mut stmt = conn.prepare_cached(&survey_sql(forms.len()))?;
    stmt.raw_bind_parameter(1, mesh_id)?;
    stmt.raw_bind_parameter(2, &claimant.session_id)?;
    for (i, form) in forms.iter().enumerate() {
        stmt.raw_bind_parameter(i + 3, form)?;
    }
    let mut rows = stmt.raw_query();
    let row =
        rows.next()?.ok_or_else(|| Fail(StoreError::Backend("the claim survey returned no row".into())))?;
    Ok(Survey {
        session_assigned: row.get(0)?,
        node_busy: row.get(1)?,
        session_pinned: row.get(2)?,
        node_pinned: row.get(3)?,
    })
}

/// Whether the provider's parallel cap is reached on the claimant's node. All id
/// forms of the node count as one node.
fn cap_reached(conn: &Connection, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<bool> {
    let provider = claimant.provider_type.as_deref().map(str::trim).filter(|p| !p.is_empty());
    let (Some(provider), Some(max)) = (provider, claimant.provider_max_parallel) else { return Ok(false) };
    if forms.is_empty() {
        return Ok(false);
    }
    let mut args: Vec<Value> = vec![Value::Text(mesh_id.to_owned())];
    args.extend(forms.iter().map(|f| Value::Text(f.clone())));
    args.push(Value::Text(provider.to_owned()));
    let sql = format!(
        "SELECT COUNT(*) FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
          WHERE mesh_id = ?1 AND status = 'assigned'
            AND assigned_node_id IN ({}) AND assigned_provider_type = ?{}",
        in_list(2, forms.len()),
        forms.len() + 2
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let active: i64 = stmt.query_row(params_from_iter(args.iter()), |r| r.get(0))?;
    Ok(active >= i64::from(max))
}

/// Claims the next task for `claimant` in one transaction.
///
/// Candidates come tier by tier (session-pinned, node-pinned, open), each in
/// priority then age order, straight from the claim indexes and only among tasks
/// whose hold is 0. The first candidate that passes every gate wins; only its
/// payload is decoded. When none passes, a bounded look at the other candidates
/// names the reason of the one that got furthest.
pub(crate) fn claim(
    conn: &Connection,
    mesh_id: &str,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
) -> Res<ClaimOutcome> {
    decide::check_claimant(claimant)?;
    let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
    let survey = survey(conn, mesh_id, claimant, &forms)?;
    if survey.session_assigned {
        return Ok(ClaimOutcome::Refused(ClaimRefusal::SessionAlreadyAssigned));
    }
    let load =
        NodeLoad { node_busy: survey.node_busy, cap_reached: cap_reached(conn, mesh_id, claimant, &forms)? };
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
            winner = scan(conn, &scope, (tier, 0, load.node_busy), usize::MAX, |c| {
                // The tier queries select only this claimant's rows; gate 6 still
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
        return Ok(ClaimOutcome::Claimed(persist(conn, &before, decision, now)?));
    }
    Ok(ClaimOutcome::Refused(diagnose(conn, &scope, load, now, best)?))
}

/// Names the refusal when no candidate passed: the reason of the candidate that got
/// furthest through the gates, looking at up to [`DIAGNOSIS_LIMIT`] candidates of
/// each stream the winner scan did not fully cover, deepest possible first.
fn diagnose(
    conn: &Connection,
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
            scan(conn, scope, (tier, hold, false), DIAGNOSIS_LIMIT, |c| {
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

    use crate::query_plan as plan;

    /// Every claim stream is an index range in claim order: no sort, no table scan,
    /// whatever the queue depth.
    #[test]
    fn claim_streams_walk_their_index_in_claim_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        conn.execute_batch("ANALYZE").unwrap();
        let t = |s: &str| Value::Text(s.to_owned());
        let cases = [
            (stream_sql(Tier::Open, 0, false, 0), vec![t("m")], "idx_mesh_queue_claim_open"),
            (stream_sql(Tier::Open, 1, true, 0), vec![t("m")], "idx_mesh_queue_claim_open_readonly"),
            (stream_sql(Tier::Session, 2, false, 0), vec![t("m"), t("s")], "idx_mesh_queue_claim_session"),
        ];
        for (sql, args, index) in cases {
            let p = plan(&conn, &sql, &args);
            assert!(p.contains(index), "{sql}\n{p}");
            assert!(!p.contains("TEMP B-TREE"), "{sql}\n{p}");
        }
        let p = plan(&conn, &stream_sql(Tier::Node, 0, false, 1), &[t("m"), t("n")]);
        assert!(p.contains("idx_mesh_queue_claim_node"), "{p}");
    }

    /// Every read of assigned rows goes through the one assigned-rows index and
    /// never needs the table to decide which rows match.
    #[test]
    fn assigned_reads_use_the_assigned_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        conn.execute_batch("ANALYZE").unwrap();
        let t = |s: &str| Value::Text(s.to_owned());
        let p = plan(&conn, &survey_sql(2), &[t("m"), t("s"), t("n"), t("n2")]);
        for search in ["(mesh_id=? AND assigned_session_id=?)", "(mesh_id=?)"] {
            assert!(p.contains(&format!("USING COVERING INDEX idx_mesh_queue_assigned {search}")), "{p}");
        }
        assert!(p.contains("idx_mesh_queue_claim_session"), "{p}");
        assert!(p.contains("idx_mesh_queue_claim_node"), "{p}");
        let p = plan(
            &conn,
            "SELECT mesh_id, id FROM mesh_queue INDEXED BY idx_mesh_queue_assigned
              WHERE status = 'assigned' AND lease_expires_ms IS NOT NULL AND lease_expires_ms < ?1",
            &[Value::Integer(0)],
        );
        assert!(p.contains("USING COVERING INDEX idx_mesh_queue_assigned"), "{p}");
    }

    /// A claim's statements are planned once: changing the mesh, session or node
    /// bound to them never forces SQLite to re-prepare them.
    #[test]
    fn claim_statements_are_not_re_prepared_per_claim() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        for sql in [
            stream_sql(Tier::Open, 0, false, 0),
            stream_sql(Tier::Session, 0, false, 0),
            stream_sql(Tier::Node, 1, true, 1),
            survey_sql(2),
        ] {
            for i in 0..20 {
                let mut stmt = conn.prepare_cached(&sql).unwrap();
                let args: Vec<Value> =
                    (0..stmt.parameter_count()).map(|p| Value::Text(format!("v{p}-{i}"))).collect();
                let mut rows = stmt.query(params_from_iter(args.iter())).unwrap();
                while rows.next().unwrap().is_some() {}
            }
            let stmt = conn.prepare_cached(&sql).unwrap();
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0, "{sql}");
        }
    }
}
