//! The handful of JavaScript value rules the original's checks are written in:
//! truthiness, "non-empty string" in its two flavours, plain-object reads and
//! `String(value)`.
//!
//! They live in one place so every rule that depends on them reads the same way,
//! and so the places where we follow JavaScript semantics on purpose are easy to
//! find. Nothing here is exported from the crate.

use serde_json::{Map, Value};

/// JavaScript truthiness of a JSON value: `null`, `false`, `0` and `""` are falsy;
/// arrays and objects (even empty ones) are truthy.
pub(crate) fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// A string of length > 0, untrimmed: the contract checks' notion of "non-empty"
/// (`" "` passes).
pub(crate) fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// A string that is non-empty after trimming, trimmed: the event helpers' notion
/// of "non-empty" (`readNonEmptyString`).
pub(crate) fn read_non_empty(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(s)) => Some(s.trim()).filter(|s| !s.is_empty()),
        _ => None,
    }
}

/// The value as a plain JSON object, if it is one.
pub(crate) fn read_record(value: Option<&Value>) -> Option<&Map<String, Value>> {
    value.and_then(Value::as_object)
}

/// JavaScript's `String(value)` for a JSON value.
///
/// Fingerprints stringify the metadata `timestamp` this way, and fingerprints
/// written by the original must keep matching, so numbers follow JavaScript's
/// formatting (`2` not `2.0`, `1e+21`, `1.5e-7`), arrays join their elements with
/// commas (nulls become empty), and objects become `[object Object]`.
pub(crate) fn js_string(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => js_number(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|item| if item.is_null() { String::new() } else { js_string(item) })
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) => "[object Object]".to_owned(),
    }
}

/// `Number.prototype.toString()` for a finite double.
fn js_number(f: f64) -> String {
    if f == 0.0 {
        return "0".to_owned();
    }
    let abs = f.abs();
    if (1e-6..1e21).contains(&abs) {
        // Rust's shortest round-trip `Display` matches JavaScript in this range,
        // including integral values, which it prints without a fraction.
        return format!("{f}");
    }
    // Exponential form: Rust writes `1e21` / `1.5e-7`; JavaScript adds a `+` to
    // positive exponents.
    let text = format!("{f:e}");
    match text.split_once('e') {
        Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn truthiness() {
        for falsy in [json!(null), json!(false), json!(0), json!(0.0), json!("")] {
            assert!(!truthy(&falsy), "{falsy}");
        }
        for truthy_value in [json!(true), json!(1), json!(" "), json!([]), json!({})] {
            assert!(truthy(&truthy_value), "{truthy_value}");
        }
    }

    #[test]
    fn non_empty_flavours() {
        assert_eq!(non_empty_str(Some(&json!(" "))), Some(" "));
        assert_eq!(non_empty_str(Some(&json!(""))), None);
        assert_eq!(read_non_empty(Some(&json!(" a "))), Some("a"));
        assert_eq!(read_non_empty(Some(&json!("  "))), None);
        assert_eq!(read_non_empty(Some(&json!(3))), None);
        assert_eq!(read_non_empty(None), None);
    }

    #[test]
    fn string_conversion_follows_javascript() {
        assert_eq!(js_string(&json!(1_700_000_000_000_i64)), "1700000000000");
        assert_eq!(js_string(&json!(2.0)), "2");
        assert_eq!(js_string(&json!(1.5)), "1.5");
        assert_eq!(js_string(&json!(-0.25)), "-0.25");
        assert_eq!(js_string(&json!(1e21)), "1e+21");
        assert_eq!(js_string(&json!(1.5e-7)), "1.5e-7");
        assert_eq!(js_string(&json!(0.000001)), "0.000001");
        assert_eq!(js_string(&json!("2025-01-01T00:00:00Z")), "2025-01-01T00:00:00Z");
        assert_eq!(js_string(&json!(true)), "true");
        assert_eq!(js_string(&json!([1, null, "a"])), "1,,a");
        assert_eq!(js_string(&json!({"a": 1})), "[object Object]");
    }
}
