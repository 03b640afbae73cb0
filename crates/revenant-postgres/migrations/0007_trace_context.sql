-- The W3C trace context of the code that enqueued a job (revenant_core::trace): the
-- `traceparent` and optional `tracestate` headers, as text, checked before they are
-- written. NULL for jobs enqueued without one, and for every job written before this
-- migration. Nullable columns without a default: adding them rewrites no row.
ALTER TABLE {schema}.jobs ADD COLUMN traceparent text;
ALTER TABLE {schema}.jobs ADD COLUMN tracestate text;
