-- A job's start for one more attempt (first start time kept). Included with
-- `-- include: _running` (running and start_job).
--
-- A helper: its function reads no KEYS or ARGV. mark_running(record, started_at, attempt, ttl):
-- record the job's record key, started_at its startedAt if it has none, attempt the attempt
-- number ('' = previous + 1), ttl the record's TTL s while it runs ('' = keep the pending TTL).
-- Returns {attempt number, queue, priority, the record's field/value pairs as it now is} (the
-- job's queue list: its fair index drops the job; the record: the worker needs no read of its
-- own), or {-1} when the job is already finished; a missing record is the error
-- COMPACTOR_NOJOB.
local function mark_running(record_key, started_at, attempt_arg, ttl)
  local flat = redis.call('HGETALL', record_key)
  if #flat == 0 then
    return redis.error_reply('COMPACTOR_NOJOB')
  end
  local record = {}
  for i = 1, #flat, 2 do
    record[flat[i]] = flat[i + 1]
  end
  if record.state ~= 'queued' and record.state ~= 'running' then
    return {-1}
  end
  local attempt = tonumber(attempt_arg)
  if not attempt then
    attempt = (tonumber(record.attempts) or 0) + 1
  end
  record.attempts, record.state = tostring(attempt), 'running'
  local writes = {'attempts', record.attempts, 'state', 'running'}
  if not record.startedAt then
    record.startedAt = started_at
    writes[#writes + 1] = 'startedAt'
    writes[#writes + 1] = started_at
  end
  redis.call('HSET', record_key, unpack(writes))
  if ttl and ttl ~= '' then
    -- The pending TTL bounds the wait in the queue, not the run: a started job keeps its record.
    redis.call('EXPIRE', record_key, ttl)
  end
  local reply = {attempt, record.queue or '', record.priority or ''}
  for field, value in pairs(record) do
    reply[#reply + 1] = field
    reply[#reply + 1] = value
  end
  return reply
end
