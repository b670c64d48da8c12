//! Coordinator identity: which coordinator dispatched work, and which one an event
//! is addressed to.
//!
//! An identity is `{daemonId, coordinatorRunId, sessionId?}`. The daemon id names
//! the machine (any of its id forms), the run id is fresh per coordinator start,
//! and the session id names a CLI coordinator's session (a pure MCP coordinator
//! has none). Two identities name the same coordinator when [`CoordinatorIdentity::equals`]
//! says so, which is exactly when their [`CoordinatorIdentity::key`]s are equal.
//! The derived `PartialEq` compares the stored strings and is *not* coordinator
//! equality.

use serde::Serialize;
use serde_json::Value;

use super::contract::{ContractViolation, ViolationDetail};
use super::js::non_empty_str;
use crate::daemon_id::{daemon_ids_equivalent, machine_core};

/// A coordinator's identity, serialized in the original's shape
/// (`{"daemonId", "coordinatorRunId", "sessionId"?}`).
///
/// Deserialization applies the contract check ([`assert_coordinator_identity`]),
/// so a deserialized identity always has a non-empty daemon id and run id and
/// either no session id or a non-empty one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", try_from = "Value")]
pub struct CoordinatorIdentity {
    /// The machine hosting the coordinator, in any of its id forms.
    pub daemon_id: String,
    /// Fresh per coordinator start. Where no real run id is known yet, the
    /// original stores the daemon id here (see [`CoordinatorIdentity::from_emit_fields`]).
    pub coordinator_run_id: String,
    /// The CLI coordinator's session, absent for a pure MCP coordinator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl CoordinatorIdentity {
    /// An identity from its parts.
    pub fn new(
        daemon_id: impl Into<String>,
        coordinator_run_id: impl Into<String>,
        session_id: Option<String>,
    ) -> CoordinatorIdentity {
        CoordinatorIdentity {
            daemon_id: daemon_id.into(),
            coordinator_run_id: coordinator_run_id.into(),
            session_id,
        }
    }

    /// Coordinator equality: the daemon ids name one machine (any id form), the run
    /// ids are identical, and the session ids are identical with "absent" equal to
    /// absent (and to an empty string).
    ///
    /// Two identities whose daemon ids are blank are never equal, because a blank
    /// id names no machine.
    pub fn equals(&self, other: &CoordinatorIdentity) -> bool {
        daemon_ids_equivalent(&self.daemon_id, &other.daemon_id)
            && self.coordinator_run_id == other.coordinator_run_id
            && self.session() == other.session()
    }

    /// The stable string form `<machine core>|<run id>|<session id or empty>`, for
    /// map keys and ledger payloads. The daemon id is reduced to its machine core
    /// (falling back to the raw id when it has none), so equal identities addressed
    /// under different id forms share one key.
    pub fn key(&self) -> String {
        let core = machine_core(&self.daemon_id).unwrap_or(&self.daemon_id);
        format!("{core}|{}|{}", self.coordinator_run_id, self.session())
    }

    /// The identity an emitter can build from the loose fields it carries.
    ///
    /// `None` unless `daemon_id` is a non-empty string (not trimmed). The run id
    /// falls back to the daemon id when absent or empty, a stable stand-in that
    /// keeps equality meaningful while real run ids are not wired through. An
    /// empty session id counts as absent.
    pub fn from_emit_fields(
        daemon_id: Option<&str>,
        coordinator_run_id: Option<&str>,
        session_id: Option<&str>,
    ) -> Option<CoordinatorIdentity> {
        let daemon_id = daemon_id.filter(|d| !d.is_empty())?;
        let run_id = coordinator_run_id.filter(|r| !r.is_empty()).unwrap_or(daemon_id);
        let session_id = session_id.filter(|s| !s.is_empty()).map(str::to_owned);
        Some(CoordinatorIdentity::new(daemon_id, run_id, session_id))
    }

    /// True when the run id is only a form of the identity's own daemon id: the
    /// stand-in [`CoordinatorIdentity::from_emit_fields`] writes when no real run
    /// id is known. Such a run id says nothing beyond "this machine".
    pub fn run_id_is_daemon_fallback(&self) -> bool {
        daemon_ids_equivalent(&self.coordinator_run_id, &self.daemon_id)
    }

    /// The identity in its JSON shape: `{"daemonId", "coordinatorRunId",
    /// "sessionId"?}`.
    pub fn to_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("daemonId".to_owned(), Value::from(self.daemon_id.as_str()));
        map.insert("coordinatorRunId".to_owned(), Value::from(self.coordinator_run_id.as_str()));
        if let Some(session) = &self.session_id {
            map.insert("sessionId".to_owned(), Value::from(session.as_str()));
        }
        Value::Object(map)
    }

    fn session(&self) -> &str {
        self.session_id.as_deref().unwrap_or("")
    }
}

impl TryFrom<Value> for CoordinatorIdentity {
    type Error = ContractViolation;
    fn try_from(value: Value) -> Result<Self, Self::Error> {
        assert_coordinator_identity(&value, "$")
    }
}

/// The contract check for an identity found at `path` in a JSON document.
///
/// In order: the value must be an object; `daemonId` and then `coordinatorRunId`
/// must be strings of length > 0 (whitespace is *not* trimmed, so `" "` passes);
/// a `sessionId` key, when present, must hold a non-empty string, so `null` and
/// `""` are violations. Other keys are ignored and not kept.
pub fn assert_coordinator_identity(
    value: &Value,
    path: &str,
) -> Result<CoordinatorIdentity, ContractViolation> {
    let Some(obj) = value.as_object() else {
        return Err(ContractViolation::new(path, ViolationDetail::NotAnObject));
    };
    let Some(daemon_id) = non_empty_str(obj.get("daemonId")) else {
        return Err(ContractViolation::new(format!("{path}.daemonId"), ViolationDetail::EmptyString));
    };
    let Some(run_id) = non_empty_str(obj.get("coordinatorRunId")) else {
        return Err(ContractViolation::new(format!("{path}.coordinatorRunId"), ViolationDetail::EmptyString));
    };
    let session_id = match obj.get("sessionId") {
        None => None,
        Some(value) => match non_empty_str(Some(value)) {
            Some(session) => Some(session.to_owned()),
            None => {
                return Err(ContractViolation::new(
                    format!("{path}.sessionId"),
                    ViolationDetail::EmptyStringWhenProvided,
                ));
            }
        },
    };
    Ok(CoordinatorIdentity::new(daemon_id, run_id, session_id))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn id(daemon: &str, run: &str, session: Option<&str>) -> CoordinatorIdentity {
        CoordinatorIdentity::new(daemon, run, session.map(str::to_owned))
    }

    #[test]
    fn equality_goes_through_the_machine_core() {
        let forms = ["mach_X", "daemon_mach_X", "standalone_mach_X"];
        for a in forms {
            for b in forms {
                assert!(id(a, "run1", None).equals(&id(b, "run1", None)), "{a} vs {b}");
                assert_eq!(id(a, "run1", Some("s")).key(), id(b, "run1", Some("s")).key());
            }
        }
        assert_eq!(id("daemon_mach_X", "run1", None).key(), "mach_X|run1|");
        assert!(!id("mach_X", "run1", None).equals(&id("mach_Y", "run1", None)));
    }

    #[test]
    fn run_ids_compare_exactly_and_sessions_by_presence() {
        assert!(!id("mach_X", "run1", None).equals(&id("mach_X", "RUN1", None)));
        assert!(!id("mach_X", "run1", Some("s")).equals(&id("mach_X", "run1", None)));
        assert!(id("mach_X", "run1", Some("")).equals(&id("mach_X", "run1", None)));
        assert!(id("mach_X", "run1", Some("s")).equals(&id("mach_X", "run1", Some("s"))));
    }

    #[test]
    fn blank_daemons_are_never_equal() {
        assert!(!id("", "r", None).equals(&id("", "r", None)));
        assert!(!id("  ", "r", None).equals(&id("  ", "r", None)));
        assert_eq!(id("", "r", None).key(), "|r|");
    }

    #[test]
    fn emit_fields() {
        assert_eq!(CoordinatorIdentity::from_emit_fields(None, Some("r"), None), None);
        assert_eq!(CoordinatorIdentity::from_emit_fields(Some(""), Some("r"), None), None);
        assert_eq!(
            CoordinatorIdentity::from_emit_fields(Some(" "), None, None),
            Some(id(" ", " ", None)),
            "whitespace is not trimmed"
        );
        assert_eq!(
            CoordinatorIdentity::from_emit_fields(Some("mach_X"), Some(""), Some("")),
            Some(id("mach_X", "mach_X", None))
        );
        assert_eq!(
            CoordinatorIdentity::from_emit_fields(Some("mach_X"), Some("run1"), Some("s1")),
            Some(id("mach_X", "run1", Some("s1")))
        );
    }

    #[test]
    fn daemon_fallback_run_ids() {
        assert!(id("mach_X", "mach_X", None).run_id_is_daemon_fallback());
        assert!(id("mach_X", "daemon_mach_X", None).run_id_is_daemon_fallback());
        assert!(!id("mach_X", "run1", None).run_id_is_daemon_fallback());
    }

    #[test]
    fn contract_check_accepts_well_formed_identities() {
        let got =
            assert_coordinator_identity(&json!({"daemonId": " ", "coordinatorRunId": "r", "x": 1}), "$.d");
        assert_eq!(got, Ok(id(" ", "r", None)));
        let got = assert_coordinator_identity(
            &json!({"daemonId": "d", "coordinatorRunId": "r", "sessionId": "s"}),
            "$",
        );
        assert_eq!(got, Ok(id("d", "r", Some("s"))));
    }

    #[test]
    fn contract_check_names_the_failing_path() {
        let cases = [
            (json!(null), "$.d", "must be an object"),
            (json!([]), "$.d", "must be an object"),
            (json!({"coordinatorRunId": "r"}), "$.d.daemonId", "must be a non-empty string"),
            (json!({"daemonId": "", "coordinatorRunId": "r"}), "$.d.daemonId", "must be a non-empty string"),
            (
                json!({"daemonId": "d", "coordinatorRunId": 7}),
                "$.d.coordinatorRunId",
                "must be a non-empty string",
            ),
            (
                json!({"daemonId": "d", "coordinatorRunId": "r", "sessionId": null}),
                "$.d.sessionId",
                "must be a non-empty string when provided",
            ),
            (
                json!({"daemonId": "d", "coordinatorRunId": "r", "sessionId": ""}),
                "$.d.sessionId",
                "must be a non-empty string when provided",
            ),
        ];
        for (value, path, detail) in cases {
            let err = assert_coordinator_identity(&value, "$.d").unwrap_err();
            assert_eq!(err.path, path, "{value}");
            assert_eq!(err.detail.to_string(), detail, "{value}");
        }
    }

    #[test]
    fn serde_round_trip_is_strict() {
        let identity = id("mach_X", "run1", None);
        let value = serde_json::to_value(&identity).unwrap();
        assert_eq!(value, json!({"daemonId": "mach_X", "coordinatorRunId": "run1"}));
        assert_eq!(identity.to_json(), value);
        assert_eq!(serde_json::from_value::<CoordinatorIdentity>(value).unwrap(), identity);
        let err = serde_json::from_value::<CoordinatorIdentity>(
            json!({"daemonId": "d", "coordinatorRunId": "r", "sessionId": null}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("$.sessionId"), "{err}");
    }

    fn daemon_form() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["", "daemon_", "standalone_"]),
            prop::sample::select(vec!["mach_A", "mach_B"]),
        )
            .prop_map(|(prefix, core)| format!("{prefix}{core}"))
    }

    fn identity() -> impl Strategy<Value = CoordinatorIdentity> {
        (
            daemon_form(),
            prop::sample::select(vec!["run1", "run2", "mach_A"]),
            prop::option::of(prop::sample::select(vec!["s1", "s2", ""])),
        )
            .prop_map(|(daemon, run, session)| {
                CoordinatorIdentity::new(daemon, run, session.map(str::to_owned))
            })
    }

    proptest! {
        /// Over the three id forms of a machine, two identities are equal exactly
        /// when their keys are equal, so keys can stand in for identities in maps.
        #[test]
        fn equality_iff_key_equality(a in identity(), b in identity()) {
            prop_assert_eq!(a.equals(&b), a.key() == b.key());
        }

        /// Equality is symmetric over the three id forms.
        #[test]
        fn equality_is_symmetric(a in identity(), b in identity()) {
            prop_assert_eq!(a.equals(&b), b.equals(&a));
        }
    }
}
