//! The HTTP connection side: hyper's limits, the request-header limits, and JSON for
//! every answer the framework makes by itself.
//!
//! hyper answers a request head larger than its read buffer with a bare 431 and no
//! body, before any of the router's code runs. So [`serve`] gives hyper a buffer far
//! above the limit ([`HEAD_BUFFER`]), and [`header_limits`] refuses heads over
//! [`MAX_HEADER_BYTES`] or [`MAX_HEADERS`] with the API's JSON error. Only a head
//! larger than the buffer itself (2 MiB) still gets hyper's bare answer, and the
//! connection closed. [`json_errors`] turns any other error answer that is not JSON
//! (an extractor's plain-text rejection, say) into the API's shape.

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt;

use crate::error::{ApiError, ErrorCode};

/// The most bytes of request headers accepted (names, values and their separators):
/// 64 KiB, far above any real client's (a bearer token is at most 512 bytes).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The most request headers accepted.
pub const MAX_HEADERS: usize = 100;

/// hyper's read buffer, which bounds a request head: past it hyper answers 431 with
/// no body and closes the connection.
pub const HEAD_BUFFER: usize = 2 * 1024 * 1024;

/// The most headers hyper parses (so a head with more reaches [`header_limits`]).
const PARSED_HEADERS: usize = 1000;

/// Middleware: 431 `headers_too_large` for a head over [`MAX_HEADER_BYTES`] or
/// [`MAX_HEADERS`].
pub async fn header_limits(request: Request, next: Next) -> Result<Response, ApiError> {
    let headers = request.headers();
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        let largest = headers
            .iter()
            .max_by_key(|(_, value)| value.len())
            .map(|(name, _)| name.as_str().to_string())
            .unwrap_or_default();
        return Err(ApiError {
            field: Some(largest.clone()).filter(|_| headers.len() <= MAX_HEADERS),
            ..ApiError::new(
                ErrorCode::HeadersTooLarge,
                format!(
                    "the request has {} headers of {bytes} bytes; the limits are {MAX_HEADERS} \
                     headers and {MAX_HEADER_BYTES} bytes (the largest is {largest})",
                    headers.len()
                ),
            )
        });
    }
    Ok(next.run(request).await)
}

/// Middleware: an error answer (4xx, 5xx) whose body is not JSON becomes the API's
/// error shape, with the code its status means and the original text as the message.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let code = code_for(status);
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("the request was refused")
            .to_string()
    } else {
        text
    };
    let mut fixed = ApiError::new(code, message).into_response();
    *fixed.status_mut() = status;
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            fixed.headers_mut().insert(name.clone(), value.clone());
        }
    }
    fixed
}

fn code_for(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::MISDIRECTED_REQUEST => ErrorCode::MisdirectedRequest,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ErrorCode::HeadersTooLarge,
        StatusCode::CONFLICT => ErrorCode::Conflict,
        s if s.is_server_error() => ErrorCode::StoreError,
        _ => ErrorCode::BadRequest,
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then lets the requests in
/// flight finish. HTTP/1.1, with the head buffer above; handlers see the peer's
/// address (a remote worker's registry entry records it).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    accept_error(err).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let service = tower::service_fn(move |mut request: Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(request.map(Body::new))
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        // As axum::serve does otherwise: no timer, so no header read timeout that
        // would close a remote worker's idle keep-alive connection under it.
        builder
            .max_buf_size(HEAD_BUFFER)
            .max_headers(PARSED_HEADERS);
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::trace!(error = %err, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// An accept error: a peer that went away is nothing; anything else (out of file
/// descriptors) is logged and waited out for a second, as axum and hyper do.
async fn accept_error(err: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %err, "accept error");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
