-- Forgets one scope's retry policy. $1 scope, $2 name ('' for the default).
DELETE FROM {schema}.policies WHERE scope = $1 AND name = $2
