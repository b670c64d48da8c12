//! Durations on the command line: `90s`, `10m`, `500ms`, `1h`, `2d`, or several
//! parts written together (`1h30m`).
//!
//! Every flag that takes a duration parses it here, through one of the value
//! parsers below, so they all read the same forms and refuse the same mistakes.
//! A bare number keeps the unit its flag had before units were accepted, so
//! existing scripts keep working: seconds for `--lease` and `--timeout`,
//! milliseconds for `task add --not-before`. Clap puts the flag's name in front of
//! a [`DurationError`], so the message names the flag as well as the mistake.

use std::fmt::Write as _;
use std::time::Duration;

use agentmesh_api::wire::NotBeforeBody;

/// The units a duration may be written in, with their suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// `ms`
    Millis,
    /// `s`
    Secs,
    /// `m`
    Mins,
    /// `h`
    Hours,
    /// `d`
    Days,
}

impl Unit {
    /// Every unit, largest first, as [`format()`] writes them.
    const LARGEST_FIRST: [Unit; 5] = [Unit::Days, Unit::Hours, Unit::Mins, Unit::Secs, Unit::Millis];

    /// The unit a suffix names, if any.
    fn from_suffix(suffix: &str) -> Option<Unit> {
        Some(match suffix {
            "ms" => Unit::Millis,
            "s" => Unit::Secs,
            "m" => Unit::Mins,
            "h" => Unit::Hours,
            "d" => Unit::Days,
            _ => return None,
        })
    }

    fn suffix(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Secs => "s",
            Unit::Mins => "m",
            Unit::Hours => "h",
            Unit::Days => "d",
        }
    }

    fn millis(self) -> u64 {
        match self {
            Unit::Millis => 1,
            Unit::Secs => 1_000,
            Unit::Mins => 60_000,
            Unit::Hours => 3_600_000,
            Unit::Days => 86_400_000,
        }
    }
}

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    /// Nothing was written.
    #[error("is empty: write a duration such as 90s, 10m, 500ms or 1h")]
    Empty,
    /// The text is not numbers with units.
    #[error("{text:?} is not a duration: write a number and a unit (ms, s, m, h or d), such as 90s or 1h30m")]
    Malformed {
        /// What was written.
        text: String,
    },
    /// A number carries a suffix that is no unit.
    #[error("{unit:?} is not a unit of time: use ms, s, m, h or d")]
    UnknownUnit {
        /// The suffix as written.
        unit: String,
    },
    /// The duration is too long to count in milliseconds.
    #[error("{text:?} is too long")]
    Overflow {
        /// What was written.
        text: String,
    },
    /// The duration is outside what the flag takes.
    #[error("{given} is outside the allowed range, {min} to {max}")]
    OutOfRange {
        /// The duration given, as [`format()`] writes it.
        given: String,
        /// The shortest allowed.
        min: String,
        /// The longest allowed.
        max: String,
    },
}

/// Parses `text` as a duration; a bare number is counted in `bare`.
pub(crate) fn parse(text: &str, bare: Unit) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let malformed = || DurationError::Malformed { text: text.to_owned() };
    let overflow = || DurationError::Overflow { text: text.to_owned() };
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let count: u64 = text.parse().map_err(|_| overflow())?;
        return count.checked_mul(bare.millis()).map(Duration::from_millis).ok_or_else(overflow);
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(malformed());
        }
        let (number, after) = rest.split_at(digits);
        let letters = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (suffix, after) = after.split_at(letters);
        if suffix.is_empty() {
            return Err(malformed());
        }
        let unit = Unit::from_suffix(suffix)
            .ok_or_else(|| DurationError::UnknownUnit { unit: suffix.to_owned() })?;
        let count: u64 = number.parse().map_err(|_| overflow())?;
        let part = count.checked_mul(unit.millis()).ok_or_else(overflow)?;
        total = total.checked_add(part).ok_or_else(overflow)?;
        rest = after;
    }
    Ok(Duration::from_millis(total))
}

/// Writes `duration` in the form [`parse`] reads, largest unit first (`1h30m`,
/// `500ms`, `0s`). Parts below a millisecond are left out.
pub(crate) fn format(duration: Duration) -> String {
    let mut left = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if left == 0 {
        return "0s".to_owned();
    }
    let mut text = String::new();
    for unit in Unit::LARGEST_FIRST {
        let count = left / unit.millis();
        if count > 0 {
            let _ = write!(text, "{count}{}", unit.suffix());
            left -= count * unit.millis();
        }
    }
    text
}

/// Parses `text` with [`parse`] and refuses a duration outside `min..=max`.
fn within(text: &str, bare: Unit, min: Duration, max: Duration) -> Result<Duration, DurationError> {
    let duration = parse(text, bare)?;
    if duration < min || duration > max {
        return Err(DurationError::OutOfRange {
            given: format(duration),
            min: format(min),
            max: format(max),
        });
    }
    Ok(duration)
}

/// The longest lease a claim can carry: its milliseconds travel as a `u32`.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(u32::MAX as u64);

/// `claim --lease` and `complete --lease`: a bare number is seconds; at least 1s.
pub(crate) fn claim_lease(text: &str) -> Result<Duration, DurationError> {
    within(text, Unit::Secs, Duration::from_secs(1), MAX_LEASE)
}

/// `work --lease`: a bare number is seconds; at least 3s, so that the heartbeats,
/// one every third of the lease, come at least a second apart.
pub(crate) fn work_lease(text: &str) -> Result<Duration, DurationError> {
    within(text, Unit::Secs, Duration::from_secs(3), MAX_LEASE)
}

/// `reserve --ttl` and `reservations renew --ttl`: a bare number is seconds;
/// from 1s to a week.
pub(crate) fn reservation_ttl(text: &str) -> Result<Duration, DurationError> {
    within(
        text,
        Unit::Secs,
        Duration::from_secs(1),
        Duration::from_millis(agentmesh_core::reservation::MAX_TTL_MS),
    )
}

/// `events watch --timeout`: a bare number is seconds; from 1s to 10m, the longest
/// a watch may wait.
pub(crate) fn watch_timeout(text: &str) -> Result<Duration, DurationError> {
    within(text, Unit::Secs, Duration::from_secs(1), agentmesh_api::MAX_WATCH_TIMEOUT)
}

/// `--older-than` and `--within` of the record listings and moves: an age, or
/// how far back to look; a bare number is seconds. Whole seconds count (the API
/// takes seconds), so a duration under a second is refused.
pub(crate) fn age(text: &str) -> Result<Duration, DurationError> {
    within(text, Unit::Secs, Duration::from_secs(1), Duration::from_secs(u64::MAX / 1000))
}

/// `serve --header-timeout` and `--idle-timeout`: a bare number is seconds; at
/// least a millisecond (zero would close every connection at once).
pub(crate) fn server_timeout(text: &str) -> Result<Duration, DurationError> {
    within(text, Unit::Secs, Duration::from_millis(1), Duration::from_secs(u64::MAX / 1000))
}

/// The longest relative `--not-before`: the API reads a number of milliseconds
/// below one year as an offset from now, and a larger one as an instant.
const MAX_NOT_BEFORE_OFFSET: Duration = Duration::from_secs(364 * 86_400);

/// `task add --not-before`: an integer is milliseconds, as it always was (an
/// offset from now below one year, else epoch milliseconds); a duration with
/// units (`90s`, `10m`, `1h30m`) is an offset from now; anything else is an
/// ISO-8601 instant, which the core checks. Text that starts with a digit and
/// holds only letters and digits is read as a duration, so `5x` is refused here,
/// naming the unit, instead of as a malformed instant.
pub(crate) fn not_before(text: &str) -> Result<NotBeforeBody, DurationError> {
    let trimmed = text.trim();
    if let Ok(millis) = trimmed.parse::<i64>() {
        return Ok(NotBeforeBody::Millis(millis));
    }
    let looks_like_duration = trimmed.starts_with(|c: char| c.is_ascii_digit())
        && trimmed.bytes().all(|b| b.is_ascii_alphanumeric());
    if !looks_like_duration {
        return Ok(NotBeforeBody::Iso(text.to_owned()));
    }
    let offset = within(trimmed, Unit::Millis, Duration::ZERO, MAX_NOT_BEFORE_OFFSET)?;
    // The bound keeps the offset far below `i64::MAX` milliseconds.
    Ok(NotBeforeBody::Millis(i64::try_from(offset.as_millis()).unwrap_or(i64::MAX)))
}

/// The lease of a claim in the milliseconds its body carries.
pub(crate) fn lease_millis(lease: Duration) -> Option<std::num::NonZeroU32> {
    u32::try_from(lease.as_millis()).ok().and_then(std::num::NonZeroU32::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_parts_add_up() {
        assert_eq!(parse("90s", Unit::Millis), Ok(Duration::from_secs(90)));
        assert_eq!(parse("10m", Unit::Millis), Ok(Duration::from_secs(600)));
        assert_eq!(parse("500ms", Unit::Secs), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1h", Unit::Secs), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("2d", Unit::Secs), Ok(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse(" 1h30m15s ", Unit::Secs), Ok(Duration::from_secs(5415)));
        assert_eq!(parse("1m500ms", Unit::Secs), Ok(Duration::from_millis(60_500)));
    }

    #[test]
    fn a_bare_number_keeps_the_flags_unit() {
        assert_eq!(parse("600", Unit::Secs), Ok(Duration::from_secs(600)));
        assert_eq!(parse("5000", Unit::Millis), Ok(Duration::from_secs(5)));
        assert_eq!(parse("0", Unit::Secs), Ok(Duration::ZERO));
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(parse(" ", Unit::Secs), Err(DurationError::Empty));
        assert_eq!(parse("5x", Unit::Secs), Err(DurationError::UnknownUnit { unit: "x".into() }));
        assert_eq!(parse("5 s", Unit::Secs), Err(DurationError::Malformed { text: "5 s".into() }));
        assert_eq!(parse("s", Unit::Secs), Err(DurationError::Malformed { text: "s".into() }));
        assert_eq!(parse("1.5h", Unit::Secs), Err(DurationError::Malformed { text: "1.5h".into() }));
        assert_eq!(parse("-5s", Unit::Secs), Err(DurationError::Malformed { text: "-5s".into() }));
        assert_eq!(parse("1h5", Unit::Secs), Err(DurationError::Malformed { text: "1h5".into() }));
        let huge = "99999999999999999999d";
        assert_eq!(parse(huge, Unit::Secs), Err(DurationError::Overflow { text: huge.into() }));
        assert_eq!(
            watch_timeout("11m"),
            Err(DurationError::OutOfRange { given: "11m".into(), min: "1s".into(), max: "10m".into() })
        );
        assert!(work_lease("2s").is_err() && work_lease("3s").is_ok());
        assert!(claim_lease("50d").is_err() && claim_lease("49d").is_ok());
        assert!(claim_lease("999ms").is_err());
    }

    #[test]
    fn not_before_takes_millis_durations_and_instants() {
        assert_eq!(not_before(" 5000 "), Ok(NotBeforeBody::Millis(5000)));
        assert_eq!(not_before("-1"), Ok(NotBeforeBody::Millis(-1)));
        assert_eq!(not_before("90s"), Ok(NotBeforeBody::Millis(90_000)));
        assert_eq!(not_before("1h30m"), Ok(NotBeforeBody::Millis(5_400_000)));
        assert_eq!(not_before("2030-01-01T00:00:00Z"), Ok(NotBeforeBody::Iso("2030-01-01T00:00:00Z".into())));
        assert_eq!(not_before("soon"), Ok(NotBeforeBody::Iso("soon".into())));
        assert_eq!(not_before("5x"), Err(DurationError::UnknownUnit { unit: "x".into() }));
        assert!(matches!(not_before("400d"), Err(DurationError::OutOfRange { .. })));
    }

    #[test]
    fn ages_are_seconds_or_durations_of_at_least_a_second() {
        assert_eq!(age("90"), Ok(Duration::from_secs(90)));
        assert_eq!(age("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(age("1d"), Ok(Duration::from_secs(86_400)));
        assert!(matches!(age("500ms"), Err(DurationError::OutOfRange { .. })));
        assert!(matches!(age("10 minutes"), Err(DurationError::Malformed { .. })));
        assert!(age("-5").is_err());
    }

    #[test]
    fn formatting_reads_back() {
        for millis in [0, 1, 500, 1_000, 90_000, 5_415_000, 86_400_000, u64::from(u32::MAX)] {
            let duration = Duration::from_millis(millis);
            assert_eq!(parse(&format(duration), Unit::Secs), Ok(duration), "{millis} ms");
        }
        assert_eq!(format(Duration::from_secs(5415)), "1h30m15s");
        assert_eq!(format(MAX_LEASE), "49d17h2m47s295ms");
    }
}
