-- A tenant's running slots under its max_running cap (docs/tenants.md,
-- worker/store/tenant_slots.py). Included with `-- include: _tenant_slot` (tenant_slot and
-- start_job).
--
-- A helper: its function reads no KEYS or ARGV. take_slot(running, job, now, until_ms, limit):
-- running the tenant's running jobs (zset: job id -> until when, Unix ms), now (Unix ms),
-- until_ms until when the slot is held (the job's deadline: a worker that dies frees it then),
-- limit the tenant's max_running (the caller reads it: the quota's field, else the setting).
-- Returns 1 (run it: a slot is held for it), 2 (run it: no cap, nothing held) or 0 (the tenant
-- runs max_running jobs already).
local function take_slot(running, job, now, until_ms, limit)
  if not limit or limit <= 0 then
    return 2
  end
  redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
  if not redis.call('ZSCORE', running, job) and redis.call('ZCARD', running) >= limit then
    return 0
  end
  redis.call('ZADD', running, until_ms, job)
  redis.call('PEXPIREAT', running, until_ms)
  return 1
end
