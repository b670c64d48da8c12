//! Retention on PostgreSQL: moves to the archive, pages that walk the archive
//! then the hot ledger in one order while writers commit out of order, tasks
//! read from the archive, drops, and the webhook cursor that holds entries
//! back.

use agentmesh_core::retention::{ArchiveMark, MeshRetention, RetentionPolicy, Window};
use agentmesh_core::webhook::{NewWebhook, UrlPolicy};
use agentmesh_core::{LedgerEntry, SliceQuery, TaskStatus, Timestamp};
use agentmesh_store::conformance::support::*;
use agentmesh_store::prelude::*;
use agentmesh_store::{ArchivedTasks, ClaimOutcome, StoreError};

use crate::support::TestDb;

/// Ten days after the suite's entries: a day's window has passed for them.
fn now() -> Timestamp {
    at(10 * 24 * 3_600)
}

/// Ledger entries older than a day move; tasks stay.
fn ledger_policy() -> RetentionPolicy {
    RetentionPolicy { tasks: Window::Off, ledger: Window::days(1), events: Window::days(1) }
}

/// Finished tasks older than a day move; the ledger stays.
fn tasks_policy() -> RetentionPolicy {
    RetentionPolicy { tasks: Window::days(1), ledger: Window::Off, events: Window::days(1) }
}

fn old(id: &str, secs: i64) -> LedgerEntry {
    ledger_entry(MESH, id, "note", at(secs))
}

/// The whole ledger of the mesh by sequence, archive and hot joined, read in
/// pages of `limit` from the start: the ids, each page's last cursor.
fn walk(db: &TestDb, limit: u32) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after = 0;
    for _ in 0..100 {
        let query = SliceQuery { after_seq: Some(after), limit: Some(limit), ..SliceQuery::default() };
        let page = agentmesh_store::archive::slice(&db.store, MESH, &query).expect("a joined page");
        assert_eq!(page.entries.len(), page.seqs.len(), "a number for every entry: {page:?}");
        ids.extend(page.entries.iter().map(|e| e.id.clone()));
        let next = page.cursor.next_after_seq.expect("a cursor");
        if page.entries.is_empty() && !page.cursor.has_more {
            return ids;
        }
        after = next;
    }
    panic!("the walk did not end: {ids:?}");
}

/// Runs SQL in the store's schema on a connection of its own.
fn session(db: &TestDb, url: &str) -> postgres::Client {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("a connection");
    client.batch_execute(&format!("SET search_path TO \"{}\"", db.store.schema())).expect("the schema");
    client
}

/// Waits until every transaction that wrote the mesh's hot ledger is below the
/// horizon pages and moves read to (the server's oldest running transaction:
/// another test's may hold it back for a moment).
fn settle(db: &TestDb, url: &str) {
    let mut client = session(db, url);
    let started = std::time::Instant::now();
    loop {
        let below: bool = client
            .query_one(
                "SELECT COALESCE(MAX(txid), '0'::xid8) < pg_snapshot_xmin(pg_current_snapshot())
                   FROM mesh_event_ledger WHERE mesh_id = $1",
                &[&MESH],
            )
            .expect("the horizon")
            .get(0);
        if below {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the horizon never passed the ledger"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn append_sql(id: &str, secs: i64) -> String {
    format!(
        "INSERT INTO mesh_event_ledger (mesh_id, id, timestamp, kind) VALUES ('{MESH}', '{id}', '{}', 'note')",
        at(secs).iso()
    )
}

/// Two writers take their transaction ids in one order and their numbers in
/// the other; with the archive ending between them, a walk by sequence from
/// the start reads every entry once, in the order it read them before any
/// moved.
#[test]
fn a_walk_by_sequence_reads_the_archive_then_the_hot_ledger_once_each() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    db.store.import_ledger(&[old("e1", 1), old("e2", 2)]).expect("entries");

    // The first writer takes its transaction id first, its number last.
    let mut first = session(&db, &url);
    let mut second = session(&db, &url);
    let mut tx_a = first.transaction().expect("a transaction");
    tx_a.query_one("SELECT pg_current_xact_id()::text", &[]).expect("a transaction id");
    let mut tx_b = second.transaction().expect("a transaction");
    tx_b.query_one("SELECT pg_current_xact_id()::text", &[]).expect("a transaction id");
    tx_b.batch_execute(&append_sql("numbered-first", 3)).expect("an entry");
    tx_a.batch_execute(&append_sql("numbered-last", 4)).expect("an entry");
    tx_b.commit().expect("the later transaction commits first");
    tx_a.commit().expect("the earlier transaction commits last");

    db.store.import_ledger(&[old("e3", 5)]).expect("an entry");
    db.store.import_ledger(&[ledger_entry(MESH, "young", "note", now())]).expect("an entry");
    settle(&db, &url);
    let before = walk(&db, 2);
    assert_eq!(before, ["e1", "e2", "numbered-last", "numbered-first", "e3", "young"]);

    // The archive ends on the entry numbered last: the hot ledger's first
    // page must start after it, not after the hot entry numbered below it.
    let report = db.store.archive_expired(&ledger_policy(), now(), 3).expect("a step");
    assert_eq!((report.ledger_entries, report.more), (3, true));
    let state = db.store.archive_state(MESH, None, now()).expect("the state");
    assert_eq!(state.ledger_entries, 3);
    for limit in [1, 2, 3, 10] {
        assert_eq!(walk(&db, limit), before, "pages of {limit}");
    }
    let first_page = agentmesh_store::archive::slice(
        &db.store,
        MESH,
        &SliceQuery { after_seq: Some(0), limit: Some(4), ..SliceQuery::default() },
    )
    .expect("a page");
    assert_eq!(first_page.archived, 3, "the archived entries come first: {first_page:?}");

    let report = db.store.archive_expired(&ledger_policy(), now(), 100).expect("a step");
    assert_eq!((report.ledger_entries, report.more), (2, false), "the young entry stays");
    for limit in [1, 2, 4] {
        assert_eq!(walk(&db, limit), before, "pages of {limit}");
    }
    let report = db.store.archive_expired(&ledger_policy(), now(), 100).expect("a step");
    assert_eq!(report.ledger_entries, 0, "nothing moves twice");

    // By time, the archive's entries come before the hot ones, each once.
    let by_time = agentmesh_store::archive::slice(
        &db.store,
        MESH,
        &SliceQuery { limit: Some(10), ..SliceQuery::default() },
    )
    .expect("a page by time");
    let ids: Vec<&str> = by_time.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["e1", "e2", "numbered-first", "numbered-last", "e3", "young"]);
    let after_archived = agentmesh_store::archive::slice(
        &db.store,
        MESH,
        &SliceQuery { after_id: Some("e3".into()), limit: Some(10), ..SliceQuery::default() },
    )
    .expect("a page by time");
    assert_eq!(after_archived.entries.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["young"]);

    // An archived id is not imported again.
    assert_eq!(db.store.import_ledger(&[old("e1", 1)]).expect("an import"), 0);
    assert_eq!(walk(&db, 10), before);
}

/// An archived task is read from the archive alone; what depended on it keeps
/// its readiness, a new dependent of it is ready at once, and its id stays
/// taken.
#[test]
fn an_archived_task_stays_met_and_keeps_its_id() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let store: &dyn agentmesh_store::Store = &db.store;
    enqueue(store, MESH, new_task("dep"), at(1));
    enqueue(store, MESH, new_task("broken"), at(2));
    let dep = assert_claimed(claim(store, MESH, &worker("n1", "s1"), at(3)), "dep");
    complete(store, MESH, &dep, at(4));
    let broken = assert_claimed(claim(store, MESH, &worker("n1", "s1"), at(5)), "broken");
    fail(store, MESH, &broken, "no luck", at(6));
    enqueue(store, MESH, dependent_task("child", &["dep"]), at(7));
    enqueue(store, MESH, dependent_task("waits", &["broken"]), at(8));

    let report = store.archive_expired(&tasks_policy(), now(), 10).expect("a step");
    assert_eq!((report.tasks, report.ledger_entries, report.more), (2, 0, false));
    assert!(store.find_task(MESH, "dep").expect("a lookup").is_none(), "the hot table no longer holds it");
    let archived = store
        .archived_tasks(MESH, ArchivedTasks::Id("dep"))
        .expect("a lookup")
        .pop()
        .expect("the archived task")
        .1;
    assert_eq!(archived.status, TaskStatus::Completed);
    assert_eq!(archived.archived, None, "stored unmarked");
    let found = agentmesh_store::archive::find_task(store, MESH, "dep").expect("a lookup").expect("found");
    assert_eq!(found.archived, Some(true));
    let page = store.archived_tasks(MESH, ArchivedTasks::After { after: 0, limit: 10 }).expect("a page");
    assert_eq!(page.iter().map(|(_, t)| t.id.as_str()).collect::<Vec<_>>(), ["dep", "broken"]);
    assert!(page[0].0 < page[1].0, "positions rise");
    assert_eq!(
        store
            .archived_tasks(MESH, ArchivedTasks::After { after: page[0].0, limit: 10 })
            .expect("a page")
            .len(),
        1
    );

    // The id stays taken, with dependencies or without.
    for new in [new_task("dep"), dependent_task("dep", &["waits"]), new_task("broken")] {
        match store.enqueue(MESH, &new, at(9)) {
            Err(StoreError::DuplicateTaskId { task_id, .. }) => assert_eq!(Some(task_id), new.id),
            other => panic!("expected the archived id refused, got {other:?}"),
        }
    }
    // Another mesh may use it.
    enqueue(store, OTHER_MESH, new_task("dep"), at(9));
    // Recording a dispatch of it finds it, archived.
    let recorded = store
        .record_dispatched_task(
            MESH,
            &agentmesh_core::NewDispatchedTask {
                id: "dep".into(),
                message: "work on dep".into(),
                node_id: "node-1".into(),
                session_id: "s9".into(),
                provider_type: Some(PROVIDER.into()),
                mission_id: None,
                task_mode: None,
            },
            at(9),
        )
        .expect("a recording");
    assert!(!recorded.created);
    assert_eq!((recorded.task.status, recorded.task.archived), (TaskStatus::Completed, Some(true)));
    assert!(store.find_task(MESH, "dep").expect("a lookup").is_none(), "nothing new in the hot table");

    // A new dependent of the archived completed task is ready at once.
    enqueue(store, MESH, dependent_task("late", &["dep"]), at(10));
    assert_claimed(claim(store, MESH, &worker("n2", "s2"), at(11)), "child");
    assert_claimed(claim(store, MESH, &worker("n3", "s3"), at(12)), "late");
    match claim(store, MESH, &worker("n4", "s4"), at(13)) {
        ClaimOutcome::Claimed(task) => panic!("a dependent of a failed task must wait, got {}", task.id),
        ClaimOutcome::Refused(_) => {}
    }
    assert_status(store, MESH, "waits", TaskStatus::Pending);

    // A pending task never moves, however old.
    let report = store.archive_expired(&tasks_policy(), at(1_000 * 24 * 3_600), 10).expect("a step");
    assert_eq!(report.tasks, 0, "only finished tasks move");
}

/// A drop removes a prefix of the archive and records where it ended: a
/// cursor before it has expired, a cursor on it reads on.
#[test]
fn a_drop_expires_the_cursors_before_it() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let entries: Vec<LedgerEntry> = (1..=5).map(|i| old(&format!("e{i}"), i)).collect();
    db.store.import_ledger(&entries).expect("entries");
    settle(&db, &url);
    let report = db.store.archive_expired(&ledger_policy(), now(), 100).expect("a step");
    assert_eq!(report.ledger_entries, 5);
    db.store.import_ledger(&[ledger_entry(MESH, "new", "note", now())]).expect("an entry");
    settle(&db, &url);

    let all = db
        .store
        .archived_ledger(MESH, &SliceQuery { after_seq: Some(0), limit: Some(10), ..SliceQuery::default() })
        .expect("the archive");
    let seqs = all.slice.seqs.clone();
    assert_eq!(seqs.len(), 5);
    let state = db.store.archive_state(MESH, None, now()).expect("the state");
    assert_eq!(state.end.ledger_through, seqs[4]);
    assert_eq!(state.ledger_through, seqs[4]);

    let mark = ArchiveMark { tasks_through: 0, ledger_through: seqs[2] };
    let dropped = db.store.drop_archived(MESH, &mark).expect("a drop");
    assert_eq!(dropped.ledger_through, seqs[2]);
    let state = db.store.archive_state(MESH, None, now()).expect("the state");
    assert_eq!((state.ledger_entries, state.dropped_through), (2, seqs[2]));

    for expired in [seqs[0], seqs[1]] {
        let query = SliceQuery { after_seq: Some(expired), limit: Some(10), ..SliceQuery::default() };
        match agentmesh_store::archive::slice(&db.store, MESH, &query) {
            Err(StoreError::CursorExpired { after_seq, dropped_through, .. }) => {
                assert_eq!((after_seq, dropped_through), (expired, seqs[2]));
            }
            other => panic!("expected the cursor {expired} expired, got {other:?}"),
        }
    }
    let ids = |after: u64| -> Vec<String> {
        let query = SliceQuery { after_seq: Some(after), limit: Some(10), ..SliceQuery::default() };
        let page = agentmesh_store::archive::slice(&db.store, MESH, &query).expect("a page");
        page.entries.iter().map(|e| e.id.clone()).collect()
    };
    assert_eq!(ids(seqs[2]), ["e4", "e5", "new"], "the last dropped entry is still a cursor");
    assert_eq!(ids(0), ["e4", "e5", "new"]);
    assert_eq!(ids(seqs[4]), ["new"], "the archive's last entry reads on in the hot ledger");

    // Dropping the rest: the hot ledger's first page follows the last dropped.
    let dropped = db.store.drop_archived(MESH, &ArchiveMark { tasks_through: 0, ledger_through: seqs[4] });
    assert_eq!(dropped.expect("a drop").ledger_through, seqs[4]);
    assert_eq!(ids(seqs[4]), ["new"]);
    assert_eq!(ids(0), ["new"]);
    assert!(matches!(
        db.store.archived_ledger(MESH, &SliceQuery { after_seq: Some(seqs[3]), ..SliceQuery::default() }),
        Err(StoreError::CursorExpired { .. })
    ));
}

/// A webhook subscription's cursor holds back the entries it has not sent:
/// from both the move and the drop.
#[test]
fn a_webhook_cursor_caps_the_move_and_the_drop() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    db.store.import_ledger(&[old("e1", 1), old("e2", 2)]).expect("entries");
    let valid = |from_start| {
        NewWebhook {
            url: "http://127.0.0.1:9/hook".into(),
            kinds: vec!["task_*".into()],
            from_start,
            ..NewWebhook::default()
        }
        .validate(UrlPolicy::default())
        .expect("a valid subscription")
    };
    let secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3";
    let hook = db.store.add_webhook(MESH, &valid(false), secret, at(3)).expect("a subscription");
    db.store.import_ledger(&[old("e3", 4), old("e4", 5)]).expect("entries");
    settle(&db, &url);

    let report = db.store.archive_expired(&ledger_policy(), now(), 100).expect("a step");
    assert_eq!(report.ledger_entries, 3, "up to the subscription's own entry, which it has passed");
    let archived = db
        .store
        .archived_ledger(MESH, &SliceQuery { after_seq: Some(0), limit: Some(10), ..SliceQuery::default() })
        .expect("the archive");
    assert_eq!(archived.slice.seqs.last().copied(), Some(hook.cursor));

    // A subscription from the start holds back everything left, and what an
    // export would drop.
    db.store.add_webhook(MESH, &valid(true), secret, at(6)).expect("a subscription");
    let report = db.store.archive_expired(&ledger_policy(), now(), 100).expect("a step");
    assert_eq!(report.ledger_entries, 0);
    let end = db.store.archive_state(MESH, None, now()).expect("the state").end;
    let dropped = db.store.drop_archived(MESH, &end).expect("a drop");
    assert_eq!(dropped.ledger_through, 0);
    assert_eq!(db.store.archive_state(MESH, None, now()).expect("the state").ledger_entries, 3);
}

/// A mesh's own windows are recorded in its ledger and replace the daemon's.
#[test]
fn a_mesh_s_own_windows_replace_the_daemon_s() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    db.store.import_ledger(&[old("e1", 1)]).expect("an entry");
    let keep = MeshRetention { ledger: Some(Window::Off), ..MeshRetention::default() };
    let state = db.store.archive_state(MESH, Some(&keep), at(2)).expect("the windows set");
    assert_eq!(state.retention, keep);
    let kinds: Vec<String> = db
        .store
        .read_ledger_ordered(MESH, &Default::default())
        .expect("the ledger")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["note", "retention_changed"]);
    let report = db.store.archive_expired(&ledger_policy(), now(), 100).expect("a step");
    assert_eq!(report.ledger_entries, 0, "the mesh keeps its ledger");

    let state =
        db.store.archive_state(MESH, Some(&MeshRetention::default()), at(3)).expect("the windows unset");
    assert_eq!(state.retention, MeshRetention::default());
    settle(&db, &url);
    let report = db.store.archive_expired(&ledger_policy(), now(), 100).expect("a step");
    assert_eq!(report.ledger_entries, 3, "the daemon's window again");
}
