DELETE FROM workers WHERE worker = ?1
