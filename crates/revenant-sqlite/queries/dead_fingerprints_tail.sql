    GROUP BY COALESCE(fingerprint, '')
) g
JOIN jobs e ON e.id = g.example_id
ORDER BY g.count DESC, g.last_seen DESC, g.fingerprint
LIMIT ?12
