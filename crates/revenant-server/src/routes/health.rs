//! `/healthz`, `/readyz`, `/openapi.json` and `/metrics`.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use metrics_exporter_prometheus::PrometheusBuilder;
use revenant::runtime::metrics as names;
use revenant::store::{DependencyListParams, QueueStatsParams};
use serde_json::json;

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Liveness: the process answers. Never touches the store, so a database outage does
/// not get the server restarted by its supervisor.
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: the store answers (one `now()` query). 503 `store_unavailable` when not,
/// so a load balancer sends traffic elsewhere.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    state.store().now().await.map_err(|err| {
        ApiError::new(
            ErrorCode::StoreUnavailable,
            format!("the store does not answer: {err}"),
        )
    })?;
    Ok(Json(
        json!({ "status": "ready", "backend": state.store().backend() }),
    ))
}

/// The OpenAPI document, as kept in the repository (`openapi.json`).
pub async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::OPENAPI_JSON,
    )
        .into_response()
}

/// The Prometheus text format's content type.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `revenant_build_info` (version and backend), the queue gauges (`revenant_queue_*`: depth, oldest due age, dead, workers alive,
/// ...) and the dependency gauges (`revenant_dependency_*`: breaker state, held open,
/// trips, failure share, rate-limit tokens, retry budget, jobs waiting), read from the
/// store at each scrape, as `revenant metrics` prints them; then the counters of the
/// attempts remote workers settled through this server (`revenant_job_attempts_total`,
/// `revenant_dead_letters_total`) and of the requests it answered
/// (`revenant_http_requests_total`, `revenant_http_request_duration_seconds`), since it
/// started. The attempts of in-process workers,
/// permit and answer counters and latency histograms come from those workers' own
/// `/metrics` (`revenant work --metrics-addr`).
pub async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let stats = state
        .store()
        .queue_stats(QueueStatsParams::default())
        .await?;
    let dependencies = state
        .store()
        .dependency_list(DependencyListParams::default())
        .await?;
    // A recorder of this request's own, never installed: the scrape shows exactly the
    // store's numbers now, and concurrent scrapes share nothing.
    let recorder = PrometheusBuilder::new().build_recorder();
    ::metrics::with_local_recorder(&recorder, || {
        names::describe();
        names::build_info(state.store().backend());
        names::queue_gauges(&stats);
        names::dependency_gauges(&dependencies);
    });
    // The families differ (gauges from the store, counters from the settle step), so
    // the two texts join into one exposition.
    let mut text = recorder.handle().render();
    text.push_str(&state.counters.render());
    Ok(([(header::CONTENT_TYPE, EXPOSITION)], text).into_response())
}
