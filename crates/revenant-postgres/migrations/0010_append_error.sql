-- append_error (0001_jobs.sql) without its query when nothing is dropped: a job whose
-- history is shorter than the number of entries kept gets the entry appended, and only
-- a full history goes through the query that keeps the newest.
--
-- The function of 0001 runs a query for every call (`jsonb_array_elements`, a sort, a
-- `LIMIT`, `jsonb_agg`): a SQL function with a FROM clause is never inlined, so each
-- row that job_fail writes executed a small plan of its own. That was about 4.4 µs of a
-- failure's 21.7 µs of `job_fail` statement time (20,000 rows by hand: 132 ms against
-- 55 ms for this version). Nearly every write appends to a history that has room: a job
-- fails at most max_attempts times before it is dead, and the default keeps 20.
--
-- The result is the same for every input: with room, keeping the newest `keep` of
-- `history || [entry]` keeps all of them, in order. A NULL history or keep, or a keep
-- of zero or less, takes the query as before. A history that is not an array fails
-- either way (`jsonb_array_length` here, `jsonb_array_elements` before); the column
-- only ever holds arrays.
--
-- PL/pgSQL, not SQL: a SQL function that names `entry` in both branches is not inlined
-- either (its argument is an expression, evaluated once per use), and then costs as
-- much as the query it avoids; PL/pgSQL evaluates the test and the append as simple
-- expressions.
CREATE OR REPLACE FUNCTION {schema}.append_error(history jsonb, entry jsonb, keep integer)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $append$
BEGIN
    IF jsonb_array_length(history) < keep THEN
        RETURN history || jsonb_build_array(entry);
    END IF;
    RETURN (
        SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
        FROM (
            SELECT e, n
            FROM jsonb_array_elements(history || jsonb_build_array(entry)) WITH ORDINALITY AS x(e, n)
            ORDER BY n DESC
            LIMIT keep
        ) newest
    );
END
$append$;
