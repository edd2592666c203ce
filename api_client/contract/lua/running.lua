-- Mark a job running for one more attempt (first start time kept).
-- KEYS: record   ARGV: 1 startedAt, 2 attempt number ('' = previous + 1),
--                      3 record TTL s while it runs ('' = keep the pending TTL)
-- Returns {attempt number, queue, priority, the record's field/value pairs as it now is} (the
-- job's queue list: its fair index drops the job; the record: the worker needs no read of its
-- own), or {-1} when the job is already finished.
local flat = redis.call('HGETALL', KEYS[1])
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
local attempt = tonumber(ARGV[2])
if not attempt then
  attempt = (tonumber(record.attempts) or 0) + 1
end
record.attempts, record.state = tostring(attempt), 'running'
local writes = {'attempts', record.attempts, 'state', 'running'}
if not record.startedAt then
  record.startedAt = ARGV[1]
  writes[#writes + 1] = 'startedAt'
  writes[#writes + 1] = ARGV[1]
end
redis.call('HSET', KEYS[1], unpack(writes))
if ARGV[3] and ARGV[3] ~= '' then
  -- The pending TTL bounds the wait in the queue, not the run: a started job keeps its record.
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
local reply = {attempt, record.queue or '', record.priority or ''}
for field, value in pairs(record) do
  reply[#reply + 1] = field
  reply[#reply + 1] = value
end
return reply
