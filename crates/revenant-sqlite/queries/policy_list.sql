-- Every stored retry policy: the default first, then queues by name, then kinds by name.
SELECT scope, name, policy, updated_at FROM policies
ORDER BY CASE scope WHEN 'default' THEN 0 WHEN 'queue' THEN 1 ELSE 2 END, name
