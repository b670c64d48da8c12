//! Missions (`mesh_missions`). Progress is never stored: it is counted from the
//! tasks carrying the mission id, through `idx_mesh_queue_mission`.

use agentmesh_core::effects::mission::{mission_id, upsert_mission};
use agentmesh_core::{Mission, MissionProgress, NewMission, TaskStatus, Timestamp};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{StoreError, UpsertedMission};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use crate::{Fail, Res, ledger};

pub(crate) use agentmesh_store::cells::MISSION_COLUMNS as COLUMNS;

pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Mission> {
    crate::cells::record(r, agentmesh_store::cells::mission)
}

fn by_id(conn: &Connection, id: &str) -> Res<Option<Mission>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM mesh_missions WHERE id = ?1"))?;
    Ok(stmt.query_row([id], from_row).optional()?)
}

/// Creates or updates a mission with its ledger entries.
pub(crate) fn upsert(
    conn: &Connection,
    mesh_id: &str,
    m: &NewMission,
    now: Timestamp,
) -> Res<UpsertedMission> {
    let existing = by_id(conn, mission_id(m))?;
    let decision =
        upsert_mission(mesh_id, m, existing.as_ref(), now, || mint_at(now)).map_err(StoreError::from)?;
    let mission = decision.mission;
    conn.prepare_cached(&format!(
        "INSERT INTO mesh_missions ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT(id) DO UPDATE SET title = excluded.title, goal = excluded.goal,
             status = excluded.status, updated_at = excluded.updated_at,
             source = COALESCE(mesh_missions.source, excluded.source)"
    ))?
    .execute(params![
        mission.id,
        mission.mesh_id,
        mission.title,
        mission.goal,
        mission.status,
        mission.created_at,
        mission.updated_at,
        mission.source
    ])?;
    for entry in &decision.ledger {
        ledger::append(conn, entry)?;
    }
    Ok(UpsertedMission { mission, created: decision.created })
}

pub(crate) fn get(conn: &Connection, mesh_id: &str, id: &str) -> Res<Option<Mission>> {
    Ok(by_id(conn, id)?.filter(|m| m.mesh_id == mesh_id))
}

pub(crate) fn list(conn: &Connection, mesh_id: &str, statuses: &[String]) -> Res<Vec<Mission>> {
    let mut sql = format!("SELECT {COLUMNS} FROM mesh_missions WHERE mesh_id = +?");
    let mut args = vec![Value::Text(mesh_id.to_owned())];
    if !statuses.is_empty() {
        sql.push_str(&format!(" AND status IN ({})", vec!["+?"; statuses.len()].join(", ")));
        args.extend(statuses.iter().map(|s| Value::Text(s.clone())));
    }
    sql.push_str(" ORDER BY updated_at DESC, rowid DESC");
    let mut stmt = conn.prepare_cached(&sql)?;
    Ok(stmt.query_map(params_from_iter(args.iter()), from_row)?.collect::<Result<Vec<_>, _>>()?)
}

pub(crate) fn progress(conn: &Connection, mesh_id: &str, id: &str) -> Res<MissionProgress> {
    if get(conn, mesh_id, id)?.is_none() {
        return Err(Fail(StoreError::NotFound {
            kind: "mission",
            mesh_id: mesh_id.to_owned(),
            id: id.to_owned(),
        }));
    }
    let mut stmt = conn.prepare_cached(
        "SELECT status, COUNT(*) FROM mesh_queue WHERE mesh_id = ?1 AND mission_id = ?2 GROUP BY status",
    )?;
    let rows = stmt
        .query_map(params![mesh_id, id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(MissionProgress::from_counts(
        rows.into_iter().filter_map(|(s, n)| s.parse::<TaskStatus>().ok().map(|s| (s, n as u64))),
    ))
}
