//! Claims: the claim streams (index walks in claim order) and the survey that
//! precedes them, for the core's claim walk ([`agentmesh_core::claim::walk`]).

use agentmesh_core::claim::walk::{self, Candidate, Stream, Tier, Visit, Visitor, Walked};
use agentmesh_core::effects::task as decide;
use agentmesh_core::{Claimant, NodeLoad, Timestamp, daemon_id};
use agentmesh_store::ids::mint_at;
use agentmesh_store::reservation_writes;
use agentmesh_store::task_writes::persist;
use agentmesh_store::{ClaimOptions, ClaimOutcome, StoreError};
use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use super::persist::Rows;
use super::rows::{Loaded, corrupt, decode};
use crate::durability::Ceilings;
use crate::payload::Bytes;
use crate::{Fail, Res};

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

/// The claim streams of one claim, on the caller's connection.
struct Streams<'a> {
    conn: &'a Connection,
    mesh_id: &'a str,
    claimant: &'a Claimant,
    /// The claimant's node in every id form.
    forms: &'a [String],
    now: Timestamp,
    /// A candidate was stepped over for another holder's path reservation.
    paths_reserved: bool,
}

impl walk::Streams for Streams<'_> {
    type Taken = Loaded;
    type Error = Fail;

    /// Reads the stream in one query; only the taken candidate's payload is
    /// decoded, from the row the walk already read.
    fn scan(&mut self, stream: Stream, limit: usize, visit: Visitor<'_>) -> Res<Option<Loaded>> {
        let Stream { tier, hold, readonly_only } = stream;
        let sql = stream_sql(tier, hold, readonly_only, self.forms.len());
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let mut args: Vec<Value> = vec![Value::Text(self.mesh_id.to_owned())];
        match tier {
            Tier::Session => args.push(Value::Text(self.claimant.session_id.clone())),
            Tier::Node => args.extend(self.forms.iter().map(|f| Value::Text(f.clone()))),
            Tier::Open => {}
        }
        let mut rows = stmt.query(params_from_iter(args.iter()))?;
        let mut seen = 0;
        while let Some(row) = rows.next()? {
            let tags: Option<String> = row.get(1)?;
            let mode: Option<String> = row.get(3)?;
            let mut candidate = Candidate::from_columns(
                row.get(0)?,
                tags.as_deref(),
                row.get(2)?,
                mode.as_deref(),
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
            )
            .map_err(|bad| corrupt(&bad.id, bad.error))?;
            if self.claimant.allowed_difficulties.is_some() {
                let payload: Bytes = row.get(8)?;
                candidate.read_difficulty(
                    self.claimant,
                    &agentmesh_store::packed::unpack(&payload.0).unwrap_or_default(),
                );
            }
            seen += 1;
            match visit(&candidate) {
                Visit::Take => {
                    let payload: Bytes = row.get(8)?;
                    let task = decode(&candidate.id, &payload.0)?;
                    let paths = crate::reservations::Rows(self.conn);
                    let found =
                        reservation_writes::blocking(&paths, &task, &self.claimant.session_id, self.now)?;
                    if found.is_empty() {
                        return Ok(Some(Loaded { task, deps_unmet: row.get(9)?, rowid: row.get(7)? }));
                    }
                    reservation_writes::skipped(&paths, &task, self.claimant, &found, self.now)?;
                    self.paths_reserved = true;
                    if seen >= limit {
                        break;
                    }
                }
                Visit::Stop => break,
                Visit::Next if seen >= limit => break,
                Visit::Next => {}
            }
        }
        Ok(None)
    }
}

/// `+?start, +?start+1, ...`: parameters for an `IN` list (see [`stream_sql`] for the `+`).
fn in_list(start: usize, n: usize) -> String {
    (0..n).map(|i| format!("+?{}", start + i)).collect::<Vec<_>>().join(", ")
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

fn survey(conn: &Connection, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<walk::Survey> {
    let mut stmt = conn.prepare_cached(&survey_sql(forms.len()))?;
    stmt.raw_bind_parameter(1, mesh_id)?;
    stmt.raw_bind_parameter(2, &claimant.session_id)?;
    for (i, form) in forms.iter().enumerate() {
        stmt.raw_bind_parameter(i + 3, form)?;
    }
    let mut rows = stmt.raw_query();
    let row =
        rows.next()?.ok_or_else(|| Fail(StoreError::Backend("the claim survey returned no row".into())))?;
    Ok(walk::Survey {
        session_assigned: row.get(0)?,
        node_busy: row.get(1)?,
        session_pinned: row.get(2)?,
        node_pinned: row.get(3)?,
    })
}

/// How many assigned tasks of the claimant's capped provider run on its node
/// (0 when no cap applies). All id forms of the node count as one node.
fn of_provider(conn: &Connection, mesh_id: &str, claimant: &Claimant, forms: &[String]) -> Res<u64> {
    let Some((provider, _)) = claimant.parallel_cap() else { return Ok(0) };
    if forms.is_empty() {
        return Ok(0);
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
    Ok(u64::try_from(active).unwrap_or(0))
}

/// Claims the next task for `claimant` in one transaction: the survey, the
/// node's load, then the core's walk over the streams; the winner's claim is
/// decided by the core and persisted, or the walk's refusal returned.
pub(crate) fn claim(
    conn: &Connection,
    ceilings: &Ceilings,
    mesh_id: &str,
    claimant: &Claimant,
    opts: &ClaimOptions,
    now: Timestamp,
) -> Res<ClaimOutcome> {
    decide::check_claimant(claimant)?;
    let forms = daemon_id::expand_daemon_id_forms([claimant.node_id.as_str()]);
    let survey = survey(conn, mesh_id, claimant, &forms)?;
    if survey.session_assigned {
        return Ok(ClaimOutcome::Refused(agentmesh_core::ClaimRefusal::SessionAlreadyAssigned));
    }
    let load =
        NodeLoad::from_counts(claimant, survey.node_busy, of_provider(conn, mesh_id, claimant, &forms)?);
    let mut streams = Streams { conn, mesh_id, claimant, forms: &forms, now, paths_reserved: false };
    match walk::walk(&mut streams, &survey, claimant, load, now)? {
        Walked::Take(mut before) => {
            ceilings.lift(&mut before.task);
            let decision = decide::claim(&before.task, claimant, opts.lease_ms, now, || mint_at(now))?;
            ceilings.note_epoch(decision.task.epoch());
            Ok(ClaimOutcome::Claimed(persist(&Rows(conn), &before, decision, now)?))
        }
        Walked::Refused(reason) => Ok(ClaimOutcome::Refused(if streams.paths_reserved {
            agentmesh_core::ClaimRefusal::PathsReserved
        } else {
            reason
        })),
    }
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
