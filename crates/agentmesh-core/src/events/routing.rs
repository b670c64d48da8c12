//! The drain-side routing decision for one pending event, and the counters a drain
//! keeps.
//!
//! A drain takes candidate events (raw JSON as stored) and decides for each one:
//! deliver it to the draining coordinator, leave it for its own coordinator, skip
//! it as an already-drained duplicate, or quarantine it. The rules are the
//! original's, in its order:
//!
//! 1. The v1 daemon scope: an event targeted (`targetCoordinatorDaemonId`) at a
//!    daemon id that is not one of the drainer's id forms is not this drainer's.
//! 2. An unversioned event (no `protocolVersion: "2.0"`) is a broadcast in accept
//!    mode and is quarantined in enforce mode.
//! 3. A v2 event that fails the contract check passes through in accept mode and
//!    is quarantined in enforce mode.
//! 4. A valid v2 event whose event id was drained before is skipped.
//! 5. Broadcast goes to every drainer; system to none. A broadcast terminal
//!    task event ([`is_terminal_task_event`]: a completion, a stop, a refine
//!    outcome) belongs to the coordinator that dispatched the task: it goes only
//!    to a drainer its `dispatchedBy` delivers to (as a unicast addressee would,
//!    without re-attribution), or, when it is a self-fallback stamp
//!    (`dispatchedBySelfFallback`), to any drainer on the dispatching machine. It
//!    never reaches another machine's coordinator.
//! 6. Unicast goes to its addressee, where an addressee and a drainer that both
//!    carry only a daemon-form run id match by machine (and by session when both
//!    name one), and otherwise by [`CoordinatorIdentity::equals`].
//! 7. A unicast event that does not match but is addressed to the drainer's own
//!    machine with a real run id on either side was orphaned by a coordinator
//!    restart (a new run id): it is re-attributed to the drainer, unless its
//!    addressee is still live (see below). It never goes to another machine.
//!
//! A drainer may answer to other daemon ids besides its own (`also_known_as`,
//! such as a status instance id): an event targeted at one of them passes the v1
//! scope, and an event addressed to one of them on another machine core is taken
//! as a daemon-level drain by that id would take it.
//!
//! Liveness is not in the original: there every coordinator start re-attributed
//! every other run's unicasts on its machine, so two live coordinators on one
//! machine took each other's events. Here the caller says which coordinators are
//! live (by [`CoordinatorIdentity::key`]); a unicast for a live addressee is
//! routed away and stays queued for it. [`route_event`] and [`DrainRouter::new`]
//! treat nobody as live, which is the original's rule.
//!
//! Routing a valid v2 event needs only a few fields, so a store can project them
//! once when the event is queued ([`project_route`]) and route stored rows from
//! the projection ([`route_projected`]) without parsing them; [`route_event`]
//! goes through the same projection, so both take the same decision.
//!
//! Nothing here marks, stores or logs; the store applies the decision inside its
//! drain transaction, so only delivered, deduplicated and quarantined events are
//! marked drained and routed-away events stay queued.

use std::collections::HashSet;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::contract::{ContractViolation, validate_v2};
use super::envelope::{ProtocolVersion, Scope};
use super::identity::CoordinatorIdentity;
use super::js::read_non_empty;
use super::names::is_terminal_task_event;
use crate::daemon_id::{daemon_ids_equivalent, expand_daemon_id_forms, machine_core};

/// The coordinator draining its inbox: its identity and every daemon id form it
/// answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drainer {
    identity: CoordinatorIdentity,
    daemon_forms: Vec<String>,
    /// Daemon-level identities for the other ids the drainer answers to whose
    /// machine core is not its own (with its session), one per machine core.
    aliases: Vec<CoordinatorIdentity>,
    /// The addresses of `aliases`, in the same order.
    alias_addresses: Vec<Address>,
}

impl Drainer {
    /// A drainer with a known identity. Its daemon id forms are the expansion of
    /// the identity's daemon id followed by `also_known_as` (other ids this daemon
    /// answers to, such as a status instance id). An event addressed to one of
    /// those ids on another machine core is taken as a daemon-level drain by that
    /// id (with this drainer's session) would take it.
    pub fn new(identity: CoordinatorIdentity, also_known_as: &[&str]) -> Drainer {
        let ids: Vec<&str> =
            std::iter::once(identity.daemon_id.as_str()).chain(also_known_as.iter().copied()).collect();
        let daemon_forms = expand_daemon_id_forms(ids.iter().copied());
        Drainer::with_aliases(identity, daemon_forms, also_known_as)
    }

    fn with_aliases(identity: CoordinatorIdentity, daemon_forms: Vec<String>, other_ids: &[&str]) -> Drainer {
        let own = machine_core(&identity.daemon_id).map(str::to_owned);
        let mut aliases: Vec<CoordinatorIdentity> = Vec::new();
        for id in other_ids.iter().map(|id| id.trim()).filter(|id| !id.is_empty()) {
            let core = machine_core(id);
            if core.is_none() || core.map(str::to_owned) == own {
                continue;
            }
            if aliases.iter().any(|a| machine_core(&a.daemon_id) == core) {
                continue;
            }
            if let Some(alias) =
                CoordinatorIdentity::from_emit_fields(Some(id), None, identity.session_id.as_deref())
            {
                aliases.push(alias);
            }
        }
        let alias_addresses = aliases.iter().map(Address::of).collect();
        Drainer { identity, daemon_forms, aliases, alias_addresses }
    }

    /// A daemon-level drainer, as the reconcile loop drains: the first of
    /// `daemon_ids` (trimmed) is the primary id and doubles as the run id, and no
    /// session is named, so it takes every session's events on its machine. `None`
    /// when no id is non-blank.
    pub fn daemon_level(daemon_ids: &[&str]) -> Option<Drainer> {
        let daemon_forms = expand_daemon_id_forms(daemon_ids.iter().copied());
        let identity =
            CoordinatorIdentity::from_emit_fields(daemon_forms.first().map(String::as_str), None, None)?;
        Some(Drainer::with_aliases(identity, daemon_forms, daemon_ids))
    }

    /// The drainer's identity.
    pub fn identity(&self) -> &CoordinatorIdentity {
        &self.identity
    }

    /// The drainer's identity reduced to what unicast routing compares.
    pub fn address(&self) -> Address {
        Address::of(&self.identity)
    }

    /// The daemon-level identities of the other machine cores the drainer answers
    /// to (see [`Drainer::new`]).
    pub fn aliases(&self) -> &[CoordinatorIdentity] {
        &self.aliases
    }

    /// The machine cores whose unicasts the drainer may take: its own first (when
    /// its daemon id names one), then its aliases'.
    pub fn machines(&self) -> Vec<String> {
        std::iter::once(&self.identity)
            .chain(&self.aliases)
            .filter_map(|i| machine_core(&i.daemon_id).map(str::to_owned))
            .collect()
    }

    /// Whether a unicast addressed to `target` is this drainer's, by its own
    /// address or an alias's (before event-id dedup): the decision and counter.
    fn route_unicast(
        &self,
        target: &Address,
        is_live: &impl Fn(&str) -> bool,
    ) -> (RouteDecision, DrainCounter) {
        let mut routed = route_unicast(target, &self.address(), is_live);
        for alias in &self.alias_addresses {
            if routed.0 == RouteDecision::Deliver {
                break;
            }
            routed = route_unicast(target, alias, is_live);
        }
        routed
    }

    /// Whether a terminal task event broadcast by `dispatched_by` is this
    /// drainer's: its dispatcher delivers to the drainer (or to an alias), or it
    /// is a self-fallback stamp of the drainer's machine (or an alias's).
    fn owns_broadcast(&self, dispatched_by: &CoordinatorIdentity, self_fallback: bool) -> bool {
        std::iter::once(&self.identity).chain(&self.aliases).any(|me| {
            (self_fallback && daemon_ids_equivalent(&dispatched_by.daemon_id, &me.daemon_id))
                || identity_delivers_to(dispatched_by, me)
        })
    }

    /// Every daemon id form the drainer answers to; element 0 is the primary id.
    /// These are the values a store's `coordinator_daemon_id IN (...)` filter uses.
    pub fn daemon_forms(&self) -> &[String] {
        &self.daemon_forms
    }

    /// The v1 daemon scope: an event with no target (absent or blank) is anyone's;
    /// a targeted event is this drainer's when the target (trimmed) is exactly one
    /// of its id forms. A drainer with no forms takes everything.
    pub fn takes_target(&self, target: Option<&str>) -> bool {
        match target.map(str::trim).filter(|t| !t.is_empty()) {
            None => true,
            Some(target) => {
                self.daemon_forms.is_empty() || self.daemon_forms.iter().any(|form| form == target)
            }
        }
    }
}

/// What a drain does with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteDecision {
    /// Hand it to the drainer and mark it drained.
    Deliver,
    /// Not for this drainer: leave it queued, unmarked, for its own coordinator.
    RoutedAway {
        /// Why it is someone else's.
        reason: RoutedAwayReason,
    },
    /// Its event id was already drained: mark it drained without delivering.
    DedupSkipped,
    /// Hold it back: mark it drained, do not deliver, and record it as
    /// recoverable (`event_held`) in the same transaction.
    Quarantine {
        /// The `event_held` reason.
        reason: QuarantineReason,
    },
}

/// Why an event was routed away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutedAwayReason {
    /// Targeted at a daemon that is not one of the drainer's id forms.
    OtherDaemon,
    /// A unicast event addressed to another coordinator.
    OtherCoordinator,
    /// A system event: for no coordinator at all.
    SystemScope,
}

/// Why an event was quarantined (enforce mode only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuarantineReason {
    /// The event has no v2 envelope.
    Unversioned,
    /// The event's v2 envelope fails the contract check.
    ValidationFailed,
}

impl QuarantineReason {
    /// The reason string the original writes into the `event_held` ledger entry.
    pub const fn as_str(self) -> &'static str {
        match self {
            QuarantineReason::Unversioned => "v2_enforce_unversioned_quarantined",
            QuarantineReason::ValidationFailed => "v2_enforce_validation_failed_quarantined",
        }
    }
}

/// The routing outcome for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// What to do with the event.
    pub decision: RouteDecision,
    /// The drain counter the outcome increments, if any. Events outside the
    /// drainer's daemon scope count nowhere, as they never reached the original's
    /// routing.
    pub counter: Option<DrainCounter>,
    /// The contract violation, for a v2 event that failed the check (accepted or
    /// quarantined).
    pub violation: Option<ContractViolation>,
    /// The event id of a v2 event that passed the check.
    pub event_id: Option<String>,
}

impl Routed {
    fn new(decision: RouteDecision, counter: Option<DrainCounter>) -> Routed {
        Routed { decision, counter, violation: None, event_id: None }
    }
}

/// Decides what a drain does with one event, given as the raw JSON it was stored as.
///
/// `enforce` is the v2 enforce switch, read once per drain by the caller (see
/// [`enforce_from_env_value`]). `already_drained` answers whether an event id was
/// drained before this drain started (or earlier in this batch); it is asked only
/// for v2 events that pass the contract check. See the module docs for the rules.
pub fn route_event(
    raw: &Value,
    drainer: &Drainer,
    enforce: bool,
    already_drained: impl FnOnce(&str) -> bool,
) -> Routed {
    route_event_live(raw, drainer, enforce, |_| false, already_drained)
}

/// [`route_event`] with liveness: `is_live` answers whether the coordinator with a
/// given [`CoordinatorIdentity::key`] is live. A unicast for another run on the
/// drainer's machine is re-attributed to the drainer only when its addressee is
/// not live; otherwise it is routed away and stays queued for it.
pub fn route_event_live(
    raw: &Value,
    drainer: &Drainer,
    enforce: bool,
    is_live: impl Fn(&str) -> bool,
    already_drained: impl FnOnce(&str) -> bool,
) -> Routed {
    let target = read_non_empty(raw.get("targetCoordinatorDaemonId"));
    if !drainer.takes_target(target) {
        return Routed::new(RouteDecision::RoutedAway { reason: RoutedAwayReason::OtherDaemon }, None);
    }

    let is_v2 = raw.get("protocolVersion").and_then(ProtocolVersion::from_json) == Some(ProtocolVersion::V2);
    if !is_v2 {
        return if enforce {
            Routed::new(
                RouteDecision::Quarantine { reason: QuarantineReason::Unversioned },
                Some(DrainCounter::V1UnversionedQuarantined),
            )
        } else {
            Routed::new(RouteDecision::Deliver, Some(DrainCounter::V1BroadcastAccepted))
        };
    }

    let event = match validate_v2(raw) {
        Ok(event) => event,
        Err(violation) => {
            let mut routed = if enforce {
                Routed::new(
                    RouteDecision::Quarantine { reason: QuarantineReason::ValidationFailed },
                    Some(DrainCounter::V2ValidationFailedQuarantined),
                )
            } else {
                Routed::new(RouteDecision::Deliver, Some(DrainCounter::V2ValidationFailedAccepted))
            };
            routed.violation = Some(violation);
            return routed;
        }
    };
    if event.scope == Scope::Broadcast && is_terminal_task_event(&event.event) {
        let self_fallback = raw.get("dispatchedBySelfFallback").and_then(Value::as_bool) == Some(true);
        let (decision, counter) = if already_drained(&event.event_id) {
            (RouteDecision::DedupSkipped, DrainCounter::V2DedupSkipped)
        } else if drainer.owns_broadcast(&event.dispatched_by, self_fallback) {
            (RouteDecision::Deliver, DrainCounter::V2Delivered)
        } else {
            (
                RouteDecision::RoutedAway { reason: RoutedAwayReason::OtherCoordinator },
                DrainCounter::V2RoutedAway,
            )
        };
        return Routed { decision, counter: Some(counter), violation: None, event_id: Some(event.event_id) };
    }
    let projected = ProjectedRoute::of_valid(event.event_id, event.scope, event.intended_for.as_ref());
    route_projected(&projected, drainer, is_live, already_drained)
}

/// Where a unicast is addressed, reduced to what routing compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The machine core of the addressee's daemon id ([`machine_core`]); `None`
    /// when the id names no machine, so it matches no drainer.
    pub machine: Option<String>,
    /// The addressee's [`CoordinatorIdentity::key`]: equal keys on a named machine
    /// are coordinator-equal identities.
    pub key: String,
    /// Whether the run id is the daemon-form stand-in (no real run id known).
    pub run_is_daemon_fallback: bool,
    /// The session, when one is named (non-empty).
    pub session: Option<String>,
}

impl Address {
    /// The address of an identity.
    pub fn of(identity: &CoordinatorIdentity) -> Address {
        Address {
            machine: machine_core(&identity.daemon_id).map(str::to_owned),
            key: identity.key(),
            run_is_daemon_fallback: identity.run_id_is_daemon_fallback(),
            session: identity.session_id.clone().filter(|s| !s.is_empty()),
        }
    }

    fn same_machine(&self, other: &Address) -> bool {
        matches!((&self.machine, &other.machine), (Some(a), Some(b)) if a == b)
    }
}

/// What a valid v2 event is, for routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteClass {
    /// For every drainer.
    Broadcast,
    /// For no drainer.
    System,
    /// For one coordinator.
    Unicast(Address),
    /// A unicast without an addressee (validation rules it out): nobody's.
    Unaddressed,
}

/// The routing inputs of an event that passed the v2 contract check: all a drain
/// needs past the daemon-target filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectedRoute {
    /// The idempotency key.
    pub event_id: String,
    /// Scope and addressee.
    pub class: RouteClass,
}

impl ProjectedRoute {
    fn of_valid(
        event_id: String,
        scope: Scope,
        intended_for: Option<&CoordinatorIdentity>,
    ) -> ProjectedRoute {
        let class = match (scope, intended_for) {
            (Scope::Broadcast, _) => RouteClass::Broadcast,
            (Scope::System, _) => RouteClass::System,
            (Scope::Unicast, Some(target)) => RouteClass::Unicast(Address::of(target)),
            (Scope::Unicast, None) => RouteClass::Unaddressed,
        };
        ProjectedRoute { event_id, class }
    }
}

/// The routing inputs of a stored event: `None` for an unversioned event, one
/// that fails the v2 contract check, and a broadcast terminal task event (those
/// are routed from the whole event, by [`route_event`]). The result depends on the
/// event alone, never on a drainer, so it can be computed once when the event is
/// queued.
pub fn project_route(raw: &Value) -> Option<ProjectedRoute> {
    let is_v2 = raw.get("protocolVersion").and_then(ProtocolVersion::from_json) == Some(ProtocolVersion::V2);
    if !is_v2 {
        return None;
    }
    let event = validate_v2(raw).ok()?;
    if event.scope == Scope::Broadcast && is_terminal_task_event(&event.event) {
        return None;
    }
    Some(ProjectedRoute::of_valid(event.event_id, event.scope, event.intended_for.as_ref()))
}

/// Routes a valid v2 event from its projection (rules 4 to 7 of the module docs;
/// the daemon-target filter is the caller's). `is_live` answers whether the
/// coordinator with a given [`CoordinatorIdentity::key`] is live; see
/// [`route_event_live`].
pub fn route_projected(
    projected: &ProjectedRoute,
    drainer: &Drainer,
    is_live: impl Fn(&str) -> bool,
    already_drained: impl FnOnce(&str) -> bool,
) -> Routed {
    let (decision, counter) = if already_drained(&projected.event_id) {
        (RouteDecision::DedupSkipped, DrainCounter::V2DedupSkipped)
    } else {
        match &projected.class {
            RouteClass::Broadcast => (RouteDecision::Deliver, DrainCounter::V2Delivered),
            RouteClass::System => (
                RouteDecision::RoutedAway { reason: RoutedAwayReason::SystemScope },
                DrainCounter::V2RoutedAway,
            ),
            RouteClass::Unicast(target) => drainer.route_unicast(target, &is_live),
            RouteClass::Unaddressed => (
                RouteDecision::RoutedAway { reason: RoutedAwayReason::OtherCoordinator },
                DrainCounter::V2RoutedAway,
            ),
        }
    };
    Routed { decision, counter: Some(counter), violation: None, event_id: Some(projected.event_id.clone()) }
}

fn route_unicast(
    target: &Address,
    drainer: &Address,
    is_live: &impl Fn(&str) -> bool,
) -> (RouteDecision, DrainCounter) {
    if address_delivers_to(target, drainer) {
        return (RouteDecision::Deliver, DrainCounter::V2Delivered);
    }
    // A mismatch between two daemon-form run ids that survived the check above is
    // a sibling session on the same machine: a genuine route-away, not an orphan.
    // With a real run id on either side the addressee is another run on this
    // machine: an orphan of a restart only when that run is no longer live.
    let real_run_id = !target.run_is_daemon_fallback || !drainer.run_is_daemon_fallback;
    if real_run_id && target.same_machine(drainer) && !is_live(&target.key) {
        return (RouteDecision::Deliver, DrainCounter::V2ReattributedToDrainer);
    }
    (RouteDecision::RoutedAway { reason: RoutedAwayReason::OtherCoordinator }, DrainCounter::V2RoutedAway)
}

/// Whether a drain by `drainer` takes a unicast addressed to `target` (by
/// address or by re-attribution), before event-id dedup. Every event of one
/// addressee gets the same answer, so a store can decide per addressee which
/// events a drain needs to read at all.
pub fn drainer_takes_unicast(target: &Address, drainer: &Address, is_live: impl Fn(&str) -> bool) -> bool {
    route_unicast(target, drainer, &is_live).0 == RouteDecision::Deliver
}

/// [`identity_delivers_to`] on addresses.
fn address_delivers_to(target: &Address, drainer: &Address) -> bool {
    if !target.same_machine(drainer) {
        return false;
    }
    if target.run_is_daemon_fallback && drainer.run_is_daemon_fallback {
        return match (&target.session, &drainer.session) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
    }
    target.key == drainer.key
}

/// Whether a unicast addressed to `intended_for` is delivered to `drainer` by
/// address (before re-attribution).
///
/// When both carry only a daemon-form run id (no real run id is known on either
/// side), the match is by machine, and additionally by session when both name a
/// session: a session-less drainer is a daemon-level drain that takes every
/// session's events on its machine. Otherwise the identities must be
/// coordinator-equal.
pub fn identity_delivers_to(intended_for: &CoordinatorIdentity, drainer: &CoordinatorIdentity) -> bool {
    if intended_for.run_id_is_daemon_fallback() && drainer.run_id_is_daemon_fallback() {
        if !daemon_ids_equivalent(&intended_for.daemon_id, &drainer.daemon_id) {
            return false;
        }
        return match (nonempty(&intended_for.session_id), nonempty(&drainer.session_id)) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
    }
    intended_for.equals(drainer)
}

fn nonempty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

/// Routes a whole drain batch: [`route_event`] plus the in-batch duplicate guard
/// and the counters.
///
/// The enforce switch is fixed for the batch, so one drain is classified under one
/// policy. An event id delivered earlier in the batch (including by
/// re-attribution) counts as already drained for the rest of it.
#[derive(Debug)]
pub struct DrainRouter<'a> {
    drainer: &'a Drainer,
    address: Address,
    enforce: bool,
    /// Keys of the coordinators that are live, besides the drainer.
    live: HashSet<String>,
    delivered: HashSet<String>,
    counters: DrainCounters,
}

impl<'a> DrainRouter<'a> {
    /// A router for one drain by `drainer`.
    /// Nobody else counts as live, so every orphan on the drainer's machine is
    /// re-attributed, as in the original.
    pub fn new(drainer: &'a Drainer, enforce: bool) -> DrainRouter<'a> {
        DrainRouter::with_live(drainer, enforce, HashSet::new())
    }

    /// A router that leaves the unicasts of the `live` coordinators (by
    /// [`CoordinatorIdentity::key`]) to them.
    pub fn with_live(drainer: &'a Drainer, enforce: bool, live: HashSet<String>) -> DrainRouter<'a> {
        DrainRouter {
            drainer,
            address: drainer.address(),
            enforce,
            live,
            delivered: HashSet::new(),
            counters: DrainCounters::default(),
        }
    }

    /// Whether the coordinator with this key is live (the drainer itself always is).
    pub fn is_live(&self, key: &str) -> bool {
        key == self.address.key || self.live.contains(key)
    }

    /// Whether this drain takes a unicast addressed to `target` (by its own
    /// address or an alias's, or by re-attribution), before event-id dedup. Every
    /// event of one addressee gets the same answer.
    pub fn takes_unicast(&self, target: &Address) -> bool {
        self.drainer.route_unicast(target, &|key: &str| self.is_live(key)).0 == RouteDecision::Deliver
    }

    /// Routes the next event. `drained_before` answers whether an event id was
    /// drained before this drain started.
    pub fn route(&mut self, raw: &Value, drained_before: impl FnOnce(&str) -> bool) -> Routed {
        let (delivered, live) = (&self.delivered, &self.live);
        let routed = route_event_live(
            raw,
            self.drainer,
            self.enforce,
            |key| live.contains(key),
            |id| delivered.contains(id) || drained_before(id),
        );
        self.record(routed)
    }

    /// Routes the next event from its projection (a valid v2 event whose daemon
    /// target the caller has already checked).
    pub fn route_projected(
        &mut self,
        projected: &ProjectedRoute,
        drained_before: impl FnOnce(&str) -> bool,
    ) -> Routed {
        let (delivered, live) = (&self.delivered, &self.live);
        let routed = route_projected(
            projected,
            self.drainer,
            |key| live.contains(key),
            |id| delivered.contains(id) || drained_before(id),
        );
        self.record(routed)
    }

    fn record(&mut self, routed: Routed) -> Routed {
        if let Some(id) = routed.event_id.as_ref().filter(|_| routed.decision == RouteDecision::Deliver) {
            self.delivered.insert(id.clone());
        }
        if let Some(counter) = routed.counter {
            self.counters.bump(counter);
        }
        routed
    }

    /// The counters of the events routed so far.
    pub fn counters(&self) -> DrainCounters {
        self.counters
    }
}

/// Interprets the value of `MESH_PROTOCOL_V2_ENFORCE`: `1`, `true`, `on` or `yes`
/// (any case, surrounding whitespace ignored) switch enforce mode on; anything
/// else, or no value, leaves it off. The caller reads the environment.
pub fn enforce_from_env_value(value: Option<&str>) -> bool {
    value
        .map(|v| v.trim().to_ascii_lowercase())
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "on" | "yes"))
}

/// One of the drain counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrainCounter {
    /// A valid v2 event delivered by scope or address.
    V2Delivered,
    /// A valid v2 event left for another coordinator (or a system event).
    V2RoutedAway,
    /// A valid v2 event skipped because its event id was already drained.
    V2DedupSkipped,
    /// An invalid v2 event passed through (accept mode).
    V2ValidationFailedAccepted,
    /// A unicast event re-attributed to the drainer after a coordinator restart.
    V2ReattributedToDrainer,
    /// An unversioned event delivered as a broadcast (accept mode).
    V1BroadcastAccepted,
    /// An invalid v2 event quarantined (enforce mode).
    V2ValidationFailedQuarantined,
    /// An unversioned event quarantined (enforce mode).
    V1UnversionedQuarantined,
}

impl DrainCounter {
    /// Every counter, in the original's order.
    pub const ALL: [DrainCounter; 8] = [
        DrainCounter::V2Delivered,
        DrainCounter::V2RoutedAway,
        DrainCounter::V2DedupSkipped,
        DrainCounter::V2ValidationFailedAccepted,
        DrainCounter::V2ReattributedToDrainer,
        DrainCounter::V1BroadcastAccepted,
        DrainCounter::V2ValidationFailedQuarantined,
        DrainCounter::V1UnversionedQuarantined,
    ];

    /// The original's name for the counter (`v2Delivered`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            DrainCounter::V2Delivered => "v2Delivered",
            DrainCounter::V2RoutedAway => "v2RoutedAway",
            DrainCounter::V2DedupSkipped => "v2DedupSkipped",
            DrainCounter::V2ValidationFailedAccepted => "v2ValidationFailedAccepted",
            DrainCounter::V2ReattributedToDrainer => "v2ReattributedToDrainer",
            DrainCounter::V1BroadcastAccepted => "v1BroadcastAccepted",
            DrainCounter::V2ValidationFailedQuarantined => "v2ValidationFailedQuarantined",
            DrainCounter::V1UnversionedQuarantined => "v1UnversionedQuarantined",
        }
    }
}

/// The drain counters, serialized under the original's names (the `drain` object
/// of `meshProtocolV2Counters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainCounters {
    /// See [`DrainCounter::V2Delivered`].
    pub v2_delivered: u64,
    /// See [`DrainCounter::V2RoutedAway`].
    pub v2_routed_away: u64,
    /// See [`DrainCounter::V2DedupSkipped`].
    pub v2_dedup_skipped: u64,
    /// See [`DrainCounter::V2ValidationFailedAccepted`].
    pub v2_validation_failed_accepted: u64,
    /// See [`DrainCounter::V2ReattributedToDrainer`].
    pub v2_reattributed_to_drainer: u64,
    /// See [`DrainCounter::V1BroadcastAccepted`].
    pub v1_broadcast_accepted: u64,
    /// See [`DrainCounter::V2ValidationFailedQuarantined`].
    pub v2_validation_failed_quarantined: u64,
    /// See [`DrainCounter::V1UnversionedQuarantined`].
    pub v1_unversioned_quarantined: u64,
}

impl DrainCounters {
    fn slot(&mut self, counter: DrainCounter) -> &mut u64 {
        match counter {
            DrainCounter::V2Delivered => &mut self.v2_delivered,
            DrainCounter::V2RoutedAway => &mut self.v2_routed_away,
            DrainCounter::V2DedupSkipped => &mut self.v2_dedup_skipped,
            DrainCounter::V2ValidationFailedAccepted => &mut self.v2_validation_failed_accepted,
            DrainCounter::V2ReattributedToDrainer => &mut self.v2_reattributed_to_drainer,
            DrainCounter::V1BroadcastAccepted => &mut self.v1_broadcast_accepted,
            DrainCounter::V2ValidationFailedQuarantined => &mut self.v2_validation_failed_quarantined,
            DrainCounter::V1UnversionedQuarantined => &mut self.v1_unversioned_quarantined,
        }
    }

    /// The value of one counter.
    pub fn get(&self, counter: DrainCounter) -> u64 {
        match counter {
            DrainCounter::V2Delivered => self.v2_delivered,
            DrainCounter::V2RoutedAway => self.v2_routed_away,
            DrainCounter::V2DedupSkipped => self.v2_dedup_skipped,
            DrainCounter::V2ValidationFailedAccepted => self.v2_validation_failed_accepted,
            DrainCounter::V2ReattributedToDrainer => self.v2_reattributed_to_drainer,
            DrainCounter::V1BroadcastAccepted => self.v1_broadcast_accepted,
            DrainCounter::V2ValidationFailedQuarantined => self.v2_validation_failed_quarantined,
            DrainCounter::V1UnversionedQuarantined => self.v1_unversioned_quarantined,
        }
    }

    /// Adds one to a counter (saturating).
    pub fn bump(&mut self, counter: DrainCounter) {
        let slot = self.slot(counter);
        *slot = slot.saturating_add(1);
    }

    /// Adds every counter of `other` into `self` (saturating).
    pub fn merge(&mut self, other: &DrainCounters) {
        for counter in DrainCounter::ALL {
            let slot = self.slot(counter);
            *slot = slot.saturating_add(other.get(counter));
        }
    }

    /// The sum of all counters.
    pub fn total(&self) -> u64 {
        DrainCounter::ALL.into_iter().map(|c| self.get(c)).fold(0, u64::saturating_add)
    }
}

impl AddAssign for DrainCounters {
    fn add_assign(&mut self, other: DrainCounters) {
        self.merge(&other);
    }
}

impl Add for DrainCounters {
    type Output = DrainCounters;
    fn add(mut self, other: DrainCounters) -> DrainCounters {
        self.merge(&other);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn identity(daemon: &str, run: &str, session: Option<&str>) -> CoordinatorIdentity {
        CoordinatorIdentity::new(daemon, run, session.map(str::to_owned))
    }

    fn identity_json(identity: &CoordinatorIdentity) -> Value {
        serde_json::to_value(identity).unwrap()
    }

    fn v1_event() -> Value {
        json!({
            "event": "agent:generating_completed",
            "meshId": "mesh1",
            "nodeLabel": "n1",
            "metadataEvent": {"taskId": "t1"},
            "queuedAt": 1,
        })
    }

    /// A valid v2 event (given an addressee for a unicast). A broadcast is a
    /// progress event (`agent:ready`): a broadcast terminal event goes only to its
    /// dispatcher (see `a_broadcast_terminal_event_goes_only_to_its_dispatcher`).
    fn v2_event(event_id: &str, scope: &str, intended_for: Option<&CoordinatorIdentity>) -> Value {
        let mut value = v1_event();
        if scope == "broadcast" {
            value["event"] = json!("agent:ready");
        }
        value["protocolVersion"] = json!("2.0");
        value["eventId"] = json!(event_id);
        value["scope"] = json!(scope);
        value["dispatchedBy"] = identity_json(&identity("mach_X", "run_OLD", None));
        if let Some(target) = intended_for {
            value["intendedFor"] = identity_json(target);
        }
        value
    }

    fn unicast(event_id: &str, target: &CoordinatorIdentity) -> Value {
        v2_event(event_id, "unicast", Some(target))
    }

    #[track_caller]
    fn route(raw: &Value, drainer: &Drainer, enforce: bool) -> (RouteDecision, Option<DrainCounter>) {
        let routed = route_event(raw, drainer, enforce, |_| false);
        (routed.decision, routed.counter)
    }

    const DELIVER: RouteDecision = RouteDecision::Deliver;
    const AWAY: RouteDecision = RouteDecision::RoutedAway { reason: RoutedAwayReason::OtherCoordinator };

    #[test]
    fn unicast_to_its_addressee() {
        let me = identity("mach_X", "run1", Some("s1"));
        let drainer = Drainer::new(identity("daemon_mach_X", "run1", Some("s1")), &[]);
        assert_eq!(route(&unicast("e1", &me), &drainer, false), (DELIVER, Some(DrainCounter::V2Delivered)));
        assert_eq!(route(&unicast("e1", &me), &drainer, true), (DELIVER, Some(DrainCounter::V2Delivered)));
    }

    #[test]
    fn daemon_form_fallback_matches_across_id_forms() {
        let target = identity("daemon_mach_X", "daemon_mach_X", None);
        let drainer = Drainer::daemon_level(&["mach_X"]).unwrap();
        assert_eq!(drainer.identity(), &identity("mach_X", "mach_X", None));
        assert_eq!(
            route(&unicast("e1", &target), &drainer, false),
            (DELIVER, Some(DrainCounter::V2Delivered))
        );
        // A session-less daemon-level drainer takes any session's unicast.
        let with_session = identity("mach_X", "mach_X", Some("s9"));
        assert_eq!(route(&unicast("e1", &with_session), &drainer, false).0, DELIVER);
    }

    #[test]
    fn sibling_session_unicast_is_routed_away() {
        let target = identity("mach_X", "mach_X", Some("s1"));
        let sibling = Drainer::new(identity("standalone_mach_X", "mach_X", Some("s2")), &[]);
        assert_eq!(route(&unicast("e1", &target), &sibling, false), (AWAY, Some(DrainCounter::V2RoutedAway)));
        let owner = Drainer::new(identity("standalone_mach_X", "mach_X", Some("s1")), &[]);
        assert_eq!(route(&unicast("e1", &target), &owner, false).0, DELIVER);
    }

    #[test]
    fn restarted_coordinator_inherits_its_unicasts_on_the_same_machine() {
        let old = identity("mach_X", "run_OLD", Some("s1"));
        let new = Drainer::new(identity("daemon_mach_X", "run_NEW", Some("s1")), &[]);
        assert_eq!(
            route(&unicast("e1", &old), &new, false),
            (DELIVER, Some(DrainCounter::V2ReattributedToDrainer))
        );
        assert_eq!(
            route(&unicast("e1", &old), &new, true),
            (DELIVER, Some(DrainCounter::V2ReattributedToDrainer))
        );
        // A daemon-level drainer on that machine inherits it too.
        let daemon = Drainer::daemon_level(&["mach_X"]).unwrap();
        assert_eq!(
            route(&unicast("e1", &old), &daemon, false).1,
            Some(DrainCounter::V2ReattributedToDrainer)
        );
    }

    #[test]
    fn a_live_addressee_keeps_its_unicasts() {
        let old = identity("mach_X", "run_OLD", Some("s1"));
        let new = Drainer::new(identity("daemon_mach_X", "run_NEW", Some("s2")), &[]);
        let raw = unicast("e1", &old);
        let live = |key: &str| key == old.key();
        let routed = route_event_live(&raw, &new, false, live, |_| false);
        assert_eq!((routed.decision, routed.counter), (AWAY, Some(DrainCounter::V2RoutedAway)));
        // Its own drain still gets it; once it is not live the other run inherits it.
        let own = Drainer::new(old.clone(), &[]);
        assert_eq!(route_event_live(&raw, &own, false, live, |_| false).decision, DELIVER);
        let routed = route_event_live(&raw, &new, false, |_| false, |_| false);
        assert_eq!(routed.counter, Some(DrainCounter::V2ReattributedToDrainer));
        // A router told who is live agrees.
        let mut router = DrainRouter::with_live(&new, false, HashSet::from([old.key()]));
        assert_eq!(router.route(&raw, |_| false).decision, AWAY);
        assert!(router.is_live(&old.key()) && router.is_live(&new.identity().key()));
    }

    #[test]
    fn the_projection_routes_as_the_whole_event_does() {
        let me = identity("mach_X", "run1", Some("s1"));
        let drainers = [
            Drainer::new(me.clone(), &[]),
            Drainer::new(identity("mach_X", "run2", None), &[]),
            Drainer::new(identity("mach_X", "mach_X", Some("s2")), &[]),
            Drainer::daemon_level(&["mach_X"]).unwrap(),
            Drainer::new(identity("mach_Y", "run1", Some("s1")), &[]),
        ];
        let events = [
            unicast("e1", &me),
            unicast("e2", &identity("daemon_mach_X", "mach_X", Some("s1"))),
            unicast("e3", &identity("mach_X", "mach_X", None)),
            unicast("e4", &identity("daemon_", "run1", None)),
            v2_event("e5", "broadcast", None),
            v2_event("e6", "system", None),
        ];
        for raw in &events {
            let projected = project_route(raw).expect("a valid v2 event");
            for drainer in &drainers {
                for live in [false, true] {
                    let whole = route_event_live(raw, drainer, true, |_| live, |_| false);
                    let from_projection = route_projected(&projected, drainer, |_| live, |_| false);
                    assert_eq!(whole, from_projection, "{raw} for {drainer:?}, live={live}");
                }
            }
        }
        assert_eq!(project_route(&v1_event()), None);
        assert_eq!(project_route(&v2_event("e1", "unicast", None)), None, "invalid: no addressee");
    }

    #[test]
    fn re_attribution_never_crosses_machines() {
        let old = identity("mach_X", "run_OLD", None);
        let elsewhere = Drainer::new(identity("mach_Y", "run_NEW", None), &[]);
        assert_eq!(route(&unicast("e1", &old), &elsewhere, false), (AWAY, Some(DrainCounter::V2RoutedAway)));
        let daemon_elsewhere = Drainer::daemon_level(&["mach_Y"]).unwrap();
        assert_eq!(route(&unicast("e1", &old), &daemon_elsewhere, false).0, AWAY);
    }

    #[test]
    fn v1_events_broadcast_in_accept_mode_and_are_quarantined_in_enforce_mode() {
        let drainer = Drainer::daemon_level(&["mach_X"]).unwrap();
        assert_eq!(route(&v1_event(), &drainer, false), (DELIVER, Some(DrainCounter::V1BroadcastAccepted)));
        let quarantined = RouteDecision::Quarantine { reason: QuarantineReason::Unversioned };
        assert_eq!(
            route(&v1_event(), &drainer, true),
            (quarantined, Some(DrainCounter::V1UnversionedQuarantined))
        );
        // Version "1.0" and the number 2.0 are unversioned for routing.
        let mut numeric = v2_event("e1", "broadcast", None);
        numeric["protocolVersion"] = json!(2.0);
        assert_eq!(route(&numeric, &drainer, false).1, Some(DrainCounter::V1BroadcastAccepted));
        let mut one = v2_event("e1", "broadcast", None);
        one["protocolVersion"] = json!("1.0");
        assert_eq!(route(&one, &drainer, true).0, quarantined);
        assert_eq!(QuarantineReason::Unversioned.as_str(), "v2_enforce_unversioned_quarantined");
    }

    #[test]
    fn invalid_v2_events_pass_in_accept_mode_and_are_quarantined_in_enforce_mode() {
        let drainer = Drainer::daemon_level(&["mach_X"]).unwrap();
        let invalid = v2_event("e1", "unicast", None);
        let accepted =
            route_event(&invalid, &drainer, false, |_| panic!("dedup is not asked for invalid events"));
        assert_eq!(accepted.decision, DELIVER);
        assert_eq!(accepted.counter, Some(DrainCounter::V2ValidationFailedAccepted));
        assert_eq!(accepted.violation.as_ref().map(|v| v.path.as_str()), Some("$.intendedFor"));
        assert_eq!(accepted.event_id, None);
        let held = route_event(&invalid, &drainer, true, |_| false);
        assert_eq!(held.decision, RouteDecision::Quarantine { reason: QuarantineReason::ValidationFailed });
        assert_eq!(held.counter, Some(DrainCounter::V2ValidationFailedQuarantined));
        assert!(held.violation.is_some());
        assert_eq!(QuarantineReason::ValidationFailed.as_str(), "v2_enforce_validation_failed_quarantined");
    }

    #[test]
    fn broadcast_goes_to_everyone_and_system_to_no_one() {
        let drainer = Drainer::new(identity("mach_Q", "run1", Some("s1")), &[]);
        assert_eq!(
            route(&v2_event("e1", "broadcast", None), &drainer, true),
            (DELIVER, Some(DrainCounter::V2Delivered))
        );
        let system = RouteDecision::RoutedAway { reason: RoutedAwayReason::SystemScope };
        assert_eq!(
            route(&v2_event("e2", "system", None), &drainer, false),
            (system, Some(DrainCounter::V2RoutedAway))
        );
        let owner = Drainer::new(identity("mach_X", "run_OLD", None), &[]);
        assert_eq!(route(&v2_event("e2", "system", None), &owner, false).0, system);
    }

    #[test]
    fn a_broadcast_terminal_event_goes_only_to_its_dispatcher() {
        let mut raw = v2_event("e1", "broadcast", None);
        raw["event"] = json!("refine:completed");
        assert_eq!(project_route(&raw), None, "routed from the whole event");
        let dispatcher = Drainer::new(identity("daemon_mach_X", "run_OLD", None), &[]);
        assert_eq!(route(&raw, &dispatcher, false), (DELIVER, Some(DrainCounter::V2Delivered)));
        for other in [
            Drainer::new(identity("mach_X", "run_NEW", None), &[]),
            Drainer::new(identity("mach_Y", "run_OLD", None), &[]),
            Drainer::daemon_level(&["mach_Y"]).unwrap(),
        ] {
            assert_eq!(route(&raw, &other, false), (AWAY, Some(DrainCounter::V2RoutedAway)), "{other:?}");
        }
        // A self-fallback stamp belongs to its machine, whoever drains there.
        raw["dispatchedBy"] = identity_json(&identity("mach_X", "mach_X", None));
        raw["dispatchedBySelfFallback"] = json!(true);
        let same_machine = Drainer::new(identity("standalone_mach_X", "run_NEW", Some("s2")), &[]);
        assert_eq!(route(&raw, &same_machine, false).0, DELIVER);
        let elsewhere = Drainer::new(identity("mach_Y", "run_NEW", None), &[]);
        assert_eq!(route(&raw, &elsewhere, false).0, AWAY);
        // Also through an id the drainer answers to.
        let aliased = Drainer::new(identity("mach_Y", "run_NEW", None), &["standalone_mach_X"]);
        assert_eq!(route(&raw, &aliased, false).0, DELIVER);
        assert_eq!(
            route_event(&raw, &dispatcher, false, |id| id == "e1").decision,
            RouteDecision::DedupSkipped
        );
    }

    #[test]
    fn a_drainer_takes_the_unicasts_of_the_ids_it_also_answers_to() {
        let drainer = Drainer::new(identity("mach_A", "run1", None), &["standalone_X", "daemon_mach_A", "X"]);
        assert_eq!(drainer.aliases(), [identity("standalone_X", "standalone_X", None)]);
        assert_eq!(drainer.machines(), ["mach_A", "X"]);
        assert_eq!(
            route(&unicast("e1", &identity("standalone_X", "standalone_X", None)), &drainer, false).0,
            DELIVER
        );
        assert_eq!(route(&unicast("e2", &identity("X", "X", None)), &drainer, false).0, DELIVER);
        let live_elsewhere = identity("X", "run_X", None);
        let routed = route_event_live(&unicast("e3", &live_elsewhere), &drainer, false, |_| true, |_| false);
        assert_eq!(routed.decision, AWAY, "a live run on that machine keeps its unicasts");
        assert_eq!(route(&unicast("e4", &identity("mach_Y", "mach_Y", None)), &drainer, false).0, AWAY);
    }

    #[test]
    fn already_drained_event_ids_are_skipped() {
        let drainer = Drainer::daemon_level(&["mach_X"]).unwrap();
        let raw = v2_event("e1", "broadcast", None);
        let routed = route_event(&raw, &drainer, false, |id| id == "e1");
        assert_eq!(routed.decision, RouteDecision::DedupSkipped);
        assert_eq!(routed.counter, Some(DrainCounter::V2DedupSkipped));
        assert_eq!(routed.event_id.as_deref(), Some("e1"));
        // Dedup runs before scope routing: even a system event is skipped.
        let routed = route_event(&v2_event("e1", "system", None), &drainer, false, |_| true);
        assert_eq!(routed.decision, RouteDecision::DedupSkipped);
    }

    #[test]
    fn events_targeted_at_another_daemon_are_not_this_drainers() {
        let drainer = Drainer::daemon_level(&["mach_X"]).unwrap();
        let mut raw = v1_event();
        raw["targetCoordinatorDaemonId"] = json!("daemon_mach_Y");
        let routed = route_event(&raw, &drainer, true, |_| false);
        assert_eq!(routed.decision, RouteDecision::RoutedAway { reason: RoutedAwayReason::OtherDaemon });
        assert_eq!(routed.counter, None);
        raw["targetCoordinatorDaemonId"] = json!("standalone_mach_X");
        assert_eq!(route(&raw, &drainer, false).0, DELIVER);
        raw["targetCoordinatorDaemonId"] = json!("  ");
        assert_eq!(route(&raw, &drainer, false).0, DELIVER, "a blank target is no target");
    }

    #[test]
    fn drainer_forms() {
        let drainer = Drainer::new(identity("daemon_mach_X", "run1", None), &["inst_7"]);
        assert_eq!(drainer.daemon_forms(), ["daemon_mach_X", "inst_7", "mach_X", "standalone_mach_X"]);
        assert!(drainer.takes_target(Some("inst_7")));
        assert!(drainer.takes_target(None));
        assert!(!drainer.takes_target(Some("mach_Y")));
        assert_eq!(Drainer::daemon_level(&[" ", ""]), None);
    }

    #[test]
    fn batch_router_guards_duplicates_within_the_batch_and_counts() {
        let drainer = Drainer::daemon_level(&["mach_X"]).unwrap();
        let mut router = DrainRouter::new(&drainer, false);
        let raw = v2_event("e1", "broadcast", None);
        assert_eq!(router.route(&raw, |_| false).decision, DELIVER);
        assert_eq!(router.route(&raw, |_| false).decision, RouteDecision::DedupSkipped);
        assert_eq!(
            router.route(&v2_event("e0", "broadcast", None), |id| id == "e0").decision,
            RouteDecision::DedupSkipped
        );
        let other = identity("mach_Y", "run1", None);
        assert_eq!(router.route(&unicast("e2", &other), |_| false).decision, AWAY);
        // A routed-away id is not remembered: its own drainer must still get it.
        assert_eq!(router.route(&unicast("e2", &other), |_| false).decision, AWAY);
        router.route(&v1_event(), |_| false);
        router.route(&v1_event(), |_| false);
        let counters = router.counters();
        assert_eq!(counters.v2_delivered, 1);
        assert_eq!(counters.v2_dedup_skipped, 2);
        assert_eq!(counters.v2_routed_away, 2);
        assert_eq!(counters.v1_broadcast_accepted, 2);
        assert_eq!(counters.total(), 7);
    }

    #[test]
    fn re_attributed_ids_count_as_delivered_in_the_batch() {
        let drainer = Drainer::daemon_level(&["mach_X"]).unwrap();
        let mut router = DrainRouter::new(&drainer, false);
        let raw = unicast("e1", &identity("mach_X", "run_OLD", None));
        assert_eq!(router.route(&raw, |_| false).counter, Some(DrainCounter::V2ReattributedToDrainer));
        assert_eq!(router.route(&raw, |_| false).decision, RouteDecision::DedupSkipped);
    }

    #[test]
    fn enforce_values() {
        for on in ["1", "true", "TRUE", " On ", "yes", "Yes"] {
            assert!(enforce_from_env_value(Some(on)), "{on}");
        }
        for off in ["0", "false", "off", "no", "", "  ", "enabled", "2"] {
            assert!(!enforce_from_env_value(Some(off)), "{off}");
        }
        assert!(!enforce_from_env_value(None));
    }

    #[test]
    fn counters_merge_and_serialize_under_the_original_names() {
        let mut a = DrainCounters::default();
        a.bump(DrainCounter::V2Delivered);
        a.bump(DrainCounter::V1UnversionedQuarantined);
        let mut b = DrainCounters::default();
        b.bump(DrainCounter::V2Delivered);
        b.bump(DrainCounter::V2ReattributedToDrainer);
        let sum = a + b;
        assert_eq!(sum.get(DrainCounter::V2Delivered), 2);
        assert_eq!(sum.total(), 4);
        a += b;
        assert_eq!(a, sum);
        let value = serde_json::to_value(sum).unwrap();
        for counter in DrainCounter::ALL {
            assert_eq!(value[counter.as_str()], json!(sum.get(counter)), "{}", counter.as_str());
        }
        assert_eq!(value.as_object().unwrap().len(), 8);
    }
}
