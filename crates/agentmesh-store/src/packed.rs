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

use libdeflater::{CompressionLvl, Compressor, DecompressionError, Decompressor};

/// The first byte of a deflated payload: a control character, never the first
/// byte of JSON text.
pub const DEFLATED: u8 = 0x01;

/// Payloads shorter than this are stored as text: deflate's fixed cost eats
/// what it would save.
const MIN_PACKED: usize = 160;

/// The largest text a stored payload unpacks to; a stream that would inflate
/// past it is unreadable (no payload the product writes comes near it).
const MAX_UNPACKED: usize = 1 << 30;

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
    /// One compressor and one decompressor per thread, reused. libdeflate
    /// compresses a whole buffer in one call, with no stream state to set up,
    /// which is what a payload of a few hundred bytes wants: about 8 µs to pack
    /// a 830-byte task and 2.5 µs to unpack it (a streaming deflater spends
    /// some 20 µs of each call setting up its tables).
    static CODEC: RefCell<(Compressor, Decompressor)> = RefCell::new((
        Compressor::new(CompressionLvl::new(6).unwrap_or_default()),
        Decompressor::new(),
    ));
}

/// The stored form of the JSON text `json`: deflated when that is shorter
/// (text shorter than 160 bytes is not tried).
pub fn pack(json: &str) -> Packed<'_> {
    if json.len() < MIN_PACKED {
        return Packed::Text(json);
    }
    let deflated = CODEC.with(|codec| {
        let compressor = &mut codec.borrow_mut().0;
        let mut out = vec![0; 1 + compressor.deflate_compress_bound(json.len())];
        out[0] = DEFLATED;
        let len = compressor.deflate_compress(json.as_bytes(), &mut out[1..]).ok()?;
        out.truncate(1 + len);
        Some(out)
    });
    match deflated {
        Some(bytes) if bytes.len() < json.len() => Packed::Deflated(bytes),
        _ => Packed::Text(json),
    }
}

/// The stored form of a task's JSON text `json` in status `status`: packed once
/// the task is finished, as text while it is open. An open task's row is
/// rewritten at every claim, heartbeat and requeue, and deflating it costs some
/// microseconds a call, so the claim path stays free of it; a finished row is
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
            let text = inflate(stream)?;
            String::from_utf8(text).map(Cow::Owned).map_err(|e| Unreadable(e.to_string()))
        }
        _ => std::str::from_utf8(stored).map(Cow::Borrowed).map_err(|e| Unreadable(e.to_string())),
    }
}

/// The bytes of a raw deflate stream. The text's length is not stored, so the
/// output starts at four times the stream (JSON rarely deflates further) and
/// doubles while it is too small.
fn inflate(stream: &[u8]) -> Result<Vec<u8>, Unreadable> {
    CODEC.with(|codec| {
        let decompressor = &mut codec.borrow_mut().1;
        let mut room = stream.len().saturating_mul(4).max(256);
        loop {
            let mut out = vec![0; room];
            match decompressor.deflate_decompress(stream, &mut out) {
                Ok(len) => {
                    out.truncate(len);
                    return Ok(out);
                }
                Err(DecompressionError::InsufficientSpace) if room < MAX_UNPACKED => {
                    room = room.saturating_mul(2).min(MAX_UNPACKED);
                }
                Err(err) => return Err(Unreadable(err.to_string())),
            }
        }
    })
}

/// The task of a stored task payload, in either form; one that cannot be read,
/// or is not a task, is [`crate::StoreError::Corrupt`] naming task `id`.
pub fn unpack_task(id: &str, stored: &[u8]) -> Result<agentmesh_core::Task, crate::StoreError> {
    let corrupt = |problem: String| crate::StoreError::Corrupt { what: format!("task {id}"), problem };
    let json = unpack(stored).map_err(|e| corrupt(e.to_string()))?;
    agentmesh_core::Task::from_json(&json).map_err(|e| corrupt(e.to_string()))
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
    fn a_payload_that_deflates_far_below_a_quarter_reads_back_whole() {
        let json = format!(r#"{{"message":"{}"}}"#, "same words again ".repeat(4000));
        let packed = pack(&json);
        assert!(packed.bytes().len() * 20 < json.len(), "{} of {}", packed.bytes().len(), json.len());
        assert_eq!(unpack(packed.bytes()).unwrap(), json);
    }

    #[test]
    fn a_payload_another_deflater_packed_reads_back() {
        // Rows packed by earlier builds are raw deflate streams from another
        // encoder (flate2's); any raw deflate stream after the marker reads.
        // Its fastest level here, so that its bytes differ from ours.
        use std::io::Write as _;
        let json = task_json(5);
        let mut encoder = flate2::write::DeflateEncoder::new(vec![DEFLATED], flate2::Compression::fast());
        encoder.write_all(json.as_bytes()).unwrap();
        let stored = encoder.finish().unwrap();
        assert_ne!(stored, pack(&json).into_vec(), "a different encoder, different bytes");
        assert_eq!(unpack(&stored).unwrap(), json);
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
