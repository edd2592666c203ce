-- include: _retention _finish
-- A worker's end of a job on one Redis, in one step (worker/store/job_lifecycle.py; on a Redis
-- Cluster the tenant's keys and the global stream lie in other slots, and the same writes go as
-- finish.lua and commands of their own): the delivery's spend counted on its tenant's day
-- (api_client/contract/usage.py add_spend's writes), the job's reservation of the budget given
-- back (api_client/contract/reservations.py), the events of the job's commit it announces with
-- its end (a compaction's session_compact: on the session's stream and the global one, before
-- the completion event, as the worker would have written them a moment before), the job ended
-- (_finish.lua), then, when this call ended it, the completion event's copy on the global
-- stream and, for a job that never started, its leaving the tenant's queued set. The spend and
-- the reservation change together, before the end: whoever sees the job ended sees its spend,
-- and no admission sees its tokens twice.
-- KEYS: 1-8 finish_job()'s (see _finish.lua), 9 the global event stream, 10 the tenant's
--       reservations, 11 the tenant's queued set, [12 the tenant's usage day, 13 the tenants
--       set: only with a spend to count]
-- ARGV: 1 global stream MAXLEN, 2 the usage fields' prefix ('' | 'draft_'), 3 jobs to count,
--       4 input tokens, 5 output tokens, 6 USD ('0' = none), 7 the day's TTL s ('0' = set
--       lately), 8 the tenant to name in the tenants set ('' = named lately), 9 '1': give the
--       reservation back ('': none was made, the job's start saw no daily budget), 10 how many
--       events the end announces (n), 11..10+2n their type and JSON, then finish_job()'s ARGV
-- Returns finish_job()'s reply, or its error.
local announced = tonumber(ARGV[10])
local FINISH = 10 + 2 * announced  -- finish_job()'s ARGV start after ours
local job = ARGV[FINISH + 1]
if KEYS[12] then
  local day, pre = KEYS[12], ARGV[2]
  if ARGV[3] ~= '0' then
    redis.call('HINCRBY', day, pre .. 'jobs', ARGV[3])
  end
  redis.call('HINCRBY', day, pre .. 'input_tokens', ARGV[4])
  redis.call('HINCRBY', day, pre .. 'output_tokens', ARGV[5])
  if tonumber(ARGV[6]) ~= 0 then
    redis.call('HINCRBYFLOAT', day, pre .. 'usd', ARGV[6])
  end
  if ARGV[7] ~= '0' then
    redis.call('EXPIRE', day, ARGV[7])
  end
  if ARGV[8] ~= '' then
    redis.call('SADD', KEYS[13], ARGV[8])
  end
end
if ARGV[9] == '1' then
  redis.call('HDEL', KEYS[10], job)
end
for i = 11, 10 + 2 * announced, 2 do
  -- (The session stream's lifetime and the retention: finish_job's event sets them next.)
  copy_event(KEYS[6], ARGV[FINISH + 5], ARGV[i], job, ARGV[i + 1])
  copy_event(KEYS[9], ARGV[1], ARGV[i], job, ARGV[i + 1])
end
local reply = finish_job({unpack(KEYS, 1, 8)}, {unpack(ARGV, FINISH + 1)})
if reply.err or reply[1] ~= 1 then
  return reply
end
local kind = ARGV[FINISH + 6]
if kind ~= '' then
  copy_event(KEYS[9], ARGV[1], kind, job, ARGV[FINISH + 7])
end
if reply[2] ~= 'running' then
  redis.call('ZREM', KEYS[11], job)
end
return reply
