//! The queue routes: list with the four numbers, pause, resume, and the history the
//! dashboard charts.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use revenant::store::{QueueHistoryParams, QueueHistoryPoint, QueueStatsParams};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::{NoBody, QueryParams, QueuePath};
use crate::state::AppState;
use crate::views::QueueView;

/// The answer to `GET /v1/queues`.
#[derive(Debug, Serialize)]
pub struct QueueList {
    queues: Vec<QueueView>,
}

/// `GET /v1/queues`: every known queue by name, with depth, oldest due age, dead and
/// workers alive (seen in the last 30 s), and the rest. Counts of the last minute.
pub async fn list(State(state): State<AppState>) -> Result<Json<QueueList>, ApiError> {
    let stats = state
        .store()
        .queue_stats(QueueStatsParams::default())
        .await?;
    Ok(Json(QueueList {
        queues: stats.into_iter().map(QueueView::from).collect(),
    }))
}

/// The answer to pause and resume.
#[derive(Debug, Serialize)]
pub struct QueuePaused {
    queue: String,
    paused: bool,
}

/// `POST /v1/queues/{name}/pause`: no job is claimed from the queue until resumed;
/// enqueues are still accepted. Pausing an unknown queue creates it, paused.
pub async fn pause(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    _: NoBody,
) -> Result<Json<QueuePaused>, ApiError> {
    state.client.pause(&queue).await?;
    Ok(Json(QueuePaused {
        queue,
        paused: true,
    }))
}

/// `POST /v1/queues/{name}/resume`.
pub async fn resume(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    _: NoBody,
) -> Result<Json<QueuePaused>, ApiError> {
    state.client.resume(&queue).await?;
    Ok(Json(QueuePaused {
        queue,
        paused: false,
    }))
}

/// `GET /v1/queues/{name}/history`'s query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    minutes: Option<u32>,
}

/// The answer to `GET /v1/queues/{name}/history`.
#[derive(Debug, Serialize)]
pub struct QueueHistory {
    queue: String,
    step: String,
    points: Vec<QueueHistoryPoint>,
}

/// The longest history one call draws: a day of minutes.
const MAX_MINUTES: u32 = 1440;

/// `GET /v1/queues/{name}/history?minutes=60`: depth and dead count one minute
/// apart, `minutes + 1` points from `minutes` ago to now, rebuilt from the jobs'
/// timestamps (see the store's `queue_history` for what that can and cannot see). An
/// unknown queue has every count at zero.
pub async fn history(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    QueryParams(query): QueryParams<HistoryQuery>,
) -> Result<Json<QueueHistory>, ApiError> {
    let minutes = match query.minutes {
        None => 60,
        Some(m) if (1..=MAX_MINUTES).contains(&m) => m,
        Some(m) => {
            return Err(ApiError::field(
                "minutes",
                format!("{m} is out of range; use 1..={MAX_MINUTES}"),
            ))
        }
    };
    let step = Duration::from_secs(60);
    let points = state
        .store()
        .queue_history(QueueHistoryParams {
            queue: queue.clone(),
            step,
            points: minutes + 1,
            now: None,
        })
        .await?;
    Ok(Json(QueueHistory {
        queue,
        step: revenant::duration::format(step),
        points,
    }))
}
