SELECT queue, group_key, status, attempts, worker, lease_token, errors FROM jobs WHERE id = ?1
