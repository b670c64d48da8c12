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

/// A mesh id that follows the id rule: trimmed, not blank, at most
/// [`MAX_ID_BYTES`], no control characters. Every transport parses the mesh it is
/// given into one ([`MeshId::parse`], the error naming `mesh`), so a `MeshId`
/// inside the program is always valid. It derefs to `&str` for the calls that
/// take one, and is cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MeshId(std::sync::Arc<str>);

impl MeshId {
    /// The field a refused mesh id is named by.
    pub const FIELD: &'static str = "mesh";

    /// Parses `value` by the id rule, naming [`MeshId::FIELD`] when refused.
    pub fn parse(value: &str) -> Result<MeshId, InvalidInput> {
        MeshId::parse_field(MeshId::FIELD, value)
    }

    /// Parses `value`, given for `field` (`meshId` in a body), by the id rule.
    pub fn parse_field(field: &str, value: &str) -> Result<MeshId, InvalidInput> {
        validate_id(field, value).map(|id| MeshId(id.into()))
    }

    /// Checks `value` by the same rule without keeping it: the trimmed id, for
    /// a call that only passes it on.
    pub fn check(value: &str) -> Result<&str, InvalidInput> {
        validate_id(MeshId::FIELD, value)
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for MeshId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for MeshId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for MeshId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for MeshId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for MeshId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::str::FromStr for MeshId {
    type Err = InvalidInput;

    fn from_str(value: &str) -> Result<MeshId, InvalidInput> {
        MeshId::parse(value)
    }
}

impl From<MeshId> for String {
    fn from(id: MeshId) -> String {
        id.0.as_ref().to_owned()
    }
}

impl From<MeshId> for std::sync::Arc<str> {
    fn from(id: MeshId) -> std::sync::Arc<str> {
        id.0
    }
}

impl PartialEq<str> for MeshId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for MeshId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl serde::Serialize for MeshId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for MeshId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<MeshId, D::Error> {
        let value = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        MeshId::parse(&value).map_err(|err| serde::de::Error::custom(err.problem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mesh_id_follows_the_one_rule() {
        let mesh = MeshId::parse("  team a ").unwrap();
        assert_eq!((mesh.as_str(), &*mesh), ("team a", "team a"));
        assert_eq!(mesh.to_string(), "team a");
        for bad in ["", "  ", "a\nb", &"x".repeat(MAX_ID_BYTES + 1)] {
            let err = MeshId::parse(bad).unwrap_err();
            assert_eq!(err, validate_id("mesh", bad).unwrap_err(), "{bad:?}: the same refusal as every id");
        }
        assert_eq!(MeshId::parse_field("meshId", "a\u{0}").unwrap_err().field, "meshId");
        let json: MeshId = serde_json::from_str("\" m \"").unwrap();
        assert_eq!(json, "m");
        assert_eq!(serde_json::to_string(&json).unwrap(), "\"m\"");
        assert!(serde_json::from_str::<MeshId>("\"\\n\"").is_err());
    }

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
