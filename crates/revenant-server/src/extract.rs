//! Extractors that answer bad input with [`ApiError`]s naming the field at fault,
//! instead of axum's plain-text rejections.
//!
//! - [`JsonBody`]: `Content-Type: application/json` required, the body limit applied
//!   (413 `payload_too_large`), syntax errors as `invalid_json`, and a value of the
//!   wrong type, a missing field or an unknown field as `invalid_field` with its path
//!   (`jobs[2].priority`).
//! - [`OptionalJsonBody`]: the same, but an empty body is the type's default.
//! - [`NoBody`]: a route that takes no body: nothing, or `{}` (what a client that
//!   always sends a JSON object sends); anything else is 400 naming `body`, and the
//!   body limit applies.
//! - [`QueryParams`]: the query string, unknown and repeated parameters refused.
//! - [`JobIdPath`], [`QueuePath`] and [`DependencyPath`]: the `{id}`, `{name}` and
//!   `{key}` of a route.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use revenant::names;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode};

/// A JSON request body of type `T`. See the module docs.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

/// A JSON request body that may be left out (an empty body is `T::default()`).
#[derive(Debug)]
pub struct OptionalJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_body(request, state).await?;
        if bytes.is_empty() {
            return Err(ApiError::new(
                ErrorCode::InvalidJson,
                "the request body is empty; this route needs a JSON object",
            ));
        }
        must_be_object(&bytes)?;
        decode(&bytes).map(JsonBody)
    }
}

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_body(request, state).await?;
        // No bytes at all is no body; whitespace alone is not JSON (see `NoBody`).
        if bytes.is_empty() {
            return Ok(OptionalJsonBody(T::default()));
        }
        must_be_object(&bytes)?;
        decode(&bytes).map(OptionalJsonBody)
    }
}

/// The body of a route that takes none: empty, or the empty object `{}`.
#[derive(Debug, Clone, Copy)]
pub struct NoBody;

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = read_body(request, state).await?;
        // No bytes at all is no body. Whitespace alone is not: it is not JSON, and a
        // request that declares a JSON body must carry one (the API fuzz sent " ").
        if bytes.is_empty() {
            return Ok(NoBody);
        }
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(map)) if map.is_empty() => Ok(NoBody),
            _ => Err(ApiError::field(
                "body",
                "this route takes no body; send none, or {}",
            )),
        }
    }
}

/// Every body of the API is a JSON object. Checked before decoding: serde would read
/// an array as a struct's fields in order (`[]` as a body of defaults), which the
/// documented schema does not allow.
fn must_be_object(bytes: &[u8]) -> Result<(), ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | None => Ok(()),
        Some(_) => Err(ApiError::field("body", "must be a JSON object")),
    }
}

/// Reads the whole body under the router's limit, after checking the content type of
/// a non-empty body.
async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    let json = is_json(request.headers());
    let declared_empty = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|len| len.as_bytes() == b"0");
    let bytes = Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the request body is larger than this server's limit (--max-body)",
                )
            } else {
                ApiError::new(
                    ErrorCode::InvalidJson,
                    format!("the request body could not be read: {rejection}"),
                )
            }
        })?;
    if !(json || declared_empty || bytes.is_empty()) {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "send the body as JSON with the header `Content-Type: application/json`",
        ));
    }
    Ok(bytes)
}

/// `application/json`, or any `application/*+json`, with or without parameters.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Decodes JSON, naming the path of the field at fault.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::new(
                ErrorCode::InvalidJson,
                format!("the request body is not valid JSON: {inner}"),
            )
        } else {
            data_error(&path, &inner.to_string())
        }
    })?;
    deserializer.end().map_err(|err| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the request body has more after its JSON value: {err}"),
        )
    })?;
    Ok(value)
}

/// An `invalid_field` for a serde data error at `path` (`.` for the root). The path
/// of a missing field is its parent's; serde names the field in backquotes, and that
/// name completes the path. (An unknown field's path already ends with it.)
fn data_error(path: &str, message: &str) -> ApiError {
    // serde_json appends " at line L column C": the path says more to a client.
    let message = message
        .rsplit_once(" at line ")
        .map_or(message, |(head, _)| head);
    let named = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    let field = match (path, named) {
        ("." | "", Some(name)) => name.to_string(),
        (path, Some(name)) => format!("{path}.{name}"),
        ("." | "", None) => "body".to_string(),
        (path, None) => path.to_string(),
    };
    ApiError::field(field, message)
}

/// The query string as `T`: each parameter named in errors, unknown ones refused
/// (give `T` `#[serde(deny_unknown_fields)]`).
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        // serde would name a repeated parameter's error after the whole query (`body`).
        let mut seen = std::collections::BTreeSet::new();
        for (name, _) in form_urlencoded::parse(query.as_bytes()) {
            if !seen.insert(name.clone()) {
                return Err(ApiError::field(
                    name.into_owned(),
                    "is given more than once; give it once",
                ));
            }
        }
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(QueryParams)
            .map_err(|err| {
                let path = err.path().to_string();
                data_error(&path, &err.into_inner().to_string())
            })
    }
}

/// The `{id}` of a job route: a positive integer.
#[derive(Debug, Clone, Copy)]
pub struct JobIdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let text = path_param(parts, state, "id").await?;
        match text.parse::<i64>() {
            Ok(id) if id >= 1 => Ok(JobIdPath(id)),
            _ => Err(ApiError::field(
                "id",
                format!("{text:?} is not a job id (a positive whole number)"),
            )),
        }
    }
}

/// The `{name}` of a queue route: a valid queue name.
#[derive(Debug, Clone)]
pub struct QueuePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for QueuePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let name = path_param(parts, state, "name").await?;
        names::validate_name("name", &name)?;
        Ok(QueuePath(name))
    }
}

/// The `{key}` of a dependency route: a valid dependency key (any text without
/// control characters, at most 255 bytes), as `revenant breaker` accepts it.
#[derive(Debug, Clone)]
pub struct DependencyPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for DependencyPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let key = path_param(parts, state, "key").await?;
        names::validate_key("key", &key)?;
        Ok(DependencyPath(key))
    }
}

async fn path_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    key: &'static str,
) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|rejection| ApiError::field(key, rejection.body_text()))?;
    params
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, value)| value.to_string())
        .ok_or_else(|| ApiError::field(key, "is missing from the path"))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // Read through Debug only.
    struct Inner {
        priority: i32,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        jobs: Vec<Inner>,
    }

    #[test]
    fn decode_names_the_path_of_the_bad_field() {
        let err = decode::<Outer>(br#"{"jobs":[{"priority":1},{"priority":"high"}]}"#).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidField);
        assert_eq!(err.field.as_deref(), Some("jobs[1].priority"));
        assert!(!err.message.contains("line 1"), "{}", err.message);

        let err = decode::<Outer>(br#"{"jobs":[{}]}"#).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("jobs[0].priority"));
        assert!(err.message.contains("missing field"));

        let err = decode::<Outer>(br#"{"jobs":[],"extra":1}"#).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("extra"));

        let err = decode::<Outer>(br#""text""#).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("body"));
    }

    #[test]
    fn broken_json_is_invalid_json() {
        for bad in [&b"{"[..], b"{\"jobs\": [}", b"nul", b"{\"jobs\": []} {}"] {
            let err = decode::<Outer>(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidJson, "{bad:?}");
        }
    }

    /// A JSON request with this body, for the body extractors.
    fn json_request(body: &'static str) -> Request {
        axum::http::Request::builder()
            .method("POST")
            .header(header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body))
            .unwrap()
    }

    /// Only zero bytes are "no body": whitespace alone is not JSON, and is refused
    /// naming `body` (the API fuzz found `POST .../resume` with " " answered 200).
    #[tokio::test]
    async fn no_body_is_zero_bytes_or_the_empty_object_and_nothing_else() {
        for fine in ["", "{}", " {} ", "{ }\n"] {
            assert!(
                NoBody::from_request(json_request(fine), &()).await.is_ok(),
                "{fine:?}"
            );
        }
        for bad in [" ", "\n", "\t\r\n", "null", "[]", "{\"a\": 1}", "\"\""] {
            let err = NoBody::from_request(json_request(bad), &())
                .await
                .expect_err(bad);
            assert_eq!(err.field.as_deref(), Some("body"), "{bad:?}");
        }
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Optional {
        priority: Option<i32>,
    }

    #[tokio::test]
    async fn an_optional_body_is_zero_bytes_or_a_json_object() {
        let OptionalJsonBody(empty) =
            OptionalJsonBody::<Optional>::from_request(json_request(""), &())
                .await
                .unwrap();
        assert_eq!(empty.priority, None);
        let OptionalJsonBody(set) =
            OptionalJsonBody::<Optional>::from_request(json_request(r#" {"priority": 3} "#), &())
                .await
                .unwrap();
        assert_eq!(set.priority, Some(3));
        for bad in [" ", "\n\n", "[]", "null"] {
            let err = OptionalJsonBody::<Optional>::from_request(json_request(bad), &())
                .await
                .expect_err(bad);
            assert!(
                err.field.as_deref() == Some("body") || err.code == ErrorCode::InvalidJson,
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn json_content_types_are_recognised() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            is_json(&headers)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        assert!(!with("text/plain"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!is_json(&HeaderMap::new()));
    }
}
