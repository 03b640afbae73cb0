//! One log event per request: method, route, status, duration, at `debug` for
//! answers below 400, `info` for client errors, `warn` for the store's 503s. Enable
//! with `REVENANT_LOG=revenant_server=debug`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

/// Middleware: logs the request once it is answered.
pub async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    // The route, not the raw path: ids stay out of the log's cardinality.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "(no route)".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match status {
        500.. => tracing::warn!(%method, route, status, ms, "request"),
        400..=499 => tracing::info!(%method, route, status, ms, "request"),
        _ => tracing::debug!(%method, route, status, ms, "request"),
    }
    response
}
