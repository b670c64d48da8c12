//! Coordinator presence records (`mesh_coordinator_presence`); which of them
//! are live is the core's rule (`agentmesh_core::events::presence`).

use agentmesh_core::Timestamp;
use agentmesh_core::events::presence::COORDINATOR_PRESENCE_TTL_MS;
use agentmesh_core::events::{Address, CoordinatorIdentity};
use rusqlite::{Connection, params};

use crate::Res;

// The core's presence rule and the store's promise name the same duration.
const _: () = assert!(COORDINATOR_PRESENCE_TTL_MS == agentmesh_store::COORDINATOR_PRESENCE_TTL_MS);

/// Records that `identity` is live in the mesh as of `now` (a later record is
/// kept). An end recorded at or after `now` stands: a touch that was on its way
/// when the coordinator ended does not bring it back.
pub(crate) fn touch_coordinator(
    conn: &Connection,
    mesh_id: &str,
    identity: &CoordinatorIdentity,
    now: Timestamp,
) -> Res<()> {
    let address = Address::of(identity);
    conn.prepare_cached(
        "INSERT INTO mesh_coordinator_presence
             (mesh_id, coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms, ended_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)
         ON CONFLICT (mesh_id, coordinator_key) DO UPDATE
            SET last_seen_ms = MAX(last_seen_ms, excluded.last_seen_ms),
                ended_at_ms = CASE WHEN ended_at_ms >= excluded.last_seen_ms THEN ended_at_ms END,
                daemon_id = excluded.daemon_id",
    )?
    .execute(params![
        mesh_id,
        address.key,
        address.machine,
        identity.daemon_id,
        identity.coordinator_run_id,
        address.session,
        now.millis(),
    ])?;
    Ok(())
}

/// Records that `identity` ended (a graceful exit): from now on its unicasts go
/// to the next coordinator on its machine. `false` when it had no record.
pub(crate) fn end_coordinator(
    conn: &Connection,
    mesh_id: &str,
    identity: &CoordinatorIdentity,
    now: Timestamp,
) -> Res<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE mesh_coordinator_presence SET ended_at_ms = ?3
              WHERE mesh_id = ?1 AND coordinator_key = ?2",
        )?
        .execute(params![mesh_id, identity.key(), now.millis()])?
        > 0)
}
