//! Reading the original's legacy files.
//!
//! A `<mesh>.queue.json` is parsed strictly: a malformed file is refused whole,
//! with the position and field of the first problem, so an import either takes
//! everything or changes nothing.
//!
//! A `*.pending-events.jsonl` inbox is read line by line, as the original's
//! one-time migration read it: each line is one event, and a line that is not one
//! is skipped and reported by its number while the other lines are kept. The
//! original appended to these files from several processes, so a torn or garbled
//! line is an expected state of the file, not a reason to refuse the events around
//! it. Nothing here touches the file system beyond building paths: the files are
//! read, claimed and removed by the backend that imports them.

use std::path::Path;

use agentmesh_core::events::PendingEvent;
use agentmesh_core::{Task, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::StoreError;

/// The file name the original uses for a mesh: characters outside
/// `[A-Za-z0-9_-]` become `_`.
pub fn safe_mesh_id(mesh_id: &str) -> String {
    mesh_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// The legacy queue file of a mesh in a ledger directory: `<mesh>.queue.json`.
pub fn legacy_queue_path(dir: &Path, mesh_id: &str) -> std::path::PathBuf {
    dir.join(format!("{}.queue.json", safe_mesh_id(mesh_id)))
}

/// Parses a legacy `<mesh>.queue.json` (a JSON array of queue entries). Every entry
/// must belong to `mesh_id`.
pub fn parse_legacy_queue(path: &Path, text: &str, mesh_id: &str) -> Result<Vec<Task>, StoreError> {
    let bad = |problem: String| StoreError::LegacyFile { path: path.to_owned(), problem };
    let mut de = serde_json::Deserializer::from_str(text);
    let tasks: Vec<Task> = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let at = err.path().to_string();
        let inner = err.into_inner();
        if at.is_empty() || at == "." { bad(format!("{inner}")) } else { bad(format!("at {at}: {inner}")) }
    })?;
    for (i, task) in tasks.iter().enumerate() {
        if task.id.trim().is_empty() {
            return Err(bad(format!("at [{i}].id: must not be blank")));
        }
        if task.mesh_id != mesh_id {
            return Err(bad(format!(
                "at [{i}].meshId: entry belongs to mesh {:?}, not {mesh_id:?}",
                task.mesh_id
            )));
        }
    }
    Ok(tasks)
}

/// The name ending of the original's inbox files: `<mesh>.pending-events.jsonl`,
/// or `<mesh>-<daemon>.pending-events.jsonl` for a per-daemon inbox.
pub const PENDING_EVENTS_SUFFIX: &str = ".pending-events.jsonl";

/// The ending an inbox file carries while an import holds it.
pub const MIGRATING_SUFFIX: &str = ".migrating";

/// Whether `name` names a legacy inbox file: it ends with
/// [`PENDING_EVENTS_SUFFIX`] and has something before it.
pub fn is_pending_events_file_name(name: &str) -> bool {
    name.len() > PENDING_EVENTS_SUFFIX.len() && name.ends_with(PENDING_EVENTS_SUFFIX)
}

/// The inbox file a claimed (`*.migrating`) name was claimed from, if `name` is a
/// claimed inbox file.
pub fn claimed_pending_events_file_name(name: &str) -> Option<&str> {
    name.strip_suffix(MIGRATING_SUFFIX).filter(|original| is_pending_events_file_name(original))
}

/// A line of a legacy inbox file that holds no event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedLine {
    /// The line number, counting from 1.
    pub line: usize,
    /// Why the line was skipped.
    pub problem: String,
}

/// The contents of a legacy inbox file: its events in file order, and the lines
/// that were skipped. Blank lines are neither.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LegacyEventLines {
    /// The events, in the order of their lines.
    pub events: Vec<PendingEvent>,
    /// The lines that were not events, in order.
    pub skipped: Vec<SkippedLine>,
}

/// Parses the bytes of a legacy `*.pending-events.jsonl` file, one event per line.
///
/// Blank lines (and a `\r` before a line break) are ignored. A line is skipped
/// when it is not UTF-8 JSON, is not an object, lacks a non-blank string `event`
/// or `meshId`, or has a field of the wrong type (named in the problem). Two
/// fields are filled in where the original filled them in: a `queuedAt` that is
/// not a number becomes `now`, and a missing or `null` `metadataEvent` becomes an
/// empty object. Keys this runtime does not model are kept with the event.
pub fn parse_legacy_pending_events(bytes: &[u8], now: Timestamp) -> LegacyEventLines {
    let mut out = LegacyEventLines::default();
    for (index, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_pending_event_line(line, now) {
            Ok(event) => out.events.push(event),
            Err(problem) => out.skipped.push(SkippedLine { line: index + 1, problem }),
        }
    }
    out
}

/// One non-blank line of an inbox file as an event, or why it is not one.
fn parse_pending_event_line(line: &[u8], now: Timestamp) -> Result<PendingEvent, String> {
    let mut map = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err(String::from("not a JSON object")),
        Err(err) => return Err(format!("not JSON: {err}")),
    };
    for key in ["event", "meshId"] {
        match map.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => {}
            Some(Value::String(_)) => return Err(format!("{key} is blank")),
            Some(_) => return Err(format!("{key} is not a string")),
            None => return Err(format!("{key} is missing")),
        }
    }
    if !map.get("queuedAt").is_some_and(Value::is_number) {
        map.insert(String::from("queuedAt"), Value::from(now.millis()));
    }
    if map.get("metadataEvent").is_none_or(Value::is_null) {
        map.insert(String::from("metadataEvent"), Value::Object(Map::new()));
    }
    PendingEvent::from_map(map).map_err(|err| err.to_string())
}

/// What an import of legacy inbox files did, in the original's field names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LegacyEventsReport {
    /// Inbox files taken up for import (claimed, or left claimed by an earlier
    /// run). A file another process holds is not counted.
    pub files_scanned: u64,
    /// Events stored. An event whose fingerprint the mesh already holds is read but
    /// not stored again, and not counted.
    pub events_imported: u64,
    /// Lines skipped as not being events, in the files whose import committed.
    pub lines_skipped: u64,
    /// Files imported and deleted.
    pub files_removed: u64,
    /// Files left in place (under their original name where possible) to be
    /// retried: unreadable, or their import failed and changed nothing.
    pub files_retained: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesh_ids_are_made_safe() {
        assert_eq!(safe_mesh_id("team/repo:main"), "team_repo_main");
        assert_eq!(safe_mesh_id("mesh-alpha_1"), "mesh-alpha_1");
    }

    #[test]
    fn malformed_files_name_the_problem() {
        let p = Path::new("m.queue.json");
        let err = parse_legacy_queue(p, "{not json", "m").unwrap_err();
        assert!(matches!(err, StoreError::LegacyFile { .. }), "{err}");
        let err = parse_legacy_queue(
            p,
            r#"[{"id":"a","meshId":"m","message":"x","status":"done","createdAt":"","updatedAt":""}]"#,
            "m",
        )
        .unwrap_err();
        assert!(err.to_string().contains("[0].status"), "{err}");
        let err = parse_legacy_queue(
            p,
            r#"[{"id":"a","meshId":"other","message":"x","status":"pending","createdAt":"","updatedAt":""}]"#,
            "m",
        )
        .unwrap_err();
        assert!(err.to_string().contains("meshId"), "{err}");
    }
    const NOW: Timestamp = Timestamp::from_millis(1_780_000_000_000);

    fn problems(lines: &LegacyEventLines) -> Vec<(usize, &str)> {
        lines.skipped.iter().map(|s| (s.line, s.problem.as_str())).collect()
    }

    #[test]
    fn inbox_file_names() {
        assert!(is_pending_events_file_name("mesh-a.pending-events.jsonl"));
        assert!(is_pending_events_file_name("m-mach_1.pending-events.jsonl"));
        assert!(!is_pending_events_file_name(".pending-events.jsonl"), "nothing before the suffix");
        assert!(!is_pending_events_file_name("mesh-a.pending-events.jsonl.migrating"));
        assert!(!is_pending_events_file_name("mesh-a.queue.json"));
        assert_eq!(
            claimed_pending_events_file_name("mesh-a.pending-events.jsonl.migrating"),
            Some("mesh-a.pending-events.jsonl")
        );
        assert_eq!(claimed_pending_events_file_name(".pending-events.jsonl.migrating"), None);
        assert_eq!(claimed_pending_events_file_name("mesh-a.queue.json.migrating"), None);
    }

    #[test]
    fn each_line_is_one_event_and_blank_lines_are_nothing() {
        let text = concat!(
            r#"{"event":"agent:stopped","meshId":"m","nodeLabel":"n","metadataEvent":{"taskId":"t1"},"queuedAt":5}"#,
            "\n\n   \r\n",
            r#"{"event":"agent:ready","meshId":"m2","metadataEvent":{},"queuedAt":7,"futureKey":[1]}"#,
            "\r\n",
        );
        let parsed = parse_legacy_pending_events(text.as_bytes(), NOW);
        assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
        assert_eq!(parsed.events.len(), 2);
        let first = &parsed.events[0];
        assert_eq!((first.event.as_str(), first.mesh_id.as_str()), ("agent:stopped", "m"));
        assert_eq!(first.metadata_event["taskId"], "t1");
        assert_eq!(first.queued_at, Timestamp::from_millis(5));
        let second = &parsed.events[1];
        assert_eq!(second.node_label, "", "nodeLabel defaults to empty");
        assert_eq!(second.extra["futureKey"], serde_json::json!([1]), "unknown keys are kept");
    }

    #[test]
    fn bad_lines_are_skipped_by_number_and_the_rest_kept() {
        let text = [
            r#"{"event":"agent:stopped","meshId":"m","metadataEvent":{},"queuedAt":1}"#,
            r#"{"event": 42}"#,
            "{not json at all",
            r#"["event","meshId"]"#,
            r#"{"event":"agent:stopped"}"#,
            r#"{"event":"  ","meshId":"m"}"#,
            r#"{"event":"agent:stopped","meshId":"m","metadataEvent":"oops"}"#,
            r#"{"event":"agent:stopped","meshId":"m","nodeLabel":3}"#,
            r#"{"event":"agent:ready","meshId":"m","metadataEvent":{},"queuedAt":2}"#,
        ]
        .join("\n");
        let parsed = parse_legacy_pending_events(text.as_bytes(), NOW);
        assert_eq!(parsed.events.len(), 2);
        assert_eq!(parsed.events[1].event, "agent:ready");
        let skipped = problems(&parsed);
        assert_eq!(skipped.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(skipped[0].1, "event is not a string");
        assert!(skipped[1].1.starts_with("not JSON"), "{}", skipped[1].1);
        assert_eq!(skipped[2].1, "not a JSON object");
        assert_eq!(skipped[3].1, "meshId is missing");
        assert_eq!(skipped[4].1, "event is blank");
        assert!(skipped[5].1.contains("metadataEvent"), "{}", skipped[5].1);
        assert!(skipped[6].1.contains("nodeLabel"), "{}", skipped[6].1);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_skipped() {
        let mut bytes = br#"{"event":"agent:ready","meshId":"m","metadataEvent":{"x":""#.to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(b"\"},\"queuedAt\":1}\n");
        bytes.extend_from_slice(br#"{"event":"agent:ready","meshId":"m","metadataEvent":{},"queuedAt":1}"#);
        let parsed = parse_legacy_pending_events(&bytes, NOW);
        assert_eq!(parsed.events.len(), 1);
        assert_eq!(parsed.skipped.len(), 1);
        assert_eq!(parsed.skipped[0].line, 1);
    }

    #[test]
    fn queued_at_and_metadata_are_filled_in_as_the_original_did() {
        let text = concat!(
            r#"{"event":"agent:ready","meshId":"m","queuedAt":"yesterday"}"#,
            "\n",
            r#"{"event":"agent:ready","meshId":"m","metadataEvent":null,"queuedAt":1748779199950.7}"#,
        );
        let parsed = parse_legacy_pending_events(text.as_bytes(), NOW);
        assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
        assert_eq!(parsed.events[0].queued_at, NOW, "a queuedAt that is no number is now");
        assert!(parsed.events[0].metadata_event.is_empty());
        assert_eq!(parsed.events[1].queued_at, Timestamp::from_millis(1_748_779_199_950));
        assert!(parsed.events[1].metadata_event.is_empty());
    }

    #[test]
    fn the_envelope_is_read_from_the_line() {
        let text = r#"{"event":"agent:stopped","meshId":"m","metadataEvent":{},"queuedAt":1,"protocolVersion":"2.0","eventId":"ev-1","scope":"broadcast","dispatchedBy":{"daemonId":"mach_a","coordinatorRunId":"r1"}}"#;
        let parsed = parse_legacy_pending_events(text.as_bytes(), NOW);
        let envelope = &parsed.events[0].envelope;
        assert_eq!(envelope.protocol_version, Some(agentmesh_core::events::ProtocolVersion::V2));
        assert_eq!(envelope.event_id.as_deref(), Some("ev-1"));
        assert_eq!(envelope.scope, Some(agentmesh_core::events::Scope::Broadcast));
        assert!(envelope.dispatched_by.is_some());
    }

    #[test]
    fn the_report_speaks_the_original_field_names() {
        let report = LegacyEventsReport {
            files_scanned: 2,
            events_imported: 3,
            lines_skipped: 2,
            files_removed: 2,
            files_retained: 0,
        };
        assert_eq!(
            serde_json::to_value(report).unwrap(),
            serde_json::json!({
                "filesScanned": 2, "eventsImported": 3, "linesSkipped": 2, "filesRemoved": 2, "filesRetained": 0
            })
        );
    }
}
