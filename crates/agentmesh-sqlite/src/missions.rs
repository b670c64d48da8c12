//! Missions (`mesh_missions`). Progress is never stored: it is counted from the
//! tasks carrying the mission id, through `idx_mesh_queue_mission`.

use agentmesh_core::{LedgerEntry, Mission, MissionProgress, NewMission, TaskStatus, Timestamp};
use agentmesh_store::{StoreError, UpsertedMission};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde_json::json;

use crate::{Fail, Res, ledger};

const COLUMNS: &str = "id, mesh_id, title, goal, status, created_at, updated_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Mission> {
    Ok(Mission {
        id: r.get(0)?,
        mesh_id: r.get(1)?,
        title: r.get(2)?,
        goal: r.get(3)?,
        status: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
    })
}

fn by_id(conn: &Connection, id: &str) -> Res<Option<Mission>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM mesh_missions WHERE id = ?1"))?;
    Ok(stmt.query_row([id], from_row).optional()?)
}

fn record(
    conn: &Connection,
    mesh_id: &str,
    kind: &str,
    payload: serde_json::Value,
    now: Timestamp,
) -> Res<()> {
    ledger::append(
        conn,
        &LedgerEntry {
            id: ledger::new_entry_id(now),
            mesh_id: mesh_id.to_owned(),
            timestamp: now.iso(),
            kind: kind.to_owned(),
            node_id: None,
            session_id: None,
            provider_type: None,
            payload,
        },
    )?;
    Ok(())
}

/// Creates or updates a mission with its ledger entries.
pub(crate) fn upsert(
    conn: &Connection,
    mesh_id: &str,
    m: &NewMission,
    now: Timestamp,
) -> Res<UpsertedMission> {
    m.validate()?;
    let id = m.id.trim();
    let existing = by_id(conn, id)?;
    if let Some(other) = existing.as_ref().filter(|e| e.mesh_id != mesh_id) {
        let _ = other;
        return Err(Fail(StoreError::IdInOtherMesh { kind: "mission", id: id.to_owned() }));
    }
    let iso = now.iso();
    let mission = Mission {
        id: id.to_owned(),
        mesh_id: mesh_id.to_owned(),
        title: m.title.trim().to_owned(),
        goal: m.goal.clone().or_else(|| existing.as_ref().map(|e| e.goal.clone())).unwrap_or_default(),
        status: m
            .status
            .clone()
            .or_else(|| existing.as_ref().map(|e| e.status.clone()))
            .unwrap_or_else(|| "active".to_owned()),
        created_at: existing.as_ref().map_or_else(|| iso.clone(), |e| e.created_at.clone()),
        updated_at: iso,
    };
    conn.prepare_cached(&format!(
        "INSERT INTO mesh_missions ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(id) DO UPDATE SET title = excluded.title, goal = excluded.goal,
             status = excluded.status, updated_at = excluded.updated_at"
    ))?
    .execute(params![
        mission.id,
        mission.mesh_id,
        mission.title,
        mission.goal,
        mission.status,
        mission.created_at,
        mission.updated_at
    ])?;
    match &existing {
        None => record(
            conn,
            mesh_id,
            "mission_created",
            json!({"missionId": mission.id, "title": mission.title, "goal": mission.goal, "status": mission.status}),
            now,
        )?,
        Some(before) => {
            if before.status != mission.status {
                record(
                    conn,
                    mesh_id,
                    "mission_status_changed",
                    json!({"missionId": mission.id, "from": before.status, "to": mission.status}),
                    now,
                )?;
            }
            if before.goal != mission.goal {
                record(
                    conn,
                    mesh_id,
                    "mission_goal_updated",
                    json!({"missionId": mission.id, "goal": mission.goal}),
                    now,
                )?;
            }
        }
    }
    Ok(UpsertedMission { mission, created: existing.is_none() })
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

pub(crate) fn clear(conn: &Connection, mesh_id: &str) -> Res<u64> {
    Ok(conn.execute("DELETE FROM mesh_missions WHERE mesh_id = ?1", [mesh_id])? as u64)
}
