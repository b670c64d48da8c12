//! Idle worker sessions, and the completion fingerprints and conflicts that keep
//! one completion from being handled twice.

use serde_json::Value;

use crate::InvalidInput;

/// A worker session that reported itself idle, until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleSession {
    /// The mesh. Idle sessions never cross meshes, even on a shared node id.
    pub mesh_id: String,
    /// The node the session runs on.
    pub node_id: String,
    /// The session.
    pub session_id: String,
    /// Its provider type.
    pub provider_type: String,
    /// When the report runs out (epoch milliseconds).
    pub expires_at_ms: i64,
    /// Anything else the session reported.
    pub metadata: Option<Value>,
}

impl IdleSession {
    /// Checks the identifying fields: the ids against the id rule, the provider not blank.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        for (field, value) in
            [("meshId", &self.mesh_id), ("nodeId", &self.node_id), ("sessionId", &self.session_id)]
        {
            crate::ids::validate_id(field, value)?;
        }
        if self.provider_type.trim().is_empty() {
            return Err(InvalidInput::new("providerType", "must not be blank"));
        }
        Ok(())
    }
}

/// Default lifetime of a completion fingerprint: one hour.
pub const FINGERPRINT_TTL_MS: i64 = 60 * 60 * 1000;
/// Default window of recent completion conflicts: one hour.
pub const CONFLICT_WINDOW_MS: i64 = 60 * 60 * 1000;
/// Most conflicts a recent-conflicts read returns.
pub const CONFLICT_LIMIT: u32 = 50;

/// Two tasks claimed one completion fingerprint: a diagnostic record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionConflict {
    /// Record id; recording an existing id is a no-op.
    pub id: String,
    /// The mesh.
    pub mesh_id: String,
    /// The contested fingerprint.
    pub fingerprint: String,
    /// The task whose completion was suppressed.
    pub conflicting_task_id: Option<String>,
    /// Its session.
    pub conflicting_session_id: Option<String>,
    /// The task that owned the fingerprint first.
    pub original_task_id: Option<String>,
    /// Its session.
    pub original_session_id: Option<String>,
    /// The event name.
    pub event: String,
    /// When (ISO).
    pub created_at: String,
}

/// A completion fingerprint as recorded: a completion with this key was handled,
/// and another with the same key is a duplicate until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionFingerprint {
    /// The key, as the original built it (`mesh::event::taskId::genuine`, ...).
    pub fingerprint: String,
    /// When it stops counting (epoch milliseconds).
    pub expires_at_ms: i64,
}

/// What the text of a completion fingerprint names. Fingerprints are built from
/// the event (see [`crate::events::pending_event_fingerprint`]); reading them back
/// is what lets an operator find the ones of a task or a session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FingerprintParts {
    /// A durable dedup record (`pending::` prefix) that outlives the drain.
    pub durable: bool,
    /// The mesh part.
    pub mesh_id: Option<String>,
    /// The event name.
    pub event: Option<String>,
    /// The task the completion was about.
    pub task_id: Option<String>,
    /// The reporting session (only the general form carries one).
    pub session_id: Option<String>,
    /// The node (bootstrap and general forms).
    pub node_id: Option<String>,
    /// `weak` or `genuine` for a task-keyed completion.
    pub strength: Option<String>,
}

/// Reads a fingerprint's parts. The forms are the four the fingerprint is built
/// in: `mesh::event::taskId::weak|genuine`, `mesh::event::taskId::group::group`,
/// `mesh::event::nodeId` (worktree bootstrap) and the general
/// `mesh::event::nodeId::sessionId::providerSessionId::taskId::jobId::timestamp`.
/// Anything else gives only the mesh and event parts.
pub fn fingerprint_parts(fingerprint: &str) -> FingerprintParts {
    let (durable, rest) = match fingerprint.strip_prefix("pending::") {
        Some(rest) => (true, rest),
        None => (false, fingerprint),
    };
    let parts: Vec<&str> = rest.split("::").collect();
    let part = |i: usize| parts.get(i).map(|p| p.trim()).filter(|p| !p.is_empty()).map(str::to_owned);
    let mut out =
        FingerprintParts { durable, mesh_id: part(0), event: part(1), ..FingerprintParts::default() };
    match parts.len() {
        3 => out.node_id = part(2),
        4 if matches!(parts[3], "weak" | "genuine") => {
            out.task_id = part(2);
            out.strength = part(3);
        }
        5 if parts[4] == "group" => out.task_id = part(2),
        8 => {
            out.node_id = part(2);
            out.session_id = part(3);
            out.task_id = part(5);
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_parts_name_the_task_and_the_session() {
        let genuine = fingerprint_parts("pending::m1::agent:generating_completed::t1::genuine");
        assert!(genuine.durable);
        assert_eq!(genuine.task_id.as_deref(), Some("t1"));
        assert_eq!(genuine.strength.as_deref(), Some("genuine"));
        assert_eq!(genuine.event.as_deref(), Some("agent:generating_completed"));
        let general = fingerprint_parts("m1::agent:ready::n1::s1::p1::t9::::42");
        assert!(!general.durable);
        assert_eq!((general.session_id.as_deref(), general.task_id.as_deref()), (Some("s1"), Some("t9")));
        assert_eq!(general.node_id.as_deref(), Some("n1"));
        let group = fingerprint_parts("m1::agent:stopped::t2::g1::group");
        assert_eq!(group.task_id.as_deref(), Some("t2"));
        assert_eq!(fingerprint_parts("m1::worktree_bootstrap_complete::n2").node_id.as_deref(), Some("n2"));
        assert_eq!(
            fingerprint_parts("bare"),
            FingerprintParts { mesh_id: Some("bare".into()), ..Default::default() }
        );
    }
}
