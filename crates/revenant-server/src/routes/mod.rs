//! The route table, and the router built from it.
//!
//! [`ROUTES`] is the one list of the API's routes: the router is built from it, each
//! route's scope check comes from it, and a test compares it with `openapi.json`'s
//! paths, methods and `x-revenant-scope`s, so the document cannot drift from the code.
//! The dashboard's static files (`GET /`, `GET /ui/{*path}`) are not part of the API
//! and not in the table.

mod dead;
mod dependencies;
mod health;
mod jobs;
mod ops;
mod policies;
mod queues;
mod schedules;
mod work;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::Router;

use crate::auth::{require_scope, RequireScope, Scope};
use crate::error::{ApiError, ErrorCode};
use crate::state::{AppState, ServerConfig};

/// One route of the API.
#[derive(Clone, Copy)]
pub struct Route {
    /// The method.
    pub method: Verb,
    /// The path, in the router's and OpenAPI's syntax (`/v1/jobs/{id}`).
    pub path: &'static str,
    /// The scope a token needs; `None`: no token needed.
    pub scope: Option<Scope>,
    handler: fn() -> MethodRouter<AppState>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method.as_str(), self.path)
    }
}

/// The methods the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Reads.
    Get,
    /// Changes: enqueue, settle, redrive, pause, ...
    Post,
    /// Replaces a resource whole (a stored policy).
    Put,
    /// Removes a resource (a stored policy).
    Delete,
}

impl Verb {
    /// The method's name in lower case, as OpenAPI writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Delete => "delete",
        }
    }

    /// The HTTP method.
    pub fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Delete => Method::DELETE,
        }
    }
}

const fn route(
    method: Verb,
    path: &'static str,
    scope: Option<Scope>,
    handler: fn() -> MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        scope,
        handler,
    }
}

use Scope::{Admin, Metrics, Produce, Work};
use Verb::{Delete, Get, Post, Put};

/// Every route of the API, in the order `docs/api.md` lists them.
pub static ROUTES: &[Route] = &[
    route(Get, "/healthz", None, || get(health::healthz)),
    route(Get, "/readyz", None, || get(health::readyz)),
    route(Get, "/openapi.json", None, || get(health::openapi)),
    route(Get, "/metrics", Some(Metrics), || get(health::metrics)),
    route(Post, "/v1/jobs", Some(Produce), || post(jobs::enqueue)),
    route(Get, "/v1/jobs", Some(Admin), || get(jobs::list)),
    route(Get, "/v1/jobs/{id}", Some(Admin), || get(jobs::show)),
    route(Post, "/v1/jobs/{id}/cancel", Some(Admin), || {
        post(jobs::cancel)
    }),
    route(Post, "/v1/claims", Some(Work), || post(work::claim)),
    route(Post, "/v1/jobs/{id}/heartbeat", Some(Work), || {
        post(work::heartbeat)
    }),
    route(Post, "/v1/jobs/{id}/complete", Some(Work), || {
        post(work::complete)
    }),
    route(Post, "/v1/jobs/{id}/fail", Some(Work), || post(work::fail)),
    route(Post, "/v1/jobs/{id}/snooze", Some(Work), || {
        post(work::snooze)
    }),
    route(Get, "/v1/dead", Some(Admin), || get(dead::list)),
    route(Get, "/v1/dead/fingerprints", Some(Admin), || {
        get(dead::fingerprints)
    }),
    route(Get, "/v1/dead/history", Some(Admin), || get(dead::history)),
    route(Get, "/v1/dead/{id}", Some(Admin), || get(dead::show)),
    route(Post, "/v1/dead/redrive", Some(Admin), || {
        post(dead::redrive)
    }),
    route(Post, "/v1/dead/purge", Some(Admin), || post(dead::purge)),
    route(Get, "/v1/queues", Some(Admin), || get(queues::list)),
    route(Post, "/v1/queues/{name}/pause", Some(Admin), || {
        post(queues::pause)
    }),
    route(Post, "/v1/queues/{name}/resume", Some(Admin), || {
        post(queues::resume)
    }),
    route(Get, "/v1/queues/{name}/history", Some(Admin), || {
        get(queues::history)
    }),
    route(Get, "/v1/dependencies", Some(Admin), || {
        get(dependencies::list)
    }),
    route(Get, "/v1/dependencies/{key}", Some(Admin), || {
        get(dependencies::show)
    }),
    route(Post, "/v1/dependencies/{key}/open", Some(Admin), || {
        post(dependencies::open)
    }),
    route(Post, "/v1/dependencies/{key}/close", Some(Admin), || {
        post(dependencies::close)
    }),
    route(Post, "/v1/dependencies/{key}/auto", Some(Admin), || {
        post(dependencies::auto)
    }),
    route(Get, "/v1/policies", Some(Admin), || get(policies::list)),
    route(Put, "/v1/policies/{scope}", Some(Admin), || {
        put(policies::set)
    }),
    route(Delete, "/v1/policies/{scope}", Some(Admin), || {
        delete(policies::remove)
    }),
    route(Get, "/v1/schedules", Some(Admin), || get(schedules::list)),
    route(Put, "/v1/schedules/{name}", Some(Admin), || {
        put(schedules::set)
    }),
    route(Delete, "/v1/schedules/{name}", Some(Admin), || {
        delete(schedules::remove)
    }),
    route(Post, "/v1/schedules/{name}/pause", Some(Admin), || {
        post(schedules::pause)
    }),
    route(Post, "/v1/schedules/{name}/resume", Some(Admin), || {
        post(schedules::resume)
    }),
    route(Post, "/v1/schedules/{name}/run", Some(Admin), || {
        post(schedules::run)
    }),
    route(Get, "/v1/workers", Some(Admin), || get(ops::workers)),
    route(Get, "/v1/alerts", Some(Admin), || get(ops::alerts)),
    route(Get, "/v1/stats", Some(Admin), || get(ops::stats)),
];

/// The whole application: the API routes of [`ROUTES`] with their scope checks, the
/// dashboard's static files, JSON answers for unknown paths, wrong methods and
/// everything else refused, the header and body limits, and without tokens the
/// loopback guard.
pub fn router(store: Arc<dyn revenant::Store>, config: ServerConfig) -> Router {
    let tokens = Arc::new(config.tokens);
    let state = AppState {
        client: revenant::Client::new(store),
        alerts: config.alerts.map(Arc::new),
        counters: Arc::new(crate::counters::Counters::default()),
        queue_rules: Arc::new(config.queue_rules),
    };
    crate::http_metrics::register(&state.counters, ROUTES);
    let counters = Arc::clone(&state.counters);
    let open = tokens.is_empty();
    let mut paths: Vec<(&'static str, MethodRouter<AppState>)> = Vec::new();
    for entry in ROUTES {
        let mut handler = (entry.handler)();
        if let Some(scope) = entry.scope {
            handler = handler.route_layer(axum::middleware::from_fn_with_state(
                RequireScope {
                    tokens: Arc::clone(&tokens),
                    scope,
                },
                require_scope,
            ));
        }
        match paths.iter_mut().find(|(path, _)| *path == entry.path) {
            Some((_, existing)) => *existing = std::mem::take(existing).merge(handler),
            None => paths.push((entry.path, handler)),
        }
    }
    let mut router = Router::new();
    for (path, handler) in paths {
        router = router.route(path, handler);
    }
    router = router
        .route("/", get(|| async { dashboard_asset("index.html") }))
        .route(
            "/ui/{*path}",
            get(
                |axum::extract::Path(path): axum::extract::Path<String>| async move {
                    dashboard_asset(&path)
                },
            ),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    if open {
        // Without tokens: this machine's programs only, never a web page's request
        // (Host, Origin, Content-Type; see crate::loopback).
        router = router.layer(axum::middleware::from_fn(crate::loopback::guard));
    }
    router
        .layer(axum::middleware::from_fn(crate::connection::header_limits))
        .layer(axum::middleware::from_fn(crate::log::log_request))
        .layer(axum::middleware::from_fn_with_state(
            counters,
            crate::http_metrics::record,
        ))
        .layer(axum::middleware::from_fn(crate::connection::json_errors))
        .layer(DefaultBodyLimit::max(config.max_body))
        .with_state(state)
}

/// The dashboard's security headers. Every file it needs comes from this server and
/// it has no inline script or style (the dashboard's tests check both), so the policy
/// can forbid everything else: an injected script or a framing page gets nothing.
/// `no-cache` makes a browser revalidate, so an upgraded server never runs old code.
const DASHBOARD_HEADERS: [(header::HeaderName, &str); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::CACHE_CONTROL, "no-cache"),
    (header::REFERRER_POLICY, "no-referrer"),
];

fn dashboard_asset(path: &str) -> Response {
    match crate::dashboard::asset(path) {
        Some((content_type, bytes)) => (
            [(header::CONTENT_TYPE, content_type)],
            DASHBOARD_HEADERS,
            bytes,
        )
            .into_response(),
        None => ApiError::not_found(format!("no dashboard file {path:?}")).into_response(),
    }
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no route {}; the routes are listed at /openapi.json",
        uri.path()
    ))
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!(
            "{method} is not allowed on {}; the Allow header lists the methods that are",
            uri.path()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for route in ROUTES {
            assert!(
                seen.insert((route.method.as_str(), route.path)),
                "{route:?} twice"
            );
        }
    }
}
