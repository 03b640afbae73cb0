//! Every error the API answers with: one JSON shape, a stable code, a message that
//! names the field or the problem.
//!
//! ```json
//! {"error": {"code": "invalid_field", "message": "jobs[2].queue: must not be empty", "field": "jobs[2].queue"}}
//! ```
//!
//! Codes are part of the API: clients branch on them, so they never change meaning.
//! Bad input of any kind is a 4xx; only the store answers 5xx, and then 503 (the
//! request may be retried), never 500.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use revenant::{InputError, StoreError};
use serde::Serialize;

/// The stable, machine-readable reason of an error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// 400: the body is not JSON (or is empty where one is needed).
    InvalidJson,
    /// 400: a field, query parameter or path parameter has a value that cannot be
    /// accepted, is missing, or is unknown.
    InvalidField,
    /// 415: a body was sent without `Content-Type: application/json`.
    UnsupportedMediaType,
    /// 413: the body is larger than the server's limit (`--max-body`).
    PayloadTooLarge,
    /// 400: a request the HTTP layer could not read (a malformed header, say).
    BadRequest,
    /// 431: the request's headers are too large or too many.
    HeadersTooLarge,
    /// 421: without tokens, a `Host` that is not a loopback name or address (a DNS
    /// rebinding attempt, or a proxy in front that should not be there).
    MisdirectedRequest,
    /// 401: no bearer token, or one the server does not know.
    Unauthorized,
    /// 403: the token is known but lacks the route's scope or the queue; or, without
    /// tokens, a request from another web site (`Origin`).
    Forbidden,
    /// 404: no such route, job or dead job.
    NotFound,
    /// 405: the route exists but not with this method.
    MethodNotAllowed,
    /// 409: the job is not running under this lease token (reclaimed, released,
    /// cancelled, finished or gone). Nothing changed; stop working on it.
    LeaseLost,
    /// 409: the job's state does not allow the change (cancelling a finished job).
    Conflict,
    /// 503: the store cannot be reached or is busy. Retry later.
    StoreUnavailable,
    /// 503: the store answered with an error retrying will not fix (see the server's
    /// log).
    StoreError,
}

impl ErrorCode {
    /// The HTTP status this code is sent with.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidJson | ErrorCode::InvalidField | ErrorCode::BadRequest => {
                StatusCode::BAD_REQUEST
            }
            ErrorCode::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorCode::MisdirectedRequest => StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::LeaseLost | ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::StoreUnavailable | ErrorCode::StoreError => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The code as it appears in the body.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidField => "invalid_field",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::HeadersTooLarge => "headers_too_large",
            ErrorCode::MisdirectedRequest => "misdirected_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::LeaseLost => "lease_lost",
            ErrorCode::Conflict => "conflict",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::StoreError => "store_error",
        }
    }
}

/// An error answer. Build one with the constructors; handlers return
/// `Result<_, ApiError>` and `?` converts store and input errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    /// The stable code.
    pub code: ErrorCode,
    /// For people: what is wrong, naming the field when there is one.
    pub message: String,
    /// The field, query parameter or path parameter at fault, if one is.
    pub field: Option<String>,
}

impl ApiError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// `invalid_field` for `field`; the message is prefixed with the field's name.
    pub fn field(field: impl Into<String>, message: impl AsRef<str>) -> Self {
        let field = field.into();
        ApiError {
            code: ErrorCode::InvalidField,
            message: format!("{field}: {}", message.as_ref()),
            field: Some(field),
        }
    }

    /// `code`, naming `field` (a header, `queue`, `jobs[2].kind`); the message is
    /// prefixed with the field's name.
    pub fn at(code: ErrorCode, field: impl Into<String>, message: impl AsRef<str>) -> Self {
        let field = field.into();
        ApiError {
            code,
            message: format!("{field}: {}", message.as_ref()),
            field: Some(field),
        }
    }

    /// `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::NotFound, message)
    }

    /// `lease_lost` for job `id`: the answer to every fenced call that matched nothing.
    pub fn lease_lost(id: i64) -> Self {
        ApiError::new(
            ErrorCode::LeaseLost,
            format!(
                "job {id} is not running under this lease token (its lease expired and it \
                 was reclaimed, or it was released, cancelled, finished or deleted); \
                 nothing changed: stop working on it"
            ),
        )
    }

    /// An [`InputError`] whose field sits under `prefix` (`jobs[2]`), for batch items.
    pub fn input_at(prefix: &str, err: InputError) -> Self {
        ApiError::field(format!("{prefix}.{}", err.field), err.message)
    }
}

impl From<InputError> for ApiError {
    fn from(err: InputError) -> Self {
        ApiError::field(err.field, err.message)
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Input(input) => input.into(),
            StoreError::Unavailable { .. } => {
                tracing::warn!(error = %err, "store unavailable");
                ApiError::new(ErrorCode::StoreUnavailable, err.to_string())
            }
            other => {
                // The details stay in the log: a backend's error text can name tables
                // and values the caller has no business seeing.
                tracing::error!(error = %other, "store error");
                ApiError::new(
                    ErrorCode::StoreError,
                    "the store failed to answer; the server's log has the details",
                )
            }
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: ErrorCode,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        let mut response = (
            status,
            Json(Body {
                error: Inner {
                    code: self.code,
                    message: &self.message,
                    field: self.field.as_deref(),
                },
            }),
        )
            .into_response();
        if self.code == ErrorCode::Unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"revenant\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_serializes_as_its_name() {
        for code in [
            ErrorCode::InvalidJson,
            ErrorCode::InvalidField,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::PayloadTooLarge,
            ErrorCode::BadRequest,
            ErrorCode::HeadersTooLarge,
            ErrorCode::MisdirectedRequest,
            ErrorCode::Unauthorized,
            ErrorCode::Forbidden,
            ErrorCode::NotFound,
            ErrorCode::MethodNotAllowed,
            ErrorCode::LeaseLost,
            ErrorCode::Conflict,
            ErrorCode::StoreUnavailable,
            ErrorCode::StoreError,
        ] {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::json!(code.as_str())
            );
            assert!(code.status().is_client_error() || code.status() == 503);
        }
    }

    #[test]
    fn store_input_errors_are_bad_requests_naming_the_field() {
        let err: ApiError = StoreError::Input(InputError::new("queue", "must not be empty")).into();
        assert_eq!(err.code, ErrorCode::InvalidField);
        assert_eq!(err.field.as_deref(), Some("queue"));
        assert_eq!(err.message, "queue: must not be empty");
    }
}
