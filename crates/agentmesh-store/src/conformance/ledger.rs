//! Rules of the event ledger: idempotent appends, newest-first and append-order
//! reads with their filters, deletion, import, the slice protocol
//! `adhdev.mesh.ledger.slice.v1`, and mesh isolation.

use agentmesh_core::ledger::{SLICE_DEFAULT_LIMIT, SLICE_MAX_LIMIT, SLICE_PROTOCOL};
use agentmesh_core::{LedgerEntry, LedgerQuery, LedgerSlice, SliceQuery};
use serde_json::json;

use super::support::*;
use crate::Store;

/// Appends every entry, each of which must be new.
#[track_caller]
fn append_all(store: &dyn Store, entries: &[LedgerEntry]) {
    for entry in entries {
        let what = format!("import of entry {}", entry.id);
        assert_eq!(ok(store.import_ledger(std::slice::from_ref(entry)), &what), 1, "expected {what} new");
    }
}

/// Whether the mesh's ledger holds an entry `id`.
#[track_caller]
fn holds(store: &dyn Store, mesh: &str, id: &str) -> bool {
    ledger_entries(store, mesh).iter().any(|e| e.id == id)
}

/// Reads one slice page.
#[track_caller]
fn slice(store: &dyn Store, mesh: &str, query: SliceQuery) -> LedgerSlice {
    ok(store.ledger_slice(mesh, &query), "ledger_slice")
}

/// `count` entries whose timestamps repeat in runs of three and whose ids are
/// scrambled within each run, with the order the slice protocol must return them in
/// ((timestamp, id)).
fn scrambled_entries(mesh: &str, count: usize) -> (Vec<LedgerEntry>, Vec<String>) {
    // 7919 is prime and divides no count the suite uses, so i -> i * 7919 % count is
    // a permutation of the ids.
    let entries: Vec<LedgerEntry> = (0..count)
        .map(|i| {
            let id = format!("e{:05}", (i * 7_919) % count);
            let kind = if i % 4 == 0 { "kind-rare" } else { "kind-common" };
            ledger_entry(mesh, &id, kind, T0.plus_millis((i / 3) as i64))
        })
        .collect();
    let mut order: Vec<(String, String)> =
        entries.iter().map(|e| (e.timestamp.clone(), e.id.clone())).collect();
    order.sort();
    (entries, order.into_iter().map(|(_, id)| id).collect())
}

/// An entry with a blank kind is refused as invalid input naming `kind`, and nothing is appended.
pub fn ledger_import_rejects_a_blank_kind(store: &dyn Store) {
    append_all(store, &[ledger_entry(MESH, "e1", "note", at(1))]);
    for kind in ["", "   "] {
        let entry = ledger_entry(MESH, "blank", kind, at(2));
        assert_invalid_input(store.import_ledger(&[entry]), "kind", "import of an entry with a blank kind");
    }
    // A batch is checked whole before anything goes in: the good entry ahead
    // of the bad one is not appended either, and the bad one is named.
    let batch = [ledger_entry(MESH, "good", "note", at(3)), ledger_entry(MESH, "bad", " ", at(4))];
    assert_invalid_input(store.import_ledger(&batch), "entries[1].kind", "a batch with a blank kind");
    assert_eq!(entry_ids(&ledger_entries(store, MESH)), ["e1"], "expected nothing appended");
}

/// `read_ledger_ordered` returns entries oldest first (timestamp, then insertion),
/// filtered by `tail` (the newest ones), `since` and kinds.
pub fn read_ledger_ordered_filters_by_tail_since_and_kind(store: &dyn Store) {
    append_all(
        store,
        &[
            ledger_entry(MESH, "e1", "kind-a", at(1)),
            ledger_entry(MESH, "e2", "kind-b", at(2)),
            ledger_entry(MESH, "e3", "kind-a", at(3)),
            // Same instant: the later append is the newer entry.
            ledger_entry(MESH, "e5", "kind-b", at(4)),
            ledger_entry(MESH, "e4", "kind-a", at(4)),
            // Appended late with an early timestamp: ordered by its timestamp.
            ledger_entry(MESH, "e0", "kind-b", at(0)),
        ],
    );
    let read =
        |query: LedgerQuery| entry_ids(&ok(store.read_ledger_ordered(MESH, &query), "read_ledger_ordered"));
    assert_eq!(
        read(LedgerQuery::default()),
        ["e0", "e1", "e2", "e3", "e5", "e4"],
        "expected oldest first by timestamp, then by insertion"
    );
    assert_eq!(
        read(LedgerQuery { tail: Some(2), ..LedgerQuery::default() }),
        ["e5", "e4"],
        "expected the 2 newest"
    );
    assert_eq!(
        read(LedgerQuery { since: Some(at(3).iso()), ..LedgerQuery::default() }),
        ["e3", "e5", "e4"],
        "expected only entries at or after since"
    );
    assert_eq!(
        read(LedgerQuery { kinds: vec!["kind-b".into()], ..LedgerQuery::default() }),
        ["e0", "e2", "e5"],
        "expected only kind-b entries"
    );
    assert_eq!(
        read(LedgerQuery { kinds: vec!["kind-a".into()], tail: Some(2), since: Some(at(1).iso()) }),
        ["e3", "e4"],
        "expected the filters combined: kind-a since 1 s, newest 2"
    );
}

/// Kind filters give the same entries whatever the kinds: the ones written for
/// every task (enqueued, claimed, completed), rarer ones, and both together, in
/// every read form.
pub fn kind_filters_cover_task_kinds_and_rare_kinds_alike(store: &dyn Store) {
    append_all(
        store,
        &[
            ledger_entry(MESH, "d1", "task_dispatched", at(1)),
            ledger_entry(MESH, "c1", "task_claimed", at(2)),
            ledger_entry(MESH, "f1", "task_failed", at(3)),
            ledger_entry(MESH, "k1", "task_completed", at(4)),
            ledger_entry(MESH, "c2", "task_claimed", at(5)),
            ledger_entry(MESH, "k2", "task_completed", at(6)),
            ledger_entry(MESH, "r1", "completion_refused", at(7)),
        ],
    );
    let kinds = |k: &[&str]| LedgerQuery {
        kinds: k.iter().map(|s| (*s).to_owned()).collect(),
        ..LedgerQuery::default()
    };
    let ordered =
        |k: &[&str]| entry_ids(&ok(store.read_ledger_ordered(MESH, &kinds(k)), "read_ledger_ordered"));
    let sliced = |k: &str| {
        let page = slice(store, MESH, SliceQuery { kind: Some(k.to_owned()), ..SliceQuery::default() });
        entry_ids(&page.entries)
    };
    assert_eq!(ordered(&["task_completed"]), ["k1", "k2"], "expected the completions");
    assert_eq!(ordered(&["task_failed"]), ["f1"], "expected the failure");
    assert_eq!(ordered(&["task_claimed", "completion_refused"]), ["c1", "c2", "r1"], "expected both kinds");
    assert_eq!(ordered(&["task_failed", "completion_refused"]), ["f1", "r1"], "expected both rare kinds");
    assert_eq!(ordered(&["task_dispatched", "task_failed"]), ["d1", "f1"], "expected append order");
    assert_eq!(sliced("task_claimed"), ["c1", "c2"], "expected the claims in slice order");
    assert_eq!(sliced("completion_refused"), ["r1"], "expected the refusal in slice order");
}

/// `read_ledger_ordered` returns entries in append order: timestamp, then insertion order within one instant.
pub fn read_ledger_ordered_keeps_append_order(store: &dyn Store) {
    append_all(
        store,
        &[
            ledger_entry(MESH, "z", "kind-a", at(1)),
            ledger_entry(MESH, "a", "kind-b", at(1)),
            ledger_entry(MESH, "m", "kind-a", at(1)),
            ledger_entry(MESH, "early", "kind-b", at(0)),
            ledger_entry(MESH, "late", "kind-a", at(2)),
        ],
    );
    let read =
        |query: LedgerQuery| entry_ids(&ok(store.read_ledger_ordered(MESH, &query), "read_ledger_ordered"));
    assert_eq!(
        read(LedgerQuery::default()),
        ["early", "z", "a", "m", "late"],
        "expected timestamp order, and insertion order (not id order) within one instant"
    );
    assert_eq!(
        read(LedgerQuery { kinds: vec!["kind-a".into()], ..LedgerQuery::default() }),
        ["z", "m", "late"],
        "expected the kind filter applied in append order"
    );
    assert_eq!(
        read(LedgerQuery { since: Some(at(1).iso()), ..LedgerQuery::default() }),
        ["z", "a", "m", "late"],
        "expected the since filter applied in append order"
    );
}

/// `read_ledger_ordered` with a tail returns the newest entries, still in append order.
pub fn read_ledger_ordered_tail_is_newest_in_append_order(store: &dyn Store) {
    append_all(
        store,
        &[
            ledger_entry(MESH, "e1", "note", at(1)),
            ledger_entry(MESH, "e2", "note", at(2)),
            ledger_entry(MESH, "e4", "note", at(3)),
            ledger_entry(MESH, "e3", "note", at(3)),
        ],
    );
    let read = |tail: u32| {
        let query = LedgerQuery { tail: Some(tail), ..LedgerQuery::default() };
        entry_ids(&ok(store.read_ledger_ordered(MESH, &query), "read_ledger_ordered"))
    };
    assert_eq!(read(3), ["e2", "e4", "e3"], "expected the newest 3 in append order");
    assert_eq!(read(1), ["e3"], "expected the newest entry alone");
    assert_eq!(read(10), ["e1", "e2", "e4", "e3"], "expected every entry when the tail exceeds the ledger");
}

/// `import_ledger` imports entries from elsewhere and counts only the new ones.
pub fn ledger_import_counts_only_new_entries(store: &dyn Store) {
    append_all(store, &[ledger_entry(MESH, "known", "note", at(1))]);
    let batch = [
        ledger_entry(MESH, "known", "note", at(1)),
        ledger_entry(MESH, "new-1", "remote", at(2)),
        ledger_entry(MESH, "new-2", "remote", at(3)),
        ledger_entry(OTHER_MESH, "new-b", "remote", at(4)),
    ];
    assert_eq!(ok(store.import_ledger(&batch), "import_ledger"), 3, "expected 3 new entries counted");
    assert_eq!(
        entry_ids(&ledger_entries(store, MESH)),
        ["known", "new-1", "new-2"],
        "expected the new entries of the mesh in timestamp order"
    );
    assert_eq!(ledger_entries(store, MESH)[1], batch[1], "expected an imported entry stored as given");
    assert!(holds(store, OTHER_MESH, "new-b"), "expected an entry imported into its own mesh");
    assert_eq!(ok(store.import_ledger(&batch), "import_ledger"), 0, "expected a repeated import to count 0");
    assert_eq!(ledger_entries(store, MESH).len(), 3, "expected a repeated import to add nothing");
    let mut changed = batch[1].clone();
    changed.payload = json!({"changed": true});
    assert_eq!(ok(store.import_ledger(&[changed]), "import_ledger"), 0, "expected a known id skipped");
    assert_eq!(ledger_entries(store, MESH)[1], batch[1], "expected the first new-1 kept exactly as imported");
}

/// `import_ledger` refuses a batch with an invalid entry (bad timestamp, non-object payload) naming the field, importing none of it.
pub fn ledger_import_rejects_an_invalid_entry_and_imports_nothing(store: &dyn Store) {
    append_all(store, &[ledger_entry(MESH, "known", "note", at(1))]);
    let good = ledger_entry(MESH, "good", "remote", at(2));

    let mut bad_time = ledger_entry(MESH, "bad-time", "remote", at(3));
    bad_time.timestamp = "yesterday".into();
    assert_invalid_input(
        store.import_ledger(&[good.clone(), bad_time]),
        "timestamp",
        "import of an entry with an unparsable timestamp",
    );

    let mut bad_payload = ledger_entry(MESH, "bad-payload", "remote", at(3));
    bad_payload.payload = json!(["not", "an", "object"]);
    assert_invalid_input(
        store.import_ledger(&[good.clone(), bad_payload]),
        "payload",
        "import of an entry whose payload is not an object",
    );

    assert!(!holds(store, MESH, "good"), "expected the valid entry of a refused batch not imported");
    assert_eq!(entry_ids(&ledger_entries(store, MESH)), ["known"], "expected the ledger unchanged");
}

/// A slice page holds 100 entries by default; the limit is clamped to 1..=500.
pub fn ledger_slice_default_and_clamped_limits(store: &dyn Store) {
    let (entries, order) = scrambled_entries(MESH, 600);
    append_all(store, &entries);

    let page = slice(store, MESH, SliceQuery::default());
    assert_eq!(page.protocol, SLICE_PROTOCOL, "expected the slice protocol name");
    assert_eq!(page.mesh_id, MESH, "expected the page to name its mesh");
    assert_eq!(page.cursor.limit, SLICE_DEFAULT_LIMIT, "expected the default limit 100");
    assert_eq!(
        entry_ids(&page.entries),
        order[..100],
        "expected the first 100 entries in (timestamp, id) order"
    );
    assert!(page.cursor.has_more, "expected more after the first 100 of 600");
    assert_eq!(page.cursor.after_id, None, "expected no afterId on the first page");
    assert_eq!(
        page.cursor.next_after_id.as_deref(),
        Some(order[99].as_str()),
        "expected nextAfterId = the last id"
    );

    let page = slice(store, MESH, SliceQuery { limit: Some(10_000), ..SliceQuery::default() });
    assert_eq!(page.cursor.limit, SLICE_MAX_LIMIT, "expected a limit of 10000 clamped to 500");
    assert_eq!(page.entries.len(), 500, "expected 500 entries on a clamped page");

    let page = slice(store, MESH, SliceQuery { limit: Some(0), ..SliceQuery::default() });
    assert_eq!(page.cursor.limit, 1, "expected a limit of 0 clamped to 1");
    assert_eq!(entry_ids(&page.entries), order[..1], "expected exactly the first entry");
    assert!(page.cursor.has_more, "expected more after a one-entry page");
}

/// A slice returns the entries strictly after the `afterId` cursor in (timestamp, id) order.
pub fn ledger_slice_orders_by_timestamp_then_id_after_the_cursor(store: &dyn Store) {
    append_all(
        store,
        &[
            ledger_entry(MESH, "c", "note", at(5)),
            ledger_entry(MESH, "b", "note", at(5)),
            ledger_entry(MESH, "z", "note", at(1)),
            ledger_entry(MESH, "a", "note", at(5)),
            ledger_entry(MESH, "y", "note", at(9)),
        ],
    );
    let page = slice(store, MESH, SliceQuery::default());
    assert_eq!(entry_ids(&page.entries), ["z", "a", "b", "c", "y"], "expected (timestamp, id) order");
    assert!(!page.cursor.has_more, "expected no more after every entry");
    assert_eq!(page.cursor.next_after_id.as_deref(), Some("y"), "expected nextAfterId = the last id");

    let after = |id: &str, limit: u32| {
        slice(
            store,
            MESH,
            SliceQuery { after_id: Some(id.into()), limit: Some(limit), ..SliceQuery::default() },
        )
    };
    let page = after("a", 2);
    assert_eq!(entry_ids(&page.entries), ["b", "c"], "expected the 2 entries after a");
    assert!(page.cursor.has_more, "expected y still to come");
    assert_eq!(page.cursor.after_id.as_deref(), Some("a"), "expected the cursor to echo afterId");
    assert_eq!(page.cursor.next_after_id.as_deref(), Some("c"), "expected nextAfterId = c");
    let page = after("a", 3);
    assert_eq!(entry_ids(&page.entries), ["b", "c", "y"], "expected exactly the 3 entries after a");
    assert!(!page.cursor.has_more, "expected hasMore false when the page holds exactly the rest");
    let page = after("z", 100);
    assert_eq!(entry_ids(&page.entries), ["a", "b", "c", "y"], "expected every entry after z");
    let page = after("y", 100);
    assert!(page.entries.is_empty(), "expected nothing after the last entry");
    assert!(!page.cursor.has_more, "expected no more after the last entry");
    assert_eq!(page.cursor.next_after_id.as_deref(), Some("y"), "expected an empty page to keep the cursor");
}

/// Paging 1,234 entries 100 at a time returns every entry exactly once in order; the last page says no more.
pub fn ledger_slice_pages_every_entry_exactly_once(store: &dyn Store) {
    let (entries, order) = scrambled_entries(MESH, 1_234);
    append_all(store, &entries);
    let mut seen: Vec<String> = Vec::new();
    let mut after_id: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = slice(
            store,
            MESH,
            SliceQuery { after_id: after_id.clone(), limit: Some(100), ..SliceQuery::default() },
        );
        pages += 1;
        assert!(pages <= 13, "expected 1,234 entries in 13 pages of 100, still paging at page {pages}");
        assert_eq!(page.cursor.after_id, after_id, "expected page {pages} to echo its afterId");
        seen.extend(entry_ids(&page.entries));
        if !page.cursor.has_more {
            assert_eq!(page.entries.len(), 34, "expected the last page to hold the remaining 34 entries");
            break;
        }
        assert_eq!(page.entries.len(), 100, "expected a full page {pages} while more follow");
        after_id = page.cursor.next_after_id.clone();
        assert_eq!(
            after_id.as_deref(),
            seen.last().map(String::as_str),
            "expected nextAfterId = the page's last id"
        );
    }
    assert_eq!(pages, 13, "expected 13 pages");
    assert_eq!(seen.len(), 1_234, "expected every entry exactly once");
    assert_eq!(seen, order, "expected the pages to return the entries in (timestamp, id) order");
}

/// Paging by sequence returns entries in commit order, and an entry appended
/// after a page was read is on the next page even when its timestamp is older
/// than everything read so far (committed late, or imported). The sequence
/// numbers only grow, an empty page keeps the cursor, every page names the same
/// origin and the mesh's head (whatever the filters), and another mesh's
/// entries never show.
pub fn ledger_slice_by_sequence_sees_an_entry_committed_late(store: &dyn Store) {
    append_all(
        store,
        &[
            ledger_entry(MESH, "e0", "note", at(10)),
            ledger_entry(MESH, "e1", "note", at(11)),
            ledger_entry(OTHER_MESH, "x0", "note", at(11)),
            ledger_entry(MESH, "e2", "note", at(12)),
        ],
    );
    settled(store, MESH);
    let by_seq = |after_seq: u64, limit: u32| {
        slice(
            store,
            MESH,
            SliceQuery { after_seq: Some(after_seq), limit: Some(limit), ..SliceQuery::default() },
        )
    };
    let first = by_seq(0, 2);
    assert_eq!(entry_ids(&first.entries), ["e0", "e1"], "expected the first two entries in commit order");
    assert!(first.cursor.has_more, "expected e2 still to come");
    assert_eq!(first.cursor.after_seq, Some(0), "expected the cursor to echo afterSeq");
    let cursor = first.cursor.next_after_seq.expect("a page by sequence carries nextAfterSeq");
    assert!(cursor > 0, "expected nextAfterSeq past the start, got {cursor}");
    let origin = first.origin.clone().expect("a page by sequence names its origin");
    let head = first.cursor.head_seq.expect("a page by sequence names the head");
    assert!(head > cursor, "expected the head ({head}) past a page that has more ({cursor})");
    let kinds = slice(
        store,
        MESH,
        SliceQuery { after_seq: Some(0), kind: Some("other-kind".into()), ..SliceQuery::default() },
    );
    assert!(kinds.entries.is_empty(), "expected no entry of another kind");
    assert_eq!(kinds.cursor.head_seq, Some(head), "expected the head whatever the filters");

    // Committed now, stamped before everything the reader has seen.
    append_all(store, &[ledger_entry(MESH, "late", "note", at(1))]);
    settled(store, MESH);
    let next = by_seq(cursor, 100);
    assert_eq!(entry_ids(&next.entries), ["e2", "late"], "expected the late entry after e2, in commit order");
    assert!(!next.cursor.has_more, "expected no more after the late entry");
    let end = next.cursor.next_after_seq.expect("nextAfterSeq");
    assert!(end > cursor, "expected the cursor to move forward: {cursor} then {end}");
    assert_eq!(next.origin.as_deref(), Some(origin.as_str()), "expected one origin for one database");
    assert_eq!(next.cursor.head_seq, Some(end), "expected the head at the last entry read");

    let empty = by_seq(end, 100);
    assert!(empty.entries.is_empty(), "expected nothing after the last entry");
    assert_eq!(empty.cursor.next_after_seq, Some(end), "expected an empty page to keep the cursor");
    append_all(store, &[ledger_entry(MESH, "after", "note", at(2))]);
    settled(store, MESH);
    assert_eq!(entry_ids(&by_seq(end, 100).entries), ["after"], "expected only the newest entry");

    // The original's cursor keeps the original's (timestamp, id) order.
    let by_time = slice(store, MESH, SliceQuery::default());
    assert_eq!(
        entry_ids(&by_time.entries),
        ["late", "after", "e0", "e1", "e2"],
        "expected afterId paging in (timestamp, id) order"
    );
    assert_eq!(by_time.cursor.next_after_seq, None, "expected no sequence cursor on a page by time");
    assert_eq!(by_time.cursor.head_seq, None, "expected no head on a page by time");
}

/// An `afterId` that is not in the mesh's ledger gives an empty page.
pub fn ledger_slice_unknown_after_id_gives_an_empty_page(store: &dyn Store) {
    append_all(
        store,
        &[ledger_entry(MESH, "e1", "note", at(1)), ledger_entry(OTHER_MESH, "b1", "note", at(2))],
    );
    for unknown in ["never-appended", "b1"] {
        let page = slice(store, MESH, SliceQuery { after_id: Some(unknown.into()), ..SliceQuery::default() });
        assert!(page.entries.is_empty(), "expected an empty page after the unknown id {unknown}");
        assert!(!page.cursor.has_more, "expected hasMore false after the unknown id {unknown}");
    }
}

/// A slice with a kind returns only entries of that kind, and pages through them.
pub fn ledger_slice_filters_by_kind(store: &dyn Store) {
    let (entries, order) = scrambled_entries(MESH, 300);
    append_all(store, &entries);
    let rare: Vec<String> = order
        .iter()
        .filter(|id| entries.iter().any(|e| &e.id == *id && e.kind == "kind-rare"))
        .cloned()
        .collect();
    let query = |after_id: Option<String>| SliceQuery {
        kind: Some("kind-rare".into()),
        after_id,
        limit: Some(50),
        ..SliceQuery::default()
    };
    let first = slice(store, MESH, query(None));
    assert!(first.entries.iter().all(|e| e.kind == "kind-rare"), "expected only kind-rare entries");
    assert_eq!(entry_ids(&first.entries), rare[..50], "expected the first 50 kind-rare entries in order");
    assert!(first.cursor.has_more, "expected more of the 75 kind-rare entries");
    let second = slice(store, MESH, query(first.cursor.next_after_id.clone()));
    assert_eq!(entry_ids(&second.entries), rare[50..], "expected the remaining kind-rare entries");
    assert!(!second.cursor.has_more, "expected no more kind-rare entries");
}

/// Entries of one mesh never show up in another mesh's reads or slices.
pub fn ledger_is_isolated_by_mesh(store: &dyn Store) {
    append_all(store, &[ledger_entry(MESH, "a1", "note", at(1)), ledger_entry(MESH, "a2", "note", at(2))]);
    enqueue(store, MESH, new_task("t-a"), at(3));
    let a_before = ledger_entries(store, MESH);

    assert!(ledger_entries(store, OTHER_MESH).is_empty(), "expected B's ledger empty");
    assert!(slice(store, OTHER_MESH, SliceQuery::default()).entries.is_empty(), "expected B's slice empty");

    append_all(store, &[ledger_entry(OTHER_MESH, "b1", "note", at(4))]);
    assert_eq!(entry_ids(&ledger_entries(store, OTHER_MESH)), ["b1"], "expected B to see only its own entry");
    assert_eq!(ledger_entries(store, MESH), a_before, "expected A's ledger untouched by B's append");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrambled_ids_are_a_permutation() {
        for count in [300, 600, 1_234] {
            let (entries, order) = scrambled_entries(MESH, count);
            let mut ids = entry_ids(&entries);
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), count, "ids must be unique for {count} entries");
            assert_eq!(order.len(), count);
        }
    }
}
