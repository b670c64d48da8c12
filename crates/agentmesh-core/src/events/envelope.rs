//! The pending event: the v1 fields every producer writes, plus the v2 envelope
//! (`protocolVersion`, `eventId`, `scope`, `dispatchedBy`, `intendedFor`).
//!
//! [`PendingEvent`] is the persistent format shared with inboxes the original
//! wrote, so its JSON is the original's, key for key. Two rules keep a payload
//! intact through a read-modify-write:
//!
//! - keys this runtime does not model are kept in [`PendingEvent::extra`];
//! - an envelope key whose value is malformed (a numeric `protocolVersion`, an
//!   unknown scope, `intendedFor: null`, an identity that fails the contract) is
//!   kept *verbatim* in `extra` too, and the typed field stays `None`. The drain
//!   must see such an event as it was written in order to quarantine it, so the
//!   model never repairs or drops it.
//!
//! The v1 fields, by contrast, must have their documented types: a payload whose
//! `metadataEvent` is not an object, say, is not a `PendingEvent`. Routing works on
//! raw JSON ([`super::routing`]), so such a payload can still be routed and
//! quarantined without being modelled.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::contract::finite_millis;
use super::identity::{CoordinatorIdentity, assert_coordinator_identity};
use crate::{InvalidInput, Timestamp};

/// Who a v2 event is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Exactly one coordinator: the event's `intendedFor`.
    Unicast,
    /// Every coordinator that drains the event.
    Broadcast,
    /// No coordinator: infrastructure signals for the daemon itself.
    System,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 3] = [Scope::Unicast, Scope::Broadcast, Scope::System];

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Unicast => "unicast",
            Scope::Broadcast => "broadcast",
            Scope::System => "system",
        }
    }

    /// The scope a JSON value names: only the exact strings count.
    pub fn from_json(value: &Value) -> Option<Scope> {
        let name = value.as_str()?;
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == s).ok_or_else(|| {
            InvalidInput::new("scope", format!("unknown scope {s:?} (expected unicast, broadcast or system)"))
        })
    }
}

/// The event protocol version. On the wire it is always a string: the number
/// `2.0` is not a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ProtocolVersion {
    /// `"1.0"`: the unversioned shape, made explicit.
    #[serde(rename = "1.0")]
    V1,
    /// `"2.0"`: the shape with a routing envelope.
    #[serde(rename = "2.0")]
    V2,
}

impl ProtocolVersion {
    /// The wire form.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V1 => "1.0",
            ProtocolVersion::V2 => "2.0",
        }
    }

    /// The version a JSON value names: only the strings `"1.0"` and `"2.0"`.
    pub fn from_json(value: &Value) -> Option<ProtocolVersion> {
        match value.as_str()? {
            "1.0" => Some(ProtocolVersion::V1),
            "2.0" => Some(ProtocolVersion::V2),
            _ => None,
        }
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The v2 envelope fields of an event, each present only when well formed.
///
/// The envelope of a [`PendingEvent`] can be partial (an event in transit, or a
/// producer bug); [`super::contract::validate_v2`] decides whether it is complete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V2Envelope {
    /// `"1.0"` or `"2.0"`.
    pub protocol_version: Option<ProtocolVersion>,
    /// The idempotency key, minted once at emit and never changed afterwards.
    pub event_id: Option<String>,
    /// Who the event is for.
    pub scope: Option<Scope>,
    /// The coordinator that dispatched the work the event reports.
    pub dispatched_by: Option<CoordinatorIdentity>,
    /// The addressee of a unicast event.
    pub intended_for: Option<CoordinatorIdentity>,
}

impl V2Envelope {
    /// The JSON keys of the envelope, in the order they are written.
    pub const KEYS: [&'static str; 5] =
        ["protocolVersion", "eventId", "scope", "dispatchedBy", "intendedFor"];

    /// True when no field is present.
    pub fn is_empty(&self) -> bool {
        self.protocol_version.is_none()
            && self.event_id.is_none()
            && self.scope.is_none()
            && self.dispatched_by.is_none()
            && self.intended_for.is_none()
    }

    /// True when the event already carries version `2.0` and a non-blank event id,
    /// the condition under which it is never stamped again.
    pub fn is_stamped(&self) -> bool {
        self.protocol_version == Some(ProtocolVersion::V2)
            && self.event_id.as_deref().is_some_and(|id| !id.trim().is_empty())
    }
}

/// An item in a coordinator's inbox, in the original's JSON shape.
///
/// Serialization and deserialization go through [`PendingEvent::to_map`] and
/// [`PendingEvent::from_map`]; see the module docs for how unknown and malformed
/// keys are kept.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEvent {
    /// The event name (`agent:generating_completed`, ...).
    pub event: String,
    /// The mesh.
    pub mesh_id: String,
    /// How the coordinator text names the node (`Node 'n1'`); empty when unknown.
    pub node_label: String,
    /// The node the event is about.
    pub node_id: Option<String>,
    /// The node's workspace.
    pub workspace: Option<String>,
    /// The producer's metadata, a JSON object (task id, summary, diagnostics, ...).
    pub metadata_event: Map<String, Value>,
    /// The text shown to the coordinator, when the event has one.
    pub coordinator_message: Option<String>,
    /// When the event was queued.
    pub queued_at: Timestamp,
    /// The coordinator daemon the event is for (any id form). The v1 drain scope:
    /// a drain only takes events with no target or one of its own id forms.
    pub target_coordinator_daemon_id: Option<String>,
    /// The coordinator session the event is for. Used when injecting into a live
    /// CLI coordinator; it does not scope drains.
    pub target_coordinator_session_id: Option<String>,
    /// The v2 envelope; empty on a v1 event.
    pub envelope: V2Envelope,
    /// Set when the event was stamped as a broadcast dispatched by this daemon
    /// itself because no owning coordinator was known at emit time.
    pub dispatched_by_self_fallback: bool,
    /// Every key this model does not interpret, and every envelope key whose value
    /// was malformed, verbatim.
    pub extra: Map<String, Value>,
}

const EVENT: &str = "event";
const MESH_ID: &str = "meshId";
const NODE_LABEL: &str = "nodeLabel";
const NODE_ID: &str = "nodeId";
const WORKSPACE: &str = "workspace";
const METADATA_EVENT: &str = "metadataEvent";
const COORDINATOR_MESSAGE: &str = "coordinatorMessage";
const QUEUED_AT: &str = "queuedAt";
const TARGET_DAEMON: &str = "targetCoordinatorDaemonId";
const TARGET_SESSION: &str = "targetCoordinatorSessionId";
const SELF_FALLBACK: &str = "dispatchedBySelfFallback";

impl PendingEvent {
    /// A v1 event with the required fields; everything else empty.
    pub fn new(
        event: impl Into<String>,
        mesh_id: impl Into<String>,
        node_label: impl Into<String>,
        metadata_event: Map<String, Value>,
        queued_at: Timestamp,
    ) -> PendingEvent {
        PendingEvent {
            event: event.into(),
            mesh_id: mesh_id.into(),
            node_label: node_label.into(),
            node_id: None,
            workspace: None,
            metadata_event,
            coordinator_message: None,
            queued_at,
            target_coordinator_daemon_id: None,
            target_coordinator_session_id: None,
            envelope: V2Envelope::default(),
            dispatched_by_self_fallback: false,
            extra: Map::new(),
        }
    }

    /// Whether the event may be queued in `mesh_id`: it has a name and belongs
    /// to that mesh.
    pub fn check_queueable(&self, mesh_id: &str) -> Result<(), InvalidInput> {
        if self.event.trim().is_empty() {
            return Err(InvalidInput::new("event", "must not be blank"));
        }
        if self.mesh_id != mesh_id {
            return Err(InvalidInput::new(
                "meshId",
                format!("the event belongs to mesh {:?}, not {mesh_id:?}", self.mesh_id),
            ));
        }
        Ok(())
    }

    /// Reads an event from a JSON object.
    ///
    /// Required: `event` and `meshId` (strings), `metadataEvent` (an object) and
    /// `queuedAt` (a number; fractions are truncated). `nodeLabel` defaults to
    /// empty; optional strings may be absent or `null`. A v1 field of the wrong
    /// type is an error naming the field.
    pub fn from_map(mut map: Map<String, Value>) -> Result<PendingEvent, InvalidInput> {
        let event = take_required_string(&mut map, EVENT)?;
        let mesh_id = take_required_string(&mut map, MESH_ID)?;
        let node_label = take_optional_string(&mut map, NODE_LABEL)?.unwrap_or_default();
        let node_id = take_optional_string(&mut map, NODE_ID)?;
        let workspace = take_optional_string(&mut map, WORKSPACE)?;
        let metadata_event = match map.remove(METADATA_EVENT) {
            Some(Value::Object(metadata)) => metadata,
            _ => return Err(InvalidInput::new(METADATA_EVENT, "must be a JSON object")),
        };
        let coordinator_message = take_optional_string(&mut map, COORDINATOR_MESSAGE)?;
        let queued_at = match map.remove(QUEUED_AT) {
            Some(value) => {
                finite_millis(&value).ok_or_else(|| InvalidInput::new(QUEUED_AT, "must be a number"))?
            }
            None => return Err(InvalidInput::new(QUEUED_AT, "is required")),
        };
        let target_coordinator_daemon_id = take_optional_string(&mut map, TARGET_DAEMON)?;
        let target_coordinator_session_id = take_optional_string(&mut map, TARGET_SESSION)?;

        let envelope = V2Envelope {
            protocol_version: take_if(&mut map, "protocolVersion", ProtocolVersion::from_json),
            event_id: take_if(&mut map, "eventId", |v| v.as_str().map(str::to_owned)),
            scope: take_if(&mut map, "scope", Scope::from_json),
            dispatched_by: take_if(&mut map, "dispatchedBy", |v| assert_coordinator_identity(v, "$").ok()),
            intended_for: take_if(&mut map, "intendedFor", |v| assert_coordinator_identity(v, "$").ok()),
        };
        let dispatched_by_self_fallback = take_if(&mut map, SELF_FALLBACK, Value::as_bool).unwrap_or(false);

        Ok(PendingEvent {
            event,
            mesh_id,
            node_label,
            node_id,
            workspace,
            metadata_event,
            coordinator_message,
            queued_at,
            target_coordinator_daemon_id,
            target_coordinator_session_id,
            envelope,
            dispatched_by_self_fallback,
            extra: map,
        })
    }

    /// Reads an event from a JSON value, which must be an object.
    pub fn from_value(value: Value) -> Result<PendingEvent, InvalidInput> {
        match value {
            Value::Object(map) => PendingEvent::from_map(map),
            _ => Err(InvalidInput::new("pendingEvent", "must be a JSON object")),
        }
    }

    /// The event as a JSON object in the original's key order (v1 fields, then the
    /// envelope), followed by the `extra` keys. A typed field that is set wins over
    /// an `extra` key of the same name.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::new();
        let mut put = |key: &str, value: Value| {
            map.insert(key.to_owned(), value);
        };
        put(EVENT, Value::from(self.event.as_str()));
        put(MESH_ID, Value::from(self.mesh_id.as_str()));
        put(NODE_LABEL, Value::from(self.node_label.as_str()));
        if let Some(node_id) = &self.node_id {
            put(NODE_ID, Value::from(node_id.as_str()));
        }
        if let Some(workspace) = &self.workspace {
            put(WORKSPACE, Value::from(workspace.as_str()));
        }
        put(METADATA_EVENT, Value::Object(self.metadata_event.clone()));
        if let Some(message) = &self.coordinator_message {
            put(COORDINATOR_MESSAGE, Value::from(message.as_str()));
        }
        put(QUEUED_AT, Value::from(self.queued_at.millis()));
        if let Some(target) = &self.target_coordinator_daemon_id {
            put(TARGET_DAEMON, Value::from(target.as_str()));
        }
        if let Some(target) = &self.target_coordinator_session_id {
            put(TARGET_SESSION, Value::from(target.as_str()));
        }
        let envelope = &self.envelope;
        if let Some(version) = envelope.protocol_version {
            put("protocolVersion", Value::from(version.as_str()));
        }
        if let Some(event_id) = &envelope.event_id {
            put("eventId", Value::from(event_id.as_str()));
        }
        if let Some(scope) = envelope.scope {
            put("scope", Value::from(scope.as_str()));
        }
        if let Some(identity) = &envelope.dispatched_by {
            put("dispatchedBy", identity.to_json());
        }
        if let Some(identity) = &envelope.intended_for {
            put("intendedFor", identity.to_json());
        }
        if self.dispatched_by_self_fallback {
            put(SELF_FALLBACK, Value::Bool(true));
        }
        for (key, value) in &self.extra {
            map.entry(key.clone()).or_insert_with(|| value.clone());
        }
        map
    }

    /// The event as a JSON value (see [`PendingEvent::to_map`]).
    pub fn to_value(&self) -> Value {
        Value::Object(self.to_map())
    }

    /// Replaces the envelope, dropping any raw (malformed) envelope keys kept in
    /// `extra`, so the new envelope is the only one the event carries.
    pub fn set_envelope(&mut self, envelope: V2Envelope) {
        for key in V2Envelope::KEYS {
            self.extra.remove(key);
        }
        self.envelope = envelope;
    }
}

fn take_required_string(map: &mut Map<String, Value>, key: &str) -> Result<String, InvalidInput> {
    match map.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(InvalidInput::new(key, "must be a string")),
        None => Err(InvalidInput::new(key, "is required")),
    }
}

fn take_optional_string(map: &mut Map<String, Value>, key: &str) -> Result<Option<String>, InvalidInput> {
    match map.remove(key) {
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Null) | None => Ok(None),
        Some(_) => Err(InvalidInput::new(key, "must be a string")),
    }
}

/// Removes `key` from the map when `parse` accepts its value; otherwise leaves it
/// in place (so it stays in `extra`, verbatim).
fn take_if<T>(map: &mut Map<String, Value>, key: &str, parse: impl FnOnce(&Value) -> Option<T>) -> Option<T> {
    let parsed = parse(map.get(key)?)?;
    map.remove(key);
    Some(parsed)
}

impl Serialize for PendingEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PendingEvent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(deserializer)?;
        PendingEvent::from_map(map).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stamped() -> Value {
        json!({
            "event": "agent:generating_completed",
            "meshId": "mesh1",
            "nodeLabel": "Node 'n1'",
            "nodeId": "n1",
            "workspace": "/w",
            "metadataEvent": {"taskId": "t1", "finalSummary": "done"},
            "coordinatorMessage": "[System] ...",
            "queuedAt": 1_700_000_000_000_i64,
            "targetCoordinatorDaemonId": "daemon_mach_X",
            "targetCoordinatorSessionId": "s1",
            "protocolVersion": "2.0",
            "eventId": "e1",
            "scope": "unicast",
            "dispatchedBy": {"daemonId": "daemon_mach_X", "coordinatorRunId": "run1", "sessionId": "s1"},
            "intendedFor": {"daemonId": "daemon_mach_X", "coordinatorRunId": "run1", "sessionId": "s1"},
            "attemptId": "a1",
        })
    }

    #[test]
    fn scope_and_version_parse_only_exact_strings() {
        assert_eq!(Scope::from_json(&json!("unicast")), Some(Scope::Unicast));
        assert_eq!(Scope::from_json(&json!("multicast")), None);
        assert_eq!(Scope::from_json(&json!("Unicast")), None);
        assert_eq!("system".parse::<Scope>(), Ok(Scope::System));
        assert!("nope".parse::<Scope>().is_err());
        assert_eq!(ProtocolVersion::from_json(&json!("2.0")), Some(ProtocolVersion::V2));
        assert_eq!(ProtocolVersion::from_json(&json!("1.0")), Some(ProtocolVersion::V1));
        assert_eq!(ProtocolVersion::from_json(&json!(2.0)), None);
        assert_eq!(ProtocolVersion::from_json(&json!(2)), None);
        assert!(serde_json::from_value::<ProtocolVersion>(json!(2.0)).is_err());
        assert_eq!(serde_json::to_value(ProtocolVersion::V2).unwrap(), json!("2.0"));
        assert_eq!(serde_json::to_value(Scope::Broadcast).unwrap(), json!("broadcast"));
    }

    #[test]
    fn a_stamped_event_round_trips() {
        let raw = stamped();
        let event: PendingEvent = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(event.envelope.event_id.as_deref(), Some("e1"));
        assert_eq!(event.envelope.scope, Some(Scope::Unicast));
        assert!(event.envelope.is_stamped());
        assert_eq!(event.extra.get("attemptId"), Some(&json!("a1")));
        assert_eq!(serde_json::to_value(&event).unwrap(), raw);
    }

    #[test]
    fn a_v1_event_round_trips() {
        let raw = json!({
            "event": "agent:ready",
            "meshId": "m",
            "nodeLabel": "",
            "metadataEvent": {},
            "queuedAt": 5,
        });
        let event = PendingEvent::from_value(raw.clone()).unwrap();
        assert!(event.envelope.is_empty());
        assert!(!event.envelope.is_stamped());
        assert_eq!(event.to_value(), raw);
    }

    #[test]
    fn malformed_envelope_keys_survive_verbatim() {
        let mut raw = stamped();
        raw["protocolVersion"] = json!(2.0);
        raw["scope"] = json!("multicast");
        raw["intendedFor"] = json!(null);
        raw["dispatchedBy"] = json!({"daemonId": "mach_X", "coordinatorRunId": "r", "sessionId": ""});
        let event = PendingEvent::from_value(raw.clone()).unwrap();
        assert_eq!(event.envelope.protocol_version, None);
        assert_eq!(event.envelope.scope, None);
        assert_eq!(event.envelope.intended_for, None);
        assert_eq!(event.envelope.dispatched_by, None);
        assert_eq!(event.envelope.event_id.as_deref(), Some("e1"));
        assert_eq!(event.extra["protocolVersion"], json!(2.0));
        assert_eq!(event.to_value(), raw);
    }

    #[test]
    fn set_envelope_replaces_raw_keys() {
        let mut raw = stamped();
        raw["scope"] = json!("multicast");
        let mut event = PendingEvent::from_value(raw).unwrap();
        event.set_envelope(V2Envelope { scope: Some(Scope::Broadcast), ..V2Envelope::default() });
        let value = event.to_value();
        assert_eq!(value["scope"], json!("broadcast"));
        assert!(value.get("eventId").is_none());
        assert!(value.get("protocolVersion").is_none());
    }

    #[test]
    fn v1_fields_must_have_their_types() {
        let cases = [
            ("event", json!(3), "invalid event: must be a string"),
            ("meshId", json!(null), "invalid meshId: must be a string"),
            ("metadataEvent", json!("x"), "invalid metadataEvent: must be a JSON object"),
            ("queuedAt", json!("now"), "invalid queuedAt: must be a number"),
            ("nodeId", json!(7), "invalid nodeId: must be a string"),
        ];
        for (key, value, message) in cases {
            let mut raw = stamped();
            raw[key] = value;
            assert_eq!(PendingEvent::from_value(raw).unwrap_err().to_string(), message);
        }
        let mut raw = stamped();
        raw.as_object_mut().unwrap().remove("queuedAt");
        assert_eq!(PendingEvent::from_value(raw).unwrap_err().field, "queuedAt");
        assert!(PendingEvent::from_value(json!([])).is_err());
    }

    #[test]
    fn null_optional_strings_read_as_absent() {
        let mut raw = stamped();
        raw["nodeId"] = json!(null);
        raw["nodeLabel"] = json!(null);
        let event = PendingEvent::from_value(raw).unwrap();
        assert_eq!(event.node_id, None);
        assert_eq!(event.node_label, "");
    }

    #[test]
    fn self_fallback_mark() {
        let mut raw = stamped();
        raw["dispatchedBySelfFallback"] = json!(true);
        let event = PendingEvent::from_value(raw.clone()).unwrap();
        assert!(event.dispatched_by_self_fallback);
        assert_eq!(event.to_value(), raw);
    }
}
