//! Kind → handler, type-erased: each entry decodes the JSON payload into its handler's
//! own type and turns the handler's result into an [`Outcome`].

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

    fn call(
        self: Arc<Self>,
        ctx: JobContext,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Outcome>;
}

fn decode<P: DeserializeOwned>(payload: serde_json::Value) -> Result<P, Outcome> {
    serde_json::from_value(payload).map_err(|err| Outcome::DecodeError {
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

    fn call(
        self: Arc<Self>,
        ctx: JobContext,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Outcome> {
        async move {
            match decode::<H::Payload>(payload) {
                Err(outcome) => outcome,
                Ok(payload) => match self.0.run(ctx, payload).await {
                    Ok(()) => Outcome::Success,
                    Err(err) => err.into_outcome(),
                },
            }
        }
        .boxed()
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

    fn call(
        self: Arc<Self>,
        ctx: JobContext,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Outcome> {
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
    /// [`Outcome::DecodeError`]. Panics are not caught here: the executor runs this in
    /// its own task and reads the panic from the join handle.
    pub(crate) fn dispatch(
        &self,
        ctx: JobContext,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Outcome> {
        match self.handlers.get(ctx.kind()) {
            Some(handler) => handler.clone().call(ctx, payload),
            None => {
                let kind = ctx.kind().to_string();
                futures::future::ready(Outcome::UnknownKind { kind }).boxed()
            }
        }
    }
}
