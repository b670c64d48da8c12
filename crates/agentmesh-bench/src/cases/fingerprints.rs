//! Group `fingerprints`: recording a completion fingerprint (TTL one hour) and
//! looking the same fingerprint up straight after, interleaved, as the seed harness
//! does.
//!
//! The seed proves expiry by recording with a TTL of -1 and looking up at once. The
//! store takes `now` as an argument, so here the fingerprint is recorded with the
//! usual TTL and looked up one millisecond after it runs out: the same distance
//! past expiry, with no waiting.

use agentmesh_core::sessions::FINGERPRINT_TTL_MS;

use crate::data::{MESH_ID, at};
use crate::harness::{CaseStore, Harness};
use crate::timing::Timer;

/// The TTL of every recorded fingerprint: one hour, as in the seed harness.
const TTL_MS: i64 = FINGERPRINT_TTL_MS;

/// Runs the group.
pub(crate) fn run(h: &mut Harness) {
    let n = h.opts().scale(100_000);
    h.run_case(&format!("fingerprints-{n}"), |h, case| fingerprints(h, case, n));
}

/// The fingerprint of item `i`, in the seed harness's form.
fn fingerprint(i: usize) -> String {
    format!("{MESH_ID}::task-{i}::session-{}::completed", i % 64)
}

/// `fingerprint-record` and `fingerprint-has`: for item `i` at instant `i`, one
/// `record_completion_fingerprint` call, then one `has_completion_fingerprint` call
/// for the same fingerprint, each timed on its own.
fn fingerprints(h: &mut Harness, case: &CaseStore, n: usize) -> anyhow::Result<()> {
    let (store, label) = (case.store(), case.label());
    let mut record = Timer::default();
    let mut has = Timer::default();
    let mut misses = 0;
    for i in 0..n {
        let fp = fingerprint(i);
        record.time(|| store.record_completion_fingerprint(MESH_ID, &fp, TTL_MS, at(i)))?;
        if !has.time(|| store.has_completion_fingerprint(MESH_ID, &fp, at(i)))? {
            misses += 1;
        }
    }
    h.report("fingerprint-record", n, n, &record);
    h.report("fingerprint-has", n, n, &has);

    let now = at(n);
    h.check(&format!("{label}: every recorded fingerprint found"), misses == 0, format!("misses={misses}"));
    let unknown = store.has_completion_fingerprint(MESH_ID, &format!("{MESH_ID}::never-recorded"), now)?;
    h.check(&format!("{label}: unknown fingerprint not found"), !unknown, "");
    let other_mesh = store.has_completion_fingerprint("other-mesh", &fingerprint(0), now)?;
    h.check(&format!("{label}: other mesh cannot see it"), !other_mesh, "");

    let expiring = format!("{MESH_ID}::expired");
    store.record_completion_fingerprint(MESH_ID, &expiring, TTL_MS, now)?;
    let before = store.has_completion_fingerprint(MESH_ID, &expiring, now.plus_millis(TTL_MS - 1))?;
    let after = store.has_completion_fingerprint(MESH_ID, &expiring, now.plus_millis(TTL_MS + 1))?;
    h.check(
        &format!("{label}: expired fingerprint not found"),
        before && !after,
        format!("found 1 ms before expiry={before}, 1 ms after={after}"),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_have_the_seed_form() {
        assert_eq!(fingerprint(0), "bench-mesh::task-0::session-0::completed");
        assert_eq!(fingerprint(130), "bench-mesh::task-130::session-2::completed");
    }
}
