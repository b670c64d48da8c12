//! Property-based fuzzing of the event parsers: every event that crosses a
//! boundary (an HTTP body, an MCP argument, a relayed wire payload, a legacy file
//! line, a stored payload) goes through these functions, so they must answer any
//! JSON with a value or a typed error, never a panic.
//!
//! The inputs are JSON trees whose keys are mostly the event vocabulary and whose
//! values are of any type, plus well-formed events with a few keys overwritten by
//! such values, so the generated cases reach past the first required-field check.

use agentmesh_core::events::{
    CoordinatorIdentity, DrainRouter, Drainer, EmitHint, PendingEvent, StampOutcome,
    durable_completion_dedup_key, pending_event_fingerprint, read_v2_envelope_from_wire,
    refine_terminal_fingerprint, stamp_event, to_wire, validate_v2,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Keys the event model, the v2 contract and the wire reader look at.
const KEYS: &[&str] = &[
    "event",
    "meshId",
    "nodeLabel",
    "nodeId",
    "workspace",
    "metadataEvent",
    "coordinatorMessage",
    "queuedAt",
    "targetCoordinatorDaemonId",
    "targetCoordinatorSessionId",
    "protocolVersion",
    "eventId",
    "scope",
    "dispatchedBy",
    "intendedFor",
    "dispatchedBySelfFallback",
    "daemonId",
    "coordinatorRunId",
    "sessionId",
    "taskId",
    "meshActiveTaskId",
    "meshNodeId",
    "finalSummary",
    "refineJobId",
    "jobId",
    "status",
];

/// Strings the parsers treat specially, and arbitrary ones.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "", " ", "2.0", "1.0", "unicast", "broadcast", "system", "daemon_mach_A", "mach_A",
            "standalone_mach_A", "run-1", " run-1 ", "session-1", "agent:generating_completed",
            "agent:stopped", "mesh:dispatch_blocked", "refine:accepted", "refine:completed",
            "worktree_bootstrap_ready", "m",
        ])
        .prop_map(str::to_owned),
        2 => "\\PC{0,16}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(KEYS).prop_map(str::to_owned), 1 => "\\PC{0,8}"]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("JSON numbers are finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        text().prop_map(Value::from),
    ]
}

/// Any JSON tree, keys mostly from the event vocabulary.
fn json_tree() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Mostly a usable id, sometimes anything.
fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["daemon_mach_A", "mach_A", "mach_B", "run-1", "run-2", "session-1"])
            .prop_map(str::to_owned),
        2 => "[a-z0-9_]{1,10}",
        1 => text(),
    ]
}

/// Mostly a known scope, sometimes anything.
fn scope() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["unicast", "broadcast", "system"]).prop_map(str::to_owned),
        1 => text(),
    ]
}

/// A coordinator identity in its JSON shape, sometimes malformed.
fn identity_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (id(), id(), prop::option::of(id())).prop_map(|(daemon, run, session)| {
            let mut map = Map::new();
            map.insert("daemonId".into(), daemon.into());
            map.insert("coordinatorRunId".into(), run.into());
            if let Some(session) = session {
                map.insert("sessionId".into(), session.into());
            }
            Value::Object(map)
        }),
        1 => json_tree(),
    ]
}

/// A well-formed event, v1 or v2, with up to four keys overwritten by anything.
fn event_like() -> impl Strategy<Value = Value> {
    let base = (
        text(),
        text(),
        prop::option::of(text()),
        prop::option::of((id(), scope(), identity_json(), prop::option::of(identity_json()))),
        prop::collection::vec((key(), json_tree()), 0..3),
    );
    base.prop_map(|(event, task, target, v2, overrides)| {
        let mut map = Map::new();
        map.insert(
            "event".into(),
            json!(if event.trim().is_empty() { "agent:generating_completed" } else { &event }),
        );
        map.insert("meshId".into(), json!("m"));
        map.insert("nodeLabel".into(), json!("Node 'n1'"));
        map.insert("metadataEvent".into(), json!({ "taskId": task, "finalSummary": "done" }));
        map.insert("queuedAt".into(), json!(1_735_689_600_000_i64));
        if let Some(target) = target {
            map.insert("targetCoordinatorDaemonId".into(), json!(target));
        }
        if let Some((event_id, scope, dispatched_by, intended_for)) = v2 {
            map.insert("protocolVersion".into(), json!("2.0"));
            map.insert("eventId".into(), json!(event_id));
            map.insert("scope".into(), json!(scope));
            map.insert("dispatchedBy".into(), dispatched_by);
            if let Some(intended_for) = intended_for {
                map.insert("intendedFor".into(), intended_for);
            }
        }
        for (key, value) in overrides {
            map.insert(key, value);
        }
        Value::Object(map)
    })
}

fn any_input() -> impl Strategy<Value = Value> {
    prop_oneof![json_tree(), event_like()]
}

fn hint() -> impl Strategy<Value = EmitHint> {
    (prop::option::of(text()), prop::option::of((text(), text(), prop::option::of(text())))).prop_map(
        |(run, owner)| EmitHint {
            coordinator_run_id: run,
            dispatched_by: owner.map(|(daemon, run, session)| CoordinatorIdentity::new(daemon, run, session)),
            ..EmitHint::default()
        },
    )
}

// proptest's default configuration: 256 cases per property, `PROPTEST_CASES` for
// longer runs.
proptest! {

    /// Reading an event gives an event or an error naming a field; an event read
    /// and written back reads back the same.
    #[test]
    fn an_event_reads_or_names_the_bad_field_and_round_trips(input in any_input()) {
        match PendingEvent::from_value(input) {
            Err(err) => prop_assert!(!err.field.is_empty() && !err.problem.is_empty(), "{err:?}"),
            Ok(event) => {
                let again = PendingEvent::from_value(event.to_value());
                prop_assert_eq!(again.as_ref(), Ok(&event));
            }
        }
    }

    /// The v2 contract check accepts or names the path of the first violation.
    #[test]
    fn the_v2_contract_accepts_or_names_a_path(input in any_input()) {
        if let Err(violation) = validate_v2(&input) {
            prop_assert!(violation.path.starts_with('$'), "{violation:?}");
        }
    }

    /// Routing any payload decides something, and counts it at most once.
    #[test]
    fn routing_any_payload_decides_and_counts_at_most_once(input in any_input(), enforce in any::<bool>()) {
        let drainer = Drainer::new(CoordinatorIdentity::new("mach_A", "run-1", None), &[]);
        let mut router = DrainRouter::new(&drainer, enforce);
        let before = router.counters().total();
        let routed = router.route(&input, |_| false);
        let counted = router.counters().total() - before;
        prop_assert_eq!(counted, u64::from(routed.counter.is_some()));
    }

    /// The wire reader takes anything; a stamped event relayed across daemons keeps
    /// its event id.
    #[test]
    fn a_stamped_event_keeps_its_event_id_across_the_wire(input in any_input(), hint in hint()) {
        let _ = read_v2_envelope_from_wire(&input);
        let Ok(mut event) = PendingEvent::from_value(input) else { return Ok(()) };
        let outcome = stamp_event(&mut event, &hint, "evt_0001", Some("mach_A"));
        let read = read_v2_envelope_from_wire(&to_wire(&event)).and_then(|envelope| envelope.event_id);
        match outcome {
            StampOutcome::Stamped | StampOutcome::SelfFallback => {
                prop_assert_eq!(read.as_deref(), Some("evt_0001"));
            }
            StampOutcome::AlreadyStamped => {
                let kept = event.envelope.event_id.as_deref().map(str::trim).filter(|id| !id.is_empty());
                prop_assert_eq!(read.as_deref(), kept);
            }
            StampOutcome::Unstamped => {}
        }
    }

    /// Stamping twice changes nothing the second time.
    #[test]
    fn stamping_is_idempotent(input in event_like(), hint in hint()) {
        let Ok(mut event) = PendingEvent::from_value(input) else { return Ok(()) };
        stamp_event(&mut event, &hint, "evt_0001", Some("mach_A"));
        let stamped = event.clone();
        let again = stamp_event(&mut event, &hint, "evt_0002", Some("mach_A"));
        if stamped.envelope.is_stamped() {
            prop_assert_eq!(again, StampOutcome::AlreadyStamped);
            prop_assert_eq!(&event, &stamped);
        }
    }

    /// Fingerprints and dedup keys are defined for every event, and the same event
    /// always gets the same ones.
    #[test]
    fn fingerprints_are_total_and_deterministic(input in any_input()) {
        let Ok(event) = PendingEvent::from_value(input) else { return Ok(()) };
        let copy = event.clone();
        prop_assert_eq!(pending_event_fingerprint(&event), pending_event_fingerprint(&copy));
        prop_assert_eq!(refine_terminal_fingerprint(&event), refine_terminal_fingerprint(&copy));
        prop_assert_eq!(durable_completion_dedup_key(&event), durable_completion_dedup_key(&copy));
    }
}

#[test]
fn the_generators_reach_valid_events_and_valid_v2_events() {
    // Guards the strategies above: a generator that never produced a readable
    // event (or a valid v2 one) would make the round-trip properties vacuous.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut readable, mut valid_v2) = (0, 0);
    for _ in 0..512 {
        let input = event_like().new_tree(&mut runner).expect("a generated value").current();
        valid_v2 += usize::from(validate_v2(&input).is_ok());
        readable += usize::from(PendingEvent::from_value(input).is_ok());
    }
    assert!(readable > 128, "only {readable} of 512 generated events were readable");
    assert!(valid_v2 > 16, "only {valid_v2} of 512 generated events were valid v2 events");
}
