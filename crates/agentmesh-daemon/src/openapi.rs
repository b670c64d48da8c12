//! The OpenAPI 3.1 document of the HTTP API, built from the routes the router
//! serves ([`crate::surface`]) and the types their handlers decode and answer
//! (their JSON Schema 2020-12, derived with `schemars`).
//!
//! Every route is one operation: its path and query parameters, its JSON body
//! (with an example for some), its answers and the errors it can answer, each
//! an `Error` body. What every route of a kind can answer is added here: 401
//! behind the token; 400, 500 and 503 on the `/v1` routes (a bad mesh id, a
//! fault of the daemon, a store that is busy or away); 413 with a body; 507 on
//! the writes. The bearer token is the `bearerAuth` scheme, required by every
//! route except the open ones (`/healthz`, `/readyz`, `/openapi.json`).
//!
//! Served at `GET /openapi.json` without a token, and printed by
//! `agentmesh openapi`.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::error::ErrorBody;
use crate::route::{Answer, Route};

/// Where the generated definitions go, and where every `$ref` points.
const SCHEMAS: &str = "/components/schemas";

/// The error responses a route may name: status, component name, description.
const ERRORS: &[(StatusCode, &str, &str)] = &[
    (
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "The path, query or body is malformed; the message names the field",
    ),
    (StatusCode::UNAUTHORIZED, "Unauthorized", "The bearer token is missing or wrong"),
    (StatusCode::NOT_FOUND, "NotFound", "What the request names is not there"),
    (
        StatusCode::CONFLICT,
        "Conflict",
        "The state of what the request names refuses it (a stale epoch, a duplicate id, ...)",
    ),
    (
        StatusCode::GONE,
        "Gone",
        "The ledger cursor is before what the archive still holds (cursor_expired); the message names the oldest cursor served",
    ),
    (StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLarge", "The body is larger than the daemon accepts (1 MiB)"),
    (StatusCode::INTERNAL_SERVER_ERROR, "Internal", "The daemon failed; its log has the cause"),
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        "The store is busy or away; ask again after Retry-After",
    ),
    (StatusCode::INSUFFICIENT_STORAGE, "StorageFull", "The store's disk is full"),
];

/// The document as JSON text, made once.
fn text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| serde_json::to_string_pretty(&document()).expect("a JSON value serializes") + "\n")
}

/// `GET /openapi.json`: the document.
pub(crate) async fn serve() -> Response {
    ([(CONTENT_TYPE, HeaderValue::from_static("application/json"))], text()).into_response()
}

/// The OpenAPI 3.1 document of every route the daemon serves, but the
/// dashboard's pages and the MCP endpoints.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.definitions_path = SCHEMAS.into();
            settings.meta_schema = None;
        })
        .into_generator();
    let error = Value::from(generator.subschema_for::<ErrorBody>());
    let mut paths = Value::Object(Map::new());
    let mut tags: Vec<String> = Vec::new();
    for (prefix, routes) in crate::surface(&tokio_util::sync::CancellationToken::new()) {
        for route in routes {
            let path = format!("{prefix}{}", route.path);
            let tag = tag_of(&path);
            if !tags.contains(&tag) {
                tags.push(tag.clone());
            }
            let operation = operation(&route, &path, tag, prefix == "/v1", &mut generator);
            let item = paths.as_object_mut().expect("an object").entry(path).or_insert_with(|| json!({}));
            item[route.method.as_str().to_ascii_lowercase()] = operation;
        }
    }
    let payload = Value::from(generator.subschema_for::<agentmesh_core::webhook::WebhookPayload>());
    let mut schemas = generator.take_definitions(true);
    schemas.sort_keys();
    let mut schemas = Value::from(schemas);
    tidy_descriptions(&mut schemas);
    tidy_descriptions(&mut paths);
    let responses: Map<String, Value> = ERRORS
        .iter()
        .map(|(_, name, description)| {
            let response = json!({
                "description": description,
                "content": { "application/json": { "schema": error.clone() } },
            });
            ((*name).to_owned(), response)
        })
        .collect();
    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "agentmesh",
            "version": crate::BUILD_VERSION,
            "description": concat!(
                "The HTTP API of the agentmesh daemon: the task queue, claims and leases, the ",
                "coordinator inbox, missions, reservations, holds, deliveries and dispatches of ",
                "each mesh. Every route but /healthz, /readyz and /openapi.json needs the bearer ",
                "token (the daemon's token file). Every failure answers the one Error body, whose ",
                "code is stable and whose message names the field at fault. An unknown path ",
                "answers 404 and a known path with another method 405, both as Error bodies. ",
                "Not described here: the dashboard's pages (/, /login, /logout, /assets/{name}) ",
                "and the MCP endpoints (/mcp and /mcp/{mesh}, streamable HTTP, described by MCP ",
                "itself).",
            ),
            "license": { "name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0" },
        },
        "tags": tags.into_iter().map(|name| json!({ "name": name })).collect::<Vec<_>>(),
        "security": [{ "bearerAuth": [] }],
        "paths": paths,
        "webhooks": { "ledgerEntry": webhook_operation(payload) },
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The daemon's token, as `Authorization: Bearer <token>`.",
                },
            },
            "schemas": schemas,
            "responses": responses,
        },
    })
}

/// Turns the doc-comment links of the types' descriptions (`` [`Name`] ``)
/// into plain code spans, everywhere under `node`.
fn tidy_descriptions(node: &mut Value) {
    match node {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value {
                    Value::String(text) if key == "description" => {
                        *text = text.replace("[`", "`").replace("`]", "`");
                    }
                    _ => tidy_descriptions(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(tidy_descriptions),
        _ => {}
    }
}

/// The tag of a path: the resource after `/v1/meshes/{mesh}/` (`tasks`, ...),
/// `meshes` for `/v1/meshes`, `daemon` outside `/v1`.
fn tag_of(path: &str) -> String {
    match path.strip_prefix("/v1/meshes") {
        None => "daemon".to_owned(),
        Some(rest) => match rest.strip_prefix("/{mesh}/") {
            Some(resource) => resource.split('/').next().unwrap_or(resource).to_owned(),
            None => "meshes".to_owned(),
        },
    }
}

/// The operation object of `route` at `path`.
/// What a webhook receiver is sent: one `POST` per ledger entry its
/// subscription takes (see the `webhooks` routes).
fn webhook_operation(payload: Value) -> Value {
    let header = |name: &str, description: &str| {
        json!({ "name": name, "in": "header", "required": true, "description": description,
                "schema": { "type": "string" } })
    };
    json!({
        "post": {
            "summary": "One ledger entry a subscription's filter takes, sent to its receiver",
            "description": concat!(
                "Sent in ledger order, one entry per request, at least once: a receiver that ",
                "drops webhook-id values it has seen handles each entry exactly once. The ",
                "subscription moves on only past an entry its receiver answered with a 2xx; ",
                "failures are retried with backoff, then the subscription is failing until an ",
                "operator resumes or skips (POST /v1/meshes/{mesh}/webhooks/{id}/resume or /skip).",
            ),
            "operationId": "webhookLedgerEntry",
            "tags": ["webhooks"],
            "security": [],
            "parameters": [
                header("webhook-id", "The ledger entry's id: the same on every retry and from every daemon."),
                header("webhook-timestamp", "When the request was signed, in Unix seconds."),
                header(
                    "webhook-signature",
                    "v1, then the base64 of the HMAC-SHA256 of `id.timestamp.body`, keyed by the bytes of \
                     the subscription's secret after whsec_ (base64).",
                ),
            ],
            "requestBody": { "required": true, "content": { "application/json": { "schema": payload } } },
            "responses": {
                "2XX": { "description": "Taken: the subscription moves on to the next entry." },
                "default": { "description": "Not taken: the entry is sent again after the backoff." },
            },
        },
    })
}

fn operation(route: &Route, path: &str, tag: String, api: bool, generator: &mut SchemaGenerator) -> Value {
    let mut op = Map::new();
    op.insert("operationId".into(), route.operation_id.into());
    op.insert("summary".into(), route.summary.into());
    op.insert("tags".into(), json!([tag]));
    let mut parameters = path_parameters(path);
    if let Some(query) = route.query {
        let schema = Value::from(query(generator));
        parameters.extend(query_parameters(&schema, generator));
    }
    if !parameters.is_empty() {
        op.insert("parameters".into(), parameters.into());
    }
    if let Some(body) = route.body {
        let mut media = json!({ "schema": Value::from(body(generator)) });
        if let Some(example) = &route.example {
            media["example"] = example.clone();
        }
        op.insert(
            "requestBody".into(),
            json!({ "required": true, "content": { "application/json": media } }),
        );
    }
    let mut responses = Map::new();
    let content = match route.answer {
        Answer::Json(schema) => json!({ "application/json": { "schema": Value::from(schema(generator)) } }),
        Answer::Text { media_type, description } => {
            json!({ media_type: { "schema": { "type": "string", "description": description } } })
        }
    };
    for status in &route.statuses {
        let description = status.canonical_reason().unwrap_or("Success");
        responses
            .insert(status.as_str().to_owned(), json!({ "description": description, "content": content }));
    }
    let mut errors: Vec<StatusCode> = Vec::new();
    if !route.open {
        errors.push(StatusCode::UNAUTHORIZED);
    }
    if api {
        errors.extend([
            StatusCode::BAD_REQUEST,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::SERVICE_UNAVAILABLE,
        ]);
        if route.method != Method::GET {
            errors.push(StatusCode::INSUFFICIENT_STORAGE);
        }
    }
    if route.body.is_some() {
        errors.extend([StatusCode::BAD_REQUEST, StatusCode::PAYLOAD_TOO_LARGE]);
    }
    errors.extend(route.errors.iter().copied());
    errors.sort();
    errors.dedup();
    for status in errors {
        if route.statuses.contains(&status) {
            continue;
        }
        let Some((_, name, _)) = ERRORS.iter().find(|(known, _, _)| *known == status) else {
            panic!("{} {path}: no error response is described for {status}", route.method);
        };
        responses
            .insert(status.as_str().to_owned(), json!({ "$ref": format!("#/components/responses/{name}") }));
    }
    op.insert("responses".into(), responses.into());
    if route.open {
        op.insert("security".into(), json!([]));
    }
    op.into()
}

/// The parameters of the `{name}` segments of `path`: strings, all required.
fn path_parameters(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let description = match name {
                "mesh" => "The mesh id (not blank, at most 200 bytes, no control characters)",
                "id" => "The id of what the path names",
                "node" => "The node id",
                "session" => "The session id",
                _ => "A path segment",
            };
            json!({
                "name": name,
                "in": "path",
                "required": true,
                "description": description,
                "schema": { "type": "string" },
            })
        })
        .collect()
}

/// One query parameter per property of `schema` (an object, or a `$ref` to one
/// among the generator's definitions).
fn query_parameters(schema: &Value, generator: &SchemaGenerator) -> Vec<Value> {
    let object = match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.rsplit('/').next().unwrap_or(reference);
            generator.definitions().get(name).cloned().unwrap_or_else(|| json!({}))
        }
        None => schema.clone(),
    };
    let required: Vec<&str> =
        object["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let Some(properties) = object["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut property = property.clone();
            let description = property.as_object_mut().and_then(|p| p.remove("description"));
            // A query parameter is absent, never null.
            if let Some(types) = property.get_mut("type").and_then(Value::as_array_mut) {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types[0].clone();
                    property["type"] = only;
                }
            }
            let mut parameter = json!({
                "name": name,
                "in": "query",
                "required": required.contains(&name.as_str()),
                "schema": property,
            });
            if let Some(description) = description {
                parameter["description"] = description;
            }
            parameter
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_one_operation_and_every_ref_resolves() {
        let doc = document();
        let mut count = 0;
        for (prefix, routes) in crate::surface(&tokio_util::sync::CancellationToken::new()) {
            for route in routes {
                let path = format!("{prefix}{}", route.path);
                let op = &doc["paths"][&path][route.method.as_str().to_ascii_lowercase()];
                assert_eq!(op["operationId"], route.operation_id, "{path}");
                count += 1;
            }
        }
        let documented: usize =
            doc["paths"].as_object().unwrap().values().map(|item| item.as_object().unwrap().len()).sum();
        assert_eq!(documented, count);
        let text = serde_json::to_string(&doc).unwrap();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let pointer = reference.split('"').next().unwrap().trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{pointer} does not resolve");
        }
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = document();
        let mut ids: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .map(|op| op["operationId"].as_str().unwrap())
            .collect();
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all);
    }
}
