//! Task and event payloads in `bytea` columns (see [`agentmesh_store::packed`]):
//! the JSON text, or deflated when that is shorter. Only [`stored`] makes the
//! bytes of a `payload` of `mesh_queue` or `mesh_pending_events`; an event's
//! are read by [`json`], a task's by `tasks::decode`; no statement looks inside
//! them.

use agentmesh_store::packed;

/// The bytes stored for the JSON text `json` (an event's).
pub(crate) fn stored(json: &str) -> Vec<u8> {
    packed::pack(json).into_vec()
}

/// The bytes stored for a task's JSON text `json` in `status`.
pub(crate) fn stored_task(json: &str, status: agentmesh_core::TaskStatus) -> Vec<u8> {
    packed::pack_task(json, status).into_vec()
}

/// The JSON text of an event's stored bytes (one that cannot be unpacked reads
/// as `{}`, see [`packed::unpack_event`]). A task's go through
/// `tasks::decode`, which names a damaged one.
pub(crate) fn json(stored: &[u8]) -> String {
    packed::unpack_event(stored)
}
