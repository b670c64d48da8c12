//! [`RawJson`]: a stored JSON document handed out as its text.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON document kept as its text. What a store holds goes out without being
/// built into a tree and is written out again verbatim (an HTTP answer, say);
/// [`RawJson::parse`] builds the tree for a reader that needs its fields.
///
/// Two documents are equal when their texts are.
#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// The document `text` holds; `{}` when `text` is not JSON (an unreadable
    /// stored payload reads as an empty object, as in the original).
    pub fn from_stored(text: String) -> RawJson {
        match RawValue::from_string(text) {
            Ok(raw) => RawJson(raw),
            Err(_) => RawJson::empty_object(),
        }
    }

    /// The document of `value`.
    pub fn from_value(value: &Value) -> RawJson {
        RawJson::from_stored(value.to_string())
    }

    /// `{}`.
    fn empty_object() -> RawJson {
        RawJson(RawValue::from_string("{}".to_owned()).expect("{} is JSON"))
    }

    /// The document's text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The document as a tree.
    pub fn parse(&self) -> Value {
        // The text is JSON by construction.
        serde_json::from_str(self.0.get()).unwrap_or_else(|_| Value::Object(Default::default()))
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RawJson {}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_goes_out_verbatim_and_parses_on_demand() {
        let raw = RawJson::from_stored(r#"{"b":1, "a":[true]}"#.to_owned());
        assert_eq!(raw.as_str(), r#"{"b":1, "a":[true]}"#);
        assert_eq!(raw.parse()["a"][0], Value::Bool(true));
        let wrapped = serde_json::to_string(&serde_json::json!({ "payload": raw.parse() })).unwrap();
        assert_eq!(wrapped, r#"{"payload":{"b":1,"a":[true]}}"#);
        #[derive(Serialize, Deserialize)]
        struct View {
            payload: RawJson,
        }
        let text = serde_json::to_string(&View { payload: raw.clone() }).unwrap();
        assert_eq!(text, r#"{"payload":{"b":1, "a":[true]}}"#);
        assert_eq!(serde_json::from_str::<View>(&text).unwrap().payload, raw);
    }

    #[test]
    fn text_that_is_not_json_reads_as_an_empty_object() {
        assert_eq!(RawJson::from_stored("{not json".to_owned()).as_str(), "{}");
        assert_eq!(RawJson::from_stored(String::new()).parse(), serde_json::json!({}));
    }
}
