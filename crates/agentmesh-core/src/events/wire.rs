//! The flat wire payload that carries a pending event between daemons.
//!
//! When a coordinator pulls a remote daemon's inbox, each event is flattened
//! ([`to_wire`]): the v1 routing fields, then the producer metadata spread over
//! them, then the v2 envelope spread last. The receiving daemon rebuilds an event
//! from the payload and restores the envelope with [`read_v2_envelope_from_wire`].
//! The event id crosses unchanged, so the rebuilt event is not stamped again and
//! the drain-side event-id dedup holds across machines.

use serde_json::{Map, Value};

use super::envelope::{PendingEvent, ProtocolVersion, Scope, V2Envelope};
use super::identity::CoordinatorIdentity;
use super::js::{read_non_empty, read_record, truthy};

/// Flattens a pending event into the wire payload:
///
/// `{event, meshId, nodeId, workspace, targetCoordinatorSessionId?,
/// targetCoordinatorDaemonId?, ...metadataEvent, taskId?, protocolVersion?,
/// eventId?, scope?, dispatchedBy?, intendedFor?}`
///
/// `event`, `meshId`, `nodeId` and `workspace` are always present (trimmed, empty
/// when unknown); `nodeId` falls back to the metadata's `meshNodeId` and
/// `workspace` to the metadata's `workspace`. Metadata keys override the fields
/// before them. `taskId` is the metadata's `taskId`, else its `meshActiveTaskId`.
/// The envelope goes last, so it always wins over a stale copy in the metadata; the
/// event id is written verbatim. An envelope key kept raw (malformed) is forwarded
/// as it is when truthy, and left for the receiver to reject.
pub fn to_wire(event: &PendingEvent) -> Value {
    let metadata = &event.metadata_event;
    let mut out = Map::new();
    out.insert("event".to_owned(), Value::from(event.event.trim()));
    out.insert("meshId".to_owned(), Value::from(event.mesh_id.trim()));
    let node_id = trimmed(event.node_id.as_deref()).or_else(|| read_non_empty(metadata.get("meshNodeId")));
    out.insert("nodeId".to_owned(), Value::from(node_id.unwrap_or("")));
    let workspace = trimmed(event.workspace.as_deref()).or_else(|| read_non_empty(metadata.get("workspace")));
    out.insert("workspace".to_owned(), Value::from(workspace.unwrap_or("")));
    if let Some(session) = trimmed(event.target_coordinator_session_id.as_deref()) {
        out.insert("targetCoordinatorSessionId".to_owned(), Value::from(session));
    }
    if let Some(daemon) = trimmed(event.target_coordinator_daemon_id.as_deref()) {
        out.insert("targetCoordinatorDaemonId".to_owned(), Value::from(daemon));
    }
    for (key, value) in metadata {
        out.insert(key.clone(), value.clone());
    }
    let task_id =
        read_non_empty(metadata.get("taskId")).or_else(|| read_non_empty(metadata.get("meshActiveTaskId")));
    if let Some(task_id) = task_id {
        out.insert("taskId".to_owned(), Value::from(task_id));
    }
    for (key, value) in envelope_entries(event) {
        out.insert(key.to_owned(), value);
    }
    Value::Object(out)
}

fn trimmed(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|s| !s.is_empty())
}

/// The envelope entries the wire carries: each typed field that is set, else the
/// raw value kept in `extra` when it is truthy. The event id is carried only when
/// it is a non-blank string.
fn envelope_entries(event: &PendingEvent) -> Vec<(&'static str, Value)> {
    let envelope = &event.envelope;
    let typed_or_raw = |key: &'static str, typed: Option<Value>| {
        typed.or_else(|| event.extra.get(key).filter(|raw| truthy(raw)).cloned()).map(|value| (key, value))
    };
    let event_id = envelope.event_id.as_deref().filter(|id| !id.trim().is_empty());
    [
        typed_or_raw("protocolVersion", envelope.protocol_version.map(|v| Value::from(v.as_str()))),
        event_id.map(|id| ("eventId", Value::from(id))),
        typed_or_raw("scope", envelope.scope.map(|s| Value::from(s.as_str()))),
        typed_or_raw("dispatchedBy", envelope.dispatched_by.as_ref().map(CoordinatorIdentity::to_json)),
        typed_or_raw("intendedFor", envelope.intended_for.as_ref().map(CoordinatorIdentity::to_json)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Restores the v2 envelope from a wire payload, keeping only what is well formed:
/// `protocolVersion` only when it is the string `"2.0"`, a non-blank `eventId`
/// (trimmed), a known `scope`, and identities whose `daemonId` and
/// `coordinatorRunId` are non-blank (trimmed; a blank `sessionId` is dropped).
///
/// The result may be partial; `None` when nothing survives (a v1 payload, or not
/// an object). A receiver sets the result on the rebuilt event
/// ([`PendingEvent::set_envelope`]) before stamping it, so an event that arrived
/// with version `2.0` and an event id keeps that id.
pub fn read_v2_envelope_from_wire(value: &Value) -> Option<V2Envelope> {
    let payload = value.as_object()?;
    let envelope = V2Envelope {
        protocol_version: (payload.get("protocolVersion").and_then(Value::as_str) == Some("2.0"))
            .then_some(ProtocolVersion::V2),
        event_id: read_non_empty(payload.get("eventId")).map(str::to_owned),
        scope: payload.get("scope").and_then(Scope::from_json),
        dispatched_by: read_wire_identity(payload.get("dispatchedBy")),
        intended_for: read_wire_identity(payload.get("intendedFor")),
    };
    (!envelope.is_empty()).then_some(envelope)
}

impl PendingEvent {
    /// Reads an event a client posts (over HTTP, or from the CLI) as
    /// [`PendingEvent::from_map`] does, with its v2 envelope checked the way a
    /// daemon restores one from the wire ([`read_v2_envelope_from_wire`]):
    /// `protocolVersion` kept only when it is `"2.0"`, `scope` only when it is
    /// `unicast`, `broadcast` or `system`, an identity only with a non-blank
    /// `daemonId` and `coordinatorRunId` (a blank `sessionId` dropped from it),
    /// `eventId` only when non-blank (trimmed). A field that fails is dropped and
    /// the rest of the event kept: it is neither stored nor handed on as it came.
    pub fn from_posted(map: Map<String, Value>) -> Result<PendingEvent, crate::InvalidInput> {
        let posted: Map<String, Value> = V2Envelope::KEYS
            .iter()
            .filter_map(|key| map.get(*key).map(|value| ((*key).to_owned(), value.clone())))
            .collect();
        let mut event = PendingEvent::from_map(map)?;
        event.set_envelope(read_v2_envelope_from_wire(&Value::Object(posted)).unwrap_or_default());
        Ok(event)
    }
}

fn read_wire_identity(value: Option<&Value>) -> Option<CoordinatorIdentity> {
    let object = read_record(value)?;
    let daemon_id = read_non_empty(object.get("daemonId"))?;
    let run_id = read_non_empty(object.get("coordinatorRunId"))?;
    let session_id = read_non_empty(object.get("sessionId")).map(str::to_owned);
    Some(CoordinatorIdentity::new(daemon_id, run_id, session_id))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::contract::validate_v2;
    use super::super::stamp::{EmitHint, StampOutcome, stamp_event};
    use super::*;
    use crate::Timestamp;

    fn completion() -> PendingEvent {
        let metadata = json!({
            "meshActiveTaskId": " t1 ",
            "finalSummary": "done",
            "eventId": "stale",
            "workspace": "/from-metadata",
        });
        let mut event = PendingEvent::new(
            "agent:generating_completed",
            "mesh1",
            "Node 'n1'",
            metadata.as_object().unwrap().clone(),
            Timestamp::from_millis(1_000),
        );
        event.node_id = Some("n1".into());
        event.target_coordinator_daemon_id = Some("daemon_mach_X".into());
        event.target_coordinator_session_id = Some("s1".into());
        event
    }

    #[test]
    fn flat_payload_shape() {
        let mut event = completion();
        stamp_event(&mut event, &EmitHint::default(), "e-123", None);
        event.event = format!(" {} ", event.event);
        event.target_coordinator_daemon_id = Some(" daemon_mach_X ".into());
        let wire = to_wire(&event);
        assert_eq!(wire["event"], json!("agent:generating_completed"));
        assert_eq!(wire["meshId"], json!("mesh1"));
        assert_eq!(wire["nodeId"], json!("n1"));
        assert_eq!(wire["workspace"], json!("/from-metadata"), "metadata is spread over the v1 fields");
        assert_eq!(wire["targetCoordinatorDaemonId"], json!("daemon_mach_X"));
        assert_eq!(wire["targetCoordinatorSessionId"], json!("s1"));
        assert_eq!(wire["finalSummary"], json!("done"));
        assert_eq!(wire["taskId"], json!("t1"));
        assert_eq!(wire["eventId"], json!("e-123"), "the envelope wins over stale metadata");
        assert_eq!(wire["protocolVersion"], json!("2.0"));
        assert_eq!(wire["scope"], json!("unicast"));
        assert_eq!(wire["intendedFor"]["daemonId"], json!("daemon_mach_X"));
        assert!(wire.get("queuedAt").is_none());
    }

    #[test]
    fn a_v1_event_has_no_envelope_on_the_wire() {
        let mut event = completion();
        event.metadata_event.remove("eventId");
        let wire = to_wire(&event);
        for key in V2Envelope::KEYS {
            assert!(wire.get(key).is_none(), "{key}");
        }
        assert_eq!(read_v2_envelope_from_wire(&wire), None);
        let bare = PendingEvent::new("agent:ready", "m", "", Map::new(), Timestamp::from_millis(0));
        let wire = to_wire(&bare);
        assert_eq!(wire["nodeId"], json!(""));
        assert_eq!(wire["workspace"], json!(""));
    }

    #[test]
    fn a_relayed_event_keeps_its_event_id() {
        let mut original = completion();
        assert_eq!(stamp_event(&mut original, &EmitHint::default(), "e-123", None), StampOutcome::Stamped);
        let wire = to_wire(&original);
        let envelope = read_v2_envelope_from_wire(&wire).unwrap();
        assert_eq!(envelope, original.envelope);

        let mut rebuilt = PendingEvent::new(
            "agent:generating_completed",
            "mesh1",
            "Node 'n1'",
            Map::new(),
            Timestamp::from_millis(2_000),
        );
        rebuilt.set_envelope(envelope);
        let outcome = stamp_event(&mut rebuilt, &EmitHint::default(), "fresh-id", Some("mach_HOST"));
        assert_eq!(outcome, StampOutcome::AlreadyStamped);
        assert_eq!(rebuilt.envelope.event_id.as_deref(), Some("e-123"));
        assert!(validate_v2(&rebuilt.to_value()).is_ok());
    }

    #[test]
    fn the_reader_keeps_only_well_formed_fields() {
        let wire = json!({
            "protocolVersion": 2.0,
            "eventId": "  e1  ",
            "scope": "multicast",
            "dispatchedBy": {"daemonId": " mach_X ", "coordinatorRunId": "r1", "sessionId": " "},
            "intendedFor": {"daemonId": "mach_X", "coordinatorRunId": "  "},
        });
        let envelope = read_v2_envelope_from_wire(&wire).unwrap();
        assert_eq!(envelope.protocol_version, None);
        assert_eq!(envelope.event_id.as_deref(), Some("e1"));
        assert_eq!(envelope.scope, None);
        assert_eq!(envelope.dispatched_by, Some(CoordinatorIdentity::new("mach_X", "r1", None)));
        assert_eq!(envelope.intended_for, None);
        assert!(!envelope.is_stamped(), "without version 2.0 the receiver stamps afresh");
        assert_eq!(read_v2_envelope_from_wire(&json!({"protocolVersion": "1.0"})), None);
        assert_eq!(read_v2_envelope_from_wire(&json!("x")), None);
    }

    #[test]
    fn raw_envelope_keys_are_forwarded_for_the_receiver_to_judge() {
        let mut raw = completion().to_value();
        raw["protocolVersion"] = json!("2.0");
        raw["eventId"] = json!("e1");
        raw["scope"] = json!("unicast");
        raw["dispatchedBy"] = json!({"daemonId": "mach_X", "coordinatorRunId": "r1", "sessionId": null});
        raw["intendedFor"] = json!(null);
        let event = PendingEvent::from_value(raw).unwrap();
        let wire = to_wire(&event);
        assert_eq!(wire["dispatchedBy"]["sessionId"], json!(null));
        assert!(wire.get("intendedFor").is_none(), "a falsy raw value is not forwarded");
        let envelope = read_v2_envelope_from_wire(&wire).unwrap();
        assert_eq!(envelope.dispatched_by, Some(CoordinatorIdentity::new("mach_X", "r1", None)));
    }

    #[test]
    fn a_posted_event_keeps_only_the_envelope_fields_that_are_well_formed() {
        let posted = json!({
            "event": "mesh:dispatch_blocked", "meshId": "m", "metadataEvent": {"taskId": "t1"},
            "queuedAt": 5, "nodeId": "n1", "custom": {"kept": true},
            "protocolVersion": "1.0", "eventId": "  ev-1 ", "scope": "multicast",
            "dispatchedBy": {"daemonId": "daemon_mach_A", "coordinatorRunId": " "},
            "intendedFor": {"daemonId": "daemon_mach_B", "coordinatorRunId": "run-2", "sessionId": ""},
        });
        let event = PendingEvent::from_posted(posted.as_object().unwrap().clone()).unwrap();
        assert_eq!(
            event.envelope,
            V2Envelope {
                event_id: Some("ev-1".into()),
                intended_for: Some(CoordinatorIdentity::new("daemon_mach_B", "run-2", None)),
                ..V2Envelope::default()
            }
        );
        let value = event.to_value();
        for dropped in ["protocolVersion", "scope", "dispatchedBy"] {
            assert!(value.get(dropped).is_none(), "{dropped} is dropped: {value}");
        }
        assert_eq!(value["intendedFor"], json!({"daemonId": "daemon_mach_B", "coordinatorRunId": "run-2"}));
        assert_eq!(value["custom"], json!({"kept": true}), "the rest of the event is kept");
        assert_eq!(event.node_id.as_deref(), Some("n1"));

        let well_formed = json!({
            "event": "x", "meshId": "m", "metadataEvent": {}, "queuedAt": 5,
            "protocolVersion": "2.0", "eventId": "ev-2", "scope": "unicast",
            "dispatchedBy": {"daemonId": "d", "coordinatorRunId": "r", "sessionId": "s"},
        });
        let event = PendingEvent::from_posted(well_formed.as_object().unwrap().clone()).unwrap();
        assert_eq!(event.envelope.protocol_version, Some(ProtocolVersion::V2));
        assert_eq!(event.envelope.scope, Some(Scope::Unicast));
        assert_eq!(event.envelope.dispatched_by, Some(CoordinatorIdentity::new("d", "r", Some("s".into()))));
        assert_eq!(event.to_value()["eventId"], json!("ev-2"));

        let missing = json!({"event": "x", "meshId": "m", "queuedAt": 5, "scope": "system"});
        let err = PendingEvent::from_posted(missing.as_object().unwrap().clone()).unwrap_err();
        assert_eq!(err.field, "metadataEvent", "a v1 field is still required");
    }
}
