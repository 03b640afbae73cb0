//! The dead-letter routes: list, show, fingerprints, the redrive audit, redrive and
//! purge, with the CLI's rules: a redrive or purge with nothing to narrow it is refused
//! unless `all` is true, a dry run changes nothing, a paced redrive spreads the jobs'
//! `run_at` so workers take them no faster than the rate.

use std::time::Duration;

use axum::extract::State;
use axum::http::Extensions;
use axum::Json;
use revenant::store::{
    DeadFingerprintsParams, JobFilter, JobListParams, JobPurgeParams, JobRedriveParams,
    RedriveHistoryParams, RedriveRecord,
};
use revenant::{DeadReason, Job, JobState, Store};
use serde::{Deserialize, Serialize};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{JobIdPath, JsonBody, QueryParams};
use crate::input;
use crate::state::AppState;
use crate::views::{FingerprintView, JobList, JobView};

/// The most dead jobs a dry run looks at to count (as the CLI's).
const DRY_RUN_SCAN: u32 = 10_000;

/// A redrive moves this many jobs per store call (one transaction each), so a large
/// redrive never holds one long transaction (as the CLI's).
const REDRIVE_CHUNK: u32 = 500;

/// The most ids one redrive or purge names.
const MAX_IDS: usize = 10_000;

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
    let groups = state
        .store
        .dead_fingerprints(DeadFingerprintsParams {
            filter,
            limit: input::limit(query.limit, 50, super::jobs::MAX_LIST)?,
        })
        .await?;
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
    let redrives = state
        .store
        .redrive_history(RedriveHistoryParams {
            limit: input::limit(query.limit, 20, super::jobs::MAX_LIST)?,
        })
        .await?;
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
    rate: Option<input::Rate>,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

impl DeadBody {
    /// The filter (dead jobs only), refusing an unnarrowed one unless `all`.
    fn filter(&self, verb: &str) -> Result<JobFilter, ApiError> {
        let narrowed = self.ids.is_some()
            || self.queue.is_some()
            || self.kind.is_some()
            || self.fingerprint.is_some()
            || self.reason.is_some()
            || self.error_contains.is_some();
        if !narrowed && !self.all {
            return Err(ApiError::field(
                "all",
                format!("give ids or a filter (queue, kind, fingerprint, reason, error_contains), or \"all\": true to {verb} every dead job"),
            ));
        }
        if let Some(ids) = &self.ids {
            if ids.is_empty() {
                return Err(ApiError::field(
                    "ids",
                    "is empty; give at least one id or leave it out",
                ));
            }
            if ids.len() > MAX_IDS {
                return Err(ApiError::field(
                    "ids",
                    format!("has {} ids; the limit is {MAX_IDS}", ids.len()),
                ));
            }
            if let Some(bad) = ids.iter().find(|id| **id < 1) {
                return Err(ApiError::field(
                    "ids",
                    format!("{bad} is not a job id (a positive whole number)"),
                ));
            }
        }
        if let Some(text) = &self.error_contains {
            if text.is_empty() {
                return Err(ApiError::field(
                    "error_contains",
                    "is empty; leave it out to match every error",
                ));
            }
            input::text("error_contains", Some(text), false)?;
        }
        if self.limit == Some(0) {
            return Err(ApiError::field("limit", "must be at least 1"));
        }
        let mut filter = dead_filter(
            self.queue.clone(),
            self.kind.clone(),
            self.fingerprint.as_deref(),
            self.reason.as_deref(),
        )?;
        filter.ids = self.ids.clone();
        filter.error_contains = self.error_contains.clone();
        Ok(filter)
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
/// in chunks of 500 under one audit record. With `rate`, the i-th job's `run_at` is
/// `start + i / rate`. Jobs that die again while it runs are not taken twice: only
/// jobs dead before it started are selected.
pub async fn redrive(
    State(state): State<AppState>,
    extensions: Extensions,
    JsonBody(body): JsonBody<DeadBody>,
) -> Result<Json<RedriveResult>, ApiError> {
    let mut filter = body.filter("redrive")?;
    let rate = body.rate.as_ref().map(input::Rate::per_sec).transpose()?;
    input::text("actor", body.actor.as_deref(), true)?;
    input::text("note", body.note.as_deref(), true)?;
    let limit = body.limit;
    if body.dry_run {
        let (sample, at_least) = scan(&*state.store, &filter, limit).await?;
        return Ok(Json(RedriveResult {
            count: sample.len(),
            ids: sample.iter().map(|job| job.id).collect(),
            dry_run: true,
            at_least,
            rate_per_sec: rate,
        }));
    }
    // per_sec is at least 1/h (Rate::per_sec), so the gap is at most an hour.
    let spacing = rate.map_or(Duration::ZERO, |per_sec| {
        Duration::try_from_secs_f64(1.0 / per_sec).unwrap_or(Duration::from_secs(3600))
    });
    let started = state.store.now().await?;
    let bound = started + chrono::Duration::milliseconds(1);
    filter.finished_before = Some(bound);
    // The audit's actor: as given, else the token's name, else "http" (no tokens).
    let caller = extensions.get::<Caller>().and_then(|c| c.0.clone());
    let actor = body.actor.or(caller).or_else(|| Some("http".into()));
    let audit_key = format!(
        "http-{}-{:016x}",
        started.timestamp_millis(),
        rand::random::<u64>()
    );
    let mut ids: Vec<i64> = Vec::new();
    loop {
        let want = match limit {
            Some(limit) => REDRIVE_CHUNK.min(limit.saturating_sub(ids.len() as u32)),
            None => REDRIVE_CHUNK,
        };
        if want == 0 {
            break;
        }
        let offset = spacing.saturating_mul(ids.len() as u32);
        let start_at = started + chrono::Duration::from_std(offset).unwrap_or_default();
        let chunk = state
            .store
            .job_redrive(JobRedriveParams {
                filter: filter.clone(),
                limit: Some(want),
                spacing,
                start_at: Some(start_at),
                actor: actor.clone(),
                note: body.note.clone(),
                audit_key: Some(audit_key.clone()),
                now: None,
            })
            .await?;
        let moved = chunk.len();
        ids.extend(chunk);
        if moved < want as usize {
            break;
        }
    }
    tracing::info!(
        count = ids.len(),
        actor = actor.as_deref().unwrap_or(""),
        rate_per_sec = rate,
        "redrive"
    );
    Ok(Json(RedriveResult {
        count: ids.len(),
        ids,
        dry_run: false,
        at_least: false,
        rate_per_sec: rate,
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
    let filter = body.filter("purge")?;
    if body.dry_run {
        let (sample, at_least) = scan(&*state.store, &filter, body.limit).await?;
        return Ok(Json(PurgeResult {
            count: sample.len() as u64,
            dry_run: true,
            at_least,
            ids: Some(sample.iter().map(|job| job.id).collect()),
        }));
    }
    let count = state
        .store
        .job_purge(JobPurgeParams {
            filter,
            limit: body.limit,
        })
        .await?;
    tracing::info!(count, "purge");
    Ok(Json(PurgeResult {
        count,
        dry_run: false,
        at_least: false,
        ids: None,
    }))
}

/// The dead jobs a filter matches, up to `limit` or the scan limit; `true` when the
/// scan limit cut the count.
async fn scan(
    store: &dyn Store,
    filter: &JobFilter,
    limit: Option<u32>,
) -> Result<(Vec<Job>, bool), ApiError> {
    let cap = limit.unwrap_or(DRY_RUN_SCAN).min(DRY_RUN_SCAN);
    let jobs = store
        .job_list(JobListParams {
            filter: filter.clone(),
            before_id: None,
            limit: cap,
        })
        .await?;
    let at_least = jobs.len() as u32 == cap && limit.is_none_or(|l| l > cap);
    Ok((jobs, at_least))
}
