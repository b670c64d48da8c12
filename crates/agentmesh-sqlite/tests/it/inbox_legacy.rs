//! The coordinator inbox's way in and way out, and its retention: importing the
//! original's `*.pending-events.jsonl` files (real files in a temp dir), exporting
//! JSONL, and the retention sweep. Time is always injected.

use std::path::{Path, PathBuf};

use agentmesh_core::events::{CoordinatorIdentity, Drainer, EmitHint, PendingEvent};
use agentmesh_core::{LedgerEntry, LedgerQuery, Timestamp};
use agentmesh_sqlite::SqliteStore;
use agentmesh_store::legacy::LegacyEventsReport;
use agentmesh_store::prelude::*;
use agentmesh_store::{DrainRequest, DuplicateReason, PruneReport, QueueOutcome};
use serde_json::{Value, json};

const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);
const DAY: i64 = 24 * 60 * 60 * 1000;
const MACHINE: &str = "mach_1b46842a15d3409d96ad33e767a916dd";
const FIXTURE_FILES: [&str; 2] = [
    "mesh-alpha-mach_1b46842a15d3409d96ad33e767a916dd.pending-events.jsonl",
    "mesh-alpha.pending-events.jsonl",
];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/original-ledger-dir")
}

/// A store in its own temp dir, and a second temp dir for inbox files.
struct Env {
    store: SqliteStore,
    inbox: tempfile::TempDir,
    _db: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let db = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(db.path().join("mesh-runtime.db")).unwrap();
        Env { store, inbox: tempfile::tempdir().unwrap(), _db: db }
    }

    fn dir(&self) -> &Path {
        self.inbox.path()
    }

    fn with_fixture_inboxes() -> Env {
        let env = Env::new();
        for name in FIXTURE_FILES {
            std::fs::copy(fixture_dir().join("legacy").join(name), env.dir().join(name)).unwrap();
        }
        env
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn import(&self) -> LegacyEventsReport {
        self.store.import_legacy_pending_events(self.dir(), NOW).unwrap()
    }

    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn raw(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.store.path()).unwrap()
    }

    fn count(&self, sql: &str) -> i64 {
        self.raw().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn export(&self, mesh_id: &str, include_drained: bool) -> (u64, String) {
        let mut out = Vec::new();
        let n = self.store.export_pending_events(mesh_id, include_drained, &mut out).unwrap();
        (n, String::from_utf8(out).unwrap())
    }

    /// Queues as the daemon of machine `mach_a` does: untargeted events are
    /// stamped v2 as broadcasts of that machine.
    fn queue(&self, event: &PendingEvent, now: Timestamp) -> QueueOutcome {
        self.store
            .queue_pending_event(&event.mesh_id, event, &EmitHint::default(), Some("mach_a"), now)
            .unwrap()
    }

    fn drain_all(&self, mesh_id: &str, now: Timestamp) -> usize {
        let request =
            DrainRequest { drainer: drainer("mach_a"), only_events: None, enforce: false, limit: None };
        self.store.drain_pending_events(mesh_id, &request, now).unwrap().events.len()
    }

    fn held(&self, mesh_id: &str) -> Vec<LedgerEntry> {
        let query = LedgerQuery { kinds: vec!["event_held".into()], ..LedgerQuery::default() };
        self.store.read_ledger_ordered(mesh_id, &query).unwrap()
    }
}

fn drainer(daemon: &str) -> Drainer {
    Drainer::new(CoordinatorIdentity::new(daemon, "run-1", None), &[])
}

/// An event of mesh `mesh_id` for no coordinator in particular, queued at `at`.
fn event(name: &str, mesh_id: &str, session: &str, at: Timestamp) -> PendingEvent {
    let metadata = json!({"sessionId": session, "timestamp": at.millis()});
    PendingEvent::new(name, mesh_id, "Node 'n1'", metadata.as_object().unwrap().clone(), at)
}

fn line(event: &PendingEvent) -> String {
    event.to_value().to_string()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

// ── Legacy import ───────────────────────────────────────────────────────────

#[test]
fn the_fixture_inboxes_import_their_valid_events_and_are_removed() {
    let env = Env::with_fixture_inboxes();
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_dir().join("manifest.json")).unwrap()).unwrap();
    let want = &manifest["legacyJsonl"];

    let report = env.import();
    assert_eq!(
        report,
        LegacyEventsReport {
            files_scanned: 2,
            events_imported: want["validEvents"].as_u64().unwrap(),
            lines_skipped: want["badLines"].as_u64().unwrap(),
            files_removed: 2,
            files_retained: 0,
        }
    );
    assert!(env.files().is_empty(), "both files are gone: {:?}", env.files());
    assert_eq!(env.store.pending_event_count("mesh-alpha").unwrap(), 3);

    // Each row as the original's migration wrote it: the daemon target from the
    // event, `queuedAt` kept, a content fingerprint, undrained.
    let conn = env.raw();
    let mut stmt = conn
        .prepare(
            "SELECT event || ' ' || IFNULL(coordinator_daemon_id, '-') || ' ' || queued_at || ' '
                    || IFNULL(fingerprint, '-') || ' '
                    || NOT EXISTS (SELECT 1 FROM mesh_inbox_queue q WHERE q.id = e.id)
               FROM mesh_pending_events e ORDER BY queued_at",
        )
        .unwrap();
    let rows: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        rows,
        [
            "agent:stopped - 1748779199950 mesh-alpha::agent:stopped::legacy-task-1::genuine 0".to_owned(),
            format!(
                "agent:generating_completed daemon_{MACHINE} 1748779199960 \
                 mesh-alpha::agent:generating_completed::legacy-task-2::genuine 0"
            ),
            format!(
                "worktree_bootstrap_complete {MACHINE} 1748779199970 mesh-alpha::worktree_bootstrap_complete::wt-1 0"
            ),
        ]
    );

    // The machine's coordinator drains all three, whichever id form they name.
    let request = DrainRequest { drainer: drainer(MACHINE), only_events: None, enforce: false, limit: None };
    let out = env.store.drain_pending_events("mesh-alpha", &request, NOW).unwrap();
    assert_eq!(out.events.len(), 3, "{out:?}");
    assert_eq!(out.events[1].event.parse()["metadataEvent"]["finalSummary"], "legacy done");

    assert_eq!(env.import(), LegacyEventsReport::default(), "a second import finds nothing");
}

#[test]
fn a_file_that_cannot_be_read_is_kept_under_its_name() {
    let env = Env::new();
    std::fs::create_dir(env.dir().join("broken.pending-events.jsonl")).unwrap();
    env.write("good.pending-events.jsonl", &line(&event("agent:ready", "m", "s1", NOW)));

    let report = env.import();
    assert_eq!(
        report,
        LegacyEventsReport {
            files_scanned: 2,
            events_imported: 1,
            lines_skipped: 0,
            files_removed: 1,
            files_retained: 1
        }
    );
    assert_eq!(env.files(), ["broken.pending-events.jsonl"], "restored under its original name");
    assert!(env.dir().join("broken.pending-events.jsonl").is_dir());
}

#[test]
fn a_failed_import_changes_nothing_and_keeps_the_file_for_the_next_run() {
    let env = Env::new();
    // A trigger makes the second event of the file fail its insert.
    env.raw()
        .execute_batch(
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON mesh_pending_events
               WHEN NEW.event = 'boom' BEGIN SELECT RAISE(ABORT, 'refused'); END;",
        )
        .unwrap();
    let text = format!(
        "{}\n{}\n",
        line(&event("agent:ready", "m", "s1", NOW)),
        line(&event("boom", "m", "s2", NOW.plus_millis(1)))
    );
    let path = env.write("m.pending-events.jsonl", &text);

    let report = env.import();
    assert_eq!(report.files_scanned, 1);
    assert_eq!(report.files_retained, 1);
    assert_eq!(report.files_removed, 0);
    assert_eq!(report.events_imported, 0);
    assert_eq!(env.store.pending_event_count("m").unwrap(), 0, "the file's transaction rolled back whole");
    assert_eq!(env.files(), ["m.pending-events.jsonl"]);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "the file is untouched");

    env.raw().execute_batch("DROP TRIGGER refuse_boom").unwrap();
    let report = env.import();
    assert_eq!((report.events_imported, report.files_removed, report.files_retained), (2, 1, 0));
    assert!(env.files().is_empty());
}

#[test]
fn a_file_left_claimed_by_an_interrupted_run_is_imported() {
    let env = Env::new();
    env.write("m.pending-events.jsonl.migrating", &line(&event("agent:ready", "m", "s1", NOW)));
    env.write("notes.txt.migrating", "not an inbox");

    let report = env.import();
    assert_eq!(
        report,
        LegacyEventsReport {
            files_scanned: 1,
            events_imported: 1,
            lines_skipped: 0,
            files_removed: 1,
            files_retained: 0
        }
    );
    assert_eq!(env.files(), ["notes.txt.migrating"], "only inbox files are touched");
    assert_eq!(env.store.pending_event_count("m").unwrap(), 1);
}

#[test]
fn a_claimed_file_that_fails_is_put_back_under_its_original_name() {
    let env = Env::new();
    std::fs::create_dir(env.dir().join("m.pending-events.jsonl.migrating")).unwrap();
    let report = env.import();
    assert_eq!((report.files_scanned, report.files_retained), (1, 1));
    assert_eq!(env.files(), ["m.pending-events.jsonl"]);
}

#[test]
fn a_claimed_copy_is_never_overwritten_by_its_namesake() {
    let env = Env::new();
    // The claimed copy fails to import while a file of its original name exists:
    // both stay as they are, and neither replaces the other.
    std::fs::create_dir(env.dir().join("m.pending-events.jsonl.migrating")).unwrap();
    let text = line(&event("agent:ready", "m", "s1", NOW));
    env.write("m.pending-events.jsonl", &text);
    let report = env.import();
    assert_eq!((report.files_scanned, report.files_retained, report.events_imported), (2, 2, 0));
    assert_eq!(env.files(), ["m.pending-events.jsonl", "m.pending-events.jsonl.migrating"]);
    assert!(env.dir().join("m.pending-events.jsonl.migrating").is_dir());
    assert_eq!(std::fs::read_to_string(env.dir().join("m.pending-events.jsonl")).unwrap(), text);
}

#[test]
fn only_files_with_a_name_before_the_suffix_are_inboxes() {
    let env = Env::new();
    let text = line(&event("agent:ready", "m", "s1", NOW));
    env.write(".pending-events.jsonl", &text);
    env.write("m.queue.json", "[]");
    env.write("m.pending-events.jsonl.bak", &text);
    assert_eq!(env.import(), LegacyEventsReport::default());
    assert_eq!(env.files().len(), 3);
}

#[test]
fn a_missing_directory_imports_nothing() {
    let env = Env::new();
    let report = env.store.import_legacy_pending_events(&env.dir().join("absent"), NOW).unwrap();
    assert_eq!(report, LegacyEventsReport::default());
}

#[test]
fn events_the_mesh_already_holds_are_not_imported_again() {
    let env = Env::with_fixture_inboxes();
    assert_eq!(env.import().events_imported, 3);
    // The same lines again, from a file of another name: every fingerprint is taken.
    let mut text = String::new();
    for name in FIXTURE_FILES {
        text.push_str(&std::fs::read_to_string(fixture_dir().join("legacy").join(name)).unwrap());
    }
    env.write("copy.pending-events.jsonl", &text);
    let report = env.import();
    assert_eq!(
        report,
        LegacyEventsReport {
            files_scanned: 1,
            events_imported: 0,
            lines_skipped: 2,
            files_removed: 1,
            files_retained: 0
        }
    );
    assert_eq!(env.store.pending_event_count("mesh-alpha").unwrap(), 3);
}

#[test]
fn a_legacy_event_does_not_come_back_after_it_was_drained() {
    let env = Env::with_fixture_inboxes();
    env.import();
    let request = DrainRequest { drainer: drainer(MACHINE), only_events: None, enforce: false, limit: None };
    assert_eq!(env.store.drain_pending_events("mesh-alpha", &request, NOW).unwrap().events.len(), 3);
    for name in FIXTURE_FILES {
        std::fs::copy(fixture_dir().join("legacy").join(name), env.dir().join(name)).unwrap();
    }
    assert_eq!(env.import().events_imported, 0, "a drained row still holds its fingerprint");
    assert_eq!(env.store.pending_event_count("mesh-alpha").unwrap(), 0);
}

// ── Export ──────────────────────────────────────────────────────────────────

#[test]
fn an_export_imports_back_into_a_fresh_store_as_the_same_events() {
    let source = Env::new();
    let at = |i: i64| NOW.plus_millis(i * 1000);
    for (i, name) in ["agent:ready", "agent:generating_completed", "monitor:no_progress"].iter().enumerate() {
        let mut e = event(name, "m", &format!("s{i}"), at(i as i64));
        e.metadata_event.insert("taskId".into(), json!(format!("t{i}")));
        e.target_coordinator_daemon_id = Some("mach_a".into());
        assert!(matches!(source.queue(&e, at(i as i64)), QueueOutcome::Queued { .. }));
    }
    source.queue(&event("agent:ready", "other-mesh", "x", NOW), NOW);
    // The oldest is drained; the export may leave it out or carry it.
    let request = DrainRequest {
        drainer: drainer("mach_a"),
        only_events: Some(vec!["agent:ready".into()]),
        enforce: false,
        limit: None,
    };
    assert_eq!(source.store.drain_pending_events("m", &request, NOW).unwrap().events.len(), 1);

    let (undrained, text) = source.export("m", false);
    assert_eq!(undrained, 2);
    let names: Vec<Value> = lines(&text).iter().map(|e| e["event"].clone()).collect();
    assert_eq!(names, [json!("agent:generating_completed"), json!("monitor:no_progress")], "oldest first");

    let (all, text) = source.export("m", true);
    assert_eq!(all, 3);
    assert_eq!(text.lines().count(), 3);
    assert!(lines(&text).iter().all(|e| e["meshId"] == "m"), "one mesh only");
    assert!(lines(&text).iter().all(|e| e["protocolVersion"] == "2.0"), "as stored, envelope included");

    let target = Env::new();
    target.write("m.pending-events.jsonl", &text);
    let report = target.import();
    assert_eq!((report.events_imported, report.lines_skipped), (3, 0));
    let (n, round_trip) = target.export("m", true);
    assert_eq!(n, 3);
    assert_eq!(lines(&round_trip), lines(&text), "the same events, in the same order");
    assert_eq!(target.store.pending_event_count("m").unwrap(), 3, "imported events are undrained");
    let fingerprints = |env: &Env| {
        let conn = env.raw();
        let mut stmt =
            conn.prepare("SELECT fingerprint FROM mesh_pending_events ORDER BY queued_at").unwrap();
        stmt.query_map([], |r| r.get::<_, String>(0)).unwrap().collect::<Result<Vec<_>, _>>().unwrap()
    };
    let mut source_fingerprints = fingerprints(&source);
    source_fingerprints.retain(|f| f.starts_with("m::"));
    assert_eq!(fingerprints(&target), source_fingerprints, "same content, same dedup keys");
}

#[test]
fn an_empty_mesh_exports_nothing() {
    let env = Env::new();
    assert_eq!(env.export("m", true), (0, String::new()));
}

// ── Retention ───────────────────────────────────────────────────────────────

#[test]
fn drained_events_past_the_cutoff_are_deleted_and_fresh_ones_kept() {
    let env = Env::new();
    let old = NOW.plus_millis(-8 * DAY);
    let fresh = NOW.plus_millis(-DAY);
    env.queue(&event("agent:ready", "m", "old", old), old);
    env.queue(&event("agent:ready", "m", "fresh", fresh), fresh);
    env.queue(&event("agent:ready", "m2", "old", old), old);
    assert_eq!(env.drain_all("m", NOW) + env.drain_all("m2", NOW), 3);
    env.queue(&event("agent:ready", "m", "undrained", old), old);

    let report =
        env.store.prune_pending_events(NOW.plus_millis(-7 * DAY), NOW.plus_millis(-30 * DAY), NOW).unwrap();
    assert_eq!(report, PruneReport { drained_expired: 2, undrained_expired: 0, terminal_exempt: 0 });
    assert_eq!(
        env.count(
            "SELECT COUNT(*) FROM mesh_pending_events e
              WHERE NOT EXISTS (SELECT 1 FROM mesh_inbox_queue q WHERE q.id = e.id)"
        ),
        1,
        "the fresh one"
    );
    assert_eq!(env.store.pending_event_count("m").unwrap(), 1, "undrained rows wait for their own cutoff");
    assert!(env.held("m").is_empty(), "drained rows were delivered; nothing to mirror");
}

/// Log lines written while a test runs, for reading back.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_retention_sweep_warns_per_mesh_how_to_requeue_what_it_moved() {
    let env = Env::new();
    let old = NOW.plus_millis(-31 * DAY);
    env.queue(&event("agent:ready", "m", "s1", old), old);
    env.queue(&event("agent:ready", "m", "s2", old), old);
    env.queue(&event("monitor:no_progress", "m2", "s3", old), old);
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        env.store.prune_pending_events(NOW.plus_millis(-7 * DAY), NOW.plus_millis(-30 * DAY), NOW).unwrap()
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "one warning per mesh that lost events:\n{log}");
    let for_m = warnings.iter().find(|l| l.contains("of mesh m ")).expect("a warning for mesh m");
    assert!(for_m.contains("2 event(s) of mesh m "), "{for_m}");
    assert!(
        for_m.contains("agentmesh --mesh m events requeue-held --reason pending_retention_expired"),
        "{for_m}"
    );
    assert!(warnings.iter().any(|l| l.contains("1 event(s) of mesh m2 ")), "{log}");
}

#[test]
fn expired_undrained_events_move_to_the_ledger_and_terminal_ones_stay() {
    let env = Env::new();
    let old = NOW.plus_millis(-31 * DAY);
    let mut stale = event("agent:ready", "m", "s-stale", old);
    stale.metadata_event.insert("taskId".into(), json!("t-stale"));
    stale.node_id = Some("n1".into());
    let QueueOutcome::Queued { event: stored, .. } = env.queue(&stale, old) else { panic!("not queued") };
    let mut completion = event("agent:generating_completed", "m", "s-done", old);
    completion.metadata_event.insert("taskId".into(), json!("t-done"));
    completion.metadata_event.insert("finalSummary".into(), json!("all green"));
    env.queue(&completion, old);
    env.queue(&event("agent:ready", "m", "s-fresh", NOW), NOW);
    env.queue(&event("monitor:no_progress", "m2", "s-other", old), old);

    let report =
        env.store.prune_pending_events(NOW.plus_millis(-7 * DAY), NOW.plus_millis(-30 * DAY), NOW).unwrap();
    assert_eq!(report, PruneReport { drained_expired: 0, undrained_expired: 2, terminal_exempt: 1 });
    assert_eq!(env.store.pending_event_count("m").unwrap(), 2, "the completion and the fresh event");
    assert_eq!(env.store.pending_event_count("m2").unwrap(), 0, "every mesh is swept");
    let left: Vec<String> = {
        let conn = env.raw();
        let mut stmt = conn.prepare("SELECT event FROM mesh_pending_events ORDER BY queued_at").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    };
    assert_eq!(left, ["agent:generating_completed", "agent:ready"]);

    let held = env.held("m");
    assert_eq!(held.len(), 1, "{held:?}");
    let entry = &held[0];
    assert_eq!(entry.mesh_id, "m");
    assert_eq!(entry.timestamp, NOW.iso());
    assert_eq!(entry.node_id.as_deref(), Some("n1"));
    let p = &entry.payload;
    assert_eq!(p["reason"], "pending_retention_expired");
    assert_eq!(p["recoverable"], true);
    assert_eq!(p["event"], "agent:ready");
    assert_eq!(p["taskId"], "t-stale");
    assert_eq!(p["queuedAt"], old.millis());
    assert_eq!(p["eventId"], json!(stored.envelope.event_id.as_deref().unwrap()));
    assert_eq!(p["heldEvent"], stored.to_value(), "the whole event, as it was stored");
    assert_eq!(env.held("m2").len(), 1, "mirrored into its own mesh's ledger");
    assert_eq!(env.held("m2")[0].payload["heldEvent"]["event"], "monitor:no_progress");

    // A second sweep finds only the exempt completion again.
    let again =
        env.store.prune_pending_events(NOW.plus_millis(-7 * DAY), NOW.plus_millis(-30 * DAY), NOW).unwrap();
    assert_eq!(again, PruneReport { drained_expired: 0, undrained_expired: 0, terminal_exempt: 1 });
    assert_eq!(env.held("m").len(), 1);
}

#[test]
fn a_long_backlog_expires_in_chunks_with_one_entry_each() {
    let env = Env::new();
    let old = NOW.plus_millis(-40 * DAY);
    for i in 0..1203 {
        let at = old.plus_millis(i % 7);
        env.queue(&event("agent:ready", "m", &format!("s{i}"), at), at);
    }
    let report = env.store.prune_pending_events(NOW, NOW.plus_millis(-30 * DAY), NOW).unwrap();
    assert_eq!(report.undrained_expired, 1203);
    assert_eq!(env.store.pending_event_count("m").unwrap(), 0);
    assert_eq!(env.held("m").len(), 1203);
}

#[test]
fn a_drained_fingerprint_keeps_deduplicating_until_it_is_pruned() {
    let env = Env::new();
    let queued = NOW.plus_millis(-3 * DAY);
    let e = event("agent:ready", "m", "s1", queued);
    assert!(matches!(env.queue(&e, queued), QueueOutcome::Queued { .. }));
    assert_eq!(env.drain_all("m", queued), 1);
    assert_eq!(env.queue(&e, NOW), QueueOutcome::Duplicate(DuplicateReason::Fingerprint));

    // The drained row is younger than the cutoff: it stays, and so does the dedup.
    let report =
        env.store.prune_pending_events(NOW.plus_millis(-7 * DAY), NOW.plus_millis(-30 * DAY), NOW).unwrap();
    assert_eq!(report.drained_expired, 0);
    assert_eq!(env.queue(&e, NOW), QueueOutcome::Duplicate(DuplicateReason::Fingerprint));

    // Once pruned, the same content may be queued again.
    let report =
        env.store.prune_pending_events(NOW.plus_millis(-2 * DAY), NOW.plus_millis(-30 * DAY), NOW).unwrap();
    assert_eq!(report.drained_expired, 1);
    assert!(matches!(env.queue(&e, NOW), QueueOutcome::Queued { .. }));
}

/// An event whose stored payload is damaged (a deflated stream cut short) reads
/// as an unparsable payload does, `{}`: the drain and the export go on and hand
/// out the other events, and nothing is lost from them.
#[test]
fn a_damaged_stored_event_payload_does_not_stop_a_drain_or_an_export() {
    let env = Env::new();
    let mut long = event("agent:ready", "m", "s1", NOW);
    long.metadata_event
        .insert("note".to_owned(), json!("a note long enough to be stored deflated ".repeat(8)));
    env.queue(&long, NOW);
    let later = Timestamp::from_millis(NOW.millis() + 1);
    env.queue(&event("agent:ready", "m", "s2", later), later);
    let path = env._db.path().join("mesh-runtime.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let kind: String = conn
        .query_row("SELECT typeof(payload) FROM mesh_pending_events ORDER BY queued_at LIMIT 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(kind, "blob", "the long event is stored deflated");
    conn.execute(
        "UPDATE mesh_pending_events SET payload = substr(payload, 1, 12)
          WHERE rowid = (SELECT rowid FROM mesh_pending_events ORDER BY queued_at LIMIT 1)",
        [],
    )
    .unwrap();
    drop(conn);

    let (exported, jsonl) = env.export("m", true);
    assert_eq!(exported, 1, "the damaged event has no payload to write; the other is written: {jsonl}");
    assert!(jsonl.contains("\"s2\""), "{jsonl}");
    let request = DrainRequest { drainer: drainer("mach_a"), only_events: None, enforce: false, limit: None };
    let drained = env
        .store
        .drain_pending_events("m", &request, Timestamp::from_millis(NOW.millis() + 2))
        .expect("the drain goes on");
    assert!(
        drained.events.iter().any(|e| e.event.parse()["metadataEvent"]["sessionId"] == "s2"),
        "the intact event is handed out: {drained:?}"
    );
}
