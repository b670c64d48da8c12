//! The v2 contract check for a pending event, and the delivery rule for a checked
//! event.
//!
//! [`validate_v2`] reads an event as raw JSON, because the point of the check is to
//! catch what a typed model would not be able to hold (a numeric `protocolVersion`,
//! an unknown scope, `intendedFor: null`). The checks run in the original's order
//! and the first failure is reported with the JSON path it happened at.

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use super::envelope::{ProtocolVersion, Scope};
use super::identity::{CoordinatorIdentity, assert_coordinator_identity};
use super::js::{non_empty_str, truthy};
use crate::Timestamp;

/// A pending event (or a part of one) that breaks the v2 contract.
///
/// Displays as `mesh contract 2.0 violation at <path>: <detail>`, the original's
/// message, so logs and ledger entries read the same.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mesh contract 2.0 violation at {path}: {detail}")]
pub struct ContractViolation {
    /// Where, as a JSON path from the event root: `$.dispatchedBy.coordinatorRunId`.
    pub path: String,
    /// What is wrong there.
    pub detail: ViolationDetail,
}

impl ContractViolation {
    /// A violation at `path`.
    pub fn new(path: impl Into<String>, detail: ViolationDetail) -> ContractViolation {
        ContractViolation { path: path.into(), detail }
    }
}

/// What a contract violation found. Each displays as the original's detail text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ViolationDetail {
    /// Not a JSON object (null, an array or a scalar).
    NotAnObject,
    /// Not a string of length > 0.
    EmptyString,
    /// Present, but not a string of length > 0.
    EmptyStringWhenProvided,
    /// A `protocolVersion` that is not the string `"1.0"` or `"2.0"`.
    UnsupportedProtocolVersion,
    /// A `scope` that is not `unicast`, `broadcast` or `system`.
    UnknownScope,
    /// A unicast event without a (truthy) `intendedFor`.
    UnicastRequiresIntendedFor,
    /// A non-unicast event with an `intendedFor` key, even `null`.
    IntendedForOnlyForUnicast,
    /// Not a finite JSON number.
    NotAFiniteNumber,
}

impl fmt::Display for ViolationDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ViolationDetail::NotAnObject => "must be an object",
            ViolationDetail::EmptyString => "must be a non-empty string",
            ViolationDetail::EmptyStringWhenProvided => "must be a non-empty string when provided",
            ViolationDetail::UnsupportedProtocolVersion => "must be one of 1.0, 2.0",
            ViolationDetail::UnknownScope => "must be one of unicast, broadcast, system",
            ViolationDetail::UnicastRequiresIntendedFor => "unicast scope requires intendedFor",
            ViolationDetail::IntendedForOnlyForUnicast => "only unicast scope may set intendedFor",
            ViolationDetail::NotAFiniteNumber => "must be a finite number",
        })
    }
}

/// A pending event that passed [`validate_v2`], normalized.
///
/// Only the contract's fields survive: the coordinator targets, the self-fallback
/// mark and unknown keys are dropped, as the original's checker dropped them.
/// Serializes in the original's shape (camelCase, absent options omitted).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingEventV2 {
    /// The event name, non-empty.
    pub event: String,
    /// The mesh, non-empty.
    pub mesh_id: String,
    /// The node label; empty unless the input held a non-empty string.
    pub node_label: String,
    /// The node, when the input held a string (empty allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The workspace, when the input held a string (empty allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The producer's metadata object.
    pub metadata_event: Map<String, Value>,
    /// The coordinator-facing text, when the input held a string (empty allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinator_message: Option<String>,
    /// When the event was queued. A fractional millisecond count is truncated.
    #[serde(serialize_with = "serialize_millis")]
    pub queued_at: Timestamp,
    /// `1.0` or `2.0`; both pass the check.
    pub protocol_version: ProtocolVersion,
    /// The idempotency key, non-empty.
    pub event_id: String,
    /// Who the event is for.
    pub scope: Scope,
    /// The coordinator that dispatched the work the event reports.
    pub dispatched_by: CoordinatorIdentity,
    /// The addressee: present exactly when the scope is unicast.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_for: Option<CoordinatorIdentity>,
}

fn serialize_millis<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(t.millis())
}

/// Checks a raw pending event against the v2 contract, rooted at `$`.
///
/// See [`validate_v2_at`] for the checks and their order.
pub fn validate_v2(raw: &Value) -> Result<PendingEventV2, ContractViolation> {
    validate_v2_at(raw, "$")
}

/// Checks a raw pending event against the v2 contract, with paths rooted at `path`.
///
/// The checks run in this order and the first failure is returned: the value is
/// an object; `protocolVersion` is the *string* `"1.0"` or `"2.0"` (the number
/// `2.0` fails); `eventId`, then `scope`, `event` and `meshId`; `dispatchedBy` is a
/// valid identity; a unicast event has a truthy `intendedFor`, and any other scope
/// has no `intendedFor` key at all (`null` included); a truthy `intendedFor` is a
/// valid identity; `metadataEvent` is an object; `queuedAt` is a finite number.
///
/// "Non-empty" here means length > 0 without trimming, as in the original.
pub fn validate_v2_at(raw: &Value, path: &str) -> Result<PendingEventV2, ContractViolation> {
    let at = |field: &str| format!("{path}.{field}");
    let Some(obj) = raw.as_object() else {
        return Err(ContractViolation::new(path, ViolationDetail::NotAnObject));
    };
    let Some(protocol_version) = obj.get("protocolVersion").and_then(ProtocolVersion::from_json) else {
        return Err(ContractViolation::new(
            at("protocolVersion"),
            ViolationDetail::UnsupportedProtocolVersion,
        ));
    };
    let Some(event_id) = non_empty_str(obj.get("eventId")) else {
        return Err(ContractViolation::new(at("eventId"), ViolationDetail::EmptyString));
    };
    let Some(scope) = obj.get("scope").and_then(Scope::from_json) else {
        return Err(ContractViolation::new(at("scope"), ViolationDetail::UnknownScope));
    };
    let Some(event) = non_empty_str(obj.get("event")) else {
        return Err(ContractViolation::new(at("event"), ViolationDetail::EmptyString));
    };
    let Some(mesh_id) = non_empty_str(obj.get("meshId")) else {
        return Err(ContractViolation::new(at("meshId"), ViolationDetail::EmptyString));
    };
    let dispatched_by =
        assert_coordinator_identity(obj.get("dispatchedBy").unwrap_or(&Value::Null), &at("dispatchedBy"))?;

    let intended_for_raw = obj.get("intendedFor");
    let intended_for_truthy = intended_for_raw.is_some_and(truthy);
    if scope == Scope::Unicast {
        if !intended_for_truthy {
            return Err(ContractViolation::new(
                at("intendedFor"),
                ViolationDetail::UnicastRequiresIntendedFor,
            ));
        }
    } else if intended_for_raw.is_some() {
        return Err(ContractViolation::new(at("intendedFor"), ViolationDetail::IntendedForOnlyForUnicast));
    }
    let intended_for = match intended_for_raw {
        Some(value) if intended_for_truthy => Some(assert_coordinator_identity(value, &at("intendedFor"))?),
        _ => None,
    };

    let Some(metadata_event) = obj.get("metadataEvent").and_then(Value::as_object) else {
        return Err(ContractViolation::new(at("metadataEvent"), ViolationDetail::NotAnObject));
    };
    let Some(queued_at) = obj.get("queuedAt").and_then(finite_millis) else {
        return Err(ContractViolation::new(at("queuedAt"), ViolationDetail::NotAFiniteNumber));
    };

    let string = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_owned);
    Ok(PendingEventV2 {
        event: event.to_owned(),
        mesh_id: mesh_id.to_owned(),
        node_label: non_empty_str(obj.get("nodeLabel")).unwrap_or("").to_owned(),
        node_id: string("nodeId"),
        workspace: string("workspace"),
        metadata_event: metadata_event.clone(),
        coordinator_message: string("coordinatorMessage"),
        queued_at,
        protocol_version,
        event_id: event_id.to_owned(),
        scope,
        dispatched_by,
        intended_for,
    })
}

/// A finite JSON number as a timestamp; fractions are truncated toward zero and
/// out-of-range values saturate.
pub(crate) fn finite_millis(value: &Value) -> Option<Timestamp> {
    let number = value.as_number()?;
    let millis = match number.as_i64() {
        Some(i) => i,
        // `as` saturates; JSON numbers are always finite.
        None => number.as_f64()? as i64,
    };
    Some(Timestamp::from_millis(millis))
}

/// Whether a checked event goes to `drainer`: never for `system`, always for
/// `broadcast`, and for `unicast` only when `intendedFor` is coordinator-equal to
/// the drainer ([`CoordinatorIdentity::equals`]).
///
/// This is the contract's strict rule. The drain itself applies the rollout rules
/// of [`super::routing`] on top of it (daemon-level drainers, re-attribution).
pub fn should_deliver_to(event: &PendingEventV2, drainer: &CoordinatorIdentity) -> bool {
    match event.scope {
        Scope::System => false,
        Scope::Broadcast => true,
        Scope::Unicast => event.intended_for.as_ref().is_some_and(|target| target.equals(drainer)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn valid() -> Value {
        json!({
            "event": "agent:generating_completed",
            "meshId": "mesh1",
            "nodeLabel": "Node 'n1'",
            "nodeId": "n1",
            "metadataEvent": {"taskId": "t1"},
            "queuedAt": 1_700_000_000_000_i64,
            "targetCoordinatorDaemonId": "mach_X",
            "protocolVersion": "2.0",
            "eventId": "e1",
            "scope": "unicast",
            "dispatchedBy": {"daemonId": "mach_X", "coordinatorRunId": "run1"},
            "intendedFor": {"daemonId": "mach_X", "coordinatorRunId": "run1", "sessionId": "s1"},
            "somethingElse": true,
        })
    }

    fn with(mut value: Value, key: &str, field: Value) -> Value {
        value[key] = field;
        value
    }

    fn without(mut value: Value, key: &str) -> Value {
        value.as_object_mut().unwrap().remove(key);
        value
    }

    #[track_caller]
    fn violation(value: &Value) -> (String, String) {
        let err = validate_v2(value).unwrap_err();
        (err.path, err.detail.to_string())
    }

    #[test]
    fn a_valid_event_is_normalized() {
        let event = validate_v2(&valid()).unwrap();
        assert_eq!(event.event_id, "e1");
        assert_eq!(event.scope, Scope::Unicast);
        assert_eq!(event.queued_at, Timestamp::from_millis(1_700_000_000_000));
        assert_eq!(event.intended_for.as_ref().and_then(|i| i.session_id.as_deref()), Some("s1"));
        let back = serde_json::to_value(&event).unwrap();
        assert!(back.get("somethingElse").is_none(), "unknown fields are dropped");
        assert!(back.get("targetCoordinatorDaemonId").is_none());
        assert!(back.get("workspace").is_none());
        assert_eq!(back["queuedAt"], json!(1_700_000_000_000_i64));
    }

    #[test]
    fn optional_strings_are_kept_only_when_strings() {
        let value =
            with(with(with(valid(), "nodeLabel", json!(3)), "workspace", json!("")), "nodeId", json!(null));
        let event = validate_v2(&value).unwrap();
        assert_eq!(event.node_label, "");
        assert_eq!(event.workspace.as_deref(), Some(""));
        assert_eq!(event.node_id, None);
        let event = validate_v2(&with(valid(), "coordinatorMessage", json!(["x"]))).unwrap();
        assert_eq!(event.coordinator_message, None);
    }

    #[test]
    fn version_one_passes_the_envelope_check() {
        let event = validate_v2(&with(valid(), "protocolVersion", json!("1.0"))).unwrap();
        assert_eq!(event.protocol_version, ProtocolVersion::V1);
    }

    #[test]
    fn the_number_two_is_not_a_version() {
        assert_eq!(
            violation(&with(valid(), "protocolVersion", json!(2.0))),
            ("$.protocolVersion".into(), "must be one of 1.0, 2.0".into())
        );
        assert_eq!(violation(&with(valid(), "protocolVersion", json!("3.0"))).0, "$.protocolVersion");
        assert_eq!(violation(&without(valid(), "protocolVersion")).0, "$.protocolVersion");
    }

    #[test]
    fn checks_run_in_order() {
        assert_eq!(violation(&json!([])), ("$".into(), "must be an object".into()));
        // Both eventId and scope are bad: eventId is reported.
        let value = with(with(valid(), "eventId", json!("")), "scope", json!("multicast"));
        assert_eq!(violation(&value).0, "$.eventId");
        assert_eq!(
            violation(&with(valid(), "scope", json!("multicast"))),
            ("$.scope".into(), "must be one of unicast, broadcast, system".into())
        );
        let value = with(with(valid(), "event", json!("")), "meshId", json!(""));
        assert_eq!(violation(&value).0, "$.event");
        assert_eq!(violation(&with(valid(), "meshId", json!(""))).0, "$.meshId");
        let value = with(with(valid(), "dispatchedBy", json!(null)), "metadataEvent", json!(null));
        assert_eq!(violation(&value), ("$.dispatchedBy".into(), "must be an object".into()));
        assert_eq!(violation(&with(valid(), "metadataEvent", json!([]))).0, "$.metadataEvent");
        assert_eq!(
            violation(&with(valid(), "queuedAt", json!("1700000000000"))),
            ("$.queuedAt".into(), "must be a finite number".into())
        );
    }

    #[test]
    fn identity_paths_are_nested() {
        let value = with(valid(), "dispatchedBy", json!({"daemonId": "mach_X", "coordinatorRunId": ""}));
        assert_eq!(
            violation(&value),
            ("$.dispatchedBy.coordinatorRunId".into(), "must be a non-empty string".into())
        );
        let value = with(
            valid(),
            "intendedFor",
            json!({"daemonId": "mach_X", "coordinatorRunId": "r", "sessionId": null}),
        );
        assert_eq!(violation(&value).0, "$.intendedFor.sessionId");
        let value = with(valid(), "intendedFor", json!("mach_X"));
        assert_eq!(violation(&value), ("$.intendedFor".into(), "must be an object".into()));
        let err = validate_v2_at(&with(valid(), "dispatchedBy", json!({})), "$.events[3]").unwrap_err();
        assert_eq!(
            err.to_string(),
            "mesh contract 2.0 violation at $.events[3].dispatchedBy.daemonId: must be a non-empty string"
        );
    }

    #[test]
    fn unicast_requires_a_truthy_intended_for() {
        for missing in [None, Some(json!(null)), Some(json!(false)), Some(json!(0)), Some(json!(""))] {
            let value = match &missing {
                None => without(valid(), "intendedFor"),
                Some(v) => with(valid(), "intendedFor", v.clone()),
            };
            assert_eq!(
                violation(&value),
                ("$.intendedFor".into(), "unicast scope requires intendedFor".into()),
                "{missing:?}"
            );
        }
    }

    #[test]
    fn only_unicast_may_set_intended_for() {
        for scope in ["broadcast", "system"] {
            let value = with(valid(), "scope", json!(scope));
            assert_eq!(
                violation(&value),
                ("$.intendedFor".into(), "only unicast scope may set intendedFor".into())
            );
            let value = with(value, "intendedFor", json!(null));
            assert_eq!(violation(&value).0, "$.intendedFor", "null counts as set");
            let event = validate_v2(&without(value, "intendedFor")).unwrap();
            assert_eq!(event.intended_for, None);
        }
    }

    #[test]
    fn non_empty_means_length_not_trimmed() {
        let value = with(with(valid(), "eventId", json!(" ")), "event", json!(" "));
        let event = validate_v2(&value).unwrap();
        assert_eq!(event.event_id, " ");
    }

    #[test]
    fn fractional_queued_at_is_truncated() {
        let event = validate_v2(&with(valid(), "queuedAt", json!(1.9))).unwrap();
        assert_eq!(event.queued_at, Timestamp::from_millis(1));
    }

    #[test]
    fn delivery_rule() {
        let drainer = CoordinatorIdentity::new("daemon_mach_X", "run1", Some("s1".into()));
        let unicast = validate_v2(&valid()).unwrap();
        assert!(should_deliver_to(&unicast, &drainer));
        assert!(!should_deliver_to(&unicast, &CoordinatorIdentity::new("mach_X", "run1", None)));
        assert!(!should_deliver_to(&unicast, &CoordinatorIdentity::new("mach_X", "run2", Some("s1".into()))));
        let broadcast =
            validate_v2(&without(with(valid(), "scope", json!("broadcast")), "intendedFor")).unwrap();
        assert!(should_deliver_to(&broadcast, &CoordinatorIdentity::new("mach_Z", "run9", None)));
        let system = validate_v2(&without(with(valid(), "scope", json!("system")), "intendedFor")).unwrap();
        assert!(!should_deliver_to(&system, &drainer));
    }
}
