//! The dead-letter routes: list, show, fingerprints, the redrive audit, redrive and
//! purge. The rules are the client's (`revenant::Client`), the CLI's too: a redrive or
//! purge with nothing to narrow it is refused unless `all` is true, a dry run changes
//! nothing, a paced redrive spreads the jobs' `run_at` so workers take them no faster
//! than the rate.

use axum::extract::State;
use axum::http::Extensions;
use axum::Json;
use revenant::store::{JobFilter, RedriveRecord};
use revenant::{DeadReason, DeadSelection, JobState, Rate, RedriveRequest};
use serde::{Deserialize, Serialize};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{JobIdPath, JsonBody, QueryParams};
use crate::input;
use crate::state::AppState;
use crate::views::{FingerprintView, JobList, JobView};

/// `GET /v1/dead`'s query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadQuery {
    queue: Option<String>,
    kind: Option<String>,
    fingerprint: Option<String>,
    reason: Option<String>,
    limit: Option<u32>,
    before: Option<i64>,
}

fn reason(value: Option<&str>) -> Result<Option<DeadReason>, ApiError> {
    value
        .map(|r| {
            r.parse::<DeadReason>()
                .map_err(|err| ApiError::field("reason", err.message))
        })
        .transpose()
}

fn dead_filter(
    queue: Option<String>,
    kind: Option<String>,
    fingerprint: Option<&str>,
    dead_reason: Option<&str>,
) -> Result<JobFilter, ApiError> {
    input::name("queue", queue.as_deref())?;
    input::name("kind", kind.as_deref())?;
    Ok(JobFilter {
        queue,
        kind,
        fingerprint: fingerprint.map(input::fingerprint).transpose()?,
        dead_reason: reason(dead_reason)?,
        statuses: Some(vec![JobState::Dead]),
        ..JobFilter::default()
    })
}

/// `GET /v1/dead`: dead jobs, newest first.
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<DeadQuery>,
) -> Result<Json<JobList>, ApiError> {
    let filter = dead_filter(
        query.queue,
        query.kind,
        query.fingerprint.as_deref(),
        query.reason.as_deref(),
    )?;
    let limit = input::limit(query.limit, 50, super::jobs::MAX_LIST)?;
    super::jobs::page(&state, filter, query.before, limit).await
}

/// `GET /v1/dead/{id}`: a dead job; 404 when the job is not dead.
pub async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Json<JobView>, ApiError> {
    let job = super::jobs::find(&state, id).await?;
    if job.status != JobState::Dead {
        return Err(ApiError::not_found(format!(
            "job {id} is {}, not dead (GET /v1/jobs/{id} shows it)",
            job.status
        )));
    }
    Ok(Json(job.into()))
}

/// `GET /v1/dead/fingerprints`'s query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FingerprintsQuery {
    queue: Option<String>,
    kind: Option<String>,
    reason: Option<String>,
    limit: Option<u32>,
}

/// The answer to `GET /v1/dead/fingerprints`.
#[derive(Debug, Serialize)]
pub struct FingerprintList {
    fingerprints: Vec<FingerprintView>,
}

/// `GET /v1/dead/fingerprints`: one group per error, the largest first.
pub async fn fingerprints(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<FingerprintsQuery>,
) -> Result<Json<FingerprintList>, ApiError> {
    let filter = dead_filter(query.queue, query.kind, None, query.reason.as_deref())?;
    let limit = input::limit(query.limit, 50, super::jobs::MAX_LIST)?;
    let groups = state.client.dead_fingerprints(filter, limit).await?;
    Ok(Json(FingerprintList {
        fingerprints: groups.into_iter().map(FingerprintView::from).collect(),
    }))
}

/// `GET /v1/dead/history`'s query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    limit: Option<u32>,
}

/// The answer to `GET /v1/dead/history`.
#[derive(Debug, Serialize)]
pub struct RedriveHistory {
    redrives: Vec<RedriveRecord>,
}

/// `GET /v1/dead/history`: the redrive audit, newest first.
pub async fn history(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<HistoryQuery>,
) -> Result<Json<RedriveHistory>, ApiError> {
    let limit = input::limit(query.limit, 20, super::jobs::MAX_LIST)?;
    let redrives = state.client.redrive_history(limit).await?;
    Ok(Json(RedriveHistory { redrives }))
}

/// The body of a redrive or a purge: which dead jobs, whether to only look, and for
/// a redrive the pace and the audit's words.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadBody {
    #[serde(default)]
    ids: Option<Vec<i64>>,
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    fingerprint: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    error_contains: Option<String>,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    rate: Option<Rate>,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

impl DeadBody {
    /// The selection; the client refuses an unnarrowed one unless `all`, and empty
    /// or bad ids, an empty `error_contains` and a zero limit, naming the field.
    fn selection(&self) -> Result<DeadSelection, ApiError> {
        input::text("error_contains", self.error_contains.as_deref(), false)?;
        let mut filter = dead_filter(
            self.queue.clone(),
            self.kind.clone(),
            self.fingerprint.as_deref(),
            self.reason.as_deref(),
        )?;
        filter.ids = self.ids.clone();
        filter.error_contains = self.error_contains.clone();
        Ok(DeadSelection {
            filter,
            all: self.all,
            limit: self.limit,
        })
    }
}

/// The answer to a redrive (schema `RedriveResult`).
#[derive(Debug, Serialize)]
pub struct RedriveResult {
    count: usize,
    ids: Vec<i64>,
    dry_run: bool,
    at_least: bool,
    rate_per_sec: Option<f64>,
}

/// `POST /v1/dead/redrive`: dead → ready with a fresh attempt budget, history kept,
/// through the client's redrive: in chunks under one audit record, the i-th job's
/// `run_at` at `start + i / rate` with a `rate`, and only jobs dead before it started
/// taken, so a job that dies again while it runs is not taken twice.
pub async fn redrive(
    State(state): State<AppState>,
    extensions: Extensions,
    JsonBody(body): JsonBody<DeadBody>,
) -> Result<Json<RedriveResult>, ApiError> {
    input::text("actor", body.actor.as_deref(), true)?;
    input::text("note", body.note.as_deref(), true)?;
    let selection = body.selection()?;
    let rate_per_sec = body.rate.map(Rate::per_second);
    if body.dry_run {
        selection.check("redrive")?;
        let preview = state.client.preview(&selection).await?;
        return Ok(Json(RedriveResult {
            count: preview.jobs.len(),
            ids: preview.jobs.iter().map(|job| job.id).collect(),
            dry_run: true,
            at_least: preview.at_least,
            rate_per_sec,
        }));
    }
    // The audit's actor: as given, else the token's name, else "http" (no tokens).
    let caller = extensions.get::<Caller>().and_then(|c| c.0.clone());
    let actor = body.actor.or(caller).or_else(|| Some("http".into()));
    let report = state
        .client
        .redrive(
            RedriveRequest {
                selection,
                rate: body.rate,
                actor,
                note: body.note,
            },
            |_| {},
        )
        .await?;
    Ok(Json(RedriveResult {
        count: report.ids.len(),
        ids: report.ids,
        dry_run: false,
        at_least: false,
        rate_per_sec,
    }))
}

/// The answer to a purge (schema `PurgeResult`).
#[derive(Debug, Serialize)]
pub struct PurgeResult {
    count: u64,
    dry_run: bool,
    at_least: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: Option<Vec<i64>>,
}

/// `POST /v1/dead/purge`: deletes dead jobs for good (a dry run lists what would go).
pub async fn purge(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<DeadBody>,
) -> Result<Json<PurgeResult>, ApiError> {
    for (field, given) in [
        ("rate", body.rate.is_some()),
        ("actor", body.actor.is_some()),
        ("note", body.note.is_some()),
    ] {
        if given {
            return Err(ApiError::field(
                field,
                "is for a redrive; a purge takes none",
            ));
        }
    }
    let selection = body.selection()?;
    if body.dry_run {
        selection.check("purge")?;
        let preview = state.client.preview(&selection).await?;
        return Ok(Json(PurgeResult {
            count: preview.jobs.len() as u64,
            dry_run: true,
            at_least: preview.at_least,
            ids: Some(preview.jobs.iter().map(|job| job.id).collect()),
        }));
    }
    let count = state.client.purge(&selection).await?;
    Ok(Json(PurgeResult {
        count,
        dry_run: false,
        at_least: false,
        ids: None,
    }))
}
