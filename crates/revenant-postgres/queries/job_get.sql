-- job_get: one job with its whole error history.
SELECT {job_columns} FROM {schema}.jobs j WHERE j.id = $1
