//! The one rule every identifier a caller passes must follow: mesh, task, node,
//! session, mission, event, run, delivery and coordinator ids alike.
//!
//! An id is trimmed of surrounding whitespace (the original trims the ids it is
//! given), must not be blank, holds no control character (a newline or NUL in an
//! id would forge lines in listings and logs), and is at most [`MAX_ID_BYTES`]
//! bytes long, so an id made on one transport is reachable on every other (a mesh
//! id is a URL path segment for the daemon).
//!
//! The rule applies to input only. Rows read back from a database, the original's
//! included, are never checked against it: they stay readable whatever they hold.

use crate::InvalidInput;

/// The longest id, in bytes of UTF-8.
pub const MAX_ID_BYTES: usize = 200;

/// Checks `value`, given for `field`, against the id rule and returns it trimmed.
///
/// The error names `field` and says what is wrong: blank, too long (with the
/// length), or the first control character and its byte offset.
pub fn validate_id<'a>(field: &str, value: &'a str) -> Result<&'a str, InvalidInput> {
    let id = value.trim();
    if id.is_empty() {
        return Err(InvalidInput::new(field, "must not be blank"));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(InvalidInput::new(
            field,
            format!("must be at most {MAX_ID_BYTES} bytes (it has {})", id.len()),
        ));
    }
    if let Some((at, c)) = id.char_indices().find(|(_, c)| c.is_control()) {
        return Err(InvalidInput::new(
            field,
            format!("must not contain control characters (U+{:04X} at byte {at})", u32::from(c)),
        ));
    }
    Ok(id)
}

/// [`validate_id`] for an owned value, reusing it when nothing is trimmed.
pub fn validate_owned_id(field: &str, value: String) -> Result<String, InvalidInput> {
    let id = validate_id(field, &value)?;
    if id.len() == value.len() { Ok(value) } else { Ok(id.to_owned()) }
}

/// An optional id: absent or blank counts as absent, anything else must follow
/// the rule.
pub fn validate_optional_id(field: &str, value: Option<&str>) -> Result<Option<String>, InvalidInput> {
    match value {
        Some(v) if !v.trim().is_empty() => validate_id(field, v).map(|id| Some(id.to_owned())),
        _ => Ok(None),
    }
}

/// An optional id or word as stored: trimmed, and left out when blank.
pub fn trimmed(value: &Option<String>) -> Option<String> {
    value.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_trimmed() {
        assert_eq!(validate_id("id", "  t1 \t").unwrap(), "t1");
        assert_eq!(validate_owned_id("id", "t1".to_owned()).unwrap(), "t1");
        assert_eq!(validate_owned_id("id", " t1 ".to_owned()).unwrap(), "t1");
        assert_eq!(validate_id("id", "a b/c:d.é").unwrap(), "a b/c:d.é");
    }

    #[test]
    fn blank_ids_are_refused() {
        for blank in ["", " ", "\n\t "] {
            let err = validate_id("taskId", blank).unwrap_err();
            assert_eq!((err.field.as_str(), err.problem.as_str()), ("taskId", "must not be blank"));
        }
    }

    #[test]
    fn control_characters_are_refused_with_their_place() {
        let err = validate_id("id", "x\u{0}y\nz").unwrap_err();
        assert_eq!(err.field, "id");
        assert_eq!(err.problem, "must not contain control characters (U+0000 at byte 1)");
        for bad in ["a\nb", "a\rb", "a\u{1b}[2Jb", "a\u{7f}", "a\u{85}b", "a\tb"] {
            assert!(validate_id("id", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_byte_cap_counts_utf8_bytes() {
        let longest = "x".repeat(MAX_ID_BYTES);
        assert_eq!(validate_id("mesh", &longest).unwrap(), longest);
        let err = validate_id("mesh", &format!("{longest}x")).unwrap_err();
        assert_eq!(err.problem, "must be at most 200 bytes (it has 201)");
        // 101 two-byte characters are 202 bytes.
        assert!(validate_id("mesh", &"é".repeat(101)).is_err());
        assert!(validate_id("mesh", &"é".repeat(100)).is_ok());
    }

    #[test]
    fn optional_ids_may_be_absent_or_blank() {
        assert_eq!(validate_optional_id("nodeId", None).unwrap(), None);
        assert_eq!(validate_optional_id("nodeId", Some("  ")).unwrap(), None);
        assert_eq!(validate_optional_id("nodeId", Some(" n1 ")).unwrap().as_deref(), Some("n1"));
        assert_eq!(validate_optional_id("nodeId", Some("n\n1")).unwrap_err().field, "nodeId");
    }
}
