-- The store's clock, at the millisecond precision the domain keeps.
SELECT date_trunc('milliseconds', now())
