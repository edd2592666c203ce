-- Create a job record unless a job of the same kind is already queued or running for the
-- session (single-flight); a more urgent request upgrades a queued job's priority.
-- KEYS: inflight key (session, kind), new record key, session event stream
-- ARGV: 1 new job id, 2 record key prefix (+ token = a record key), 3 priority (lower = sooner),
--       4 queue, 5 reason, 6 target id ('' = none), 7 inflight TTL s, 8 pending record TTL s,
--       9.. record field/value pairs
-- Returns {outcome, job id, state, last event id of the session stream ('0-0' when empty)}
--   outcome: created | coalesced | upgraded | conflict (same kind, other target: not merged)
local function last_event_id()
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  if #last == 0 then
    return '0-0'
  end
  return last[1][1]
end
local current = redis.call('GET', KEYS[1])
if current then
  local token = string.match(current, ':(%x+)$')
  local record = ARGV[2] .. (token or '')
  local f = redis.call('HMGET', record, 'state', 'priority', 'targetId')
  if f[1] == 'queued' or f[1] == 'running' then
    if (f[3] or '') ~= ARGV[6] then
      return {'conflict', current, f[1], last_event_id()}
    end
    if f[1] == 'queued' and tonumber(ARGV[3]) < tonumber(f[2]) then
      redis.call('HSET', record, 'priority', ARGV[3], 'queue', ARGV[4], 'reason', ARGV[5])
      return {'upgraded', current, f[1], last_event_id()}
    end
    return {'coalesced', current, f[1], last_event_id()}
  end
end
redis.call('HSET', KEYS[2], unpack(ARGV, 9))
redis.call('EXPIRE', KEYS[2], ARGV[8])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[7])
return {'created', ARGV[1], 'queued', last_event_id()}
