-- The W3C trace context of the code that enqueued a job (revenant_core::trace): the
-- `traceparent` and optional `tracestate` headers, as text, checked before they are
-- written. NULL for jobs enqueued without one, and for every job written before this
-- migration: they run untraced-linked, as before.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE jobs ADD COLUMN tracestate TEXT;
