    ORDER BY +id
    LIMIT ?12
)
