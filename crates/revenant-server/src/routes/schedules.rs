//! Periodic jobs: list the schedules, store or remove one, pause, resume, run by
//! hand. What these routes store is what every worker's scheduler reads (within a
//! second) and what `revenant cron` shows (`revenant::Client::set_schedule`).

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use revenant::schedule::{Misfire, ScheduleListing, ScheduleSpec, ScheduledJob};
use revenant::store::Enqueued;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::{JsonBody, NoBody, QueuePath};
use crate::state::AppState;

/// The answer to `GET /v1/schedules`.
#[derive(Debug, Serialize)]
pub struct ScheduleList {
    schedules: Vec<ScheduleListing>,
}

/// `GET /v1/schedules`: every schedule by name, with its next and last tick, paused or
/// not, and its misfire policy.
pub async fn list(State(state): State<AppState>) -> Result<Json<ScheduleList>, ApiError> {
    let records = state.client.schedules().await?;
    Ok(Json(ScheduleList {
        schedules: records.iter().map(ScheduleListing::from).collect(),
    }))
}

/// The body of `PUT /v1/schedules/{name}`: a schedule without its name (the path's).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleBody {
    #[serde(default)]
    cron: Option<String>,
    #[serde(default, with = "revenant::duration::serde_opt")]
    every: Option<Duration>,
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    misfire: Option<Misfire>,
    #[serde(default, with = "revenant::duration::serde_opt")]
    grace: Option<Duration>,
    job: ScheduledJob,
}

/// `PUT /v1/schedules/{name}`: stores the schedule, replacing the one of that name. A
/// new or changed schedule's first tick is the first after now; an unchanged one keeps
/// its next tick and its pause. Bad input answers 400 `invalid_field` naming the field
/// (`cron`, `every`, `timezone`, `grace`, `payload`, ...).
pub async fn set(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    JsonBody(body): JsonBody<ScheduleBody>,
) -> Result<Json<ScheduleListing>, ApiError> {
    let spec = ScheduleSpec {
        name: name.clone(),
        cron: body.cron,
        every: body.every,
        timezone: body.timezone.unwrap_or_else(|| "UTC".to_string()),
        misfire: body.misfire.unwrap_or_default(),
        grace: body.grace,
        job: body.job,
    };
    state.client.set_schedule(spec).await?;
    let record = found(&state, &name).await?;
    Ok(Json(record))
}

async fn found(state: &AppState, name: &str) -> Result<ScheduleListing, ApiError> {
    state
        .client
        .schedules()
        .await?
        .iter()
        .find(|record| record.spec.name == name)
        .map(ScheduleListing::from)
        .ok_or_else(|| ApiError::not_found(format!("no schedule named {name:?}")))
}

/// The answer to `DELETE /v1/schedules/{name}`.
#[derive(Debug, Serialize)]
pub struct ScheduleRemoved {
    name: String,
    removed: bool,
}

/// `DELETE /v1/schedules/{name}`: removes the schedule (its jobs stay). 404 when there
/// is none.
pub async fn remove(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    _: NoBody,
) -> Result<Json<ScheduleRemoved>, ApiError> {
    if !state.client.delete_schedule(&name).await? {
        return Err(ApiError::not_found(format!("no schedule named {name:?}")));
    }
    Ok(Json(ScheduleRemoved {
        name,
        removed: true,
    }))
}

/// `POST /v1/schedules/{name}/pause`: no tick is enqueued until resumed. 404 when
/// there is no such schedule.
pub async fn pause(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    _: NoBody,
) -> Result<Json<ScheduleListing>, ApiError> {
    if !state.client.pause_schedule(&name).await? {
        return Err(ApiError::not_found(format!("no schedule named {name:?}")));
    }
    Ok(Json(found(&state, &name).await?))
}

/// `POST /v1/schedules/{name}/resume`: ticks resume from the first after now (those
/// that fell while paused are not enqueued). 404 when there is no such schedule.
pub async fn resume(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    _: NoBody,
) -> Result<Json<ScheduleListing>, ApiError> {
    if !state.client.resume_schedule(&name).await? {
        return Err(ApiError::not_found(format!("no schedule named {name:?}")));
    }
    Ok(Json(found(&state, &name).await?))
}

/// The answer to `POST /v1/schedules/{name}/run`.
#[derive(Debug, Serialize)]
pub struct ScheduleRun {
    name: String,
    job: Enqueued,
}

/// `POST /v1/schedules/{name}/run`: enqueues the schedule's job now, paused or not;
/// its ticks are untouched. 404 when there is no such schedule.
pub async fn run(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    _: NoBody,
) -> Result<Json<ScheduleRun>, ApiError> {
    match state.client.run_schedule(&name).await? {
        Some(job) => Ok(Json(ScheduleRun { name, job })),
        None => Err(ApiError::not_found(format!("no schedule named {name:?}"))),
    }
}
