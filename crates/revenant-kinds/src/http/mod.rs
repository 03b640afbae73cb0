//! The `http` kind: deliver one HTTP request, and classify the answer.
//!
//! See [`HttpPayload`] for the payload and [`HttpHandler`] for what each answer means.

mod classify;
mod payload;

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Client, Response};

use revenant_runtime::{Handler, JobContext, JobError};

pub use payload::{HttpPayload, DEFAULT_TIMEOUT};

/// How long establishing a connection may take, within the request's timeout. A
/// provider that does not accept a connection in 10 s is down; failing fast frees the
/// slot for jobs that can run.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle pooled connections are closed after this long: longer than most servers keep
/// them, so we do not keep dead sockets around.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Delivers the `http` kind's requests ([`HttpPayload`]).
///
/// One handler holds one [`reqwest::Client`] (its connection pool is shared by all the
/// jobs it runs), with redirects off: a webhook that redirects is a configuration
/// problem, not something to follow silently with the body re-sent elsewhere.
///
/// Every request carries `Idempotency-Key: revenant-<job id>` (unless the payload sets
/// its own), `X-Revenant-Job-Id` and `X-Revenant-Attempt`: delivery is at least once,
/// so the receiver can drop duplicates by the key.
///
/// | answer | outcome |
/// | --- | --- |
/// | 2xx | success |
/// | 3xx | permanent, the message says where it points |
/// | 429 and 5xx (502, 503, 504 ...) | retry; `Retry-After` (seconds or an HTTP date) passed on as the retry delay, which the policy caps and uses as a floor under its backoff |
/// | other 4xx | permanent |
/// | connection refused/reset, DNS, TLS, timeout | retry |
/// | a payload that fails its checks | permanent, naming the field |
///
/// Error messages carry the status and the first 512 bytes of the response body; the
/// URL shown drops credentials and the query string. The request is cut short when the
/// attempt is cancelled (timeout, lost lease, shutdown).
#[derive(Debug, Clone)]
pub struct HttpHandler {
    client: Client,
}

/// The `http` kind could not build its HTTP client (the TLS backend failed to
/// initialise). The worker cannot serve the kind; nothing was sent.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the http kind's client: {0}")]
pub struct HttpClientError(#[source] reqwest::Error);

impl HttpHandler {
    /// A handler with its own client: redirects off, 10 s connect timeout, pooled
    /// connections idle for at most 60 s, `User-Agent: revenant/<version>`.
    ///
    /// Fails only when the TLS backend cannot initialise.
    pub fn new() -> Result<Self, HttpClientError> {
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .user_agent(concat!("revenant/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(HttpClientError)?;
        Ok(Self::with_client(client))
    }

    /// A handler using `client` as it is. Configure it with redirects off
    /// (`reqwest::redirect::Policy::none()`), or a redirect is followed instead of
    /// failing the job.
    pub fn with_client(client: Client) -> Self {
        HttpHandler { client }
    }
}

#[async_trait]
impl Handler for HttpHandler {
    const KIND: &'static str = "http";
    type Payload = HttpPayload;

    /// The payload's `dependency`, else the URL's host.
    fn dependency(&self, payload: &HttpPayload) -> Option<String> {
        payload.dependency_key()
    }

    async fn run(&self, ctx: JobContext, payload: HttpPayload) -> Result<(), JobError> {
        let request = payload.validate()?;
        let target = format!("{} {}", request.method, payload::redacted(&request.url));

        let mut headers = request.headers;
        let job_id = ctx.id().to_string();
        if !headers.contains_key("idempotency-key") {
            headers.insert(
                HeaderName::from_static("idempotency-key"),
                header_value(format!("revenant-{job_id}")),
            );
        }
        headers.insert(
            HeaderName::from_static("x-revenant-job-id"),
            header_value(job_id),
        );
        headers.insert(
            HeaderName::from_static("x-revenant-attempt"),
            header_value(ctx.attempt().to_string()),
        );

        let mut builder = self
            .client
            .request(request.method, request.url)
            .headers(headers);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        // One limit for the whole exchange, body excerpt included, cut to what is left
        // of the attempt (`ctx.timeout`), rather than reqwest's per-request timeout.
        let limit = request.timeout;

        let exchange = async {
            let response = builder
                .send()
                .await
                .map_err(|err| classify::transport(err, &target))?;
            let status = response.status();
            let response_headers = response.headers().clone();
            let body = if status.is_success() || status.is_redirection() {
                Vec::new()
            } else {
                excerpt_of(response, classify::BODY_EXCERPT_BYTES).await
            };
            tracing::debug!(job_id = ctx.id(), %status, target = %target, "http kind: answered");
            classify::response(status, &response_headers, &body, &target, SystemTime::now())
        };

        tokio::select! {
            result = ctx.timeout(limit, exchange) => match result {
                Ok(result) => result,
                Err(timed_out) => Err(JobError::retry(format!("{target}: {}", timed_out.message()))),
            },
            () = ctx.cancelled() => Err(JobError::retry(format!("{target}: attempt cancelled before an answer"))),
        }
    }
}

fn header_value(text: String) -> HeaderValue {
    // Digits and "revenant-" only: always a valid header value.
    HeaderValue::from_str(&text).expect("job ids and attempts are ASCII digits")
}

/// Reads up to about `cap` bytes of the body. A body that fails half-way still gives
/// what arrived: the status already says what happened, the excerpt is a courtesy.
async fn excerpt_of(mut response: Response, cap: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() <= cap {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body
}
