//! The bench's deterministic inputs, identical to the seed harness's: UUID-v4-shaped
//! ids from a seeded PRNG, ~200-byte task messages and timestamps that step by one
//! millisecond from 2025-01-01T00:00:00Z.
//!
//! Every generator here reproduces `bench.ts` bit for bit, so both benchmarks write
//! the same keys into their databases and their numbers can be compared row by row.

use agentmesh_core::{NewTask, Timestamp};

/// The mesh every case works in.
pub(crate) const MESH_ID: &str = "bench-mesh";

/// 2025-01-01T00:00:00Z in milliseconds since the epoch.
const BASE_MS: i64 = 1_735_689_600_000;

/// The instant of item `i`: `BASE + i` milliseconds.
pub(crate) fn at(i: usize) -> Timestamp {
    let offset = i64::try_from(i).expect("item index fits in i64");
    Timestamp::from_millis(BASE_MS + offset)
}

const FILLER: &str = "Refactor the module, keep behaviour identical, run the tests, and report the diff \
                      summary back to the coordinator. ";

/// The message of task `i`: `Task #i: ` followed by filler, cut at 200 bytes.
///
/// The cut can end on a space, which `enqueue` trims away; compare stored messages
/// with `message(i).trim()`.
pub(crate) fn message(i: usize) -> String {
    let mut text = format!("Task #{i}: {FILLER}{FILLER}");
    text.truncate(200);
    text
}

/// A pending, untargeted task request with a caller-chosen id.
pub(crate) fn new_task(id: &str, i: usize, depends_on: Option<&str>) -> NewTask {
    NewTask {
        id: Some(id.to_owned()),
        message: message(i),
        depends_on: depends_on.into_iter().map(str::to_owned).collect(),
        ..NewTask::default()
    }
}

/// The mulberry32 generator, as `bench.ts` writes it with `Math.imul` and `>>> 0`.
struct Mulberry32(u32);

impl Mulberry32 {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x6d2b_79f5);
        let mut t = self.0;
        t = (t ^ (t >> 15)).wrapping_mul(t | 1);
        t ^= t.wrapping_add((t ^ (t >> 7)).wrapping_mul(t | 61));
        t ^ (t >> 14)
    }
}

/// Deterministic UUID-v4-shaped ids: the seed harness's `uuidGen(seed)`.
pub(crate) struct UuidGen(Mulberry32);

impl UuidGen {
    /// The sequence `uuidGen(seed)` produces in `bench.ts`.
    pub(crate) fn new(seed: u32) -> UuidGen {
        UuidGen(Mulberry32(seed))
    }

    /// The next id.
    ///
    /// Four PRNG words make 32 hex digits `w`; the id is `w[0..8]-w[8..12]-4w[13..16]-
    /// Rw[17..20]-w[20..32]`, where `R` is `w[16]` with its top two bits set to `10`.
    pub(crate) fn next_id(&mut self) -> String {
        let w: String = (0..4).map(|_| format!("{:08x}", self.0.next())).collect();
        let variant = u8::from_str_radix(&w[16..17], 16).expect("a hex digit") & 0x3 | 0x8;
        format!("{}-{}-4{}-{variant:x}{}-{}", &w[0..8], &w[8..12], &w[13..16], &w[17..20], &w[20..32])
    }

    /// The next `n` ids.
    pub(crate) fn take(&mut self, n: usize) -> Vec<String> {
        (0..n).map(|_| self.next_id()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_the_seed_harness() {
        let mut ids = UuidGen::new(0xa000 + 1000);
        assert_eq!(ids.next_id(), "8f3819d4-da78-45bd-a282-2edb4deedb5e");
        assert_eq!(ids.next_id(), "f76d896e-1237-43a7-8099-944cec48bce7");
        let mut ids = UuidGen::new(0xe000 + 100_000);
        let all = ids.take(100_000);
        assert_eq!(all[0], "667118f5-185e-4c13-b2a7-61b51506d9fe");
        assert_eq!(all[99_999], "1a56a3d5-c5ec-4100-8d97-21f8e75c6bc2");
    }

    #[test]
    fn messages_and_times_match_the_seed_harness() {
        assert_eq!(message(0).len(), 200);
        assert!(message(5000).ends_with("report "));
        assert!(message(500_000).ends_with("and repor"));
        assert_eq!(at(1234).iso(), "2025-01-01T00:00:01.234Z");
    }
}
