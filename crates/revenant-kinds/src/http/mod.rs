//! The `http` kind: deliver one HTTP request, and classify the answer.
//!
//! See [`HttpPayload`] for the payload and [`HttpHandler`] for what each answer means.

mod classify;
mod outbound;
mod payload;
mod ranges;
mod resolve;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Client, Response};

use revenant_runtime::{Handler, JobContext, JobError};

pub use ipnet::IpNet;
pub use outbound::{DestinationRefused, OutboundPolicy, OutboundPolicyError};
pub use payload::{HttpPayload, DEFAULT_TIMEOUT};
use resolve::PolicyResolver;

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
/// problem, not something to follow silently with the body re-sent elsewhere (and a
/// redirect target would need the same outbound check as the first URL).
///
/// **Outbound policy:** a producer controls the URL, so by default the handler refuses
/// internal destinations (loopback, link-local and cloud metadata, private ranges and
/// the like: see [`OutboundPolicy`]), checked on the addresses actually connected to.
/// A refused destination is a permanent failure naming the rule, and nothing is sent.
/// Open what you mean to reach with [`HttpHandler::builder`]:
///
/// ```no_run
/// # fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use revenant_kinds::HttpHandler;
///
/// let handler = HttpHandler::builder()
///     .allow_net("10.20.0.0/16")?      // the internal billing network
///     .allow_net("hooks.internal")?    // every address this name resolves to
///     .build()?;
/// # Ok(()) }
/// ```
///
/// The client ignores the `HTTP_PROXY`/`HTTPS_PROXY` variables: a proxy would connect
/// on the worker's behalf, where the policy cannot see the destination.
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
/// | a destination the outbound policy refuses | permanent, naming the range; nothing sent |
///
/// Error messages carry the status and the first 512 bytes of the response body; the
/// URL shown drops credentials and the query string. The request is cut short when the
/// attempt is cancelled (timeout, lost lease, shutdown).
#[derive(Debug, Clone)]
pub struct HttpHandler {
    client: Client,
    /// `None` only for [`HttpHandler::with_client`]: the caller's client decides.
    policy: Option<Arc<OutboundPolicy>>,
}

/// Configures an [`HttpHandler`]: its outbound policy. See [`HttpHandler::builder`].
#[derive(Debug, Clone, Default)]
pub struct HttpHandlerBuilder {
    policy: OutboundPolicy,
}

impl HttpHandlerBuilder {
    /// Allows one entry: a CIDR, an IP address or a host name
    /// ([`OutboundPolicy::allow_net`]; `revenant work --allow-net` takes the same).
    pub fn allow_net(mut self, spec: &str) -> Result<Self, OutboundPolicyError> {
        self.policy = self.policy.allow_net(spec)?;
        Ok(self)
    }

    /// Allows the addresses in `net` ([`OutboundPolicy::allow_cidr`]).
    pub fn allow_cidr(mut self, net: IpNet) -> Self {
        self.policy = self.policy.allow_cidr(net);
        self
    }

    /// Allows every address `host` resolves to ([`OutboundPolicy::allow_host`]).
    pub fn allow_host(mut self, host: &str) -> Result<Self, OutboundPolicyError> {
        self.policy = self.policy.allow_host(host)?;
        Ok(self)
    }

    /// Replaces the whole outbound policy.
    pub fn outbound_policy(mut self, policy: OutboundPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The handler, with its own client: redirects off, proxies off, the policy's
    /// resolver, 10 s connect timeout, pooled connections idle for at most 60 s,
    /// `User-Agent: revenant/<version>`.
    ///
    /// Fails only when the TLS backend cannot initialise.
    pub fn build(self) -> Result<HttpHandler, HttpClientError> {
        let policy = Arc::new(self.policy);
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(PolicyResolver::new(Arc::clone(&policy))))
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .user_agent(concat!("revenant/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(HttpClientError)?;
        Ok(HttpHandler {
            client,
            policy: Some(policy),
        })
    }
}

/// The `http` kind could not build its HTTP client (the TLS backend failed to
/// initialise). The worker cannot serve the kind; nothing was sent.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the http kind's client: {0}")]
pub struct HttpClientError(#[source] reqwest::Error);

impl HttpHandler {
    /// A handler with the default outbound policy (internal destinations refused) and
    /// its own client, as [`HttpHandlerBuilder::build`] makes it.
    ///
    /// Fails only when the TLS backend cannot initialise.
    pub fn new() -> Result<Self, HttpClientError> {
        Self::builder().build()
    }

    /// A builder, to open destinations the default policy refuses.
    pub fn builder() -> HttpHandlerBuilder {
        HttpHandlerBuilder::default()
    }

    /// A handler using `client` as it is, **without an outbound policy**: the client's
    /// own resolver and proxies decide where requests go, so a producer can reach
    /// anything the worker can. Use it only when every producer is trusted, or when
    /// `client` enforces a policy of its own. Configure it with redirects off
    /// (`reqwest::redirect::Policy::none()`), or a redirect is followed instead of
    /// failing the job.
    pub fn with_client(client: Client) -> Self {
        HttpHandler {
            client,
            policy: None,
        }
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
        if let (Some(policy), Some(host)) = (&self.policy, request.url.host_str()) {
            // IP literals never reach the resolver, so they are checked here; names
            // are checked by the resolver on the addresses it finds.
            policy
                .check_literal(host)
                .map_err(|refused| JobError::permanent(format!("{refused} [{target}]")))?;
        }

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
