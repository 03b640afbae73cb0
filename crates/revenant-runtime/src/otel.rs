//! OpenTelemetry attempt spans: each attempt a worker runs is one consumer span, a
//! child of the trace context the job was enqueued with, so a producer's trace shows
//! every attempt of its job, retries included, with how each ended.
//!
//! Off by default, and off costs nothing: a worker without a tracer provider
//! ([`crate::WorkerBuilder::tracer_provider`]) keeps `None` and each attempt pays one
//! `Option` check. On, each attempt builds one span through the provider given (the
//! binary's OTLP exporter, or a test's in-memory one).
//!
//! The span follows the OpenTelemetry messaging conventions for a consumer's
//! "process" span: named `process <queue>`, kind consumer, with `messaging.system =
//! revenant`, `messaging.operation.type` and `.name = process`,
//! `messaging.destination.name` (the queue), `messaging.message.id` (the job id), and
//! revenant's own `revenant.job.kind`, `revenant.job.attempt`,
//! `revenant.job.max_attempts`, `revenant.worker`, `revenant.outcome` (as
//! `revenant_job_attempts_total` names it) and, for a death, `revenant.dead_reason`. A
//! failed attempt records its failure as an `exception` event (`exception.type` is
//! the failure class, `exception.message` the error) and sets the span's status to
//! error.
//!
//! Parented, not only linked: the enqueue context becomes the span's parent, so the
//! attempts sit in the producer's trace (one search by trace id finds them all). A
//! job enqueued without a trace context gets a new trace per attempt.

use std::borrow::Cow;
use std::sync::Arc;

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use revenant_core::decide::Transition;
use revenant_core::trace::TraceContext;
use revenant_core::ClaimedJob;

use crate::settle::Settled;

/// The instrumentation scope of revenant's spans.
pub const SCOPE: &str = "revenant";

/// The tracer a worker starts attempt spans with. Cheap to clone.
#[derive(Clone)]
pub struct AttemptTracer(Arc<BoxedTracer>);

impl std::fmt::Debug for AttemptTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AttemptTracer")
    }
}

impl AttemptTracer {
    /// A tracer from `provider` (scope `revenant`).
    pub fn new<P>(provider: &P) -> Self
    where
        P: TracerProvider,
        P::Tracer: Send + Sync + 'static,
        <P::Tracer as Tracer>::Span: Send + Sync + 'static,
    {
        AttemptTracer(Arc::new(BoxedTracer::new(Box::new(provider.tracer(SCOPE)))))
    }

    /// Starts the span of `job`'s current attempt, run by `worker`.
    pub(crate) fn start(&self, job: &ClaimedJob, worker: &str) -> AttemptSpan {
        let parent = job
            .trace_context
            .as_ref()
            .and_then(remote_context)
            .map_or_else(Context::new, |span| {
                Context::new().with_remote_span_context(span)
            });
        let span = self
            .0
            .span_builder(format!("process {}", job.queue))
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("messaging.system", "revenant"),
                KeyValue::new("messaging.operation.type", "process"),
                KeyValue::new("messaging.operation.name", "process"),
                KeyValue::new("messaging.destination.name", job.queue.clone()),
                KeyValue::new("messaging.message.id", job.id.to_string()),
                KeyValue::new("revenant.job.kind", job.kind.clone()),
                KeyValue::new("revenant.job.attempt", i64::from(job.attempts)),
                KeyValue::new("revenant.job.max_attempts", i64::from(job.max_attempts)),
                KeyValue::new("revenant.worker", worker.to_string()),
            ])
            .start_with_context(&*self.0, &parent);
        AttemptSpan(span)
    }
}

/// The enqueue context as a remote span context; `None` when its ids do not parse
/// (they were checked at enqueue, so only a row edited by hand).
fn remote_context(trace: &TraceContext) -> Option<SpanContext> {
    let state = trace
        .tracestate()
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        TraceId::from_hex(trace.trace_id()).ok()?,
        SpanId::from_hex(trace.parent_id()).ok()?,
        TraceFlags::new(trace.flags()),
        true,
        state,
    ))
}

/// The trace context of the span current where this is called, to enqueue a job
/// under it (`NewJob::with_trace_context`); `None` outside a valid span.
///
/// ```
/// assert!(revenant_runtime::otel::current_trace_context().is_none());
/// ```
pub fn current_trace_context() -> Option<TraceContext> {
    let cx = Context::current();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let parent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    );
    let state = sc.trace_state().header();
    TraceContext::new(&parent, Some(&state)).ok()
}

/// One attempt's span, ended by one of its methods.
pub(crate) struct AttemptSpan(BoxedSpan);

impl AttemptSpan {
    /// The attempt's outcome was decided and written (or not): the outcome label,
    /// the failure as an exception event, the dead reason.
    pub(crate) fn settled(mut self, transition: &Transition, settled: &Settled) {
        let outcome = match (settled, transition) {
            (Settled::Applied, Transition::Complete) => "completed",
            (Settled::Applied, Transition::Retry { .. }) => "retried",
            (Settled::Applied, Transition::Snooze { .. }) => "snoozed",
            (Settled::Applied, Transition::Dead { .. }) => "dead",
            (Settled::Applied | Settled::NotCancelled(_), Transition::Cancel { .. }) => "cancelled",
            (Settled::LeaseLost, _) => "lease_lost",
            (Settled::Unwritten(_), _) => "unwritten",
            (Settled::NotCancelled(_), _) => "cancelled",
        };
        self.0
            .set_attribute(KeyValue::new("revenant.outcome", outcome));
        match transition {
            Transition::Retry { failure, .. } => {
                self.failed(failure.class.as_str(), &failure.message)
            }
            Transition::Dead { reason, failure } => {
                self.0
                    .set_attribute(KeyValue::new("revenant.dead_reason", reason.as_str()));
                self.failed(failure.class.as_str(), &failure.message);
            }
            _ => {}
        }
        self.0.end();
    }

    /// The attempt ended without an outcome: `lease_lost` or `released`.
    pub(crate) fn ended(mut self, outcome: &'static str) {
        self.0
            .set_attribute(KeyValue::new("revenant.outcome", outcome));
        if outcome == "lease_lost" {
            self.0.set_status(Status::error("lease lost"));
        }
        self.0.end();
    }

    fn failed(&mut self, class: &'static str, message: &str) {
        self.0.add_event(
            "exception",
            vec![
                KeyValue::new("exception.type", class),
                KeyValue::new("exception.message", message.to_string()),
            ],
        );
        self.0.set_status(Status::Error {
            description: Cow::Owned(message.to_string()),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use opentelemetry::trace::{
        Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
    };
    use opentelemetry::{Context, Value};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
    use revenant_core::backoff::{Backoff, Jitter};
    use revenant_core::policy::{PolicySet, RetryPolicy};
    use revenant_core::store::{JobEnqueueParams, Store};
    use revenant_core::{JobState, NewJob};

    use crate::faulty::FaultyStore;
    use crate::{JobContext, JobError, Worker};

    fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy::builder()
            .max_attempts(3)
            .backoff(Backoff {
                base: Duration::from_millis(10),
                multiplier: 2.0,
                cap: Duration::from_millis(40),
            })
            .jitter(Jitter::None)
            .lease(Duration::from_millis(2000))
            .attempt_timeout(Duration::from_millis(1000))
            .heartbeat(Duration::from_millis(300))
            .build()
            .unwrap()
    }

    /// A job enqueued under a span runs each attempt in a consumer span of that trace,
    /// child of the enqueuing span: the failed first attempt with its error recorded,
    /// the retry that succeeded, each with the messaging attributes. A job enqueued
    /// without a trace context gets a trace of its own.
    #[tokio::test]
    async fn attempts_of_a_job_enqueued_under_a_span_join_its_trace_retries_included() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let store = Arc::new(FaultyStore::open().await);

        // The producer: enqueue inside its own span.
        let producer = provider.tracer("producer").start("checkout");
        let producer_context = producer.span_context().clone();
        let cx = Context::current_with_span(producer);
        let trace = {
            let _guard = cx.clone().attach();
            super::current_trace_context().expect("a current span")
        };
        assert_eq!(trace.trace_id(), producer_context.trace_id().to_string());
        let enqueued = store
            .job_enqueue(JobEnqueueParams {
                jobs: vec![
                    NewJob::new("q", "flaky", serde_json::json!({})).with_trace_context(trace),
                    NewJob::new("q", "steady", serde_json::json!({})),
                ],
                default_max_attempts: 3,
                now: None,
            })
            .await
            .unwrap();
        cx.span().end();

        let worker = Worker::builder(store.clone())
            .queue("q", 2)
            .policies(PolicySet::new(policy()))
            .poll_interval(Duration::from_millis(20))
            .worker_id("w1")
            .tracer_provider(&provider)
            .handler_fn(
                "flaky",
                |ctx: JobContext, _: serde_json::Value| async move {
                    if ctx.attempt() == 1 {
                        Err(JobError::retry("provider said 503"))
                    } else {
                        Ok(())
                    }
                },
            )
            .handler_fn("steady", |_: JobContext, _: serde_json::Value| async move {
                Ok(())
            })
            .build()
            .unwrap();
        let shutdown = worker.shutdown_handle();
        let run = tokio::spawn(worker.run_until(std::future::pending()));

        // Three attempt spans end: two of the flaky job, one of the steady one.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let attempts = loop {
            let spans: Vec<SpanData> = exporter
                .get_finished_spans()
                .unwrap()
                .into_iter()
                .filter(|s| s.name == "process q")
                .collect();
            if spans.len() >= 3 {
                break spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} attempt spans after 30 s: {spans:#?}",
                spans.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        shutdown.shutdown();
        run.await.unwrap().unwrap();
        assert_eq!(store.job(enqueued[0].id).await.status, JobState::Completed);

        let id = enqueued[0].id.to_string();
        let mut flaky: Vec<&SpanData> = attempts
            .iter()
            .filter(|s| attribute(s, "messaging.message.id") == Some(&Value::from(id.clone())))
            .collect();
        flaky.sort_by_key(|s| s.start_time);
        assert_eq!(flaky.len(), 2, "{attempts:#?}");
        for (n, span) in flaky.iter().enumerate() {
            assert_eq!(span.span_context.trace_id(), producer_context.trace_id());
            assert_eq!(span.parent_span_id, producer_context.span_id());
            assert_eq!(span.span_kind, SpanKind::Consumer);
            assert_eq!(
                attribute(span, "messaging.system"),
                Some(&Value::from("revenant"))
            );
            assert_eq!(
                attribute(span, "messaging.destination.name"),
                Some(&Value::from("q"))
            );
            assert_eq!(
                attribute(span, "revenant.job.kind"),
                Some(&Value::from("flaky"))
            );
            assert_eq!(
                attribute(span, "revenant.job.attempt"),
                Some(&Value::from(i64::try_from(n).unwrap() + 1))
            );
        }
        let (first, second) = (flaky[0], flaky[1]);
        assert_eq!(
            attribute(first, "revenant.outcome"),
            Some(&Value::from("retried"))
        );
        assert!(
            matches!(&first.status, Status::Error { description } if description.contains("503"))
        );
        let exception = first
            .events
            .iter()
            .find(|e| e.name == "exception")
            .expect("the failure recorded as an exception event");
        assert!(exception
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "exception.message" && kv.value.as_str().contains("503")));
        assert_eq!(
            attribute(second, "revenant.outcome"),
            Some(&Value::from("completed"))
        );
        assert!(second.events.is_empty());
        assert_eq!(second.status, Status::Unset);

        let steady = attempts
            .iter()
            .find(|s| attribute(s, "revenant.job.kind") == Some(&Value::from("steady")))
            .expect("the steady job's span");
        assert_ne!(steady.span_context.trace_id(), producer_context.trace_id());
        assert_eq!(
            attribute(steady, "revenant.outcome"),
            Some(&Value::from("completed"))
        );
    }
}
