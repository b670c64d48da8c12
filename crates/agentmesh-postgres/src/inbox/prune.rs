//! The retention sweep: drained events past their age are deleted, undrained
//! ones past theirs are expired with an `event_held` ledger entry each.

use agentmesh_core::Timestamp;
use agentmesh_core::events::held::retention_entry;
use agentmesh_core::events::names::NEVER_EXPIRE_EVENTS;
use agentmesh_store::PruneReport;
use agentmesh_store::ids::mint_at;
use agentmesh_store::inbox_sweep::{self, CHUNK, Cursor};

use crate::db::{Db, unsigned};
use crate::{PgStore, Res, ledger};

/// The meshes with an event queued before $1.
const MESHES: &str =
    "SELECT DISTINCT mesh_id FROM mesh_pending_events /* all meshes */ WHERE queued_at < $1 ORDER BY mesh_id";

/// A mesh's drained events (event rows without a queue entry) queued before $2.
const DELETE_DRAINED: &str = "DELETE FROM mesh_pending_events e
  WHERE e.mesh_id = $1 AND e.queued_at < $2
    AND NOT EXISTS (SELECT 1 FROM mesh_inbox_queue q
                     WHERE q.mesh_id = e.mesh_id AND q.lane = e.lane
                       AND q.queued_at = e.queued_at AND q.id = e.id)";

/// One chunk of a mesh's expirable undrained events in queue order (lane by
/// lane, oldest first in each) after the (lane, queued_at, id) cursor in $3, $4,
/// $5; the never-expire names in $6, the chunk size in $7.
const EXPIRE_CHUNK: &str = "SELECT q.id, q.event, e.payload, q.queued_at, q.lane
   FROM mesh_inbox_queue q
   JOIN mesh_pending_events e ON e.mesh_id = q.mesh_id AND e.row_id = q.event_row_id
  WHERE q.mesh_id = $1 AND q.queued_at < $2
    AND (q.lane, q.queued_at, q.id) > ($3, $4, $5)
    AND q.event <> ALL($6::text[])
  ORDER BY q.lane ASC, q.queued_at ASC, q.id ASC LIMIT $7";

/// A mesh's undrained events queued before $2 that never expire (names in $3).
const EXEMPT_COUNT: &str = "SELECT COUNT(*) FROM mesh_inbox_queue
  WHERE mesh_id = $1 AND queued_at < $2 AND event = ANY($3::text[])";

/// The sweep over every mesh; see [`agentmesh_store::InboxStore::prune_pending_events`].
///
/// Each mesh is swept in transactions holding its inbox lock: the first deletes its
/// drained events, each one expires at most [`CHUNK`] undrained events
/// with their ledger entries. If the sweep stops halfway, every transaction that
/// committed did so with its ledger entries.
pub(crate) fn prune(
    store: &PgStore,
    drained_older_than: Timestamp,
    undrained_older_than: Timestamp,
    now: Timestamp,
) -> agentmesh_store::StoreResult<PruneReport> {
    let own = store.read(crate::archive::own_windows)?;
    // A mesh's drained events go by its own window, when it has one.
    let drained_cutoff = |mesh_id: &str| match own.get(mesh_id) {
        Some(windows) => windows.drained_cutoff(drained_older_than, now),
        None => Some(drained_older_than),
    };
    let oldest_kept = own
        .values()
        .filter_map(|windows| windows.drained_cutoff(drained_older_than, now))
        .chain([drained_older_than, undrained_older_than])
        .map(Timestamp::millis)
        .max()
        .unwrap_or(i64::MIN);
    let meshes: Vec<String> =
        store.read(|db| Ok(db.query(MESHES, &[&oldest_kept])?.iter().map(|r| r.get(0)).collect()))?;
    let never_expire: Vec<&str> = NEVER_EXPIRE_EVENTS.to_vec();
    let mut drained = 0;
    for mesh_id in &meshes {
        if let Some(cutoff) = drained_cutoff(mesh_id) {
            drained +=
                store.write_inbox(mesh_id, |db| db.execute(DELETE_DRAINED, &[&mesh_id, &cutoff.millis()]))?;
        }
    }
    let mut report = inbox_sweep::expire_undrained(
        &meshes,
        |mesh_id, cursor| {
            store.write_inbox(mesh_id, |db| {
                expire_chunk(db, mesh_id, undrained_older_than, cursor, &never_expire, now)
            })
        },
        |mesh_id| {
            store.read(|db| {
                let n: i64 = db
                    .query_one(EXEMPT_COUNT, &[&mesh_id, &undrained_older_than.millis(), &never_expire])?
                    .get(0);
                Ok(unsigned(n))
            })
        },
    )?;
    report.drained_expired = drained;
    inbox_sweep::log(&report);
    Ok(report)
}

/// Removes one chunk of a mesh's expirable rows, each with its `event_held`
/// entry, in the caller's transaction. Returns how many and the last row's
/// cursor.
fn expire_chunk(
    db: &Db<'_>,
    mesh_id: &str,
    older_than: Timestamp,
    cursor: &Cursor,
    never_expire: &[&str],
    now: Timestamp,
) -> Res<(u64, Option<Cursor>)> {
    let rows = db.query(
        EXPIRE_CHUNK,
        &[&mesh_id, &older_than.millis(), &cursor.0, &cursor.1, &cursor.2, &never_expire, &CHUNK],
    )?;
    let mut last = None;
    let mut expired = 0;
    for row in &rows {
        let (id, event, payload, queued_at, lane): (String, String, String, i64, String) =
            (row.get(0), row.get(1), crate::payload::json(row.get(2)), row.get(3), row.get(4));
        // The mesh's lock is held, so the row is still queued (undrained); the
        // delete trigger takes its queue entry with it.
        if db.execute("DELETE FROM mesh_pending_events WHERE mesh_id = $1 AND id = $2", &[&mesh_id, &id])?
            == 1
        {
            let entry_id = mint_at(now);
            ledger::append(db, &retention_entry(mesh_id, &id, &event, &payload, queued_at, entry_id, now))?;
            expired += 1;
        }
        last = Some((lane, queued_at, id));
    }
    Ok((expired, last))
}
