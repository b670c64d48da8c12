//! The routing columns of a stored inbox event and its lane: who may take it.
//!
//! The encoding both backends store (`route_class`, `to_machine`, `to_key`,
//! `to_fallback`, `to_session`, `lane`), so a drain reads the same lanes on
//! either and `agentmesh migrate` copies the columns as they are.

use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::{
    Address, PendingEvent, ProjectedRoute, RouteClass, pending_event_fingerprint, project_route,
};

/// `route_class` values. 0, the column's default: routed from the payload.
pub const CLASS_PAYLOAD: i64 = 0;
/// A broadcast.
pub const CLASS_BROADCAST: i64 = 1;
/// A system-scope event, for no coordinator.
pub const CLASS_SYSTEM: i64 = 2;
/// A unicast to one coordinator.
pub const CLASS_UNICAST: i64 = 3;
/// An event addressed to nobody.
pub const CLASS_UNADDRESSED: i64 = 4;

/// The lane prefix of a unicast: the addressee's key follows, which starts with
/// its machine core and `|`.
pub const UNICAST_LANE: &str = "u:";

/// The lane prefix of any other event targeted at a daemon: the target's machine
/// core follows.
pub const TARGET_LANE: &str = "@";

/// A [`ProjectedRoute`] as the columns of `mesh_pending_events` hold it (the
/// event id lives in `event_id`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteColumns {
    /// `route_class`.
    pub class: i64,
    /// `to_machine`: the addressee's machine core (`''` when its id names none).
    pub machine: Option<String>,
    /// `to_key`: the addressee's key.
    pub key: Option<String>,
    /// `to_fallback`: the addressee's run is its daemon's fallback.
    pub fallback: bool,
    /// `to_session`: the addressee's session.
    pub session: Option<String>,
}

impl RouteColumns {
    /// The columns of an event routed as `projected` (`None`: from its payload).
    pub fn of(projected: Option<&ProjectedRoute>) -> RouteColumns {
        let Some(projected) = projected else { return RouteColumns::default() };
        let class = match &projected.class {
            RouteClass::Broadcast => CLASS_BROADCAST,
            RouteClass::System => CLASS_SYSTEM,
            RouteClass::Unaddressed => CLASS_UNADDRESSED,
            RouteClass::Unicast(to) => {
                return RouteColumns {
                    class: CLASS_UNICAST,
                    // A daemon id that names no machine matches no drainer: '' is
                    // no drainer's machine.
                    machine: Some(to.machine.clone().unwrap_or_default()),
                    key: Some(to.key.clone()),
                    fallback: to.run_is_daemon_fallback,
                    session: to.session.clone(),
                };
            }
        };
        RouteColumns { class, ..RouteColumns::default() }
    }

    /// The row's lane: who may take it. `target` is the row's daemon target
    /// (trimmed, non-blank).
    pub fn lane(&self, target: Option<&str>) -> String {
        match (&self.key, target) {
            (Some(key), _) if self.class == CLASS_UNICAST => format!("{UNICAST_LANE}{key}"),
            (_, Some(target)) => format!("{TARGET_LANE}{}", machine_core(target).unwrap_or(target)),
            _ => String::new(),
        }
    }

    /// The projection back, given the row's event id; `None` for rows routed
    /// from their payload.
    pub fn projected(self, event_id: Option<String>) -> Option<ProjectedRoute> {
        let event_id = event_id?;
        let class = match self.class {
            CLASS_BROADCAST => RouteClass::Broadcast,
            CLASS_SYSTEM => RouteClass::System,
            CLASS_UNADDRESSED => RouteClass::Unaddressed,
            CLASS_UNICAST => RouteClass::Unicast(Address {
                machine: self.machine.filter(|m| !m.is_empty()),
                key: self.key?,
                run_is_daemon_fallback: self.fallback,
                session: self.session,
            }),
            _ => return None,
        };
        Some(ProjectedRoute { event_id, class })
    }
}

/// What both backends store of a queued event beside its id and mesh: the
/// whole event as JSON text, and the columns a drain reads without parsing it
/// (its daemon target, fingerprint, event id, addressee, routing and lane).
#[derive(Debug, Clone, PartialEq)]
pub struct EventColumns {
    /// `coordinator_daemon_id`: the daemon target, trimmed, when not blank.
    pub target: Option<String>,
    /// `event`: its name.
    pub event: String,
    /// `payload`: the whole event, as JSON text (each backend stores it its way).
    pub payload: String,
    /// `fingerprint`, when the event has one.
    pub fingerprint: Option<String>,
    /// `queued_at`, in milliseconds.
    pub queued_at: i64,
    /// `event_id`: the projected route's, else the envelope's.
    pub event_id: Option<String>,
    /// `intended_for`: the addressee's identity as JSON text.
    pub intended_for: Option<String>,
    /// The routing columns.
    pub route: RouteColumns,
    /// `lane`: who may take it ([`RouteColumns::lane`]).
    pub lane: String,
}

impl EventColumns {
    /// The columns of `ev`.
    pub fn of(ev: &PendingEvent) -> EventColumns {
        let fingerprint = pending_event_fingerprint(ev);
        let value = ev.to_value();
        let projected = project_route(&value);
        let route = RouteColumns::of(projected.as_ref());
        let event_id = match projected {
            Some(p) => Some(p.event_id),
            None => ev.envelope.event_id.clone(),
        };
        let target = ev.target_coordinator_daemon_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let lane = route.lane(target);
        EventColumns {
            target: target.map(str::to_owned),
            event: ev.event.clone(),
            payload: value.to_string(),
            fingerprint: (!fingerprint.is_empty()).then_some(fingerprint),
            queued_at: ev.queued_at.millis(),
            event_id,
            intended_for: ev.envelope.intended_for.as_ref().map(|i| i.to_json().to_string()),
            route,
            lane,
        }
    }
}
