//! The `http` kind as the demo runs it: the real handler, with the simulated time the
//! request leaves the worker in an `X-Demo-Sent-At` header.
//!
//! Why: at 60x a simulated second is 16.7 real milliseconds, and on a busy machine a
//! request can take a few of them between the worker sending it and the provider's
//! thread reading it. The provider counts requests per simulated second as they reach
//! it (what the story asks about), and also as they were sent, so the summary can
//! tell the worker's pacing apart from the time-scale's jitter.

use async_trait::async_trait;
use revenant::runtime::{Handler, JobContext, JobError};
use revenant_kinds::{HttpHandler, HttpPayload};

use super::scenario::SimClock;

/// The header carrying the send time, simulated seconds since the demo's start.
pub const SENT_AT: &str = "x-demo-sent-at";

/// [`HttpHandler`] with the send time stamped on every request.
pub struct StampedHttp {
    inner: HttpHandler,
    clock: SimClock,
}

impl StampedHttp {
    /// Wraps `inner`, stamping times from `clock`.
    pub fn new(inner: HttpHandler, clock: SimClock) -> Self {
        StampedHttp { inner, clock }
    }
}

#[async_trait]
impl Handler for StampedHttp {
    const KIND: &'static str = "http";
    type Payload = HttpPayload;

    fn dependency(&self, payload: &HttpPayload) -> Option<String> {
        self.inner.dependency(payload)
    }

    async fn run(&self, ctx: JobContext, mut payload: HttpPayload) -> Result<(), JobError> {
        payload
            .headers
            .insert(SENT_AT.to_string(), format!("{:.6}", self.clock.now()));
        self.inner.run(ctx, payload).await
    }
}
