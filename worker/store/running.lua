-- Mark a job running for one more attempt (first start time kept).
-- KEYS: record   ARGV: 1 startedAt, 2 attempt number ('' = previous + 1),
--                      3 record TTL s while it runs ('' = keep the pending TTL)
-- Returns {attempt number, queue, priority} (the job's queue list: its fair index drops the
-- job), or {-1} when the job is already finished.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return redis.error_reply('COMPACTOR_NOJOB')
end
if state ~= 'queued' and state ~= 'running' then
  return {-1}
end
local attempt
if ARGV[2] == '' then
  attempt = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
else
  attempt = tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], 'attempts', attempt)
end
redis.call('HSET', KEYS[1], 'state', 'running')
redis.call('HSETNX', KEYS[1], 'startedAt', ARGV[1])
if ARGV[3] and ARGV[3] ~= '' then
  -- The pending TTL bounds the wait in the queue, not the run: a started job keeps its record.
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
local route = redis.call('HMGET', KEYS[1], 'queue', 'priority')
return {attempt, route[1] or '', route[2] or ''}
