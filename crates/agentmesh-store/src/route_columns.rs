//! The routing columns of a stored inbox event and its lane: who may take it.
//!
//! The encoding both backends store (`route_class`, `to_machine`, `to_key`,
//! `to_fallback`, `to_session`, `lane`), so a drain reads the same lanes on
//! either and `agentmesh migrate` copies the columns as they are.

use agentmesh_core::daemon_id::machine_core;
use agentmesh_core::events::{Address, ProjectedRoute, RouteClass};

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
