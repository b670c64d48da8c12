//! Missions (`mesh_missions`) and the scheduler cursor. Progress is never
//! stored: it is counted from the tasks carrying the mission id, through
//! `idx_mesh_queue_mission`.

use agentmesh_core::effects::mission::{mission_id, upsert_mission};
use agentmesh_core::{Mission, MissionProgress, NewMission, TaskStatus, Timestamp};
use agentmesh_store::ids::mint_at;
use agentmesh_store::{MissionQuery, StoreError, StoreResult, UpsertedMission};
use postgres::Row;

use crate::db::{Db, unsigned};
use crate::{Fail, PgStore, Res, ledger};

fn from_row(r: &Row) -> Res<Mission> {
    crate::db::record(r, agentmesh_store::cells::mission)
}

/// The mission `id` of the mesh.
pub(crate) fn get(db: &Db<'_>, mesh_id: &str, id: &str) -> Res<Option<Mission>> {
    let row = db.query_opt(
        "SELECT id, mesh_id, title, goal, status, created_at, updated_at, source
           FROM mesh_missions WHERE mesh_id = $1 AND id = $2",
        &[&mesh_id, &id],
    )?;
    row.as_ref().map(from_row).transpose()
}

/// Creates or updates a mission with its ledger entries. The caller holds the
/// mesh lock, so of concurrent upserts of a new id exactly one creates it.
pub(crate) fn upsert(db: &Db<'_>, mesh_id: &str, m: &NewMission, now: Timestamp) -> Res<UpsertedMission> {
    let existing = get(db, mesh_id, mission_id(m))?;
    let decision =
        upsert_mission(mesh_id, m, existing.as_ref(), now, || mint_at(now)).map_err(StoreError::from)?;
    let mission = decision.mission;
    db.execute(
        "INSERT INTO mesh_missions (mesh_id, id, title, goal, status, created_at, updated_at, source)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (mesh_id, id) DO UPDATE SET title = EXCLUDED.title, goal = EXCLUDED.goal,
             status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
             source = COALESCE(mesh_missions.source, EXCLUDED.source)",
        &[
            &mission.mesh_id,
            &mission.id,
            &mission.title,
            &mission.goal,
            &mission.status,
            &mission.created_at,
            &mission.updated_at,
            &mission.source,
        ],
    )?;
    for entry in &decision.ledger {
        ledger::append(db, entry)?;
    }
    Ok(UpsertedMission { mission, created: decision.created })
}

/// The mesh's missions, of the given statuses (all when none), most recently
/// updated first, the later created first among equals.
pub(crate) fn list(db: &Db<'_>, mesh_id: &str, statuses: &[String]) -> Res<Vec<Mission>> {
    let rows = if statuses.is_empty() {
        db.query(
            "SELECT id, mesh_id, title, goal, status, created_at, updated_at, source
               FROM mesh_missions WHERE mesh_id = $1
              ORDER BY updated_at DESC, row_id DESC",
            &[&mesh_id],
        )?
    } else {
        db.query(
            "SELECT id, mesh_id, title, goal, status, created_at, updated_at, source
               FROM mesh_missions WHERE mesh_id = $1 AND status = ANY($2)
              ORDER BY updated_at DESC, row_id DESC",
            &[&mesh_id, &statuses],
        )?
    };
    rows.iter().map(from_row).collect()
}

/// The counts of the mission's tasks by status; a mission the mesh does not
/// have is not found. Its two statements must see one snapshot.
pub(crate) fn progress(db: &Db<'_>, mesh_id: &str, id: &str) -> Res<MissionProgress> {
    if get(db, mesh_id, id)?.is_none() {
        return Err(Fail(StoreError::NotFound {
            kind: "mission",
            mesh_id: mesh_id.to_owned(),
            id: id.to_owned(),
        }));
    }
    let rows = db.query(
        "SELECT status, COUNT(*) FROM mesh_queue WHERE mesh_id = $1 AND mission_id = $2 GROUP BY status",
        &[&mesh_id, &id],
    )?;
    Ok(MissionProgress::from_counts(rows.iter().filter_map(|r| {
        let status: String = r.get(0);
        status.parse::<TaskStatus>().ok().map(|s| (s, unsigned(r.get(1))))
    })))
}

/// Advances the mesh's scheduler cursor by one; returns the value before.
pub(crate) fn bump_cursor(db: &Db<'_>, mesh_id: &str) -> Res<u64> {
    let row = db.query_one(
        "INSERT INTO mesh_scheduler_cursor (mesh_id, cursor) VALUES ($1, 1)
         ON CONFLICT (mesh_id) DO UPDATE SET cursor = mesh_scheduler_cursor.cursor + 1
         RETURNING cursor - 1",
        &[&mesh_id],
    )?;
    Ok(unsigned(row.get(0)))
}

impl agentmesh_store::MissionStore for PgStore {
    fn upsert_mission(
        &self,
        mesh_id: &str,
        mission: &NewMission,
        now: Timestamp,
    ) -> StoreResult<UpsertedMission> {
        self.write(mesh_id, |db| upsert(db, mesh_id, mission, now))
    }

    fn missions(&self, mesh_id: &str, query: MissionQuery<'_>) -> StoreResult<Vec<Mission>> {
        self.read(|db| match query {
            MissionQuery::Id(id) => Ok(get(db, mesh_id, id)?.into_iter().collect()),
            MissionQuery::Statuses(statuses) => list(db, mesh_id, statuses),
        })
    }

    fn mission_progress(&self, mesh_id: &str, id: &str) -> StoreResult<MissionProgress> {
        self.snapshot(|db| progress(db, mesh_id, id))
    }

    fn bump_scheduler_cursor(&self, mesh_id: &str) -> StoreResult<u64> {
        self.write(mesh_id, |db| bump_cursor(db, mesh_id))
    }
}
