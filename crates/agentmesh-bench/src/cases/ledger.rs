//! Group `ledger`: appending entries one call each, then paging through them with
//! the slice protocol (500 per page, `afterId` cursor) to the end.

use std::collections::HashSet;

use agentmesh_core::{LedgerEntry, SliceQuery};

use crate::data::{MESH_ID, UuidGen, at};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// Entries per slice call.
const PAGE: usize = 500;

/// Entry kinds, cycled as the seed harness cycles them.
const KINDS: [&str; 4] = ["task_assigned", "task_progress", "task_completed", "session_idle"];

/// Runs the group.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(100_000);
    h.run_case(&format!("ledger-{n}"), |h, case| ledger(h, case, n));
}

/// Entry `i` with `id`, shaped like the seed harness's.
fn entry(id: String, i: usize) -> LedgerEntry {
    LedgerEntry {
        id,
        mesh_id: MESH_ID.to_owned(),
        timestamp: at(i).iso(),
        kind: KINDS[i % KINDS.len()].to_owned(),
        node_id: Some(format!("node-{}", i % 8)),
        session_id: Some(format!("session-{}", i % 64)),
        provider_type: Some("claude-cli".to_owned()),
        payload: serde_json::json!({ "taskId": format!("task-{i}"), "seq": i, "note": "ledger bench entry" }),
    }
}

/// `ledger-append` (N imports of one entry, the daemon's `POST .../ledger/import`) and `ledger-page` (`ledger_slice`
/// from the start to the end; ops are entries, latency is per page).
fn ledger(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let (store, label) = (case.store(), case.label());
    let ids = UuidGen::new(0xe000 + n as u32).take(n);
    let mut append = Timer::default();
    let mut rejected = 0;
    for (i, id) in ids.iter().enumerate() {
        let entry = entry(id.clone(), i);
        if append.time(|| store.import_ledger(std::slice::from_ref(&entry)))? != 1 {
            rejected += 1;
        }
    }
    h.report("ledger-append", n, n, &append);
    h.check(&format!("{label}: every append accepted"), rejected == 0, format!("rejected={rejected}"));
    let count = crate::harness::ledger_count(store, MESH_ID)?;
    h.check(&format!("{label}: ledger count"), count == n as u64, format!("count={count}"));

    let mut page = Timer::default();
    let mut seen: Vec<String> = Vec::with_capacity(n);
    let mut query = SliceQuery { limit: Some(PAGE as u32), ..SliceQuery::default() };
    let mut last_has_more = true;
    while page.calls() <= n {
        let slice = page.time(|| store.ledger_slice(MESH_ID, &query))?;
        let empty = slice.entries.is_empty();
        seen.extend(slice.entries.into_iter().map(|e| e.id));
        last_has_more = slice.cursor.has_more;
        if !last_has_more || empty {
            break;
        }
        query.after_id = slice.cursor.next_after_id;
    }
    h.report("ledger-page", n, seen.len(), &page);

    let distinct = seen.iter().collect::<HashSet<_>>().len();
    h.check(
        &format!("{label}: paged every entry exactly once"),
        seen.len() == n && distinct == n,
        format!("paged={} distinct={distinct}", seen.len()),
    );
    h.check(&format!("{label}: paging order = append order"), seen == ids, "");
    let pages = page.calls();
    h.check(
        &format!("{label}: {} pages, last hasMore=false", n.div_ceil(PAGE)),
        pages == n.div_ceil(PAGE) && !last_has_more,
        format!("pages={pages} lastHasMore={last_has_more}"),
    );
    Ok(())
}
