//! Retention: how long finished work stays in the hot database before it
//! moves to the archive, where the product still reads it.
//!
//! A policy has one window per kind of row. A finished task (completed,
//! failed or cancelled) whose last change is older than the tasks window
//! moves to the archive, its dependency edges with it. Ledger entries older
//! than the ledger window move too, oldest first in sequence order, and never
//! past an entry a durable follower (a webhook subscription) has not passed.
//! Drained inbox events older than the events window are deleted: they were
//! delivered, and the change each one announced is in the ledger. Nothing
//! else is archived or deleted by a policy: never a pending or assigned task,
//! never an undrained event.
//!
//! The daemon has one policy ([`RetentionPolicy`]); a mesh may override the
//! task and ledger windows ([`MeshRetention`]). A window is written as a
//! duration (`7d`, `36h`, `90m`, `45s`, `500ms`, or parts together: `1d12h`)
//! or `off` (kept forever).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{InvalidInput, LedgerEntry, TaskStatus, Timestamp};

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// The longest window: about 100 years, so that `now` minus a window stays a
/// time.
const MAX_WINDOW_MS: u64 = 36_500 * DAY;

/// How long rows of one kind stay in the hot database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// Kept forever.
    Off,
    /// Kept this many milliseconds (at least one).
    After(u64),
}

impl Window {
    /// The window of `days` days.
    pub const fn days(days: u64) -> Window {
        Window::After(days * DAY)
    }

    /// Parses `7d`, `36h`, `90m`, `45s`, `500ms`, parts written together
    /// (`1d12h`), or `off`. A zero or an unknown unit is refused, naming
    /// `field`.
    pub fn parse(field: &str, text: &str) -> Result<Window, InvalidInput> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(Window::Off);
        }
        let bad = |problem: &str| {
            InvalidInput::new(field, format!("{problem}: {text:?}; write for example 7d, 36h, 90m or off"))
        };
        if text.is_empty() {
            return Err(bad("is empty"));
        }
        let mut total: u64 = 0;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            if digits == 0 {
                return Err(bad("needs a number before each unit"));
            }
            let number: u64 = rest[..digits].parse().map_err(|_| bad("is too long"))?;
            rest = &rest[digits..];
            let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
            let unit = match &rest[..unit_len] {
                "ms" => 1,
                "s" => SECOND,
                "m" => MINUTE,
                "h" => HOUR,
                "d" => DAY,
                "" => return Err(bad("needs a unit (ms, s, m, h or d)")),
                _ => return Err(bad("has an unknown unit")),
            };
            rest = &rest[unit_len..];
            total = number
                .checked_mul(unit)
                .and_then(|ms| total.checked_add(ms))
                .ok_or_else(|| bad("is too long"))?;
        }
        if total == 0 {
            return Err(bad("must be more than zero (off keeps rows forever)"));
        }
        if total > MAX_WINDOW_MS {
            return Err(bad("is longer than 100 years (off keeps rows forever)"));
        }
        Ok(Window::After(total))
    }

    /// The instant before which a row has outlived this window at `now`;
    /// `None` when the window is off.
    pub fn cutoff(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            Window::Off => None,
            Window::After(ms) => Some(Timestamp::from_millis(now.millis() - ms as i64)),
        }
    }
}

impl fmt::Display for Window {
    /// `off`, or the largest units that add up to the window (`1d12h`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Window::After(mut ms) = *self else { return f.write_str("off") };
        for (unit, suffix) in [(DAY, "d"), (HOUR, "h"), (MINUTE, "m"), (SECOND, "s"), (1, "ms")] {
            if ms >= unit {
                write!(f, "{}{suffix}", ms / unit)?;
                ms %= unit;
            }
        }
        Ok(())
    }
}

impl Serialize for Window {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Window {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Window, D::Error> {
        let text = String::deserialize(deserializer)?;
        Window::parse("window", &text).map_err(|e| serde::de::Error::custom(e.problem))
    }
}

impl schemars::JsonSchema for Window {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RetentionWindow".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A duration such as 7d, 36h or 90m (units ms, s, m, h, d; parts together: 1d12h), or off (kept forever)",
            "examples": ["7d", "30d", "off"]
        })
    }
}

/// The daemon's retention policy: one window per kind of row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPolicy {
    /// Finished tasks (completed, failed, cancelled), from their last change.
    pub tasks: Window,
    /// Ledger entries, from their time.
    pub ledger: Window,
    /// Drained inbox events, from when they were queued (deleted, not
    /// archived: the ledger holds the change each announced).
    pub events: Window,
}

impl Default for RetentionPolicy {
    /// Finished tasks 7 days, ledger entries 30 days, drained events 1 day.
    fn default() -> RetentionPolicy {
        RetentionPolicy { tasks: Window::days(7), ledger: Window::days(30), events: Window::days(1) }
    }
}

impl RetentionPolicy {
    /// This policy with a mesh's own windows in place of the daemon's.
    pub fn with(self, mesh: &MeshRetention) -> RetentionPolicy {
        RetentionPolicy {
            tasks: mesh.tasks.unwrap_or(self.tasks),
            ledger: mesh.ledger.unwrap_or(self.ledger),
            events: mesh.events.unwrap_or(self.events),
        }
    }
}

/// A mesh's own windows; an absent one is the daemon's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeshRetention {
    /// Finished tasks of the mesh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Window>,
    /// Ledger entries of the mesh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<Window>,
    /// Drained inbox events of the mesh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Window>,
}

impl MeshRetention {
    /// Whether the mesh follows the daemon's policy in everything.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_none() && self.ledger.is_none() && self.events.is_none()
    }

    /// Before when the mesh's drained events go, at `now`: its own window's
    /// cutoff, else `daemon` (the daemon's); `None` when its own window is off.
    pub fn drained_cutoff(&self, daemon: Timestamp, now: Timestamp) -> Option<Timestamp> {
        match self.events {
            Some(window) => window.cutoff(now),
            None => Some(daemon),
        }
    }
}

/// The statuses a task may be archived in: the finished ones.
pub const ARCHIVABLE: [TaskStatus; 3] = [TaskStatus::Completed, TaskStatus::Failed, TaskStatus::Cancelled];

/// Whether a task in `status`, last changed at `updated_at` (ISO), has
/// outlived `window` at `now`. A time that does not parse is never expired.
pub fn task_expired(status: TaskStatus, updated_at: &str, window: Window, now: Timestamp) -> bool {
    let Some(cutoff) = window.cutoff(now) else { return false };
    ARCHIVABLE.contains(&status) && Timestamp::parse_iso(updated_at).is_some_and(|at| at < cutoff)
}

/// The ledger kind of a change to a mesh's own windows.
pub const RETENTION_CHANGED: &str = "retention_changed";

/// The ledger entry of a mesh's own windows set to `windows` (an empty set:
/// the daemon's again).
pub fn changed_entry(mesh_id: &str, windows: &MeshRetention, id: String, now: Timestamp) -> LedgerEntry {
    LedgerEntry {
        id,
        mesh_id: mesh_id.to_owned(),
        timestamp: now.iso(),
        kind: RETENTION_CHANGED.to_owned(),
        node_id: None,
        session_id: None,
        provider_type: None,
        payload: serde_json::json!({ "retention": windows }),
    }
}

/// Where an export of a mesh's archive got to: the archive's own order of its
/// tasks and the ledger's sequence. Dropping through a mark removes what an
/// export up to it wrote out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveMark {
    /// The last archived task exported, in archive order (0: none).
    pub tasks_through: u64,
    /// The sequence number of the last archived ledger entry exported (0: none).
    pub ledger_through: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_units_and_parts_and_print_back() {
        let parse = |t| Window::parse("tasks", t).unwrap();
        assert_eq!(parse("7d"), Window::After(7 * DAY));
        assert_eq!(parse("36h"), Window::After(36 * HOUR));
        assert_eq!(parse("1d12h"), Window::After(36 * HOUR));
        assert_eq!(parse("500ms"), Window::After(500));
        assert_eq!(parse(" OFF "), Window::Off);
        assert_eq!(parse("36h").to_string(), "1d12h");
        assert_eq!(parse("90m").to_string(), "1h30m");
        assert_eq!(Window::Off.to_string(), "off");
        assert_eq!(parse("1500ms").to_string(), "1s500ms");
    }

    #[test]
    fn bad_windows_are_refused_naming_the_field() {
        for bad in ["", "0d", "7", "d", "7w", "-1d", "1.5d", "99999999999999999999d", "36600d", "7d off"] {
            let err = Window::parse("ledger", bad).unwrap_err();
            assert_eq!(err.field, "ledger", "{bad:?}");
            assert!(err.problem.contains("off"), "{bad:?}: {}", err.problem);
        }
    }

    #[test]
    fn windows_read_and_write_as_strings() {
        let policy: MeshRetention = serde_json::from_str(r#"{"tasks":"3d","ledger":"off"}"#).unwrap();
        assert_eq!(
            policy,
            MeshRetention { tasks: Some(Window::days(3)), ledger: Some(Window::Off), events: None }
        );
        assert_eq!(serde_json::to_string(&policy).unwrap(), r#"{"tasks":"3d","ledger":"off"}"#);
        assert!(serde_json::from_str::<MeshRetention>(r#"{"tasks":"soon"}"#).is_err());
        assert!(serde_json::from_str::<MeshRetention>(r#"{"drained":"1d"}"#).is_err());
        let events: MeshRetention = serde_json::from_str(r#"{"events":"2h"}"#).unwrap();
        assert_eq!(
            events,
            MeshRetention { events: Some(Window::After(2 * HOUR)), ..MeshRetention::default() }
        );
        assert!(serde_json::from_str::<MeshRetention>(r#"{"tasks":7}"#).is_err());
    }

    #[test]
    fn a_mesh_overrides_the_daemons_windows_it_names() {
        let daemon = RetentionPolicy::default();
        let mesh = MeshRetention { tasks: Some(Window::days(1)), ..MeshRetention::default() };
        let policy = daemon.with(&mesh);
        assert_eq!(policy.tasks, Window::days(1));
        assert_eq!(policy.ledger, Window::days(30));
        assert_eq!(policy.events, Window::days(1));
        assert_eq!(daemon.with(&MeshRetention::default()), daemon);
        let quiet = MeshRetention { events: Some(Window::Off), ..MeshRetention::default() };
        assert_eq!(daemon.with(&quiet).events, Window::Off);
        let now = Timestamp::from_millis(10 * DAY as i64);
        let daemons = Timestamp::from_millis(9 * DAY as i64);
        assert_eq!(mesh.drained_cutoff(daemons, now), Some(daemons), "the daemon's when the mesh names none");
        assert_eq!(quiet.drained_cutoff(daemons, now), None, "kept forever");
        let short = MeshRetention { events: Some(Window::After(HOUR)), ..MeshRetention::default() };
        assert_eq!(
            short.drained_cutoff(daemons, now),
            Some(Timestamp::from_millis(10 * DAY as i64 - HOUR as i64))
        );
    }

    #[test]
    fn only_finished_tasks_past_the_window_expire() {
        let now = Timestamp::parse_iso("2026-01-10T00:00:00.000Z").unwrap();
        let old = "2026-01-01T00:00:00.000Z";
        let young = "2026-01-09T00:00:00.000Z";
        let week = Window::days(7);
        for status in ARCHIVABLE {
            assert!(task_expired(status, old, week, now), "{status:?}");
            assert!(!task_expired(status, young, week, now), "{status:?}");
            assert!(!task_expired(status, old, Window::Off, now), "{status:?}");
        }
        assert!(!task_expired(TaskStatus::Pending, old, week, now));
        assert!(!task_expired(TaskStatus::Assigned, old, week, now));
        assert!(!task_expired(TaskStatus::Completed, "not a time", week, now));
    }
}
