-- The body of enqueue.lua as a function of its KEYS and ARGV (included by enqueue and
-- compact_auto). What it does, its KEYS, ARGV and replies:
-- Create a job record unless a job of the same kind is already queued or running for the
-- session (single-flight), and push its Celery task message when the broker is this Redis.
-- KEYS: 1 inflight key (session, kind), 2 new record key, 3 session event stream,
--       4 session header, 5 session entries, 6-8 the tenant's queued jobs and the queue list's
--       fair index, tags and messages (only with ARGV[15]; given only when this Redis is no
--       Cluster)
-- ARGV: 1 new job id, 2 record key prefix (+ token = a record key), 3 priority (lower = sooner),
--       4 queue, 5 reason, 6 target id ('' = none), 7 inflight TTL s, 8 pending record TTL s,
--       9 instructions ('' = none), 10 task message to LPUSH ('' = the caller publishes),
--       11 event channel, 12 task-sent event to PUBLISH ('' = none),
--       13 when the sweep looks at the new job (Unix ms; '' = the caller indexes it),
--       14 the session's retention in s (0 = forever; needs _retention), 15 the tenant's admission
--       policy ('' = the caller admitted the job; needs _admit), 16 the broker's queue list
--       (with ARGV[10]), 17 the jobs-due index (with ARGV[13]), 18 the tenant's quota and 19
--       today's usage (with ARGV[15]), 20.. record field pairs
-- The keys of ARGV 16-19 are not declared: Redis checks a script's declared keys for reading
-- and writing both, and a tenant's ACL user may only write the broker's lists and the jobs-due
-- index and only read its quota and usage (docs/tenants.md); each command is checked.
-- Errors: COMPACTOR_NOSESSION (no header), COMPACTOR_NOENTRY <id> (target not in the session),
--         COMPACTOR_QUOTA <quota> <limit> <value> (the tenant is over a quota: see _admit.lua)
-- Returns {outcome, job id, state, last event id of the session stream ('0-0' when empty),
--          why (conflicts only)}
--   outcome: created | coalesced | upgraded (re-send at the new priority) | conflict
--   A queued job without instructions takes the request's instructions (coalesced); other
--   instructions, or any instructions for a running job, are a conflict, never dropped.
local function enqueue(KEYS, ARGV)
  local function last_event_id()
    local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
    if #last == 0 then
      return '0-0'
    end
    return last[1][1]
  end
  if redis.call('EXISTS', KEYS[4]) == 0 then
    return redis.error_reply('COMPACTOR_NOSESSION')
  end
  if ARGV[6] ~= '' and redis.call('HEXISTS', KEYS[5], ARGV[6]) == 0 then
    return redis.error_reply('COMPACTOR_NOENTRY ' .. ARGV[6])
  end
  local current = redis.call('GET', KEYS[1])
  if current then
    local token = string.match(current, ':(%x+)$')
    local record = ARGV[2] .. (token or '')
    local f = redis.call('HMGET', record, 'state', 'priority', 'targetId', 'instructions')
    if f[1] == 'queued' or f[1] == 'running' then
      if (f[3] or '') ~= ARGV[6] then
        return {'conflict', current, f[1], last_event_id(), 'target'}
      end
      local held = f[4] or ''
      if ARGV[9] ~= '' and ARGV[9] ~= held then
        if f[1] ~= 'queued' or held ~= '' then
          return {'conflict', current, f[1], last_event_id(), 'instructions'}
        end
        redis.call('HSET', record, 'instructions', ARGV[9])
      end
      if f[1] == 'queued' and tonumber(ARGV[3]) < tonumber(f[2]) then
        redis.call('HSET', record, 'priority', ARGV[3], 'queue', ARGV[4], 'reason', ARGV[5])
        return {'upgraded', current, f[1], last_event_id()}
      end
      -- Only the job record changed (it keeps its own TTL): the session's keys are untouched.
      return {'coalesced', current, f[1], last_event_id()}
    end
  end
  local tag = nil
  if ARGV[15] ~= '' then
    tag = admit(KEYS[6], ARGV[18], ARGV[19], ARGV[15], ARGV[1])
    if type(tag) == 'table' then
      return tag
    end
  end
  redis.call('HSET', KEYS[2], unpack(ARGV, 20))
  redis.call('EXPIRE', KEYS[2], ARGV[8])
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[7])
  if ARGV[13] ~= '' then
    redis.call('ZADD', ARGV[17], 'NX', ARGV[13], ARGV[1])
  end
  if ARGV[10] ~= '' then
    if tag then
      place(ARGV[16], KEYS[7], KEYS[8], tag, ARGV[1], ARGV[10], ARGV[8])
    else
      redis.call('LPUSH', ARGV[16], ARGV[10])
    end
    if ARGV[12] ~= '' then
      redis.call('PUBLISH', ARGV[11], ARGV[12])
    end
  end
  -- The session's only key written: the slot, whose TTL was just set.
  retain_keys(KEYS[4], ARGV[14], {{KEYS[1], tonumber(ARGV[7]) * 1000}})
  return {'created', ARGV[1], 'queued', last_event_id()}
end
