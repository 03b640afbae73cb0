//! `revenant_http_requests_total` and `revenant_http_request_duration_seconds`: one
//! count and one duration per answered request, into the router's [`Counters`].
//!
//! Labels stay bounded whatever clients send: the route is the template the router
//! matched (`/v1/jobs/{id}`, never `/v1/jobs/42`), `unmatched` for a path no route
//! serves; the method is one of the API's four or `other`; the status is its class
//! (`2xx` to `5xx`). So the series are at most routes × methods × 4, about 150.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use revenant::runtime::metrics as names;

use crate::counters::Counters;
use crate::routes::Route;

/// Middleware: counts and times the request once it is answered.
pub async fn record(
    State(counters): State<std::sync::Arc<Counters>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    let status = status_class(response.status().as_u16());
    let seconds = started.elapsed().as_secs_f64();
    counters.record(|| {
        metrics::counter!(
            names::HTTP_REQUESTS,
            "route" => route.clone(),
            "method" => method,
            "status" => status,
        )
        .increment(1);
        metrics::histogram!(
            names::HTTP_REQUEST_SECONDS,
            "route" => route,
            "method" => method,
        )
        .record(seconds);
    });
    response
}

/// Every route's success counter at zero, so a dashboard's request rate reads 0, not
/// "no data", before the first request.
pub fn register(counters: &Counters, routes: &[Route]) {
    counters.record(|| {
        for route in routes {
            metrics::counter!(
                names::HTTP_REQUESTS,
                "route" => route.path,
                "method" => method_label(&route.method.method()),
                "status" => "2xx",
            )
            .increment(0);
        }
    });
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        _ => "other",
    }
}

fn status_class(status: u16) -> &'static str {
    match status {
        ..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        assert_eq!(status_class(204), "2xx");
        assert_eq!(status_class(431), "4xx");
        assert_eq!(status_class(503), "5xx");
        assert_eq!(method_label(&Method::PATCH), "other");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
    }
}
