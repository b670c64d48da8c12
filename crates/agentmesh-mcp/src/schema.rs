//! Tool input schemas in the form the common JSON Schema validators accept.
//!
//! schemars describes Rust integers with the formats `uint32`, `uint64` and
//! `int64`, which JSON Schema does not define: a validator in strict mode (ajv's
//! default) refuses a schema that names one. [`input_schema`] writes what such a
//! format meant as `minimum` and `maximum` instead, inlines every subschema (no
//! `$defs` for a client to resolve) and leaves out `$schema`: MCP reads a tool
//! schema without one as draft 2020-12, and every keyword used here means the same
//! in draft-07, so either kind of validator compiles it.
//!
//! The helpers below write the closed sets of words a field takes (task modes,
//! priorities, placement strategies) as `enum`, from the core's own lists, so a
//! schema never names a value the tool would refuse.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use rmcp::model::JsonObject;
use schemars::generate::SchemaSettings;
use schemars::transform::transform_subschemas;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Number, Value};

/// The input schema of a tool whose arguments are `T`: a JSON object schema,
/// without the struct's own title and description (the tool carries those).
///
/// # Panics
///
/// When `T` is not described by an object schema; every argument struct is.
pub(crate) fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    static CACHE: LazyLock<Mutex<HashMap<TypeId, Arc<JsonObject>>>> = LazyLock::new(Mutex::default);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    let schema = cache.entry(TypeId::of::<T>()).or_insert_with(|| {
        let settings = SchemaSettings::draft2020_12()
            .with(|s| {
                s.meta_schema = None;
                s.inline_subschemas = true;
            })
            .with_transform(integer_bounds);
        let schema = settings.into_generator().into_root_schema_for::<T>();
        let Value::Object(mut object) = schema.to_value() else {
            panic!("the arguments of a tool are described by an object schema");
        };
        assert_eq!(object.get("type"), Some(&Value::from("object")), "tool arguments are a JSON object");
        object.remove("title");
        object.remove("description");
        Arc::new(object)
    });
    Arc::clone(schema)
}

/// Replaces the numeric `format` schemars writes for a Rust number type with the
/// bounds it stands for, in this schema and every schema inside it.
fn integer_bounds(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        let bounds = object.get("format").and_then(Value::as_str).and_then(format_bounds);
        if let Some((min, max)) = bounds {
            object.remove("format");
            if let Some(min) = min {
                let kept = object.get("minimum").and_then(Value::as_f64).filter(|m| *m >= min as f64);
                if kept.is_none() {
                    object.insert("minimum".into(), Value::Number(Number::from(min)));
                }
            }
            if let Some(max) = max {
                let kept = object.get("maximum").and_then(Value::as_f64).filter(|m| *m <= max as f64);
                if kept.is_none() {
                    object.insert("maximum".into(), Value::Number(Number::from(max)));
                }
            }
        }
    }
    let mut inner = integer_bounds;
    transform_subschemas(&mut inner, schema);
}

/// The bounds a schemars number format stands for (`None` for no bound), or
/// `None` for a format that JSON Schema itself defines.
fn format_bounds(format: &str) -> Option<(Option<i64>, Option<i64>)> {
    Some(match format {
        "uint8" => (Some(0), Some(u8::MAX.into())),
        "uint16" => (Some(0), Some(u16::MAX.into())),
        "uint32" => (Some(0), Some(u32::MAX.into())),
        "uint" | "uint64" | "uint128" => (Some(0), None),
        "int8" => (Some(i8::MIN.into()), Some(i8::MAX.into())),
        "int16" => (Some(i16::MIN.into()), Some(i16::MAX.into())),
        "int32" => (Some(i32::MIN.into()), Some(i32::MAX.into())),
        "int" | "int64" | "int128" | "float" | "double" => (None, None),
        _ => return None,
    })
}

/// An optional string that is one of `words`.
fn optional_word(words: impl IntoIterator<Item = &'static str>) -> Schema {
    let mut values: Vec<Value> = words.into_iter().map(Value::from).collect();
    values.push(Value::Null);
    json_schema!({ "type": ["string", "null"], "enum": values })
}

/// `taskMode`: one of the core's task modes.
pub(crate) fn task_mode(_: &mut SchemaGenerator) -> Schema {
    optional_word(agentmesh_core::TaskMode::ALL.map(agentmesh_core::TaskMode::as_str))
}

/// `priority`: one of the core's task priorities.
pub(crate) fn priority(_: &mut SchemaGenerator) -> Schema {
    optional_word(agentmesh_core::TaskPriority::ALL.map(agentmesh_core::TaskPriority::as_str))
}

/// A required `priority`: one of the core's task priorities, never null.
pub(crate) fn required_priority(_: &mut SchemaGenerator) -> Schema {
    let values: Vec<Value> =
        agentmesh_core::TaskPriority::ALL.map(agentmesh_core::TaskPriority::as_str).map(Value::from).into();
    json_schema!({ "type": "string", "enum": values })
}

/// `strategy`: one of the core's placement strategies.
pub(crate) fn strategy(_: &mut SchemaGenerator) -> Schema {
    optional_word(agentmesh_core::Strategy::ALL.map(agentmesh_core::Strategy::as_str))
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde_json::json;

    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code)] // Only its schema is read.
    struct Numbers {
        small: u32,
        big: Option<u64>,
        signed: i64,
        #[schemars(range(min = 1, max = 50))]
        bounded: u32,
        inner: Vec<Inner>,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)] // Only its schema is read.
    struct Inner {
        count: u16,
    }

    #[test]
    fn number_formats_become_bounds_and_nothing_is_referenced() {
        let schema = Value::Object(input_schema::<Numbers>().as_ref().clone());
        let text = schema.to_string();
        assert!(!text.contains("format"), "{text}");
        assert!(!text.contains("$ref") && !text.contains("$defs") && !text.contains("$schema"), "{text}");
        let props = &schema["properties"];
        assert_eq!(props["small"]["minimum"], json!(0));
        assert_eq!(props["small"]["maximum"], json!(u32::MAX));
        assert_eq!(props["big"]["minimum"], json!(0));
        assert!(props["big"].get("maximum").is_none());
        assert!(props["signed"].get("minimum").is_none());
        assert_eq!(props["bounded"]["minimum"], json!(1));
        assert_eq!(props["bounded"]["maximum"], json!(50));
        assert_eq!(props["inner"]["items"]["properties"]["count"]["maximum"], json!(u16::MAX));
    }

    #[test]
    fn word_sets_come_from_the_core() {
        let mut generator = SchemaGenerator::default();
        let modes = task_mode(&mut generator).to_value();
        assert_eq!(modes["enum"][0], "code_change");
        assert_eq!(modes["enum"].as_array().unwrap().last(), Some(&Value::Null));
        assert_eq!(priority(&mut generator).to_value()["enum"], json!(["low", "normal", "high", null]));
    }
}
