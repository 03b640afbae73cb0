//! Kind → handler, type-erased: each entry decodes the JSON payload into its handler's
//! own type and turns the handler's result into an [`Outcome`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::context::JobContext;
use crate::handler::{Handler, HandlerFn};
use revenant_core::outcome::Outcome;

/// A handler with its payload type erased.
pub(crate) trait ErasedHandler: Send + Sync + 'static {
    /// The handler's [`Handler::dependency`] for a payload (none when the payload does
    /// not decode: the attempt then fails with `decode_error` without calling anyone).
    fn dependency(&self, payload: &serde_json::Value) -> Option<String>;

    /// Decodes the payload (here, before the future: the payload may be borrowed)
    /// and returns the handler's future.
    fn call(self: Arc<Self>, ctx: JobContext, payload: Payload<'_>) -> BoxFuture<'static, Outcome>;
}

/// A job's payload on its way to its handler: moved when the job is done with it,
/// borrowed when the job keeps it for a retry the worker may keep (see
/// crate::executor). Borrowed, the handler's type is decoded from the job's own copy;
/// the executor once cloned the payload for such an attempt and the handler decoded
/// the clone: two copies of the payload, where one is needed (for a payload of a few
/// bytes, about 1% of the worker's instructions in W2's clean drain, callgrind; more
/// for a larger payload).
pub(crate) enum Payload<'a> {
    Owned(serde_json::Value),
    Borrowed(&'a serde_json::Value),
}

fn decode<P: DeserializeOwned>(payload: Payload<'_>) -> Result<P, Outcome> {
    match payload {
        Payload::Owned(value) => serde_json::from_value(value),
        Payload::Borrowed(value) => P::deserialize(value),
    }
    .map_err(|err| Outcome::DecodeError {
        message: format!("payload does not decode: {err}"),
    })
}

struct TraitHandler<H>(H);

struct FnHandler<F, P> {
    f: F,
    // `fn() -> P`: the handler neither owns nor drops a P, so it stays Send + Sync
    // whatever P is.
    payload: std::marker::PhantomData<fn() -> P>,
}

impl<H: Handler> ErasedHandler for TraitHandler<H> {
    fn dependency(&self, payload: &serde_json::Value) -> Option<String> {
        let payload = H::Payload::deserialize(payload).ok()?;
        self.0.dependency(&payload)
    }

    fn call(self: Arc<Self>, ctx: JobContext, payload: Payload<'_>) -> BoxFuture<'static, Outcome> {
        match decode::<H::Payload>(payload) {
            Err(outcome) => futures::future::ready(outcome).boxed(),
            Ok(payload) => async move {
                match self.0.run(ctx, payload).await {
                    Ok(()) => Outcome::Success,
                    Err(err) => err.into_outcome(),
                }
            }
            .boxed(),
        }
    }
}

impl<P, F> ErasedHandler for FnHandler<F, P>
where
    P: DeserializeOwned + Send + 'static,
    F: HandlerFn<P>,
{
    fn dependency(&self, _payload: &serde_json::Value) -> Option<String> {
        None
    }

    fn call(self: Arc<Self>, ctx: JobContext, payload: Payload<'_>) -> BoxFuture<'static, Outcome> {
        match decode::<P>(payload) {
            Err(outcome) => futures::future::ready(outcome).boxed(),
            Ok(payload) => {
                let fut = self.f.call(ctx, payload);
                async move {
                    match fut.await {
                        Ok(()) => Outcome::Success,
                        Err(err) => err.into_outcome(),
                    }
                }
                .boxed()
            }
        }
    }
}

/// The handlers a worker runs, by kind.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    /// foldhash, not SipHash: looked up at every attempt, and fixed before the worker
    /// starts (a producer's kind is only looked up, never added).
    handlers: foldhash::HashMap<String, Arc<dyn ErasedHandler>>,
}

impl Registry {
    /// Registers a trait handler. Returns false when the kind was already taken.
    pub(crate) fn insert<H: Handler>(&mut self, handler: H) -> bool {
        self.handlers
            .insert(H::KIND.to_string(), Arc::new(TraitHandler(handler)))
            .is_none()
    }

    /// Registers a closure. Returns false when the kind was already taken.
    pub(crate) fn insert_fn<P, F>(&mut self, kind: String, f: F) -> bool
    where
        P: DeserializeOwned + Send + 'static,
        F: HandlerFn<P>,
    {
        let handler: Arc<dyn ErasedHandler> = Arc::new(FnHandler {
            f,
            payload: std::marker::PhantomData::<fn() -> P>,
        });
        self.handlers.insert(kind, handler).is_none()
    }

    pub(crate) fn kinds(&self) -> impl Iterator<Item = &str> {
        self.handlers.keys().map(String::as_str)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// The dependency a job of `kind` with `payload` calls, by its handler's say.
    pub(crate) fn dependency(&self, kind: &str, payload: &serde_json::Value) -> Option<String> {
        self.handlers.get(kind)?.dependency(payload)
    }

    /// Runs one attempt: decode, call, classify. A kind with no handler is
    /// [`Outcome::UnknownKind`]; a payload that does not decode is
    /// [`Outcome::DecodeError`]. The payload is decoded here, and a closure handler
    /// builds its future here: a panic in either (a payload type's own `Deserialize`,
    /// say) is caught here and is the attempt's [`Outcome::Panic`]. A panic in the
    /// future itself the executor reads from the join handle of the task it runs in.
    pub(crate) fn dispatch(
        &self,
        ctx: JobContext,
        payload: Payload<'_>,
    ) -> BoxFuture<'static, Outcome> {
        let Some(handler) = self.handlers.get(ctx.kind()) else {
            let kind = ctx.kind().to_string();
            return futures::future::ready(Outcome::UnknownKind { kind }).boxed();
        };
        let handler = handler.clone();
        match std::panic::catch_unwind(AssertUnwindSafe(|| handler.call(ctx, payload))) {
            Ok(future) => future,
            Err(panic) => futures::future::ready(Outcome::Panic {
                message: crate::executor::panic_message(panic),
            })
            .boxed(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::context::tests::context;
    use crate::handler::JobError;

    /// A payload type whose own `Deserialize` panics on one name, as custom
    /// decoding might on a producer's input.
    pub(crate) struct Touchy(pub(crate) String);

    impl<'de> Deserialize<'de> for Touchy {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let name = String::deserialize(d)?;
            assert!(name != "Zoë", "cannot render {name}");
            Ok(Touchy(name))
        }
    }

    struct Receipts;

    #[async_trait::async_trait]
    impl Handler for Receipts {
        const KIND: &'static str = "send_receipt";
        type Payload = Touchy;
        async fn run(&self, _ctx: JobContext, payload: Touchy) -> Result<(), JobError> {
            match payload.0.as_str() {
                "" => Err(JobError::retry("no name")),
                _ => Ok(()),
            }
        }
    }

    /// The same handler as a trait and as a closure (`context` is of kind
    /// `send_receipt`).
    fn registries() -> [Registry; 2] {
        let mut by_trait = Registry::default();
        assert!(by_trait.insert(Receipts));
        let mut by_fn = Registry::default();
        assert!(by_fn.insert_fn(
            "send_receipt".to_string(),
            |_ctx: JobContext, payload: Touchy| async move {
                match payload.0.as_str() {
                    "" => Err(JobError::retry("no name")),
                    _ => Ok(()),
                }
            }
        ));
        [by_trait, by_fn]
    }

    async fn run(registry: &Registry, payload: Payload<'_>) -> Outcome {
        registry
            .dispatch(context(Duration::from_secs(30)), payload)
            .await
    }

    #[tokio::test]
    async fn a_borrowed_payload_decodes_as_a_moved_one_and_stays_with_its_job() {
        for registry in registries() {
            let kept = json!("Ada");
            assert!(matches!(
                run(&registry, Payload::Borrowed(&kept)).await,
                Outcome::Success
            ));
            assert_eq!(kept, json!("Ada"));
            assert!(matches!(
                run(&registry, Payload::Owned(kept)).await,
                Outcome::Success
            ));
            let empty = json!("");
            assert!(matches!(
                run(&registry, Payload::Borrowed(&empty)).await,
                Outcome::Retry { .. }
            ));
            for payload in [Payload::Borrowed(&json!(5)), Payload::Owned(json!(5))] {
                match run(&registry, payload).await {
                    Outcome::DecodeError { message } => {
                        assert!(
                            message.starts_with("payload does not decode: "),
                            "{message}"
                        )
                    }
                    other => panic!("a number for a name is {other:?}"),
                }
            }
        }
    }

    #[tokio::test]
    async fn a_panic_while_decoding_is_the_attempts_panic() {
        for registry in registries() {
            let zoe = json!("Zoë");
            for payload in [Payload::Borrowed(&zoe), Payload::Owned(zoe.clone())] {
                match run(&registry, payload).await {
                    Outcome::Panic { message } => {
                        assert_eq!(message, "handler panicked: cannot render Zoë")
                    }
                    other => panic!("a panicking decode is {other:?}"),
                }
            }
        }
    }
}
