//! Property-based fuzzing of the legacy file parsers: an original ledger
//! directory is foreign input (torn appends, hand edits, other versions), so its
//! parsers must answer any bytes with events or reasons, never a panic.

use std::path::Path;

use agentmesh_core::Timestamp;
use agentmesh_store::StoreError;
use agentmesh_store::legacy::{parse_legacy_pending_events, parse_legacy_queue};
use proptest::prelude::*;
use serde_json::{Value, json};

fn now() -> Timestamp {
    Timestamp::from_millis(1_735_689_600_000)
}

/// Any JSON scalar.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("JSON numbers are finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        "\\PC{0,12}".prop_map(Value::from),
        Just(json!({})),
        Just(json!([])),
    ]
}

/// An event line the original wrote.
fn good_event() -> impl Strategy<Value = Value> {
    ("[a-z:_]{1,24}", "[a-z-]{1,8}", any::<u32>(), prop::option::of("mach_[a-f0-9]{4}")).prop_map(
        |(event, mesh, at, target)| {
            let mut line = json!({
                "event": event,
                "meshId": mesh,
                "nodeLabel": "Node 'n1'",
                "metadataEvent": { "taskId": "t1" },
                "queuedAt": 1_748_779_199_970_i64 + i64::from(at),
            });
            if let Some(target) = target {
                line["targetCoordinatorDaemonId"] = json!(target);
            }
            line
        },
    )
}

/// A line of an inbox file, and whether the parser must take it as an event.
fn line() -> impl Strategy<Value = (Vec<u8>, bool)> {
    let keys = prop::sample::select(vec![
        "event",
        "meshId",
        "nodeLabel",
        "nodeId",
        "metadataEvent",
        "queuedAt",
        "targetCoordinatorDaemonId",
        "protocolVersion",
        "eventId",
        "scope",
        "dispatchedBy",
    ]);
    prop_oneof![
        3 => good_event().prop_map(|e| (e.to_string().into_bytes(), true)),
        3 => (good_event(), keys, scalar()).prop_map(|(mut e, key, value)| {
            e[key] = value;
            (e.to_string().into_bytes(), false)
        }),
        2 => prop::collection::vec(any::<u8>(), 0..48).prop_map(|bytes| (bytes, false)),
        1 => (good_event(), 0usize..64).prop_map(|(e, cut)| {
            // A torn append: the line stops somewhere.
            let mut bytes = e.to_string().into_bytes();
            bytes.truncate(cut.min(bytes.len()));
            (bytes, false)
        }),
        1 => prop::sample::select(vec!["", " ", "\t", "\r"]).prop_map(|s| (s.as_bytes().to_vec(), false)),
    ]
}

fn is_blank(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.iter().all(u8::is_ascii_whitespace)
}

// proptest's default configuration: 256 cases per property, `PROPTEST_CASES` for
// longer runs.
proptest! {

    /// Every non-blank line is either an event or a skipped line reported by its
    /// number; every line the original wrote is an event.
    #[test]
    fn every_inbox_line_is_an_event_or_a_numbered_skip(lines in prop::collection::vec(line(), 0..12)) {
        // A line holding a newline byte is several lines of the file.
        let file = lines.iter().map(|(bytes, _)| bytes.as_slice()).collect::<Vec<_>>().join(&b'\n');
        let file_lines: Vec<&[u8]> = file.split(|b| *b == b'\n').collect();
        let parsed = parse_legacy_pending_events(&file, now());

        let non_blank = file_lines.iter().filter(|l| !is_blank(l)).count();
        prop_assert_eq!(parsed.events.len() + parsed.skipped.len(), non_blank);
        let numbers: Vec<usize> = parsed.skipped.iter().map(|s| s.line).collect();
        prop_assert!(numbers.windows(2).all(|w| w[0] < w[1]), "skips out of order: {numbers:?}");
        for skip in &parsed.skipped {
            prop_assert!(skip.line >= 1 && skip.line <= file_lines.len(), "{skip:?}");
            prop_assert!(!is_blank(file_lines[skip.line - 1]), "a blank line was reported: {skip:?}");
            prop_assert!(!skip.problem.is_empty());
        }
        let good = lines.iter().filter(|(bytes, good)| *good && !bytes.contains(&b'\n')).count();
        prop_assert!(parsed.events.len() >= good, "{} events for {good} good lines", parsed.events.len());
        for event in &parsed.events {
            prop_assert!(!event.event.trim().is_empty() && !event.mesh_id.trim().is_empty());
        }
    }

    /// A file cut between two lines reads as its two parts do.
    #[test]
    fn an_inbox_file_reads_line_by_line(lines in prop::collection::vec(line(), 0..10), cut in 0usize..10) {
        let lines: Vec<Vec<u8>> = lines.into_iter().map(|(bytes, _)| bytes).collect();
        let cut = cut.min(lines.len());
        let whole = parse_legacy_pending_events(&lines.join(&b'\n'), now());
        let head = parse_legacy_pending_events(&lines[..cut].join(&b'\n'), now());
        let tail = parse_legacy_pending_events(&lines[cut..].join(&b'\n'), now());
        let mut parts = head.events;
        parts.extend(tail.events);
        prop_assert_eq!(whole.events, parts);
    }

    /// A queue file is taken whole or refused with a reason; never half.
    #[test]
    fn a_queue_file_is_taken_whole_or_refused_with_a_reason(
        entries in prop::collection::vec((any::<u16>(), prop::option::of(("[a-zA-Z]{1,16}", scalar()))), 0..6),
        garbage in prop::option::of(prop::collection::vec(any::<u8>(), 0..64)),
    ) {
        let path = Path::new("mesh-gamma.queue.json");
        let text = match &garbage {
            Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            None => {
                let items: Vec<Value> = entries
                    .iter()
                    .map(|(n, change)| {
                        let mut entry = json!({
                            "id": format!("lq-{n}"),
                            "meshId": "mesh-gamma",
                            "status": "pending",
                            "message": format!("legacy queue task {n}"),
                            "createdAt": "2025-06-01T11:58:20.000Z",
                            "updatedAt": "2025-06-01T11:58:20.000Z",
                        });
                        if let Some((key, value)) = change {
                            entry[key.as_str()] = value.clone();
                        }
                        entry
                    })
                    .collect();
                Value::Array(items).to_string()
            }
        };
        match parse_legacy_queue(path, &text, "mesh-gamma") {
            Ok(tasks) => {
                if garbage.is_none() {
                    prop_assert_eq!(tasks.len(), entries.len());
                }
                prop_assert!(tasks.iter().all(|t| t.mesh_id == "mesh-gamma" && !t.id.trim().is_empty()));
            }
            Err(StoreError::LegacyFile { path: named, problem }) => {
                prop_assert_eq!(named.as_path(), path);
                prop_assert!(!problem.is_empty());
                prop_assert!(garbage.is_some() || entries.iter().any(|(_, change)| change.is_some()),
                    "a queue file as the original wrote it was refused: {problem}");
            }
            Err(other) => prop_assert!(false, "not a legacy file error: {other:?}"),
        }
    }
}
