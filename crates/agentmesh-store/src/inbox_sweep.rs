//! The retention sweep of undrained events, run the same way by both stores:
//! mesh by mesh, the events queued before the window's cutoff are expired a
//! chunk at a time, each chunk in a transaction of its own with an
//! `event_held` ledger entry per event, so a sweep stopped halfway leaves
//! every committed chunk with its entries; events the product never expires
//! are counted, not touched. The store supplies a chunk's expiry and the
//! count; drained events go by each store's own statement.

use agentmesh_core::events::held::retention_warning;

use crate::{PruneReport, StoreResult};

/// Undrained events expired per transaction, so a long backlog never holds a
/// mesh's inbox for long.
pub const CHUNK: i64 = 500;

/// Where the sweep of a mesh's undrained events stands: the (lane,
/// queued_at, id) of the last row read, in the queue's order.
pub type Cursor = (String, i64, String);

/// The cursor before every row.
pub fn start() -> Cursor {
    (String::new(), i64::MIN, String::new())
}

/// Expires the undrained events of each of `meshes`: `chunk` expires the next
/// [`CHUNK`] rows of a mesh after a cursor and answers how many it expired
/// and the last row it read; `exempt` counts a mesh's events that never
/// expire. Returns the report's undrained and exempt counts; warns once per
/// mesh that had events expired (an operator has to decide whether they
/// mattered).
pub fn expire_undrained(
    meshes: &[String],
    mut chunk: impl FnMut(&str, &Cursor) -> StoreResult<(u64, Option<Cursor>)>,
    mut exempt: impl FnMut(&str) -> StoreResult<u64>,
) -> StoreResult<PruneReport> {
    let mut report = PruneReport::default();
    for mesh_id in meshes {
        let mut cursor = start();
        let mut expired = 0;
        loop {
            let (n, last) = chunk(mesh_id, &cursor)?;
            expired += n;
            match last {
                Some(last) if n == CHUNK as u64 => cursor = last,
                _ => break,
            }
        }
        report.undrained_expired += expired;
        if expired > 0 {
            tracing::warn!(mesh = %mesh_id, count = expired, "{}", retention_warning(mesh_id, expired));
        }
        report.terminal_exempt += exempt(mesh_id)?;
    }
    Ok(report)
}

/// Logs what a sweep did, when it did anything.
pub fn log(report: &PruneReport) {
    if *report != PruneReport::default() {
        tracing::info!(
            drained_expired = report.drained_expired,
            undrained_expired = report.undrained_expired,
            terminal_exempt = report.terminal_exempt,
            "pending events pruned"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mesh's chunks are read until one comes back short, each after the
    /// last row of the one before; every mesh is counted.
    #[test]
    fn chunks_follow_the_cursor_until_one_is_short() {
        let mut asked = Vec::new();
        let meshes = vec!["a".to_owned(), "b".to_owned()];
        let report = expire_undrained(
            &meshes,
            |mesh, cursor| {
                asked.push((mesh.to_owned(), cursor.2.clone()));
                let n = if mesh == "a" && cursor.2.is_empty() { CHUNK as u64 } else { 3 };
                Ok((n, Some((String::new(), 1, format!("{mesh}-last-{}", asked.len())))))
            },
            |mesh| Ok(if mesh == "b" { 2 } else { 0 }),
        )
        .expect("a sweep");
        assert_eq!(
            asked,
            vec![
                ("a".to_owned(), String::new()),
                ("a".to_owned(), "a-last-1".to_owned()),
                ("b".to_owned(), String::new()),
            ]
        );
        assert_eq!(report.undrained_expired, CHUNK as u64 + 3 + 3);
        assert_eq!(report.terminal_exempt, 2);
        assert_eq!(report.drained_expired, 0);
    }
}
