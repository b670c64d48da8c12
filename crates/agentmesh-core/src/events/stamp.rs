//! Stamping the v2 envelope onto an event at emit time.
//!
//! [`build_emit_stamp`] is the contract-level rule (scope defaulting, the
//! unicast-to-broadcast fallback); [`stamp_event`] applies it to a
//! [`PendingEvent`] the way the original's emit path did, deriving the identity
//! from the event's coordinator targets. Neither mints ids: the caller passes the
//! fresh event id (and this daemon's machine id for the self fallback), so both
//! stay deterministic under test.

use super::envelope::{PendingEvent, ProtocolVersion, Scope, V2Envelope};
use super::identity::CoordinatorIdentity;
use super::names::{default_scope_for_event, is_worktree_bootstrap_event};

/// The envelope an emitter stamps. Its protocol version is always `2.0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmitStamp {
    /// The idempotency key, as the caller minted it.
    pub event_id: String,
    /// The resolved scope.
    pub scope: Scope,
    /// The dispatching coordinator.
    pub dispatched_by: CoordinatorIdentity,
    /// The addressee; present exactly when the scope is unicast.
    pub intended_for: Option<CoordinatorIdentity>,
}

impl EmitStamp {
    /// The stamp as an envelope (version `2.0`).
    pub fn into_envelope(self) -> V2Envelope {
        V2Envelope {
            protocol_version: Some(ProtocolVersion::V2),
            event_id: Some(self.event_id),
            scope: Some(self.scope),
            dispatched_by: Some(self.dispatched_by),
            intended_for: self.intended_for,
        }
    }
}

/// Computes the v2 stamp for an event named `event_name`.
///
/// - No `dispatched_by`: `None`, and the event stays v1 (no identity is invented).
/// - The scope is `scope` when given, else [`default_scope_for_event`].
/// - A unicast scope with no `intended_for` falls back to broadcast, explicit
///   override or not: an event that cannot be addressed is delivered broadly
///   rather than dropped.
/// - `intended_for` is dropped for any scope but unicast.
///
/// Merged onto an event with valid v1 fields and a non-empty `event_id`, the stamp
/// always passes [`super::contract::validate_v2`].
pub fn build_emit_stamp(
    event_name: &str,
    event_id: &str,
    dispatched_by: Option<CoordinatorIdentity>,
    intended_for: Option<CoordinatorIdentity>,
    scope: Option<Scope>,
) -> Option<EmitStamp> {
    let dispatched_by = dispatched_by?;
    let mut scope = scope.unwrap_or_else(|| default_scope_for_event(event_name));
    if scope == Scope::Unicast && intended_for.is_none() {
        scope = Scope::Broadcast;
    }
    let intended_for = if scope == Scope::Unicast { intended_for } else { None };
    Some(EmitStamp { event_id: event_id.to_owned(), scope, dispatched_by, intended_for })
}

/// What an emit site knows better than the event's own fields. Every field is
/// optional; an empty hint derives everything from the event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmitHint {
    /// Overrides the scope defaulted from the event name.
    pub scope: Option<Scope>,
    /// Overrides the identity derived from the event's coordinator targets.
    pub dispatched_by: Option<CoordinatorIdentity>,
    /// Overrides the unicast addressee (by default the dispatching coordinator).
    pub intended_for: Option<CoordinatorIdentity>,
    /// The real coordinator run id, folded into the derived identity.
    pub coordinator_run_id: Option<String>,
}

/// What [`stamp_event`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampOutcome {
    /// The event already carried version `2.0` and an event id; it is unchanged,
    /// so a re-queued or relayed event keeps its idempotency key.
    AlreadyStamped,
    /// Stamped with the identity of its coordinator.
    Stamped,
    /// No coordinator identity was known: stamped as dispatched by this daemon
    /// itself (scope broadcast unless the hint says otherwise).
    SelfFallback,
    /// No identity and no machine id: the event stays v1.
    Unstamped,
}

/// Stamps the v2 envelope onto `event`, as the original's emit path did.
///
/// 1. An event that already carries version `2.0` and a non-blank event id is
///    never stamped again.
/// 2. The dispatching identity is the hint's, else one built from
///    `targetCoordinatorDaemonId` (with the hint's run id, else the daemon id) and
///    `targetCoordinatorSessionId`. The addressee is the hint's, else that same
///    identity.
/// 3. With no identity, the event is dispatched by this daemon itself
///    (`self_machine_id`, trimmed, with itself as run id), has no addressee and is
///    a broadcast unless the hint sets a scope; a resulting broadcast is marked
///    `dispatchedBySelfFallback`. Such an event with neither a daemon nor a session
///    target is also targeted at this daemon, so it stays on this machine, except
///    for `worktree_bootstrap_*` events, which a remote mesh host must be able to
///    pull.
/// 4. With no identity and no usable machine id, the event stays v1.
///
/// `fresh_event_id` is used only when the event is stamped. Any malformed envelope
/// keys the event carried are replaced, and a stale addressee or self-fallback mark
/// is cleared, so a stamped event always has exactly the stamp's envelope.
pub fn stamp_event(
    event: &mut PendingEvent,
    hint: &EmitHint,
    fresh_event_id: &str,
    self_machine_id: Option<&str>,
) -> StampOutcome {
    if event.envelope.is_stamped() {
        return StampOutcome::AlreadyStamped;
    }
    let owner = hint.dispatched_by.clone().or_else(|| {
        CoordinatorIdentity::from_emit_fields(
            event.target_coordinator_daemon_id.as_deref(),
            hint.coordinator_run_id.as_deref(),
            event.target_coordinator_session_id.as_deref(),
        )
    });
    let self_fallback = owner.is_none();
    let (dispatched_by, intended_for, scope) = match owner {
        Some(owner) => {
            let intended_for = hint.intended_for.clone().unwrap_or_else(|| owner.clone());
            (Some(owner), Some(intended_for), hint.scope)
        }
        None => {
            let own = self_machine_id.map(str::trim).filter(|m| !m.is_empty());
            let dispatched_by = CoordinatorIdentity::from_emit_fields(own, None, None);
            (dispatched_by, hint.intended_for.clone(), Some(hint.scope.unwrap_or(Scope::Broadcast)))
        }
    };
    let Some(stamp) = build_emit_stamp(&event.event, fresh_event_id, dispatched_by, intended_for, scope)
    else {
        return StampOutcome::Unstamped;
    };

    let self_broadcast = self_fallback && stamp.scope == Scope::Broadcast;
    let untargeted = blank(event.target_coordinator_daemon_id.as_deref())
        && blank(event.target_coordinator_session_id.as_deref());
    if self_broadcast && untargeted && !is_worktree_bootstrap_event(&event.event) {
        event.target_coordinator_daemon_id = Some(stamp.dispatched_by.daemon_id.trim().to_owned());
    }
    event.dispatched_by_self_fallback = self_broadcast;
    event.set_envelope(stamp.into_envelope());
    if self_fallback { StampOutcome::SelfFallback } else { StampOutcome::Stamped }
}

fn blank(value: Option<&str>) -> bool {
    value.is_none_or(|v| v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::super::contract::validate_v2;
    use super::super::names::*;
    use super::*;
    use crate::Timestamp;

    fn identity(daemon: &str, run: &str, session: Option<&str>) -> CoordinatorIdentity {
        CoordinatorIdentity::new(daemon, run, session.map(str::to_owned))
    }

    fn event(name: &str) -> PendingEvent {
        PendingEvent::new(name, "mesh1", "Node 'n1'", Map::new(), Timestamp::from_millis(1_000))
    }

    fn targeted(name: &str, daemon: &str, session: Option<&str>) -> PendingEvent {
        let mut event = event(name);
        event.target_coordinator_daemon_id = Some(daemon.to_owned());
        event.target_coordinator_session_id = session.map(str::to_owned);
        event
    }

    #[test]
    fn no_dispatcher_no_stamp() {
        assert_eq!(build_emit_stamp(AGENT_STOPPED, "e1", None, None, None), None);
    }

    #[test]
    fn scope_defaults_by_name() {
        let me = identity("mach_X", "mach_X", None);
        let stamp = build_emit_stamp(AGENT_STOPPED, "e1", Some(me.clone()), Some(me.clone()), None).unwrap();
        assert_eq!(stamp.scope, Scope::Unicast);
        assert_eq!(stamp.intended_for, Some(me.clone()));
        let stamp = build_emit_stamp(AGENT_READY, "e1", Some(me.clone()), Some(me.clone()), None).unwrap();
        assert_eq!(stamp.scope, Scope::Broadcast);
        assert_eq!(stamp.intended_for, None, "intendedFor is dropped for broadcast");
        let stamp =
            build_emit_stamp(AGENT_READY, "e1", Some(me.clone()), Some(me), Some(Scope::System)).unwrap();
        assert_eq!(stamp.scope, Scope::System);
        assert_eq!(stamp.intended_for, None);
    }

    #[test]
    fn unicast_without_addressee_falls_back_to_broadcast() {
        let me = identity("mach_X", "run1", None);
        let stamp = build_emit_stamp(AGENT_GENERATING_COMPLETED, "e1", Some(me.clone()), None, None).unwrap();
        assert_eq!(stamp.scope, Scope::Broadcast);
        let stamp = build_emit_stamp(AGENT_READY, "e1", Some(me), None, Some(Scope::Unicast)).unwrap();
        assert_eq!(stamp.scope, Scope::Broadcast, "an explicit unicast override falls back too");
    }

    #[test]
    fn stamps_from_the_coordinator_targets() {
        let mut event = targeted(AGENT_GENERATING_COMPLETED, "daemon_mach_X", Some("s1"));
        let hint = EmitHint { coordinator_run_id: Some("run1".into()), ..EmitHint::default() };
        assert_eq!(stamp_event(&mut event, &hint, "e1", Some("mach_SELF")), StampOutcome::Stamped);
        let expected = identity("daemon_mach_X", "run1", Some("s1"));
        assert_eq!(event.envelope.protocol_version, Some(ProtocolVersion::V2));
        assert_eq!(event.envelope.event_id.as_deref(), Some("e1"));
        assert_eq!(event.envelope.scope, Some(Scope::Unicast));
        assert_eq!(event.envelope.dispatched_by, Some(expected.clone()));
        assert_eq!(event.envelope.intended_for, Some(expected));
        assert!(!event.dispatched_by_self_fallback);
        assert_eq!(event.target_coordinator_daemon_id.as_deref(), Some("daemon_mach_X"));
        assert!(validate_v2(&event.to_value()).is_ok());
    }

    #[test]
    fn run_id_defaults_to_the_daemon_id() {
        let mut event = targeted(AGENT_STOPPED, "mach_X", None);
        stamp_event(&mut event, &EmitHint::default(), "e1", None);
        assert_eq!(event.envelope.dispatched_by, Some(identity("mach_X", "mach_X", None)));
    }

    #[test]
    fn never_re_stamps() {
        let mut event = targeted(AGENT_STOPPED, "mach_X", None);
        stamp_event(&mut event, &EmitHint::default(), "e1", None);
        let before = event.clone();
        let hint = EmitHint { scope: Some(Scope::System), ..EmitHint::default() };
        assert_eq!(stamp_event(&mut event, &hint, "e2", Some("mach_Y")), StampOutcome::AlreadyStamped);
        assert_eq!(event, before);
    }

    #[test]
    fn a_blank_event_id_does_not_count_as_stamped() {
        let mut event = targeted(AGENT_STOPPED, "mach_X", None);
        event.envelope.protocol_version = Some(ProtocolVersion::V2);
        event.envelope.event_id = Some("  ".into());
        assert_eq!(stamp_event(&mut event, &EmitHint::default(), "e2", None), StampOutcome::Stamped);
        assert_eq!(event.envelope.event_id.as_deref(), Some("e2"));
    }

    #[test]
    fn hints_override() {
        let mut event = targeted(AGENT_STOPPED, "mach_X", None);
        let other = identity("mach_Y", "run7", Some("s7"));
        let hint = EmitHint {
            dispatched_by: Some(identity("mach_Z", "run9", None)),
            intended_for: Some(other.clone()),
            ..EmitHint::default()
        };
        stamp_event(&mut event, &hint, "e1", None);
        assert_eq!(event.envelope.dispatched_by, Some(identity("mach_Z", "run9", None)));
        assert_eq!(event.envelope.intended_for, Some(other));
    }

    #[test]
    fn self_fallback_is_a_broadcast_targeted_at_this_daemon() {
        let mut event = event(AGENT_GENERATING_COMPLETED);
        assert_eq!(
            stamp_event(&mut event, &EmitHint::default(), "e1", Some(" mach_SELF ")),
            StampOutcome::SelfFallback
        );
        assert_eq!(event.envelope.scope, Some(Scope::Broadcast));
        assert_eq!(event.envelope.dispatched_by, Some(identity("mach_SELF", "mach_SELF", None)));
        assert_eq!(event.envelope.intended_for, None);
        assert!(event.dispatched_by_self_fallback);
        assert_eq!(event.target_coordinator_daemon_id.as_deref(), Some("mach_SELF"));
        let value = event.to_value();
        assert_eq!(value["dispatchedBySelfFallback"], json!(true));
        assert!(validate_v2(&value).is_ok());
    }

    #[test]
    fn self_fallback_leaves_bootstrap_and_session_targeted_events_untargeted() {
        let mut bootstrap = event(WORKTREE_BOOTSTRAP_COMPLETE);
        stamp_event(&mut bootstrap, &EmitHint::default(), "e1", Some("mach_SELF"));
        assert!(bootstrap.dispatched_by_self_fallback);
        assert_eq!(bootstrap.target_coordinator_daemon_id, None);

        let mut session_only = event(AGENT_STOPPED);
        session_only.target_coordinator_session_id = Some("s1".into());
        stamp_event(&mut session_only, &EmitHint::default(), "e1", Some("mach_SELF"));
        assert!(session_only.dispatched_by_self_fallback);
        assert_eq!(session_only.target_coordinator_daemon_id, None);
    }

    #[test]
    fn self_fallback_with_an_explicit_unicast_hint() {
        let mut event = event(AGENT_STOPPED);
        let target = identity("mach_Y", "run1", None);
        let hint = EmitHint {
            scope: Some(Scope::Unicast),
            intended_for: Some(target.clone()),
            ..EmitHint::default()
        };
        assert_eq!(stamp_event(&mut event, &hint, "e1", Some("mach_SELF")), StampOutcome::SelfFallback);
        assert_eq!(event.envelope.scope, Some(Scope::Unicast));
        assert_eq!(event.envelope.intended_for, Some(target));
        assert!(!event.dispatched_by_self_fallback, "only a self-fallback broadcast is marked");
        assert_eq!(event.target_coordinator_daemon_id, None);
    }

    #[test]
    fn no_identity_and_no_machine_id_stays_v1() {
        let mut event = event(AGENT_STOPPED);
        let before = event.clone();
        assert_eq!(stamp_event(&mut event, &EmitHint::default(), "e1", None), StampOutcome::Unstamped);
        assert_eq!(stamp_event(&mut event, &EmitHint::default(), "e1", Some("  ")), StampOutcome::Unstamped);
        assert_eq!(event, before);
    }

    #[test]
    fn stamping_replaces_malformed_envelope_keys() {
        let mut raw = targeted(AGENT_READY, "mach_X", None).to_value();
        raw["protocolVersion"] = json!(2);
        raw["intendedFor"] = json!(null);
        let mut event = PendingEvent::from_value(raw).unwrap();
        assert_eq!(stamp_event(&mut event, &EmitHint::default(), "e1", None), StampOutcome::Stamped);
        let value = event.to_value();
        assert_eq!(value["protocolVersion"], json!("2.0"));
        assert!(value.get("intendedFor").is_none());
        assert!(validate_v2(&value).is_ok());
    }

    #[test]
    fn stamped_events_always_validate() {
        let names =
            [AGENT_GENERATING_COMPLETED, AGENT_READY, MESH_DISPATCH_BLOCKED, WORKTREE_BOOTSTRAP_FAILED];
        let scopes = [None, Some(Scope::Unicast), Some(Scope::Broadcast), Some(Scope::System)];
        let targets = [None, Some("mach_X")];
        for name in names {
            for scope in scopes {
                for target in targets {
                    let mut event = event(name);
                    event.target_coordinator_daemon_id = target.map(str::to_owned);
                    let hint = EmitHint { scope, ..EmitHint::default() };
                    stamp_event(&mut event, &hint, "e1", Some("mach_SELF"));
                    let checked = validate_v2(&event.to_value());
                    assert!(checked.is_ok(), "{name} {scope:?} {target:?}: {checked:?}");
                }
            }
        }
    }
}
