//! Coordinator presence: which coordinators of a machine are live, and when a
//! drain refreshes its own record.
//!
//! A coordinator is live for [`COORDINATOR_PRESENCE_TTL_MS`] after it was last
//! seen (a drain or a touch), unless it ended. A unicast for a run that is not
//! live is re-attributed to the drainer on its machine.

/// How long a coordinator stays live after it was last seen.
pub const COORDINATOR_PRESENCE_TTL_MS: i64 = 120_000;

/// A drain rewrites its own presence record only when it is older than this, so
/// most drains write no presence.
pub const PRESENCE_REFRESH_MS: i64 = COORDINATOR_PRESENCE_TTL_MS / 8;

/// The earliest last-seen instant of a coordinator still live at `now_ms` (one
/// that has not ended).
pub fn live_since(now_ms: i64) -> i64 {
    now_ms.saturating_sub(COORDINATOR_PRESENCE_TTL_MS)
}

/// Whether a drain at `now_ms` refreshes the drainer's presence, given when it
/// was last seen (`None`: not recorded, or ended).
pub fn drain_refreshes_presence(my_last_seen_ms: Option<i64>, now_ms: i64) -> bool {
    my_last_seen_ms.is_none_or(|seen| seen < now_ms.saturating_sub(PRESENCE_REFRESH_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_is_live_for_the_ttl() {
        let now = 1_000_000;
        assert_eq!(live_since(now), now - 120_000);
        assert_eq!(live_since(i64::MIN), i64::MIN);
    }

    #[test]
    fn a_drain_refreshes_a_missing_or_old_record_only() {
        let now = 1_000_000;
        assert!(drain_refreshes_presence(None, now));
        assert!(drain_refreshes_presence(Some(now - PRESENCE_REFRESH_MS - 1), now));
        assert!(!drain_refreshes_presence(Some(now - PRESENCE_REFRESH_MS), now));
        assert!(!drain_refreshes_presence(Some(now), now));
    }
}
