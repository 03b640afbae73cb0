//! The dependency routes: every dependency's circuit breaker, rate limit and retry
//! budget with the jobs waiting on it (`revenant breaker list --json`), and an
//! operator's hand on a breaker (`revenant breaker open|close|auto`).

use axum::extract::State;
use axum::http::Extensions;
use axum::Json;
use revenant::dependency::{BreakerAction, DependencyState};
use revenant::store::DependencyListParams;
use serde::Serialize;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{DependencyPath, NoBody};
use crate::state::AppState;

/// The answer to `GET /v1/dependencies`.
#[derive(Debug, Serialize)]
pub struct DependencyList {
    dependencies: Vec<DependencyState>,
}

/// `GET /v1/dependencies`: every dependency the workers have seen (or an operator
/// opened), by key, as the core's `DependencyState`: the JSON of
/// `revenant breaker list --json`.
pub async fn list(State(state): State<AppState>) -> Result<Json<DependencyList>, ApiError> {
    let dependencies = state
        .store()
        .dependency_list(DependencyListParams::default())
        .await?;
    Ok(Json(DependencyList { dependencies }))
}

/// `GET /v1/dependencies/{key}`: one dependency; 404 when no worker has recorded the
/// key and no operator has set its breaker.
pub async fn show(
    State(state): State<AppState>,
    DependencyPath(key): DependencyPath,
) -> Result<Json<DependencyState>, ApiError> {
    find(&state, &key)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no dependency {key:?}: a worker protecting dependencies records a key when it first claims one of its jobs"
            ))
        })
}

async fn find(state: &AppState, key: &str) -> Result<Option<DependencyState>, ApiError> {
    Ok(state
        .store()
        .dependency_list(DependencyListParams {
            dependency: Some(key.to_string()),
            now: None,
        })
        .await?
        .into_iter()
        .next())
}

/// `POST /v1/dependencies/{key}/open`: hold the breaker open. No job of the
/// dependency runs and no probe goes (its jobs wait, attempts given back) until
/// `close` or `auto`. An unknown key is created, so a breaker can be opened before a
/// planned outage.
pub async fn open(
    State(state): State<AppState>,
    extensions: Extensions,
    DependencyPath(key): DependencyPath,
    _: NoBody,
) -> Result<Json<DependencyState>, ApiError> {
    set(&state, &extensions, key, BreakerAction::Open).await
}

/// `POST /v1/dependencies/{key}/close`: close the breaker now and release the jobs
/// parked on it, paced by its rate limit. It opens again by itself if the failures
/// go on.
pub async fn close(
    State(state): State<AppState>,
    extensions: Extensions,
    DependencyPath(key): DependencyPath,
    _: NoBody,
) -> Result<Json<DependencyState>, ApiError> {
    set(&state, &extensions, key, BreakerAction::Close).await
}

/// `POST /v1/dependencies/{key}/auto`: release a hold. An open breaker sends a probe
/// at once and works by itself from there.
pub async fn auto(
    State(state): State<AppState>,
    extensions: Extensions,
    DependencyPath(key): DependencyPath,
    _: NoBody,
) -> Result<Json<DependencyState>, ApiError> {
    set(&state, &extensions, key, BreakerAction::Auto).await
}

async fn set(
    state: &AppState,
    extensions: &Extensions,
    key: String,
    action: BreakerAction,
) -> Result<Json<DependencyState>, ApiError> {
    // For the log: how many parked jobs a close releases (as `revenant breaker close`
    // says).
    let parked = match action {
        BreakerAction::Close => find(state, &key).await?.map_or(0, |d| d.waiting.breaker),
        BreakerAction::Open | BreakerAction::Auto => 0,
    };
    let after = state.client.breaker(&key, action).await?;
    let actor = extensions
        .get::<Caller>()
        .and_then(|c| c.0.clone())
        .unwrap_or_else(|| "http".to_string());
    let breaker = after.breaker.as_str();
    match action {
        BreakerAction::Open => {
            tracing::info!(dependency = key, actor, breaker, "breaker held open");
        }
        BreakerAction::Close => {
            tracing::info!(
                dependency = key,
                actor,
                breaker,
                released = parked,
                "breaker closed"
            );
        }
        BreakerAction::Auto => {
            tracing::info!(dependency = key, actor, breaker, "breaker set to auto");
        }
    }
    Ok(Json(after))
}
