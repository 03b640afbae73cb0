SELECT paused FROM queues WHERE name = ?1
