//! `agentmesh archive` on a data dir: retention run by hand, the archived task
//! and ledger read back marked, a mesh's own windows, and an export to a
//! gzip file of JSON lines that a drop then empties the archive of.

use std::io::Read;

use serde_json::Value;

use super::agentmesh;

fn run(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = agentmesh().arg("--data-dir").arg(dir).args(args).output().unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn json(dir: &std::path::Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = run(dir, &all);
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
}

/// A temporary folder with the data dir `data` in it, holding
/// [`one_done_one_open`] with `summary`.
fn seeded(summary: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    one_done_one_open(&data, summary);
    (dir, data)
}

/// Task t1 completed with `summary`, task t2 still pending, in `data`.
fn one_done_one_open(data: &std::path::Path, summary: &str) {
    json(data, &["task", "add", "first piece", "--id", "t1"]);
    json(data, &["task", "add", "second piece", "--id", "t2"]);
    json(data, &["claim", "--node", "n1", "--session", "s1"]);
    json(data, &["complete", "--session", "s1", "--task", "t1", "--summary", summary]);
}

#[test]
fn archive_run_status_export_and_drop_on_a_data_dir() {
    let (dir, data) = seeded("did it");
    let data = data.as_path();
    // The defaults keep a task finished a moment ago.
    let kept = json(data, &["archive", "run"]);
    assert_eq!(kept["tasksArchived"], 0, "{kept}");
    let moved = json(data, &["archive", "run", "--retain-tasks", "1ms", "--retain-ledger", "1ms"]);
    assert_eq!(moved["tasksArchived"], 1, "only the finished task: {moved}");
    let status = json(data, &["archive", "status"]);
    assert_eq!(status["tasks"], 1, "{status}");
    let shown = json(data, &["task", "show", "t1"]);
    assert_eq!((&shown["archived"], &shown["finalSummary"]), (&Value::Bool(true), &Value::from("did it")));
    let (_, human, _) = run(data, &["task", "show", "t2"]);
    assert!(!human.contains("archived"), "{human}");
    let (code, _, stderr) = run(data, &["task", "add", "again", "--id", "t1"]);
    assert_ne!(code, Some(0), "an archived id stays taken");
    assert!(stderr.contains("t1"), "{stderr}");

    let own = json(data, &["archive", "retention", "--tasks", "3d"]);
    assert_eq!(own["tasks"], "3d", "{own}");
    let own = json(data, &["archive", "retention", "--events", "36h"]);
    assert_eq!((&own["tasks"], &own["events"]), (&Value::from("3d"), &Value::from("1d12h")), "{own}");
    let (_, human, _) = run(data, &["archive", "retention"]);
    assert!(human.contains("drained events 1d12h"), "{human}");
    let (code, _, stderr) = run(data, &["archive", "retention", "--ledger", "forever"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--ledger"), "{stderr}");

    let file = dir.path().join("mesh.jsonl.gz");
    let exported = json(data, &["archive", "export", "--output", file.to_str().unwrap(), "--drop"]);
    assert_eq!(exported["tasks"], 1, "{exported}");
    let entries = exported["ledgerEntries"].as_u64().unwrap();
    assert!(entries >= 3, "{exported}");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap()).read_to_string(&mut text).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len() as u64, 1 + entries);
    assert_eq!((&lines[0]["type"], &lines[0]["task"]["id"]), (&Value::from("task"), &Value::from("t1")));
    assert!(lines[1..].iter().all(|l| l["type"] == "ledger" && l["entry"]["kind"].is_string()), "{text}");
    let after = json(data, &["archive", "status"]);
    assert_eq!((&after["tasks"], &after["ledgerEntries"]), (&Value::from(0), &Value::from(0)), "{after}");
    assert!(after["droppedThrough"].as_u64().unwrap() > 0, "{after}");
    let (code, _, stderr) = run(data, &["archive", "export", "--output", file.to_str().unwrap()]);
    assert_ne!(code, Some(0), "an export never writes over a file");
    assert!(stderr.contains("never writes over"), "{stderr}");
    let (code, _, stderr) = run(data, &["ledger", "slice", "--after-seq", "1"]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("expired"), "{stderr}");
}

#[test]
fn a_task_history_reads_the_archive_and_the_hot_ledger_alike() {
    let (_dir, data) = seeded("did it");
    let data = data.as_path();
    let history = |task: &str| -> Vec<String> {
        let entries = json(data, &["ledger", "tail", "--task", task]);
        let entries = entries.as_array().unwrap_or_else(|| panic!("{entries}"));
        assert!(entries.iter().all(|e| e["payload"]["taskId"] == task), "{entries:?}");
        entries.iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
    };
    let hot = history("t1");
    assert_eq!(hot, ["task_dispatched", "task_claimed", "task_completed"]);
    assert_eq!(history("t2"), ["task_dispatched"]);

    let moved = json(data, &["archive", "run", "--retain-tasks", "1ms"]);
    assert_eq!(
        (&moved["tasksArchived"], &moved["ledgerEntriesArchived"]),
        (&Value::from(1), &Value::from(0))
    );
    assert_eq!(history("t1"), hot, "the task archived, its entries hot");
    let moved = json(data, &["archive", "run", "--retain-tasks", "1ms", "--retain-ledger", "1ms"]);
    assert!(moved["ledgerEntriesArchived"].as_u64().unwrap() >= 4, "{moved}");
    assert_eq!(history("t1"), hot, "the task and its entries archived");
    assert_eq!(history("t2"), ["task_dispatched"], "an open task's archived entries");
    let last = json(data, &["ledger", "tail", "--task", "t1", "--limit", "1", "--kind", "task_claimed"]);
    assert_eq!(last.as_array().map(|e| e.len()), Some(1), "{last}");

    let (code, _, stderr) = run(data, &["ledger", "tail", "--task", "t9"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("task t9 not found"), "{stderr}");
    let (code, _, stderr) = run(data, &["ledger", "tail", "--task", " "]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("task"), "{stderr}");
}

#[test]
fn a_backup_carries_the_archive_and_a_restore_puts_it_back() {
    let (dir, data) = seeded("done");
    let data = data.as_path();

    // An archive that holds nothing yet is not copied.
    let first = dir.path().join("first.db");
    let plain = json(data, &["backup", first.to_str().unwrap()]);
    assert!(plain.get("archive").is_none(), "{plain}");
    assert!(!dir.path().join("first.db-archive").exists());

    let moved = json(data, &["archive", "run", "--retain-tasks", "1ms", "--retain-ledger", "1ms"]);
    assert_eq!(moved["tasksArchived"], 1, "{moved}");
    let second = dir.path().join("second.db");
    let (code, text, stderr) = run(data, &["backup", second.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let copied = dir.path().join("second.db-archive");
    let line = text.lines().find(|l| l.starts_with("and its archive")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(copied.to_str().unwrap()) && line.contains("1 task(s)"), "{line}");
    let third = dir.path().join("third.db");
    let with_archive = json(data, &["backup", third.to_str().unwrap()]);
    assert_eq!(with_archive["archive"]["path"], dir.path().join("third.db-archive").to_str().unwrap());
    assert_eq!(with_archive["archive"]["tasks"], 1, "{with_archive}");
    let entries = with_archive["archive"]["ledgerEntries"].as_u64().unwrap();
    assert!(entries >= 3, "{with_archive}");
    // The live archive is never a destination, even with --force.
    let live = data.join("mesh-runtime.db-archive");
    let (code, _, stderr) = run(data, &["backup", live.to_str().unwrap(), "--force"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is the database itself"), "{stderr}");
    assert_eq!(json(data, &["archive", "status"])["tasks"], 1, "the archive is as it was");
    // Neither file of a backup is written over without --force.
    std::fs::remove_file(&third).unwrap();
    let (code, _, stderr) = run(data, &["backup", third.to_str().unwrap()]);
    assert_ne!(code, Some(0), "the archive of an earlier backup is there: {stderr}");
    assert!(stderr.contains("third.db-archive"), "{stderr}");
    assert!(!third.exists(), "nothing was written");

    // The dry run and a restore into a fresh data dir: the archived task is
    // found archived, the open one hot.
    let checked = json(data, &["restore", "--dry-run", second.to_str().unwrap()]);
    assert_eq!(checked["backup"]["archive"]["tasks"], 1, "{checked}");
    let fresh = dir.path().join("fresh");
    let restored = json(&fresh, &["restore", second.to_str().unwrap()]);
    assert_eq!(restored["restored"]["archive"]["tasks"], 1, "{restored}");
    assert!(restored.get("archiveKept").is_none(), "{restored}");
    let shown = json(&fresh, &["task", "show", "t1"]);
    assert_eq!((&shown["archived"], &shown["finalSummary"]), (&Value::Bool(true), &Value::from("done")));
    assert_eq!(json(&fresh, &["task", "show", "t2"])["status"], "pending");
    assert_eq!(json(&fresh, &["archive", "status"])["tasks"], 1);

    // A backup from before any archiving keeps the data dir's archive, and says so.
    let back = json(data, &["restore", first.to_str().unwrap()]);
    let kept = &back["archiveKept"];
    assert_eq!(kept["path"], data.join("mesh-runtime.db-archive").to_str().unwrap(), "{back}");
    assert_eq!(kept["tasks"], 1, "{back}");
    assert_eq!(json(data, &["task", "show", "t1"])["status"], "completed");
    assert_eq!(json(data, &["archive", "status"])["tasks"], 1);
    // A restore that brings an archive moves the old one aside.
    let again = json(data, &["restore", second.to_str().unwrap()]);
    let aside = again["movedAside"].as_array().unwrap();
    assert!(
        aside.iter().any(|p| p.as_str().unwrap().contains("mesh-runtime.db-archive.before-restore-")),
        "{again}"
    );
    assert_eq!(json(data, &["archive", "status"])["tasks"], 1);
}

#[test]
fn migrate_copies_the_archive_for_the_target_to_archive_again() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("from");
    let to = dir.path().join("to");
    one_done_one_open(&from, "done");
    json(&from, &["archive", "run", "--retain-tasks", "1ms", "--retain-ledger", "1ms"]);
    json(&from, &["task", "add", "third piece", "--id", "t3"]);
    // The whole ledger by sequence: the archived entries, then the hot one.
    let by_seq = |data: &std::path::Path| -> (Vec<String>, u64) {
        let slice = json(data, &["ledger", "slice", "--after-seq", "0", "--limit", "500"]);
        let ids = slice["entries"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_owned());
        (ids.collect(), slice["archived"].as_u64().unwrap_or(0))
    };
    let (source, archived) = by_seq(&from);
    assert_eq!((source.len() as u64, archived), (archived + 1, 4), "4 archived, t3's hot");

    let (code, text, stderr) =
        run(&from, &["migrate", "--from", from.to_str().unwrap(), "--to", to.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("archive: 1 task(s) and 4 ledger entries copied, 0 already there"), "{stderr}");
    assert!(text.contains("archived tasks") && text.contains("archived ledger entries"), "{text}");
    let copied = json(&to, &["task", "show", "t1"]);
    assert_eq!((&copied["finalSummary"], copied.get("archived")), (&Value::from("done"), None), "{copied}");
    assert_eq!(by_seq(&to), (source.clone(), 0), "the same order, all hot in the target");

    let moved = json(&to, &["archive", "run", "--retain-tasks", "1ms", "--retain-ledger", "1ms"]);
    assert_eq!(moved["tasksArchived"], 1, "{moved}");
    assert_eq!(json(&to, &["task", "show", "t1"])["archived"], true);
    assert_eq!(by_seq(&to).0, source, "archived again, in the same order");

    let again = json(&from, &["migrate", "--from", from.to_str().unwrap(), "--to", to.to_str().unwrap()]);
    let archive = &again["meshes"][0]["archive"];
    assert_eq!(
        (&archive["tasks"]["copied"], &archive["tasks"]["existing"]),
        (&Value::from(0), &Value::from(1))
    );
    assert_eq!(
        (&archive["ledger"]["copied"], &archive["ledger"]["existing"]),
        (&Value::from(0), &Value::from(4))
    );
    assert_eq!(again["totals"]["copied"], 0, "{again}");
}
