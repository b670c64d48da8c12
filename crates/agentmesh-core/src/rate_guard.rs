//! The tool-call rate guard: a coordinator that calls one tool too often within a
//! sliding window is told to wait for events instead of polling.

/// Window and limit of the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateGuard {
    /// Sliding window in milliseconds (10 s by default).
    pub window_ms: i64,
    /// Calls allowed within the window (5 by default); the next one trips the guard.
    pub max_calls: u32,
}

impl Default for RateGuard {
    fn default() -> RateGuard {
        RateGuard { window_ms: 10_000, max_calls: 5 }
    }
}

/// Recorded calls between two sweeps of old rows.
pub const SWEEP_EVERY_CALLS: u64 = 200;

impl RateGuard {
    /// Rows older than this many milliseconds are swept: ten windows, at least a
    /// minute.
    pub fn retention_ms(self) -> i64 {
        (self.window_ms * 10).max(60_000)
    }

    /// The verdict for `calls_in_window` calls of `tool` (this one included).
    pub fn verdict(self, mesh_id: &str, tool: &str, calls_in_window: u64) -> RateVerdict {
        let exceeded = calls_in_window > u64::from(self.max_calls);
        RateVerdict {
            rate_limit_exceeded: exceeded,
            calls_in_window,
            advisory: exceeded.then(|| {
                format!(
                    "Rate limit: {tool} called {calls_in_window} times in the last {}s for mesh {mesh_id}. \
                     Wait for events (wait_for_mesh_events) or an explicit user status request before calling \
                     again.",
                    seconds(self.window_ms)
                )
            }),
        }
    }
}

/// Seconds as JavaScript would print `ms / 1000`.
fn seconds(ms: i64) -> String {
    if ms % 1000 == 0 { (ms / 1000).to_string() } else { format!("{}", ms as f64 / 1000.0) }
}

/// Who made a tool call, as the call log records it: `coordinator`, `worker`, or
/// `unknown` (the original's log knows `coordinator` and `unknown`; agentmesh
/// also tells its worker sessions apart).
pub const CALLER_ROLES: [&str; 3] = ["coordinator", "worker", "unknown"];

/// Checks a caller role given for `field`, returning it trimmed.
pub fn caller_role(field: &str, role: &str) -> Result<String, crate::InvalidInput> {
    let role = role.trim();
    if CALLER_ROLES.contains(&role) {
        Ok(role.to_owned())
    } else {
        Err(crate::InvalidInput::new(
            field,
            format!("unknown caller role {role:?} (expected coordinator, worker or unknown)"),
        ))
    }
}

/// Checks a tool call the guard is to record: the tool is named, and a caller
/// role given is one of [`CALLER_ROLES`]. Returns the role trimmed.
pub fn check_call(tool: &str, caller_role: Option<&str>) -> Result<Option<String>, crate::InvalidInput> {
    crate::InvalidInput::non_blank("tool", tool)?;
    caller_role.map(|role| self::caller_role("callerRole", role)).transpose()
}

/// What the guard says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateVerdict {
    /// More calls than allowed within the window.
    pub rate_limit_exceeded: bool,
    /// Calls within the window, this one included.
    pub calls_in_window: u64,
    /// The text to show the caller when the guard tripped.
    pub advisory: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_names_its_tool_and_a_known_role() {
        assert_eq!(check_call("mesh_status", None), Ok(None));
        assert_eq!(check_call("mesh_status", Some(" worker ")), Ok(Some("worker".to_owned())));
        assert_eq!(check_call("  ", None).unwrap_err().field, "tool");
        assert_eq!(check_call("mesh_status", Some("boss")).unwrap_err().field, "callerRole");
    }

    #[test]
    fn the_sixth_call_in_the_window_trips_the_guard() {
        let g = RateGuard::default();
        assert!(!g.verdict("m", "mesh_status", 5).rate_limit_exceeded);
        let v = g.verdict("m", "mesh_status", 6);
        assert!(v.rate_limit_exceeded);
        assert_eq!(
            v.advisory.unwrap(),
            "Rate limit: mesh_status called 6 times in the last 10s for mesh m. Wait for events \
             (wait_for_mesh_events) or an explicit user status request before calling again."
        );
        assert_eq!(
            RateGuard { window_ms: 1_500, max_calls: 1 }.verdict("m", "t", 2).advisory.unwrap()[..40].len(),
            40
        );
        assert_eq!(g.retention_ms(), 100_000);
    }
}
