//! Reading the original's legacy files. Parsing is strict: a malformed file is
//! refused whole, with the position and field of the first problem, so an import
//! either takes everything or changes nothing.

use std::path::Path;

use agentmesh_core::Task;

use crate::StoreError;

/// The file name the original uses for a mesh: characters outside
/// `[A-Za-z0-9_-]` become `_`.
pub fn safe_mesh_id(mesh_id: &str) -> String {
    mesh_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// The legacy queue file of a mesh in a ledger directory: `<mesh>.queue.json`.
pub fn legacy_queue_path(dir: &Path, mesh_id: &str) -> std::path::PathBuf {
    dir.join(format!("{}.queue.json", safe_mesh_id(mesh_id)))
}

/// Parses a legacy `<mesh>.queue.json` (a JSON array of queue entries). Every entry
/// must belong to `mesh_id`.
pub fn parse_legacy_queue(path: &Path, text: &str, mesh_id: &str) -> Result<Vec<Task>, StoreError> {
    let bad = |problem: String| StoreError::LegacyFile { path: path.to_owned(), problem };
    let mut de = serde_json::Deserializer::from_str(text);
    let tasks: Vec<Task> = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let at = err.path().to_string();
        let inner = err.into_inner();
        if at.is_empty() || at == "." { bad(format!("{inner}")) } else { bad(format!("at {at}: {inner}")) }
    })?;
    for (i, task) in tasks.iter().enumerate() {
        if task.id.trim().is_empty() {
            return Err(bad(format!("at [{i}].id: must not be blank")));
        }
        if task.mesh_id != mesh_id {
            return Err(bad(format!(
                "at [{i}].meshId: entry belongs to mesh {:?}, not {mesh_id:?}",
                task.mesh_id
            )));
        }
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesh_ids_are_made_safe() {
        assert_eq!(safe_mesh_id("team/repo:main"), "team_repo_main");
        assert_eq!(safe_mesh_id("mesh-alpha_1"), "mesh-alpha_1");
    }

    #[test]
    fn malformed_files_name_the_problem() {
        let p = Path::new("m.queue.json");
        let err = parse_legacy_queue(p, "{not json", "m").unwrap_err();
        assert!(matches!(err, StoreError::LegacyFile { .. }), "{err}");
        let err = parse_legacy_queue(
            p,
            r#"[{"id":"a","meshId":"m","message":"x","status":"done","createdAt":"","updatedAt":""}]"#,
            "m",
        )
        .unwrap_err();
        assert!(err.to_string().contains("[0].status"), "{err}");
        let err = parse_legacy_queue(
            p,
            r#"[{"id":"a","meshId":"other","message":"x","status":"pending","createdAt":"","updatedAt":""}]"#,
            "m",
        )
        .unwrap_err();
        assert!(err.to_string().contains("meshId"), "{err}");
    }
}
