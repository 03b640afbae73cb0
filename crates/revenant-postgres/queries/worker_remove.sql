-- worker_remove: worker $1 (clean shutdown).
DELETE FROM {schema}.workers WHERE worker = $1
