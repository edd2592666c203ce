-- include: _running
-- Mark a job running for one more attempt (first start time kept; _running.lua's mark_running).
-- KEYS: record   ARGV: 1 startedAt, 2 attempt number ('' = previous + 1),
--                      3 record TTL s while it runs ('' = keep the pending TTL)
-- Returns {attempt number, queue, priority, the record's field/value pairs as it now is} (the
-- job's queue list: its fair index drops the job; the record: the worker needs no read of its
-- own), or {-1} when the job is already finished.
return mark_running(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
