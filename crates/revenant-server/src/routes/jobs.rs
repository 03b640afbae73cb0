//! Producers' `POST /v1/jobs`, and the operators' job routes: list, show, cancel.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use revenant::store::{CancelResult, JobFilter};
use revenant::trace::TraceContext;
use revenant::{Job, JobId, JobState, NewJob, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::Reach;
use crate::error::{ApiError, ErrorCode};
use crate::extract::{decode, JobIdPath, JsonBody, OptionalJsonBody, QueryParams};
use crate::input;
use crate::state::AppState;
use crate::views::{JobList, JobView};

/// The most jobs one `POST /v1/jobs` takes: larger batches belong in several calls
/// (each is one transaction).
pub const MAX_BATCH: usize = 1000;

/// The most jobs one list returns.
pub const MAX_LIST: u32 = 1000;

/// One job to enqueue: every option of the library's [`NewJob`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewJobBody {
    queue: String,
    kind: String,
    #[serde(default = "empty_object")]
    payload: Value,
    #[serde(default)]
    priority: i32,
    #[serde(default, deserialize_with = "input::opt_timestamp")]
    run_at: Option<Timestamp>,
    #[serde(default, deserialize_with = "input::opt_duration")]
    delay: Option<Duration>,
    #[serde(default)]
    max_attempts: Option<i32>,
    #[serde(default)]
    group_key: Option<String>,
    /// An alias of `group_key`, as the CLI names it.
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    unique_key: Option<String>,
    #[serde(default)]
    correlation_id: Option<String>,
    /// The W3C trace context the job's attempts join; without it, the request's
    /// `traceparent` header (if any) applies.
    #[serde(default)]
    traceparent: Option<String>,
    /// Its `tracestate`, only with `traceparent`.
    #[serde(default)]
    tracestate: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    jobs: Vec<NewJobBody>,
}

impl NewJobBody {
    /// The library's job, checked; errors name the field under `at` (`jobs[3]`), or
    /// alone for a single job.
    fn into_new_job(
        self,
        at: Option<&str>,
        now: Timestamp,
        header_trace: Option<&TraceContext>,
    ) -> Result<NewJob, ApiError> {
        let name = |field: &str| match at {
            Some(at) => format!("{at}.{field}"),
            None => field.to_string(),
        };
        let group_key = match (self.group_key, self.group) {
            (Some(_), Some(_)) => {
                return Err(ApiError::field(
                    name("group"),
                    "give group or group_key (the same thing), not both",
                ))
            }
            (key, alias) => key.or(alias),
        };
        if let Some(run_at) = self.run_at {
            // The stores keep any time, but a date centuries away is a bug in the
            // caller, and PostgreSQL refuses some that chrono reads.
            let latest = now + chrono::Duration::days(365);
            if run_at.timestamp() < 0 || run_at > latest {
                return Err(ApiError::field(
                    name("run_at"),
                    format!("{run_at} is out of range; use a time from 1970 to 365 days from now"),
                ));
            }
        }
        let trace_context = match (self.traceparent, self.tracestate) {
            (None, Some(_)) => {
                return Err(ApiError::field(
                    name("tracestate"),
                    "needs a traceparent beside it",
                ))
            }
            (None, None) => header_trace.cloned(),
            (Some(parent), state) => Some(
                TraceContext::new(&parent, state.as_deref())
                    .map_err(|err| ApiError::field(name(err.field), err.message))?,
            ),
        };
        let job = NewJob {
            queue: self.queue,
            kind: self.kind,
            payload: self.payload,
            priority: self.priority,
            run_at: self.run_at,
            delay: self.delay,
            max_attempts: self.max_attempts,
            group_key,
            unique_key: self.unique_key,
            correlation_id: self.correlation_id,
            trace_context,
        };
        input::no_nul_in_json(&name("payload"), &job.payload)?;
        job.validate().map_err(|err| match at {
            Some(at) => ApiError::input_at(at, err),
            None => err.into(),
        })?;
        Ok(job)
    }
}

/// What one enqueued job became.
#[derive(Debug, Serialize)]
pub struct EnqueuedView {
    id: i64,
    inserted: bool,
}

/// The answer to `POST /v1/jobs`.
#[derive(Debug, Serialize)]
pub struct EnqueueResponse {
    jobs: Vec<EnqueuedView>,
}

/// `POST /v1/jobs`: one job, or `{"jobs": [...]}`. Every job is checked before any is
/// written, and the batch is one transaction: one bad job writes none. A job into a
/// queue the token does not reach, or of a kind its queue does not accept, is 403
/// naming its `queue` or `kind` (`jobs[2].kind`), and writes none either.
pub async fn enqueue(
    State(state): State<AppState>,
    reach: Reach,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Value>,
) -> Result<(StatusCode, Json<EnqueueResponse>), ApiError> {
    let now = chrono::Utc::now();
    let header_trace = header_trace_context(&headers)?;
    let header_trace = header_trace.as_ref();
    let batch = matches!(&body, Value::Object(object) if object.contains_key("jobs"));
    let jobs = match body {
        Value::Object(ref object) if object.contains_key("jobs") => {
            let batch: Batch = decode_value(body)?;
            if batch.jobs.is_empty() {
                return Err(ApiError::field("jobs", "is empty; give at least one job"));
            }
            if batch.jobs.len() > MAX_BATCH {
                return Err(ApiError::field(
                    "jobs",
                    format!(
                        "has {} jobs; the limit is {MAX_BATCH} per request",
                        batch.jobs.len()
                    ),
                ));
            }
            batch
                .jobs
                .into_iter()
                .enumerate()
                .map(|(i, job)| job.into_new_job(Some(&format!("jobs[{i}]")), now, header_trace))
                .collect::<Result<Vec<_>, _>>()?
        }
        Value::Object(_) => {
            vec![decode_value::<NewJobBody>(body)?.into_new_job(None, now, header_trace)?]
        }
        other => {
            return Err(ApiError::field(
                "body",
                format!(
                    "must be a job object or {{\"jobs\": [...]}}, not {}",
                    json_type(&other)
                ),
            ))
        }
    };
    for (i, job) in jobs.iter().enumerate() {
        let at = |field: &str| match batch {
            true => format!("jobs[{i}].{field}"),
            false => field.to_string(),
        };
        reach.check(&at("queue"), &job.queue)?;
        state
            .queue_rules
            .check(&at("kind"), &job.queue, &job.kind)?;
    }
    // The client resolves each job's attempt budget from its queue's and kind's stored
    // policy, and writes the batch in one transaction.
    let results = state.client.enqueue_many(jobs).await?;
    Ok((
        StatusCode::CREATED,
        Json(EnqueueResponse {
            jobs: results
                .into_iter()
                .map(|r| EnqueuedView {
                    id: r.id,
                    inserted: !r.duplicate,
                })
                .collect(),
        }),
    ))
}

/// The request's W3C `traceparent` and `tracestate` headers, checked: a malformed one
/// is refused by name (`traceparent header`), not dropped, so a producer that meant to
/// trace learns that nothing would join up.
fn header_trace_context(headers: &HeaderMap) -> Result<Option<TraceContext>, ApiError> {
    let text = |name: &'static str| -> Result<Option<&str>, ApiError> {
        headers
            .get(name)
            .map(|value| {
                value
                    .to_str()
                    .map_err(|_| ApiError::field(format!("{name} header"), "is not visible ASCII"))
            })
            .transpose()
    };
    let Some(parent) = text("traceparent")? else {
        // As in the body: a tracestate alone joins nothing up, and an unchecked header
        // would be the one producer input read and never bounded.
        if text("tracestate")?.is_some_and(|state| !state.trim().is_empty()) {
            return Err(ApiError::field(
                "tracestate header",
                "needs a traceparent header beside it",
            ));
        }
        return Ok(None);
    };
    TraceContext::new(parent, text("tracestate")?)
        .map(Some)
        .map_err(|err| ApiError::field(format!("{} header", err.field), err.message))
}

fn decode_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    // Through bytes, so the one decoder names paths and sorts syntax from data errors.
    let bytes = serde_json::to_vec(&value)
        .map_err(|err| ApiError::new(ErrorCode::InvalidJson, err.to_string()))?;
    decode(&bytes)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `GET /v1/jobs`'s query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    queue: Option<String>,
    kind: Option<String>,
    state: Option<String>,
    group: Option<String>,
    correlation_id: Option<String>,
    limit: Option<u32>,
    before: Option<i64>,
}

/// `GET /v1/jobs`: newest first, paged with `before`.
pub async fn list(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<JobList>, ApiError> {
    input::name("queue", query.queue.as_deref())?;
    input::name("kind", query.kind.as_deref())?;
    input::key("group", query.group.as_deref())?;
    input::key("correlation_id", query.correlation_id.as_deref())?;
    let status = query
        .state
        .as_deref()
        .map(|s| {
            s.parse::<JobState>()
                .map_err(|err| ApiError::field("state", err.message))
        })
        .transpose()?;
    let limit = input::limit(query.limit, 50, MAX_LIST)?;
    let filter = JobFilter {
        queue: query.queue,
        kind: query.kind,
        statuses: status.map(|s| vec![s]),
        group_key: query.group,
        correlation_id: query.correlation_id,
        ..JobFilter::default()
    };
    page(&state, filter, query.before, limit).await
}

/// One page of the jobs `filter` matches, newest first, before the id `before`.
pub(super) async fn page(
    state: &AppState,
    filter: JobFilter,
    before: Option<i64>,
    limit: u32,
) -> Result<Json<JobList>, ApiError> {
    let jobs = state
        .client
        .jobs(filter, input::before(before)?, limit)
        .await?;
    Ok(Json(JobList::page(jobs, limit)))
}

/// The job `id`, or a 404 naming it.
pub(super) async fn find(state: &AppState, id: JobId) -> Result<Job, ApiError> {
    state
        .client
        .job(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no job with id {id}")))
}

/// `GET /v1/jobs/{id}`: the job with its whole history.
pub async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(find(&state, id).await?.into()))
}

/// `POST /v1/jobs/{id}/cancel`'s optional body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/jobs/{id}/cancel`: a ready or running job becomes cancelled (a running
/// job's worker finds its lease lost at its next call).
pub async fn cancel(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    OptionalJsonBody(body): OptionalJsonBody<CancelBody>,
) -> Result<Json<Value>, ApiError> {
    input::text("reason", body.reason.as_deref(), false)?;
    let result = state.client.cancel(id, body.reason).await?;
    match result {
        CancelResult::Cancelled => Ok(Json(serde_json::json!({ "id": id, "state": "cancelled" }))),
        CancelResult::NotCancellable(state) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!("job {id} is {state}; only ready and running jobs can be cancelled"),
        )),
        CancelResult::NotFound => Err(ApiError::not_found(format!("no job with id {id}"))),
        CancelResult::LeaseLost => Err(ApiError::new(
            ErrorCode::Conflict,
            format!("job {id} changed while being cancelled; try again"),
        )),
    }
}
