-- The state of one job (why a cancel by id did nothing).
SELECT j.status FROM {schema}.jobs j WHERE j.id = $1
