//! Creating and updating a mission: the row as it becomes and its entries.

use serde_json::{Value, json};

use crate::{InvalidInput, LedgerEntry, Mission, NewMission, Timestamp};

/// What an upsert stores and records.
#[derive(Debug, Clone, PartialEq)]
pub struct MissionUpsert {
    /// The mission as it is to be stored.
    pub mission: Mission,
    /// Whether it is new.
    pub created: bool,
    /// `mission_created`; or `mission_status_changed` and `mission_goal_updated`
    /// for what an update changed.
    pub ledger: Vec<LedgerEntry>,
}

/// Why an upsert is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissionRefusal {
    /// The request is invalid.
    Invalid(InvalidInput),
    /// The id names a mission of another mesh.
    InOtherMesh {
        /// The (trimmed) id.
        id: String,
    },
}

fn entry(mesh_id: &str, kind: &str, payload: Value, id: String, now: Timestamp) -> LedgerEntry {
    LedgerEntry {
        id,
        mesh_id: mesh_id.to_owned(),
        timestamp: now.iso(),
        kind: kind.to_owned(),
        node_id: None,
        session_id: None,
        provider_type: None,
        payload,
    }
}

/// The id a request names, trimmed: the mission an upsert loads as `existing`.
pub fn mission_id(m: &NewMission) -> &str {
    m.id.trim()
}

/// Creates or updates a mission in `mesh_id`, given the mission stored under the
/// request's id ([`mission_id`]), whichever mesh it belongs to. An update keeps
/// what the request leaves unset and the creation time, and a source once
/// written (the original's `COALESCE(source, excluded.source)`).
pub fn upsert_mission(
    mesh_id: &str,
    m: &NewMission,
    existing: Option<&Mission>,
    now: Timestamp,
    mut mint: impl FnMut() -> String,
) -> Result<MissionUpsert, MissionRefusal> {
    m.validate().map_err(MissionRefusal::Invalid)?;
    let id = mission_id(m);
    if existing.is_some_and(|e| e.mesh_id != mesh_id) {
        return Err(MissionRefusal::InOtherMesh { id: id.to_owned() });
    }
    let iso = now.iso();
    let mission = Mission {
        id: id.to_owned(),
        mesh_id: mesh_id.to_owned(),
        title: m.title.trim().to_owned(),
        goal: m.goal.clone().or_else(|| existing.map(|e| e.goal.clone())).unwrap_or_default(),
        status: m
            .status
            .clone()
            .or_else(|| existing.map(|e| e.status.clone()))
            .unwrap_or_else(|| "active".to_owned()),
        source: existing
            .and_then(|e| e.source.clone())
            .or_else(|| m.source.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)),
        created_at: existing.map_or_else(|| iso.clone(), |e| e.created_at.clone()),
        updated_at: iso,
    };
    let mut ledger = Vec::new();
    match existing {
        None => ledger.push(entry(
            mesh_id,
            "mission_created",
            json!({"missionId": mission.id, "title": mission.title, "goal": mission.goal, "status": mission.status}),
            mint(),
            now,
        )),
        Some(before) => {
            if before.status != mission.status {
                ledger.push(entry(
                    mesh_id,
                    "mission_status_changed",
                    json!({"missionId": mission.id, "from": before.status, "to": mission.status}),
                    mint(),
                    now,
                ));
            }
            if before.goal != mission.goal {
                ledger.push(entry(
                    mesh_id,
                    "mission_goal_updated",
                    json!({"missionId": mission.id, "goal": mission.goal}),
                    mint(),
                    now,
                ));
            }
        }
    }
    Ok(MissionUpsert { mission, created: existing.is_none(), ledger })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("id-{n}")
        }
    }

    fn request(goal: Option<&str>, status: Option<&str>) -> NewMission {
        NewMission {
            id: " m1 ".into(),
            title: " Ship ".into(),
            goal: goal.map(str::to_owned),
            status: status.map(str::to_owned),
            source: None,
        }
    }

    #[test]
    fn a_source_is_written_once() {
        let now = Timestamp::from_millis(1_000);
        let bare = upsert_mission("mesh", &request(None, None), None, now, ids()).unwrap().mission;
        assert_eq!(bare.source, None, "no source given, none stored");
        let given = NewMission { source: Some(" coordinator ".into()), ..request(None, None) };
        let first = upsert_mission("mesh", &given, Some(&bare), now, ids()).unwrap().mission;
        assert_eq!(first.source.as_deref(), Some("coordinator"), "the first source given is written");
        let other = NewMission { source: Some("import".into()), ..request(None, None) };
        let kept = upsert_mission("mesh", &other, Some(&first), now, ids()).unwrap().mission;
        assert_eq!(kept.source.as_deref(), Some("coordinator"), "a written source is kept");
        let blank = NewMission { source: Some(" ".into()), ..request(None, None) };
        assert_eq!(upsert_mission("mesh", &blank, None, now, ids()).unwrap().mission.source, None);
    }

    #[test]
    fn a_new_mission_is_active_and_recorded() {
        let now = Timestamp::from_millis(1_000);
        let up = upsert_mission("mesh", &request(None, None), None, now, ids()).unwrap();
        assert!(up.created);
        assert_eq!((up.mission.id.as_str(), up.mission.title.as_str()), ("m1", "Ship"));
        assert_eq!((up.mission.goal.as_str(), up.mission.status.as_str()), ("", "active"));
        assert_eq!(up.mission.created_at, now.iso());
        assert_eq!(up.ledger.len(), 1);
        let e = &up.ledger[0];
        assert_eq!((e.id.as_str(), e.kind.as_str(), e.mesh_id.as_str()), ("id-1", "mission_created", "mesh"));
        assert_eq!(
            e.payload.to_string(),
            json!({"missionId": "m1", "title": "Ship", "goal": "", "status": "active"}).to_string()
        );
    }

    #[test]
    fn an_update_records_what_changed_and_keeps_the_rest() {
        let t0 = Timestamp::from_millis(1_000);
        let first = upsert_mission("mesh", &request(Some("g"), None), None, t0, ids()).unwrap().mission;
        let t1 = Timestamp::from_millis(2_000);
        let same = upsert_mission("mesh", &request(None, None), Some(&first), t1, ids()).unwrap();
        assert!(!same.created && same.ledger.is_empty());
        assert_eq!(
            (same.mission.goal.as_str(), same.mission.created_at.as_str()),
            ("g", first.created_at.as_str())
        );
        assert_eq!(same.mission.updated_at, t1.iso());
        let both =
            upsert_mission("mesh", &request(Some("g2"), Some("paused")), Some(&first), t1, ids()).unwrap();
        let kinds: Vec<&str> = both.ledger.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["mission_status_changed", "mission_goal_updated"]);
        assert_eq!(both.ledger[0].payload, json!({"missionId": "m1", "from": "active", "to": "paused"}));
        assert_eq!(both.ledger[1].payload, json!({"missionId": "m1", "goal": "g2"}));
        assert_eq!((both.ledger[0].id.as_str(), both.ledger[1].id.as_str()), ("id-1", "id-2"));
    }

    #[test]
    fn refusals_name_the_field_or_the_other_mesh() {
        let now = Timestamp::from_millis(0);
        let other = upsert_mission("other", &request(None, None), None, now, ids()).unwrap().mission;
        assert_eq!(
            upsert_mission("mesh", &request(None, None), Some(&other), now, ids()),
            Err(MissionRefusal::InOtherMesh { id: "m1".into() })
        );
        let blank = NewMission { title: " ".into(), ..request(None, None) };
        match upsert_mission("mesh", &blank, None, now, ids()) {
            Err(MissionRefusal::Invalid(e)) => assert_eq!(e.field, "title"),
            other => panic!("{other:?}"),
        }
        let bad_status = request(None, Some("Done!"));
        assert!(matches!(
            upsert_mission("mesh", &bad_status, None, now, ids()),
            Err(MissionRefusal::Invalid(_))
        ));
    }
}
