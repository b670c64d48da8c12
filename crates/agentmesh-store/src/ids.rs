//! The one id minter: every id agentmesh makes up (ledger entries, inbox events,
//! tasks enqueued without an id, sessions, runs, machines, database ids) comes
//! from here.
//!
//! An id is a version 7 UUID: 48 bits of Unix milliseconds, then 18 bits that
//! count up within a millisecond, then random bits. Ids minted by one process
//! therefore sort in the order they were minted (rows written in the same
//! millisecond keep their order in every `(timestamp, id)` ordering, and a clock
//! step back never makes a later id sort earlier), and ids of different processes
//! never collide. The core has no clock and no randomness, so it is handed ids;
//! the minter lives here, beside the store every transport already depends on.

use std::sync::Mutex;

use agentmesh_core::Timestamp;
use uuid::Uuid;

/// The last id's (milliseconds, counter), so ids minted in one process increase.
static LAST: Mutex<(u64, u32)> = Mutex::new((0, 0));

/// The largest counter an id carries within one millisecond (18 bits).
const COUNTER_MAX: u32 = (1 << 18) - 1;

/// A fresh time-ordered id for something that happens at `now`, in the UUID's
/// hyphenated form (`0190b6f0-...`).
pub fn mint_at(now: Timestamp) -> String {
    uuid_at(now).to_string()
}

/// A fresh time-ordered id, timed by the system clock, in the hyphenated form.
pub fn mint() -> String {
    mint_at(system_now())
}

/// A fresh time-ordered id with `prefix` before its 32 hex digits
/// (`ses_0190b6f0...`): the form of session, run and machine ids.
pub fn mint_prefixed(prefix: &str) -> String {
    format!("{prefix}{}", uuid_at(system_now()).simple())
}

/// The clock an id's time bits come from when no time is handed in. They order
/// ids and decide nothing, so tests have no need to control them (ids a rule
/// depends on are minted with [`mint_at`] from the caller's time).
#[allow(clippy::disallowed_methods, reason = "an id's time bits are not a rule's input")]
fn system_now() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_millis(ms)
}

fn uuid_at(now: Timestamp) -> Uuid {
    let (ms, counter) = {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        let now_ms = u64::try_from(now.millis()).unwrap_or(0);
        *last = if now_ms > last.0 {
            (now_ms, 0)
        } else if last.1 < COUNTER_MAX {
            (last.0, last.1 + 1)
        } else {
            (last.0 + 1, 0)
        };
        *last
    };
    let random = *Uuid::new_v4().as_bytes();
    let mut bytes = [0u8; 10];
    bytes[0] = ((counter >> 14) & 0x0F) as u8;
    bytes[1] = ((counter >> 6) & 0xFF) as u8;
    bytes[2] = (counter & 0x3F) as u8;
    bytes[3..].copy_from_slice(&random[..7]);
    uuid::Builder::from_unix_timestamp_millis(ms, &bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_minted_in_one_millisecond_sort_in_minting_order() {
        let now = Timestamp::from_millis(1_800_000_000_000);
        let ids: Vec<String> = (0..1_000).map(|_| mint_at(now)).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        let earlier = mint_at(Timestamp::from_millis(1_700_000_000_000));
        assert!(earlier > ids[999], "a clock step back never makes an id sort earlier");
        assert_eq!(Uuid::parse_str(&ids[0]).unwrap().get_version_num(), 7);
    }

    #[test]
    fn prefixed_ids_keep_their_prefix_and_order() {
        let a = mint_prefixed("ses_");
        let b = mint_prefixed("ses_");
        assert!(a.starts_with("ses_") && a.len() == 4 + 32, "{a}");
        assert!(a < b, "{a} then {b}");
        assert_eq!(Uuid::parse_str(&a[4..]).unwrap().get_version_num(), 7);
        assert!(mint().replace('-', "").as_str() > &b[4..], "the hyphenated form shares the counter");
    }
}
