//! How a task's and a pending event's JSON is stored: deflated when that is
//! smaller, as it is for any payload past a few hundred bytes.
//!
//! A stored payload is either the JSON text itself (a row written before
//! payloads were packed, or one too short to gain) or [`DEFLATED`] followed by
//! the text as a raw deflate stream. JSON text never starts with that byte, so a
//! reader tells the two forms apart by the first byte alone and reads rows of
//! both forms in one table. Both backends store the bytes as they are (a SQLite
//! blob or text, a PostgreSQL `bytea`); only this module makes or reads them.
//!
//! A task is packed only once it is finished ([`pack_task`]); an event when it
//! is queued.
//!
//! Compression is deterministic for one build (same text, same bytes), which the
//! PostgreSQL claim relies on when it compares a row's payload before and after
//! taking its lock.

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Write as _;

use flate2::Compression;
use flate2::write::{DeflateDecoder, DeflateEncoder};

/// The first byte of a deflated payload: a control character, never the first
/// byte of JSON text.
pub const DEFLATED: u8 = 0x01;

/// Payloads shorter than this are stored as text: deflate's fixed cost eats
/// what it would save.
const MIN_PACKED: usize = 160;

/// A payload as it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packed<'a> {
    /// Stored as the JSON text.
    Text(&'a str),
    /// Stored deflated: [`DEFLATED`], then the raw deflate stream.
    Deflated(Vec<u8>),
}

impl Packed<'_> {
    /// The stored bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Packed::Text(text) => text.as_bytes(),
            Packed::Deflated(bytes) => bytes,
        }
    }

    /// The stored bytes, owned.
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Packed::Text(text) => text.as_bytes().to_vec(),
            Packed::Deflated(bytes) => bytes,
        }
    }
}

thread_local! {
    /// One encoder's buffers per thread, reused: deflate's tables are large to
    /// set up for a payload of a few hundred bytes.
    static ENCODER: RefCell<Option<DeflateEncoder<Vec<u8>>>> = const { RefCell::new(None) };
}

/// The stored form of the JSON text `json`: deflated when that is shorter
/// (text shorter than 160 bytes is not tried).
pub fn pack(json: &str) -> Packed<'_> {
    if json.len() < MIN_PACKED {
        return Packed::Text(json);
    }
    let deflated = ENCODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let encoder =
            slot.get_or_insert_with(|| DeflateEncoder::new(Vec::with_capacity(1024), Compression::new(6)));
        let mut out = Vec::with_capacity(json.len() / 2 + 16);
        out.push(DEFLATED);
        // The previous stream's output is taken by `reset`; writing into a Vec
        // cannot fail.
        encoder.reset(out).ok()?;
        encoder.write_all(json.as_bytes()).ok()?;
        encoder.try_finish().ok()?;
        let out = encoder.reset(Vec::new()).ok()?;
        Some(out)
    });
    match deflated {
        Some(bytes) if bytes.len() < json.len() => Packed::Deflated(bytes),
        _ => Packed::Text(json),
    }
}

/// The stored form of a task's JSON text `json` in status `status`: packed once
/// the task is finished, as text while it is open. An open task's row is
/// rewritten at every claim, heartbeat and requeue, and setting up deflate costs
/// about 20 µs a call, so the claim path stays free of it; a finished row is
/// written once more at most and kept until retention moves it, which is where
/// its bytes count.
pub fn pack_task(json: &str, status: agentmesh_core::TaskStatus) -> Packed<'_> {
    if status.is_terminal() { pack(json) } else { Packed::Text(json) }
}

/// A stored payload that cannot be read: what was stored, and why.
#[derive(Debug, thiserror::Error)]
#[error("the stored payload is neither JSON text nor a deflated payload: {0}")]
pub struct Unreadable(String);

/// The JSON text of a stored payload, in either form; a payload stored as text
/// is borrowed, not copied.
pub fn unpack(stored: &[u8]) -> Result<Cow<'_, str>, Unreadable> {
    match stored.split_first() {
        Some((&DEFLATED, stream)) => {
            let mut decoder = DeflateDecoder::new(Vec::with_capacity(stream.len() * 3));
            decoder.write_all(stream).map_err(|e| Unreadable(e.to_string()))?;
            let text = decoder.finish().map_err(|e| Unreadable(e.to_string()))?;
            String::from_utf8(text).map(Cow::Owned).map_err(|e| Unreadable(e.to_string()))
        }
        _ => std::str::from_utf8(stored).map(Cow::Borrowed).map_err(|e| Unreadable(e.to_string())),
    }
}

/// The JSON text of a stored event payload. One that cannot be unpacked reads
/// as empty text (with a warning), which every event read takes as it takes
/// damaged JSON text, as `{}`: one damaged row never stops a drain or an export.
pub fn unpack_event(stored: &[u8]) -> String {
    unpack(stored).map(Cow::into_owned).unwrap_or_else(|err| {
        tracing::warn!(%err, "an event payload that cannot be unpacked reads as {{}}");
        String::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_json(i: usize) -> String {
        format!(
            r#"{{"id":"task-{i}","meshId":"mesh","message":"Refactor module {i}, keep behaviour identical, run the tests and report the diff summary back to the coordinator.","status":"pending","sourceCoordinatorSessionId":"coordinator-1","createdAt":"2025-01-01T00:00:00.001Z","updatedAt":"2025-01-01T00:00:00.001Z"}}"#
        )
    }

    #[test]
    fn a_long_payload_is_deflated_and_reads_back_as_written() {
        for i in 0..3 {
            let json = task_json(i);
            let packed = pack(&json);
            let Packed::Deflated(bytes) = &packed else { panic!("expected {json} deflated") };
            assert_eq!(bytes[0], DEFLATED);
            assert!(
                bytes.len() < json.len() * 3 / 4,
                "expected a real saving, got {} of {}",
                bytes.len(),
                json.len()
            );
            assert_eq!(unpack(packed.bytes()).unwrap(), json);
        }
    }

    #[test]
    fn packing_is_deterministic_across_calls() {
        let json = task_json(7);
        assert_eq!(pack(&json), pack(&json));
        let other = task_json(8);
        assert_ne!(pack(&json), pack(&other));
    }

    #[test]
    fn a_short_payload_stays_text() {
        assert_eq!(pack(r#"{"a":1}"#), Packed::Text(r#"{"a":1}"#));
        assert_eq!(unpack(br#"{"a":1}"#).unwrap(), r#"{"a":1}"#);
    }

    #[test]
    fn a_task_is_packed_once_it_is_finished() {
        use agentmesh_core::TaskStatus;
        let json = task_json(3);
        assert_eq!(pack_task(&json, TaskStatus::Pending), Packed::Text(json.as_str()));
        assert_eq!(pack_task(&json, TaskStatus::Assigned), Packed::Text(json.as_str()));
        for finished in [TaskStatus::Completed, TaskStatus::Failed, TaskStatus::Cancelled] {
            assert!(matches!(pack_task(&json, finished), Packed::Deflated(_)), "{finished:?}");
        }
    }

    #[test]
    fn a_row_written_as_text_reads_as_it_was() {
        let json = task_json(1);
        assert_eq!(unpack(json.as_bytes()).unwrap(), json);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_guess() {
        let json = task_json(2);
        let Packed::Deflated(mut bytes) = pack(&json) else { panic!("expected deflated") };
        bytes.truncate(bytes.len() / 2);
        assert!(unpack(&bytes).is_err());
        assert!(unpack(&[DEFLATED, 0xff, 0xff, 0xff]).is_err());
        assert!(unpack(&[0xc3, 0x28]).is_err(), "invalid UTF-8 text");
        assert_eq!(unpack_event(&bytes), "", "a damaged event reads as text no JSON reader takes");
        assert_eq!(unpack_event(json.as_bytes()), json);
    }
}
