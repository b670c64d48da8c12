//! The ledger's page by sequence while writers commit out of order: an entry
//! numbered before one that committed, but committed after it, is never
//! skipped by a reader that paged past the later one.

use agentmesh_core::{LedgerEntry, SliceQuery};
use agentmesh_store::LedgerStore;
use serde_json::json;

use crate::support::TestDb;

fn entry(id: &str) -> LedgerEntry {
    LedgerEntry {
        id: id.to_owned(),
        mesh_id: "m".to_owned(),
        timestamp: "2026-01-01T00:00:00.000Z".to_owned(),
        kind: "note".to_owned(),
        node_id: None,
        session_id: None,
        provider_type: None,
        payload: json!({}),
    }
}

fn page(store: &agentmesh_postgres::PgStore, after: u64) -> (Vec<String>, u64) {
    let page = store
        .ledger_slice("m", &SliceQuery { after_seq: Some(after), limit: Some(100), ..SliceQuery::default() })
        .expect("a page");
    (page.entries.iter().map(|e| e.id.clone()).collect(), page.cursor.next_after_seq.expect("a cursor"))
}

/// A transaction that took its number first and commits last holds back what
/// was numbered after it; once it commits, a reader at the cursor it was given
/// reads it, then nothing twice.
#[test]
fn a_late_commit_is_read_after_the_entries_that_committed_before_it() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    db.store.import_ledger(&[entry("first")]).expect("an entry");
    let (ids, cursor) = page(&db.store, 0);
    assert_eq!(ids, ["first"]);

    // Another writer takes the next number and stays open.
    let mut late = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
    let mut tx = late.transaction().expect("a transaction");
    tx.batch_execute(&format!(
        "SET LOCAL search_path TO \"{}\";
         INSERT INTO mesh_event_ledger (mesh_id, id, timestamp, kind) VALUES ('m', 'late', '2026-01-01T00:00:01.000Z', 'note')",
        db.store.schema()
    ))
    .expect("the late writer appends");
    // This one is numbered after it and commits first.
    db.store.import_ledger(&[entry("early")]).expect("an entry");
    let (ids, held) = page(&db.store, cursor);
    assert!(ids.is_empty(), "nothing past an open writer's entry may be handed out yet: {ids:?}");
    assert_eq!(held, cursor, "the cursor stays put");

    tx.commit().expect("the late writer commits");
    let (ids, cursor) = page(&db.store, held);
    assert_eq!(ids, ["late", "early"], "both, the one numbered first first");
    let (ids, _) = page(&db.store, cursor);
    assert!(ids.is_empty(), "nothing twice: {ids:?}");
    let (all, _) = page(&db.store, 0);
    assert_eq!(all, ["first", "late", "early"]);
}
