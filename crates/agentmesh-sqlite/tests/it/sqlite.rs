//! Behaviour specific to the SQLite backend: how the file is opened and configured,
//! upgrading a database the original wrote, legacy files, and durability across a
//! reopen. The backend-agnostic rules live in the conformance suite.

use std::path::{Path, PathBuf};

use agentmesh_core::{
    Claimant, CompletionFingerprint, LedgerQuery, NewTask, SliceQuery, TaskStatus, Timestamp,
};
use agentmesh_sqlite::{LegacyQueueState, SCHEMA_VERSION, SqliteStore};
use agentmesh_store::prelude::*;
use agentmesh_store::transfer::{Records, TransferStore};
use agentmesh_store::{ClaimOptions, ClaimOutcome, HeldRequeue, MissionQuery, RuntimePrune, StoreError};
use serde_json::Value;

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/original-ledger-dir")
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture_dir().join("manifest.json")).unwrap()).unwrap()
}

/// Copies the fixture files into a fresh temp dir, writable.
fn copy_fixture(sub: &str, files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in files {
        let src = fixture_dir().join(sub).join(f);
        std::fs::copy(&src, dir.path().join(f)).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
    }
    dir
}

fn raw_count(path: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn pragmas_are_set_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    assert_eq!(store.pragma("journal_mode").unwrap(), "wal");
    assert_eq!(store.pragma("synchronous").unwrap(), "2", "FULL: an acknowledged write is synced");
    assert_eq!(store.pragma("foreign_keys").unwrap(), "1");
    assert_eq!(store.pragma("cache_size").unwrap(), "-2048", "2 MiB");
    assert_eq!(store.pragma("user_version").unwrap(), SCHEMA_VERSION.to_string());
}

#[test]
fn a_write_waits_for_another_processs_lock_no_longer_than_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh-runtime.db");
    let store = SqliteStore::open(&path).unwrap();
    // Another connection, as a stopped process's would, holds the write lock.
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let task = NewTask { message: "waits".into(), ..NewTask::default() };
    let budget = std::time::Duration::from_millis(300);
    let began = std::time::Instant::now();
    let out = agentmesh_store::deadline::within(Some(began + budget), || store.enqueue("m", &task, NOW));
    let took = began.elapsed();
    assert!(matches!(out, Err(StoreError::Busy)), "{out:?}");
    assert!(took >= budget && took < budget * 3, "gave up after {took:?} with a budget of {budget:?}");
    // Once the lock is let go the same write goes through.
    holder.execute_batch("COMMIT").unwrap();
    store.enqueue("m", &task, NOW).unwrap();
}

#[test]
fn the_original_database_opens_and_upgrades_with_every_row_intact() {
    let dir = copy_fixture("", &["mesh-runtime.db"]);
    let db = dir.path().join("mesh-runtime.db");
    assert_eq!(raw_count(&db, "PRAGMA user_version"), 0, "the fixture is the original's, unversioned");
    let store = SqliteStore::open(&db).unwrap();
    let m = manifest();

    for (id, want) in m["tasks"].as_object().unwrap() {
        let mesh = want["meshId"].as_str().unwrap();
        let task = store.find_task(mesh, id).unwrap().unwrap_or_else(|| panic!("task {id} lost"));
        assert_eq!(task.status.as_str(), want["status"].as_str().unwrap(), "status of {id}");
        assert_eq!(task.message, want["message"].as_str().unwrap(), "message of {id}");
    }
    for (mesh, want) in m["meshes"].as_object().unwrap() {
        if let Some(n) = want.get("tasks") {
            assert_eq!(
                store.queue_entries(mesh, &[]).unwrap().len() as u64,
                n.as_u64().unwrap(),
                "tasks of {mesh}"
            );
        }
    }
    // Fields this runtime does not model are kept verbatim.
    let odd = &m["taskWithUnknownFields"];
    let task = store.find_task("mesh-alpha", odd["id"].as_str().unwrap()).unwrap().unwrap();
    assert_eq!(task.model.as_deref(), odd["model"].as_str());
    let auto = task.auto_launch.as_ref().expect("autoLaunch kept");
    assert_eq!(auto["status"], odd["autoLaunchStatus"]);

    let ledger = &m["ledger"];
    let count = |mesh: &str| store.read_ledger_ordered(mesh, &LedgerQuery::default()).unwrap().len() as u64;
    assert_eq!(count("mesh-alpha"), ledger["mesh-alpha"].as_u64().unwrap());
    assert_eq!(count("mesh-beta"), ledger["mesh-beta"].as_u64().unwrap());
    let ordered = store.read_ledger_ordered("mesh-alpha", &LedgerQuery::default()).unwrap();
    let first_any = ["mesh-alpha", "mesh-beta"]
        .iter()
        .flat_map(|mesh| store.read_ledger_ordered(mesh, &LedgerQuery::default()).unwrap())
        .min_by(|a, b| a.timestamp.cmp(&b.timestamp))
        .unwrap();
    assert_eq!(first_any.id, ledger["firstIdAppendOrder"].as_str().unwrap());
    assert_eq!(ordered.last().unwrap().id, ledger["lastIdMeshA"].as_str().unwrap());

    // Tables this issue does not model yet are carried over untouched.
    assert_eq!(
        raw_count(&db, "SELECT COUNT(*) FROM mesh_pending_events"),
        m["pendingEvents"]["total"].as_i64().unwrap()
    );
    assert_eq!(raw_count(&db, "SELECT COUNT(*) FROM mesh_missions WHERE mesh_id = 'mesh-alpha'"), 2);
    assert_eq!(raw_count(&db, "SELECT cursor FROM mesh_scheduler_cursor WHERE mesh_id = 'mesh-alpha'"), 3);
    assert_eq!(raw_count(&db, "PRAGMA user_version"), SCHEMA_VERSION);
}

#[test]
fn the_upgraded_original_queue_claims_by_the_rules() {
    let dir = copy_fixture("", &["mesh-runtime.db"]);
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let machine = manifest()["machineId"].as_str().unwrap().to_owned();
    // The fixture's machine already runs a write task (as daemon_<machine>), so a
    // write task is refused to it under its bare id.
    let busy = Claimant { node_id: machine.clone(), session_id: "fresh".into(), ..Claimant::default() };
    let out = store.claim_next("mesh-alpha", &busy, &ClaimOptions::default(), NOW).unwrap();
    assert!(matches!(out, ClaimOutcome::Refused(_)), "busy machine must not take a write task: {out:?}");

    // Another node takes the oldest claimable open task: step 2 depends on the
    // completed step 0, and step 3's notBefore twin is past too at NOW.
    let other =
        Claimant { node_id: "mach_other".into(), session_id: "s-other".into(), ..Claimant::default() };
    let task =
        store.claim_next("mesh-alpha", &other, &ClaimOptions::default(), NOW).unwrap().expect_claimed();
    assert_eq!(task.message, manifest()["tasks"][&task.id]["message"].as_str().unwrap());
    assert_eq!(task.status, TaskStatus::Assigned);
    let beta = store.queue_entries("mesh-beta", &[TaskStatus::Pending]).unwrap();
    assert_eq!(beta.len(), 1, "claims in mesh-alpha never touch mesh-beta");
}

#[test]
fn a_legacy_ledger_dir_opens_through_beads_db_and_imports_its_queue_file_once() {
    let dir = copy_fixture("legacy", &["beads.db", "mesh-gamma.queue.json"]);
    let store = SqliteStore::open_data_dir(dir.path()).unwrap();
    assert_eq!(store.path(), dir.path().join("mesh-runtime.db"));
    assert!(!dir.path().join("beads.db").exists(), "beads.db renamed");
    assert_eq!(store.queue_entries("mesh-alpha", &[]).unwrap().len(), 9, "data of beads.db kept");

    let gamma = store.queue_entries("mesh-gamma", &[]).unwrap();
    assert_eq!(gamma.len() as u64, manifest()["meshes"]["mesh-gamma"]["legacyQueueTasks"].as_u64().unwrap());
    assert_eq!(store.legacy_queue_state("mesh-gamma"), Some(LegacyQueueState::Imported(3)));
    assert!(dir.path().join("mesh-gamma.queue.json.imported").exists());
    // The pending legacy task that needs os=darwin goes only to a darwin node.
    let linux = Claimant {
        node_id: "n1".into(),
        session_id: "s1".into(),
        capability_tags: vec!["os=linux".into()],
        ..Claimant::default()
    };
    let first =
        store.claim_next("mesh-gamma", &linux, &ClaimOptions::default(), NOW).unwrap().expect_claimed();
    assert_eq!(first.message, "legacy queue task 1");
    drop(store);

    // Reopening never imports again, even with the file put back.
    std::fs::copy(
        dir.path().join("mesh-gamma.queue.json.imported"),
        dir.path().join("mesh-gamma.queue.json"),
    )
    .unwrap();
    let store = SqliteStore::open_data_dir(dir.path()).unwrap();
    let again = store.queue_entries("mesh-gamma", &[]).unwrap();
    assert_eq!(again.len(), gamma.len(), "nothing imported twice");
    assert!(again.iter().any(|t| t.id == first.id && t.status == TaskStatus::Assigned), "the claim kept");
}

#[test]
fn a_submitted_claim_as_the_first_write_to_a_mesh_imports_its_legacy_queue_file_first() {
    let dir = copy_fixture("legacy", &["beads.db", "mesh-gamma.queue.json"]);
    let store = std::sync::Arc::new(SqliteStore::open_data_dir(dir.path()).unwrap());
    let darwin = Claimant {
        node_id: "n1".into(),
        session_id: "s1".into(),
        capability_tags: vec!["os=darwin".into()],
        ..Claimant::default()
    };
    let submitted = agentmesh_store::submit::claim(
        std::sync::Arc::clone(&store),
        "mesh-gamma".into(),
        darwin,
        ClaimOptions::default(),
        NOW,
    );
    let claimed = agentmesh_store::submit::wait(submitted).unwrap().expect_claimed();
    assert_eq!(store.legacy_queue_state("mesh-gamma"), Some(LegacyQueueState::Imported(3)));
    assert!(claimed.message.starts_with("legacy queue task"), "claimed from the imported queue: {claimed:?}");
    assert!(dir.path().join("mesh-gamma.queue.json.imported").exists());
}

#[test]
fn a_malformed_legacy_queue_file_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_data_dir(dir.path()).unwrap();
    let bad = dir.path().join("bad.queue.json");
    std::fs::write(
        &bad,
        r#"[{"id":"a","meshId":"m","message":"x","status":"pending","createdAt":"t","updatedAt":"t"},
            {"id":"b","meshId":"m","message":"y","status":"finished","createdAt":"t","updatedAt":"t"}]"#,
    )
    .unwrap();
    let err = store.import_legacy_queue_file("m", &bad).unwrap_err();
    assert!(matches!(err, StoreError::LegacyFile { .. }), "{err}");
    assert!(err.to_string().contains("[1].status"), "names the entry and field: {err}");
    assert!(store.queue_entries("m", &[]).unwrap().is_empty(), "nothing imported");

    // The automatic import refuses it too, leaves the file, and the mesh works.
    std::fs::write(dir.path().join("auto.queue.json"), "{ nope").unwrap();
    store.enqueue("auto", &NewTask { message: "fresh".into(), ..NewTask::default() }, NOW).unwrap();
    assert!(matches!(store.legacy_queue_state("auto"), Some(LegacyQueueState::Rejected(_))));
    assert!(dir.path().join("auto.queue.json").exists(), "a rejected file stays for the user to fix");
    assert_eq!(store.queue_entries("auto", &[]).unwrap().len(), 1);
}

#[test]
fn committed_work_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh-runtime.db");
    let id = {
        let store = SqliteStore::open(&path).unwrap();
        let t =
            store.enqueue("m", &NewTask { message: "persist me".into(), ..NewTask::default() }, NOW).unwrap();
        let c = Claimant { node_id: "n".into(), session_id: "s".into(), ..Claimant::default() };
        store.claim_next("m", &c, &ClaimOptions::default(), NOW).unwrap().expect_claimed();
        t.id
    };
    let store = SqliteStore::open(&path).unwrap();
    let task = store.find_task("m", &id).unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Assigned);
    assert_eq!(task.epoch(), 1);
    let kinds: Vec<String> = store
        .read_ledger_ordered("m", &LedgerQuery::default())
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["task_dispatched", "task_claimed"]);
}

/// Threads opening a file that does not exist yet, each on a connection of its
/// own as separate processes would: every open succeeds and ends migrated.
#[test]
fn stores_opening_a_new_file_together_all_succeed() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data").join("mesh-runtime.db");
        let barrier = std::sync::Barrier::new(6);
        let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
            let opens: Vec<_> = (0..6)
                .map(|i| {
                    let (path, barrier) = (&path, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        let store = SqliteStore::open(path).map_err(|e| format!("{e:#}: {:?}", e))?;
                        let task =
                            NewTask { id: Some(format!("t{i}")), message: "m".into(), ..NewTask::default() };
                        store.enqueue("m", &task, NOW).map(drop).map_err(|e| e.to_string())
                    })
                })
                .collect();
            opens.into_iter().map(|open| open.join().unwrap()).collect()
        });
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.pragma("user_version").unwrap(), SCHEMA_VERSION.to_string());
        assert_eq!(raw_count(&path, "SELECT COUNT(*) FROM mesh_queue"), 6);
    }
}

/// A database a newer agentmesh wrote is refused with both versions, and its
/// bytes stay as they were.
/// The schema of a database as `sqlite_master` and `user_version` state it.
fn schema_of(path: &Path) -> (Vec<(String, String, Option<String>)>, i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let rows = conn
        .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let version = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    (rows, version)
}

#[test]
fn the_in_flight_holds_of_an_original_database_are_imported_once() {
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("original.db");
    {
        let conn = rusqlite::Connection::open(&original).unwrap();
        conn.execute_batch(include_str!("../../migrations/0001_original.sql")).unwrap();
        conn.execute_batch(
            "CREATE TABLE mesh_inflight_hold (
                 task_id TEXT PRIMARY KEY, mesh_id TEXT NOT NULL, hold_reason TEXT NOT NULL,
                 held_at TEXT NOT NULL, first_idle_since_ack TEXT,
                 read_failure_count INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL);
             INSERT INTO mesh_inflight_hold VALUES
                 ('t1', 'm', 'acked', '2025-01-01T00:00:00.000Z', NULL, 0, '2025-01-01T00:00:00.000Z'),
                 ('t2', 'm', 'idle_after_ack', '2025-01-01T00:00:01.000Z', '2025-01-01T00:00:02.000Z', 3,
                  '2025-01-01T00:00:03.000Z');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let report = store.import_original_database(&original).unwrap();
    let line = report.tables.iter().find(|t| t.what == "in-flight holds").expect("an in-flight holds line");
    assert_eq!((line.imported, line.skipped), (2, 0));
    let holds = store.inflight_holds("m", None).unwrap();
    let read: Vec<(&str, Option<&str>, u32)> = holds
        .iter()
        .map(|h| (h.task_id.as_str(), h.first_idle_since_ack.as_deref(), h.read_failure_count))
        .collect();
    assert_eq!(read, [("t1", None, 0), ("t2", Some("2025-01-01T00:00:02.000Z"), 3)]);
    let again = store.import_original_database(&original).unwrap();
    let line = again.tables.iter().find(|t| t.what == "in-flight holds").expect("the line again");
    assert_eq!((line.imported, line.skipped), (0, 2), "a second import adds nothing");
}

#[test]
fn an_original_database_gains_the_mission_source_and_loses_the_dormant_delivered_events_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh-runtime.db");
    {
        // The original's tables (missions without `source`), its dormant
        // delivered-events table, and a mission it wrote.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../../migrations/0001_original.sql")).unwrap();
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS mesh_direct_delivered_events (
                 mesh_id TEXT NOT NULL,
                 event_id TEXT NOT NULL,
                 delivered_at INTEGER NOT NULL,
                 PRIMARY KEY (mesh_id, event_id)
             );
             INSERT INTO mesh_direct_delivered_events VALUES ('m', 'evt-1', 1);
             INSERT INTO mesh_missions (id, mesh_id, title, goal, status, created_at, updated_at)
                 VALUES ('old', 'm', 'Old', '', 'active', '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z');",
        )
        .unwrap();
    }
    let columns = |path: &Path| -> Vec<String> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('mesh_missions')").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    };
    assert!(!columns(&path).contains(&"source".to_owned()), "the original's missions have no source");

    let store = SqliteStore::open(&path).unwrap();
    let old =
        store.missions("m", MissionQuery::Id("old")).unwrap().pop().expect("the original's mission is read");
    assert_eq!((old.title.as_str(), old.source), ("Old", None), "an old mission has no source");
    let sourced = agentmesh_core::NewMission {
        id: "old".into(),
        title: "Old".into(),
        source: Some("coordinator".into()),
        ..agentmesh_core::NewMission::default()
    };
    store.upsert_mission("m", &sourced, Timestamp::from_millis(1_800_000_000_000)).unwrap();
    drop(store);
    assert!(columns(&path).contains(&"source".to_owned()), "missions gained their source");
    let dormant = "SELECT COUNT(*) FROM sqlite_master WHERE name = 'mesh_direct_delivered_events'";
    assert_eq!(raw_count(&path, dormant), 0, "the dormant table is dropped");

    let once = schema_of(&path);
    assert_eq!(once.1, SCHEMA_VERSION);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.missions("m", MissionQuery::Id("old")).unwrap().pop().and_then(|m| m.source).as_deref(),
        Some("coordinator")
    );
    drop(store);
    assert_eq!(schema_of(&path), once, "a second open changes nothing");
}

#[test]
fn a_newer_database_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh-runtime.db");
    drop(SqliteStore::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 3).unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let wal = dir.path().join("mesh-runtime.db-wal");
    let wal_before = std::fs::read(&wal).ok();
    let err = SqliteStore::open(&path).unwrap_err();
    match &err {
        StoreError::SchemaTooNew { path: named, found, supported } => {
            assert_eq!((named, *found, *supported), (&path, SCHEMA_VERSION + 3, SCHEMA_VERSION));
        }
        other => panic!("refused as too new, not {other:?}"),
    }
    assert_eq!(err.code(), "schema_too_new");
    assert!(!err.is_caller_error());
    assert!(std::fs::read(&path).unwrap() == before, "the file is unchanged");
    assert!(std::fs::read(&wal).ok() == wal_before, "the WAL is as it was (or still absent)");
}

fn note(id: &str, at: Timestamp) -> agentmesh_core::LedgerEntry {
    agentmesh_core::LedgerEntry {
        id: id.into(),
        mesh_id: "m".into(),
        timestamp: at.iso(),
        kind: "note".into(),
        node_id: None,
        session_id: None,
        provider_type: None,
        payload: serde_json::json!({}),
    }
}

/// Appends one entry through the ledger import; whether it was new.
fn append(store: &SqliteStore, entry: agentmesh_core::LedgerEntry) -> bool {
    store.import_ledger(&[entry]).unwrap() == 1
}

fn ids(slice: &agentmesh_core::LedgerSlice) -> Vec<&str> {
    slice.entries.iter().map(|e| e.id.as_str()).collect()
}

/// A page by sequence walks a bounded stretch of the sequence: following a mesh
/// whose few entries sit among many of another mesh's takes several bounded
/// pages, each saying more may follow, and ends at the head with every entry of
/// the mesh seen once.
#[test]
fn a_page_by_sequence_walks_a_bounded_stretch_past_other_meshes_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let entry =
        |mesh: &str, id: String| agentmesh_core::LedgerEntry { mesh_id: mesh.into(), ..note(&id, NOW) };
    append(&store, entry("quiet", "q-first".into()));
    let busy: Vec<_> = (0..25_000).map(|i| entry("busy", format!("b{i}"))).collect();
    assert_eq!(store.import_ledger(&busy).unwrap(), 25_000);
    append(&store, entry("quiet", "q-last".into()));

    let mut cursor = 0;
    let (mut seen, mut pages) = (Vec::new(), Vec::new());
    loop {
        let page = store
            .ledger_slice(
                "quiet",
                &SliceQuery { after_seq: Some(cursor), limit: Some(100), ..SliceQuery::default() },
            )
            .unwrap();
        seen.extend(page.entries.iter().map(|e| e.id.clone()));
        let next = page.cursor.next_after_seq.unwrap();
        pages.push((page.entries.len(), next, page.cursor.has_more));
        assert!(next > cursor || !page.cursor.has_more, "the cursor moves while more may follow");
        cursor = next;
        if !page.cursor.has_more {
            break;
        }
    }
    assert_eq!(seen, ["q-first", "q-last"]);
    assert_eq!(pages, [(1, 10_000, true), (0, 20_000, true), (1, 25_002, false)]);
}

/// Entries appended between a store's appends through other connections (a
/// second store on the file, as another process would, and a bare connection
/// that numbers its own) are seen: no number is handed out twice, none is
/// skipped, nothing is dropped.
#[test]
fn ledger_numbers_stay_unique_when_other_connections_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh-runtime.db");
    let (a, b) = (SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap());
    let mut want = Vec::new();
    for i in 0..30 {
        let id = format!("e{i:02}");
        let store = if i % 3 == 2 { &b } else { &a };
        assert!(append(store, note(&id, NOW)), "{id} is new");
        want.push(id);
    }
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "INSERT INTO mesh_event_ledger (id, mesh_id, timestamp, kind, payload, seq)
         SELECT 'raw', 'm', ?1, 'note', '{}', MAX(seq) + 1 FROM mesh_event_ledger WHERE mesh_id = 'm'",
        [NOW.iso()],
    )
    .unwrap();
    want.push("raw".into());
    for id in ["after-raw", "e00"] {
        append(&a, note(id, NOW));
    }
    want.push("after-raw".into());
    let page = a
        .ledger_slice("m", &SliceQuery { after_seq: Some(0), limit: Some(100), ..SliceQuery::default() })
        .unwrap();
    assert_eq!(ids(&page), want, "every entry, in commit order");
    assert_eq!(page.cursor.next_after_seq, Some(want.len() as u64), "numbered 1..=n with no gap");
}

/// An entry appended after a peer read its page, with a timestamp older than
/// that page's last entry (committed late, or imported), is on the peer's next
/// page when it pages by sequence. Paging by `afterId` passes it by: that is
/// the original's protocol, kept for the original's peers.
#[test]
fn an_entry_committed_late_is_on_the_next_page_by_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    for i in 0..3 {
        assert!(append(&store, note(&format!("e{i}"), NOW.plus_millis(i * 1_000))));
    }
    let by_seq =
        |after_seq| SliceQuery { after_seq: Some(after_seq), limit: Some(2), ..SliceQuery::default() };
    let first = store.ledger_slice("m", &by_seq(0)).unwrap();
    assert_eq!(ids(&first), ["e0", "e1"]);
    assert_eq!((first.cursor.after_seq, first.cursor.next_after_seq), (Some(0), Some(2)));
    assert!(first.cursor.has_more);
    let origin = first.origin.clone().expect("the page names its database");
    let by_time = store.ledger_slice("m", &SliceQuery { limit: Some(2), ..SliceQuery::default() }).unwrap();
    assert_eq!(ids(&by_time), ["e0", "e1"]);
    assert_eq!(by_time.cursor.next_after_seq, None, "a page by time carries no sequence cursor");

    // Committed now, stamped before everything the peer has read.
    assert!(append(&store, note("late", NOW.plus_millis(-60_000))));

    let next = store.ledger_slice("m", &by_seq(first.cursor.next_after_seq.unwrap())).unwrap();
    assert_eq!(ids(&next), ["e2", "late"], "the late entry follows in commit order");
    assert_eq!(next.cursor.next_after_seq, Some(4));
    assert!(!next.cursor.has_more);
    assert_eq!(next.origin.as_deref(), Some(origin.as_str()));
    let old_cursor = SliceQuery { after_id: by_time.cursor.next_after_id, ..SliceQuery::default() };
    assert_eq!(ids(&store.ledger_slice("m", &old_cursor).unwrap()), ["e2"], "afterId passes it by");

    // The next number follows the last one handed out.
    assert!(append(&store, note("after-late", NOW)));
    let tail = store.ledger_slice("m", &by_seq(4)).unwrap();
    assert_eq!(ids(&tail), ["after-late"]);
    assert_eq!(tail.cursor.next_after_seq, Some(5));
    let empty = store.ledger_slice("m", &by_seq(5)).unwrap();
    assert!(empty.entries.is_empty());
    assert_eq!(empty.cursor.next_after_seq, Some(5), "an empty page keeps the cursor");

    // The sequence and the origin survive a reopen. One sequence numbers every
    // mesh: another mesh's entry takes a number here, and is never on this
    // mesh's pages; the last page's cursor moves past it, to the head.
    drop(store);
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let mut other = note("elsewhere", NOW);
    other.mesh_id = "n".into();
    assert!(append(&store, other));
    assert!(append(&store, note("reopened", NOW)));
    let page = store.ledger_slice("m", &by_seq(5)).unwrap();
    assert_eq!(ids(&page), ["reopened"]);
    assert_eq!((page.cursor.next_after_seq, page.cursor.head_seq), (Some(7), Some(7)));
    let elsewhere = store.ledger_slice("n", &by_seq(0)).unwrap();
    assert_eq!(ids(&elsewhere), ["elsewhere"]);
    assert_eq!(elsewhere.cursor.next_after_seq, Some(7), "past this mesh's entries, to the head");
    assert_eq!(page.origin.as_deref(), Some(origin.as_str()));

    // A page by sequence walks the table's key from the cursor: no index, no sort.
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT id FROM mesh_event_ledger NOT INDEXED WHERE seq > ?2 AND mesh_id = ?1
              ORDER BY seq ASC LIMIT 501",
        )
        .unwrap()
        .query_map(rusqlite::params!["m", 3], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let plan = plan.join(" | ");
    assert!(plan.contains("USING INTEGER PRIMARY KEY (rowid>?)"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}

#[test]
fn slice_pages_seek_to_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let entries: Vec<_> = (0..1_000)
        .map(|i| agentmesh_core::LedgerEntry {
            id: format!("e{i:05}"),
            mesh_id: "m".into(),
            timestamp: NOW.plus_millis(i / 3).iso(),
            kind: "note".into(),
            node_id: None,
            session_id: None,
            provider_type: None,
            payload: serde_json::json!({}),
        })
        .collect();
    assert_eq!(store.import_ledger(&entries).unwrap(), 1_000);
    let last_page = store
        .ledger_slice(
            "m",
            &SliceQuery { after_id: Some("e00989".into()), limit: Some(500), ..SliceQuery::default() },
        )
        .unwrap();
    assert_eq!(last_page.entries.len(), 10);
    assert!(!last_page.cursor.has_more);
    // The page query walks the slice index from the cursor: no sort, no full scan.
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT id FROM mesh_event_ledger WHERE mesh_id = ?1 AND (timestamp, id) > (?2, ?3)
              ORDER BY timestamp ASC, id ASC LIMIT 501",
        )
        .unwrap()
        .query_map(["m", "x", "y"], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let plan = plan.join(" | ");
    assert!(plan.contains("idx_mesh_event_ledger_slice"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "{plan}");
}

#[test]
fn a_wal_past_its_threshold_is_checkpointed_and_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let batch: Vec<NewTask> =
        (0..200).map(|i| NewTask { message: format!("t{i}"), ..NewTask::default() }).collect();
    store.enqueue_batch("m", &batch, NOW).unwrap();
    let wal = dir.path().join("mesh-runtime.db-wal");
    let before = std::fs::metadata(&wal).unwrap().len();
    assert!(before > 0, "writes went to the WAL");
    assert!(!store.checkpoint_if_wal_exceeds(before + 1).unwrap(), "below the threshold nothing happens");
    assert!(store.checkpoint_if_wal_exceeds(0).unwrap());
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0, "WAL truncated");
    assert_eq!(
        store.queue_entries("m", &[TaskStatus::Pending]).unwrap().len(),
        200,
        "nothing lost by the checkpoint"
    );
}

#[test]
fn placement_suggests_eligible_nodes_and_rotates_round_robin_ties() {
    use agentmesh_core::Strategy;
    use agentmesh_store::placement::{NodeInfo, suggest_nodes};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let node = |id: &str, tags: &[&str]| NodeInfo {
        node_id: id.into(),
        capability_tags: tags.iter().map(|t| t.to_string()).collect(),
        scheduling_priority: 0,
    };
    let nodes = [
        node("a", &["os=linux"]),
        node("b", &["os=linux"]),
        node("mac", &["os=darwin"]),
        node("c", &["os=linux"]),
    ];
    // Node a is busy with one task; b and c tie at no load.
    let busy = store.enqueue("m", &NewTask { message: "busy".into(), ..NewTask::default() }, NOW).unwrap();
    let a = Claimant { node_id: "a".into(), session_id: "sa".into(), ..Claimant::default() };
    assert_eq!(
        store.claim_next("m", &a, &ClaimOptions::default(), NOW).unwrap().expect_claimed().id,
        busy.id
    );
    let task = store
        .enqueue(
            "m",
            &NewTask { message: "x".into(), required_tags: vec!["os=linux".into()], ..NewTask::default() },
            NOW,
        )
        .unwrap();

    let firsts: Vec<String> = (0..4)
        .map(|_| suggest_nodes(&store, "m", &task, &nodes, Strategy::RoundRobin).unwrap()[0].node_id.clone())
        .collect();
    assert!(firsts.iter().all(|n| n == "b" || n == "c"), "the least loaded win: {firsts:?}");
    assert!(firsts.windows(2).any(|w| w[0] != w[1]), "ties take turns: {firsts:?}");
    let ranked = suggest_nodes(&store, "m", &task, &nodes, Strategy::LeastLoaded).unwrap();
    let ids: Vec<_> = ranked.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(ids, ["b", "c", "a"], "the darwin node is not eligible; the busy node comes last");
    assert_eq!(ranked[2].load, 1);
}

#[test]
fn the_fingerprint_sweep_walks_the_expiry_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let fingerprints = (0..100)
        .map(|i| CompletionFingerprint {
            fingerprint: format!("m::t{i}"),
            expires_at_ms: NOW.millis() + if i % 2 == 0 { 1_000 } else { 60_000 },
        })
        .collect();
    store.import_page("m", &Records::CompletionFingerprints(fingerprints)).unwrap();
    assert_eq!(store.prune_runtime(RuntimePrune::Fingerprints(NOW.plus_millis(5_000))).unwrap(), 50);
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN DELETE FROM mesh_completion_fingerprints WHERE expires_at <= ?1",
            [0],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("idx_mesh_completion_fingerprints_expires"), "{plan}");
}

#[test]
fn a_completion_reaches_the_coordinator_that_enqueued_the_task_once() {
    use agentmesh_core::events::{CoordinatorIdentity, Drainer};
    use agentmesh_store::{CompletionReport, DrainRequest, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let mine = NewTask {
        message: "write the parser".into(),
        source_coordinator_daemon_id: Some("mach_A".into()),
        source_coordinator_run_id: Some("run-1".into()),
        ..NewTask::default()
    };
    let task = store.enqueue("m", &mine, NOW).unwrap();
    let worker = Claimant { node_id: "mach_W".into(), session_id: "w1".into(), ..Claimant::default() };
    let claimed = store.claim_next("m", &worker, &ClaimOptions::default(), NOW).unwrap().expect_claimed();
    let report = CompletionReport {
        session_id: "w1".into(),
        task_id: Some(task.id.clone()),
        epoch: Some(claimed.epoch()),
        occurred_at: None,
        outcome: Outcome::Completed { summary: Some("parser written, 12 tests".into()) },
    };
    store.complete_task("m", &report, NOW).unwrap();

    let drain = |daemon: &str, run: &str| {
        let drainer = Drainer::new(CoordinatorIdentity::new(daemon, run, None), &[]);
        let request = DrainRequest { drainer, only_events: None, enforce: true, limit: None };
        store.drain_pending_events("m", &request, NOW).unwrap()
    };
    assert!(drain("mach_B", "run-9").events.is_empty(), "another machine's coordinator gets nothing");
    let out = drain("daemon_mach_A", "run-1");
    assert_eq!(out.events.len(), 1, "{out:?}");
    let event = out.events[0].event.parse();
    assert_eq!(out.events[0].name, "agent:generating_completed");
    assert_eq!(event["event"], "agent:generating_completed");
    assert_eq!(event["metadataEvent"]["taskId"], task.id.as_str());
    assert_eq!(event["metadataEvent"]["finalSummary"], "parser written, 12 tests");
    assert_eq!(event["protocolVersion"], "2.0");
    assert_eq!(event["scope"], "unicast");
    let text = event["coordinatorMessage"].as_str().unwrap();
    assert!(text.contains("parser written, 12 tests"), "{text}");
    assert!(drain("mach_A", "run-1").events.is_empty(), "delivered once");
}

#[test]
fn a_refine_terminal_buried_under_newer_ledger_entries_is_backfilled() {
    use agentmesh_core::LedgerEntry;
    use agentmesh_core::events::{CoordinatorIdentity, Drainer, EmitHint, PendingEvent};
    use agentmesh_store::DrainRequest;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let entry = |i: i64, kind: &str, payload: serde_json::Value| LedgerEntry {
        id: format!("e{i:04}"),
        mesh_id: "m".into(),
        timestamp: NOW.plus_millis(i).iso(),
        kind: kind.into(),
        node_id: Some("n1".into()),
        session_id: None,
        provider_type: None,
        payload,
    };
    let outcome = serde_json::json!({
        "source": "refine_mesh_node_async_job",
        "refineJob": {"jobId": "job-7", "nodeId": "n1"},
        "result": {"merged": true},
    });
    let mut entries = vec![entry(0, "task_completed", outcome)];
    entries.extend(
        (1..=260).map(|i| entry(i, "task_completed", serde_json::json!({"taskId": format!("t{i}")}))),
    );
    store.import_ledger(&entries).unwrap();

    let accepted = PendingEvent::from_value(serde_json::json!({
        "event": "refine:accepted", "meshId": "m", "nodeLabel": "n1",
        "metadataEvent": {"jobId": "job-7"}, "queuedAt": NOW.millis(),
    }))
    .unwrap();
    store.queue_pending_event("m", &accepted, &EmitHint::default(), None, NOW).unwrap();
    let drainer = Drainer::new(CoordinatorIdentity::new("mach_A", "run-1", None), &[]);
    let request = DrainRequest { drainer, only_events: None, enforce: false, limit: None };
    let peeked = store.peek_pending_events("m", &request).unwrap();
    let out = store.drain_pending_events("m", &request, NOW).unwrap();
    for events in [&peeked, &out.events] {
        let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["refine:completed"], "the accepted event is superseded by its backfilled outcome");
        assert_eq!(events[0].event.parse()["metadataEvent"]["jobId"], "job-7");
        assert_eq!(events[0].event.parse()["metadataEvent"]["result"]["merged"], true);
    }
    assert_eq!(store.pending_event_count("m").unwrap(), 0, "the accepted event was consumed");
}

#[test]
fn a_held_event_can_be_requeued_and_then_delivered() {
    use agentmesh_core::events::{CoordinatorIdentity, Drainer, EmitHint, PendingEvent};
    use agentmesh_store::DrainRequest;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("mesh-runtime.db")).unwrap();
    let v1 = PendingEvent::from_value(serde_json::json!({
        "event": "agent:generating_completed", "meshId": "m", "nodeLabel": "Node 'n1'",
        "metadataEvent": {"taskId": "t1", "finalSummary": "done"}, "queuedAt": NOW.millis(),
    }))
    .unwrap();
    store.queue_pending_event("m", &v1, &EmitHint::default(), None, NOW).unwrap();
    let request = |enforce| DrainRequest {
        drainer: Drainer::new(CoordinatorIdentity::new("mach_A", "run-1", None), &[]),
        only_events: None,
        enforce,
        limit: None,
    };
    let held = store.drain_pending_events("m", &request(true), NOW).unwrap();
    assert!(held.events.is_empty());
    assert_eq!(held.quarantined.len(), 1);
    let entry = store
        .read_ledger_ordered("m", &LedgerQuery { kinds: vec!["event_held".into()], ..LedgerQuery::default() })
        .unwrap()
        .remove(0);
    assert!(matches!(store.requeue_held_event("m", "nope", NOW), Err(StoreError::NotFound { .. })));
    assert_eq!(store.requeue_held_event("m", &entry.id, NOW).unwrap(), HeldRequeue::Requeued);
    assert_eq!(
        store.requeue_held_event("m", &entry.id, NOW).unwrap(),
        HeldRequeue::NotNeeded,
        "already queued again"
    );
    let out = store.drain_pending_events("m", &request(false), NOW).unwrap();
    assert_eq!(out.events.len(), 1, "delivered once requeued (accept mode)");
    assert_eq!(out.events[0].event.parse()["metadataEvent"]["taskId"], "t1");
    let requeued = store
        .read_ledger_ordered(
            "m",
            &LedgerQuery { kinds: vec!["event_held_requeued".into()], ..LedgerQuery::default() },
        )
        .unwrap();
    assert_eq!(requeued.len(), 2);
}

/// A finished task is stored deflated, an open one as text; a task whose stored
/// payload is damaged is a corrupt task named by its id, and its neighbours read
/// on.
#[test]
fn a_finished_task_is_stored_packed_and_a_damaged_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh-runtime.db");
    let store = SqliteStore::open(&path).unwrap();
    let message = "Refactor the module, keep behaviour identical, run the tests. ".repeat(4);
    for id in ["open", "done"] {
        let task = agentmesh_core::NewTask {
            id: Some(id.to_owned()),
            message: message.clone(),
            ..Default::default()
        };
        store.enqueue("m", &task, NOW).unwrap();
    }
    let cancel = agentmesh_store::TaskCommand::Cancel { reason: Some("no longer needed") };
    store.task_command("m", "done", cancel, NOW).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let kind = |id: &str| -> String {
        conn.query_row("SELECT typeof(payload) FROM mesh_queue WHERE id = ?1", [id], |r| r.get(0)).unwrap()
    };
    assert_eq!((kind("open").as_str(), kind("done").as_str()), ("text", "blob"));
    conn.execute("UPDATE mesh_queue SET payload = substr(payload, 1, 10) WHERE id = 'done'", []).unwrap();
    drop(conn);
    match store.find_task("m", "done") {
        Err(StoreError::Corrupt { what, .. }) => assert_eq!(what, "task done"),
        other => panic!("expected the damaged task named as corrupt, got {other:?}"),
    }
    assert_eq!(store.find_task("m", "open").unwrap().unwrap().message, message.trim());
}

/// A runtime record whose stored value no record can hold is named corrupt, with
/// the value it is (the shared row readers' error, carried through rusqlite's
/// row mapping), and the records beside it still read.
#[test]
fn a_damaged_delivery_row_is_named_corrupt_and_the_others_still_read() {
    use agentmesh_store::DeliveryQuery;
    use agentmesh_store::conformance::support::delivery;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh-runtime.db");
    let store = SqliteStore::open(&path).unwrap();
    store.insert_session_delivery("m", &delivery("d1", "s1", 1), NOW).unwrap();
    store.insert_session_delivery("m", &delivery("d2", "s1", 1), NOW).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE mesh_session_delivery SET attempt_count = -1 WHERE id = 'd1'", []).unwrap();
    drop(conn);
    match store.session_deliveries("m", DeliveryQuery::Id("d1")) {
        Err(StoreError::Corrupt { what, .. }) => assert_eq!(what, "delivery attempt count"),
        other => panic!("expected the damaged delivery named as corrupt, got {other:?}"),
    }
    let d2 = store.session_deliveries("m", DeliveryQuery::Id("d2")).unwrap();
    assert_eq!(d2.len(), 1);
}
