//! The server's own counters: `revenant_job_attempts_total` and
//! `revenant_dead_letters_total` for the attempts remote workers settle through it, and
//! `revenant_http_requests_total` and `revenant_http_request_duration_seconds` for every
//! request it answers (see [`crate::http_metrics`]).
//!
//! The settle step (`revenant::settle`) counts through the `metrics` facade. The server
//! installs no global recorder (a process embedding it may have its own, and tests run
//! many servers in one process); instead each settle runs with this router's recorder
//! as the thread's local recorder on every poll ([`Counters::scope`]), and `/metrics`
//! renders it after the gauges read from the store.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use revenant::runtime::metrics as names;

/// One router's counters.
pub struct Counters {
    recorder: PrometheusRecorder,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

impl Default for Counters {
    fn default() -> Self {
        // Explicit buckets: a histogram, not a summary, so it sums across servers.
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(names::HTTP_REQUEST_SECONDS.to_string()),
                names::HTTP_SECONDS_BUCKETS,
            )
            .expect("bucket bounds are not empty")
            .build_recorder();
        ::metrics::with_local_recorder(&recorder, names::describe);
        Counters { recorder }
    }
}

impl Counters {
    /// Runs `future` with these counters as the recorder of whatever it counts.
    pub fn scope<F: Future>(&self, future: F) -> Scoped<'_, F> {
        Scoped {
            counters: self,
            future: Box::pin(future),
        }
    }

    /// Runs `record` with these counters as its recorder (a synchronous call, for the
    /// request middleware).
    pub fn record<T>(&self, record: impl FnOnce() -> T) -> T {
        ::metrics::with_local_recorder(&self.recorder, record)
    }

    /// The counters in the Prometheus text format.
    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }
}

/// A future polled under a [`Counters`]' recorder (see [`Counters::scope`]).
pub struct Scoped<'a, F> {
    counters: &'a Counters,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Scoped<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        ::metrics::with_local_recorder(&this.counters.recorder, || this.future.as_mut().poll(cx))
    }
}
