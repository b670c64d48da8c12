//! [`ApiError`]: every way an HTTP request can fail, one status for each in a
//! single `match`, and one JSON body shape:
//! `{"error": {"code": "...", "message": "..."}}`.
//!
//! A caller's mistake is explained in the message (the store's and the core's
//! messages name the field). A failure of the daemon itself is logged here, once,
//! and the client gets only its code and "internal error": database paths, SQL
//! and row contents never leave the process.

use agentmesh_api::MeshError;
use agentmesh_core::InvalidInput;
use agentmesh_store::StoreError;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The body of every error answer: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The code and message of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// A stable machine-readable code (`invalid_input`, `task_not_found`,
    /// `stale_epoch`, `unauthorized`, `busy`, ...).
    #[schemars(example = &"invalid_input")]
    pub code: String,
    /// The failure in words; a caller's mistake names the field.
    #[schemars(example = &"invalid priority: unknown variant `urgent`")]
    pub message: String,
}

/// What a 503 tells the client to wait before it asks again, in seconds.
pub(crate) const RETRY_AFTER_SECS: &str = "1";

/// The error of every HTTP handler and extractor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The body, query string or path could not be decoded (the message names the field).
    #[error("{0}")]
    BadRequest(String),
    /// The body is larger than the daemon accepts.
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The bearer token is missing or wrong.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// A request authenticated by the dashboard's session cookie alone changes
    /// something without the dashboard's request header, or from another origin.
    #[error(
        "a request authenticated by the session cookie must send the {} header from the daemon's own origin",
        crate::dashboard::REQUEST_HEADER
    )]
    CrossSite,
    /// No route has this path.
    #[error("no such route")]
    RouteNotFound,
    /// The route does not take this method.
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    /// The daemon failed; the text is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<MeshError> for ApiError {
    fn from(err: MeshError) -> ApiError {
        match err {
            MeshError::Store(err) => ApiError::Store(err),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<InvalidInput> for ApiError {
    fn from(err: InvalidInput) -> ApiError {
        ApiError::Store(StoreError::InvalidInput(err))
    }
}

impl ApiError {
    /// The HTTP status: the one place that decides it.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Store(err) => StatusCode::from_u16(agentmesh_api::store_error_status(err))
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::CrossSite => StatusCode::FORBIDDEN,
            ApiError::RouteNotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code of the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Store(err) => err.code(),
            ApiError::BadRequest(_) => "invalid_input",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::Unauthorized => "unauthorized",
            ApiError::CrossSite => "forbidden",
            ApiError::RouteNotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Internal(_) => "internal_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let code = self.code();
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = ?self, code, "request failed");
            "internal error".to_owned()
        } else {
            self.to_string()
        };
        let body = ErrorBody { error: ErrorDetail { code: code.to_owned(), message } };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // A fault of the environment: worth asking again in a moment.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn internal_causes_are_not_sent() {
        let err = ApiError::Store(StoreError::Corrupt { what: "task t1".into(), problem: "secret".into() });
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, json!({ "error": { "code": "corrupt_row", "message": "internal error" } }));
    }

    #[tokio::test]
    async fn a_full_disk_is_507_and_names_the_cause() {
        let response =
            ApiError::Store(StoreError::StorageFull(agentmesh_store::FullStorage::NoSpace)).into_response();
        assert_eq!(response.status(), StatusCode::INSUFFICIENT_STORAGE);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let message = "storage full: no space left on the filesystem that holds the database";
        assert_eq!(body, json!({ "error": { "code": "storage_full", "message": message } }));
    }

    #[test]
    fn caller_errors_map_to_client_statuses() {
        let cases = [
            (ApiError::from(InvalidInput::new("priority", "bad")), StatusCode::BAD_REQUEST),
            (
                ApiError::Store(StoreError::TaskNotFound { mesh_id: "m".into(), task_id: "t".into() }),
                StatusCode::NOT_FOUND,
            ),
            (
                ApiError::Store(StoreError::StaleEpoch { task_id: "t".into(), presented: 1, current: 2 }),
                StatusCode::CONFLICT,
            ),
            (ApiError::Store(StoreError::Busy), StatusCode::SERVICE_UNAVAILABLE),
        ];
        for (err, status) in cases {
            assert_eq!(err.status(), status, "{err}");
        }
    }
}
