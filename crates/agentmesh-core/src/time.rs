//! Time as a value. The core never reads a clock: every operation that needs
//! "now" takes a [`Timestamp`] argument, so tests control time completely.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch, UTC.
///
/// The original runtime stores instants as JavaScript ISO strings
/// (`2025-01-01T00:00:00.000Z`); [`Timestamp::iso`] produces exactly that form, so
/// string comparison of stored values orders them in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// A timestamp from milliseconds since the epoch.
    pub const fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// Milliseconds since the epoch.
    pub const fn millis(self) -> i64 {
        self.0
    }

    /// This instant plus `ms` milliseconds (saturating).
    pub const fn plus_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// The ISO-8601 form the original writes: millisecond precision, `Z` suffix.
    pub fn iso(self) -> String {
        match DateTime::<Utc>::from_timestamp_millis(self.0) {
            Some(dt) => dt.to_rfc3339_opts(SecondsFormat::Millis, true),
            None => String::from("1970-01-01T00:00:00.000Z"),
        }
    }

    /// Parses an RFC 3339 / ISO-8601 instant (any offset, any sub-second precision).
    /// Returns `None` for anything unparsable.
    pub fn parse_iso(text: &str) -> Option<Timestamp> {
        DateTime::parse_from_rfc3339(text.trim()).ok().map(|dt| Timestamp(dt.timestamp_millis()))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.iso())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_matches_javascript_to_iso_string() {
        let t = Timestamp::from_millis(1_735_689_600_001);
        assert_eq!(t.iso(), "2025-01-01T00:00:00.001Z");
        assert_eq!(Timestamp::parse_iso(&t.iso()), Some(t));
    }

    #[test]
    fn parse_accepts_offsets_and_rejects_garbage() {
        assert_eq!(
            Timestamp::parse_iso("2025-01-01T01:00:00+01:00"),
            Some(Timestamp::from_millis(1_735_689_600_000))
        );
        assert_eq!(Timestamp::parse_iso("tomorrow"), None);
    }
}
