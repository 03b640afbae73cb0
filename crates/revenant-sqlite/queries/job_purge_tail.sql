    ORDER BY id
    LIMIT ?11
)
