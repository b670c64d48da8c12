//! Coordinator presence records (`mesh_coordinator_presence`); which of them
//! are live is the core's rule (`agentmesh_core::events::presence`).

use agentmesh_core::Timestamp;
use agentmesh_core::events::presence::COORDINATOR_PRESENCE_TTL_MS;
use agentmesh_core::events::{Address, CoordinatorIdentity};

use crate::Res;
use crate::db::Db;

// The core's presence rule and the store's promise name the same duration.
const _: () = assert!(COORDINATOR_PRESENCE_TTL_MS == agentmesh_store::COORDINATOR_PRESENCE_TTL_MS);

/// Records that `identity` is live in the mesh as of `now` (a later record is
/// kept). An end recorded at or after `now` stands: a touch that was on its way
/// when the coordinator ended does not bring it back.
pub(crate) fn touch_coordinator(
    db: &Db<'_>,
    mesh_id: &str,
    identity: &CoordinatorIdentity,
    now: Timestamp,
) -> Res<()> {
    let address = Address::of(identity);
    db.execute(
        "INSERT INTO mesh_coordinator_presence
             (mesh_id, coordinator_key, machine, daemon_id, run_id, session_id, last_seen_ms, ended_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)
         ON CONFLICT (mesh_id, coordinator_key) DO UPDATE
            SET last_seen_ms = GREATEST(mesh_coordinator_presence.last_seen_ms, EXCLUDED.last_seen_ms),
                ended_at_ms = CASE WHEN mesh_coordinator_presence.ended_at_ms >= EXCLUDED.last_seen_ms
                                THEN mesh_coordinator_presence.ended_at_ms END,
                daemon_id = EXCLUDED.daemon_id",
        &[
            &mesh_id,
            &address.key,
            &address.machine,
            &identity.daemon_id,
            &identity.coordinator_run_id,
            &address.session,
            &now.millis(),
        ],
    )?;
    Ok(())
}

/// Records that `identity` ended (a graceful exit): from now on its unicasts go
/// to the next coordinator on its machine. `false` when it had no record.
pub(crate) fn end_coordinator(
    db: &Db<'_>,
    mesh_id: &str,
    identity: &CoordinatorIdentity,
    now: Timestamp,
) -> Res<bool> {
    let ended = db.execute(
        "UPDATE mesh_coordinator_presence SET ended_at_ms = $3 WHERE mesh_id = $1 AND coordinator_key = $2",
        &[&mesh_id, &identity.key(), &now.millis()],
    )?;
    Ok(ended > 0)
}
