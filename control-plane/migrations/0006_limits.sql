-- 0006: per-computer resource limits (memory, CPU, processes, /dev/shm), as the JSON object of
-- providers::MachineLimits ({"memory_mb":…, "cpu_millis":…, "pids":…, "shm_mb":…}, each optional).
-- They are the computer's, not its machine's: a replacement machine gets the same limits.
-- Existing computers have none set ('{}': the provider's defaults).

ALTER TABLE computers ADD COLUMN limits TEXT NOT NULL DEFAULT '{}';
