//! Extractors that reject malformed input with an [`ApiError`] instead of axum's
//! plain-text rejections, so every failure has the one JSON error shape.
//!
//! [`ApiJson`] reads the body (at most [`crate::MAX_BODY_BYTES`], else 413) and
//! decodes it with `serde_path_to_error`, so a wrong type or an unknown field is
//! reported with the path of the field (`invalid priority: invalid type: integer
//! `5`, expected a string`). [`ApiQuery`] and [`ApiPath`] wrap axum's extractors
//! and keep their messages, which name the parameter.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::MAX_BODY_BYTES;
use crate::error::ApiError;

/// A JSON request body of type `T`.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit: MAX_BODY_BYTES }
            } else {
                ApiError::BadRequest(format!("cannot read the request body: {}", rejection.body_text()))
            }
        })?;
        decode_json(&bytes).map(ApiJson)
    }
}

/// Decodes one JSON document, naming the offending field on failure.
pub(crate) fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        // A syntax error is about the text, not the field being read when it occurred.
        if path == "." || inner.is_syntax() || inner.is_eof() {
            ApiError::BadRequest(format!("invalid JSON body: {inner}"))
        } else {
            ApiError::BadRequest(format!("invalid {path}: {inner}"))
        }
    })?;
    de.end().map_err(|err| ApiError::BadRequest(format!("invalid JSON body: {err}")))?;
    Ok(value)
}

/// Query-string parameters of type `T`.
#[derive(Debug)]
pub(crate) struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
    }
}

/// Path parameters of type `T`.
#[derive(Debug)]
pub(crate) struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| ApiPath(value))
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // Only decoded, to see the errors.
    struct Body {
        priority: Option<String>,
        tags: Option<Vec<String>>,
    }

    #[track_caller]
    fn message_of(json: &str) -> String {
        match decode_json::<Body>(json.as_bytes()) {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("expected a bad request for {json}, got {other:?}"),
        }
    }

    #[test]
    fn decode_errors_name_the_field() {
        assert!(message_of(r#"{"priority": 5}"#).starts_with("invalid priority: invalid type: integer `5`"));
        assert!(message_of(r#"{"tags": ["a", 1]}"#).starts_with("invalid tags[1]: "));
        assert!(message_of(r#"{"prio": "high"}"#).contains("unknown field `prio`"));
        assert!(message_of(r#"{"priority": "high""#).starts_with("invalid JSON body: EOF"));
        assert!(message_of(r#"{} {}"#).starts_with("invalid JSON body: trailing characters"));
    }
}
