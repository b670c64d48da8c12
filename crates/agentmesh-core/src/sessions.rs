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
