-- The body of enqueue.lua as a function (included by enqueue and compact_auto; needs _retention,
-- _admit and _place). Creates a job record unless a job of the same kind is already queued or
-- running for the session (single flight). Everything the job needs that lies in this Redis's
-- reach is done here, in one step (docs/storage.md "Enqueue"): the tenant's admission, the
-- record, the jobs-due index and, with the broker in this Redis, the task message in its fair
-- place; with the tenant's inbox, the inbox and its announcement.
--
-- enqueue(K, a, message, event): K the KEYS in this layout, a the named arguments (one JSON
-- object: ARGV[1] of enqueue.lua, decoded), message and event the task message and task-sent
-- event (ARGV[2] and ARGV[3], with a.push only: texts of their own, neither escaped into the
-- JSON nor decoded on every call, a coalescing one included):
-- K: 1 the session's single-flight key of the job's kind, 2 the new record, 3 the session's
--    event stream, 4 its header, 5 its entries; then
--    with a.admit: 6 the tenant's queued jobs, and with a.push too: 7-8 the queue list's fair
--    index (tags, messages);
--    with a.inbox: 6 the tenant's inbox (also its announcement channel).
--    On a Redis Cluster only 1-5 are given (the others lie in other slots): the caller admits
--    and indexes the job with commands of its own.
-- a: job (the new job's id), records (record key prefix: + token = a record key), priority
--    (lower = sooner), queue, reason, target (a branch summary's entry id, '' = none),
--    instructions ('' = none), ttl (s: the single-flight key and a queued record), retention
--    (the session's, s; 0 = forever), fields (the record's field/value pairs, one flat array),
--    and what applies of:
--    admit = {policy, quota, usage}: the tenant's admission (_admit.lua),
--    due = {key, at}: the jobs-due index and when the sweep looks at the job (Unix ms),
--    push = {list, channel}: LPUSH/place the message on the broker's list, then PUBLISH the
--      event ('' = none) to channel,
--    inbox = at (Unix ms): ZADD the job to the inbox (K[6]) and PUBLISH its id there.
-- Keys not in K (the exception to api_client/contract/lua_scripts.py's rule): those a tenant's
-- ACL user may hold read-only (admit.quota, admit.usage) or write-only (due.key, push.list) are
-- named in the argument that uses them, because Redis checks a script's declared keys for
-- reading and writing both (docs/tenants.md); each command is still checked against the
-- caller's ACL. _admit.lua derives the quota's siblings by the rule; _retention.lua the
-- session's.
-- Errors: COMPACTOR_NOSESSION (no header), COMPACTOR_NOENTRY <id> (target not in the session),
--         COMPACTOR_QUOTA <quota> <limit> <value> (over a quota: see _admit.lua; nothing
--         written)
-- Returns {outcome, job id, state, last event id of the session stream ('0-0' when empty),
--          then the fair tag (created with a.admit and no a.push: the caller places the
--          message) or why (conflicts only: 'target' | 'instructions')}
--   outcome: created | coalesced | upgraded (re-send at the new priority) | conflict
--   A queued job without instructions takes the request's instructions (coalesced); other
--   instructions, or any instructions for a running job, are a conflict, never dropped.
local function announce(inbox, at, job_id)
  redis.call('ZADD', inbox, at, job_id)
  redis.call('PUBLISH', inbox, job_id)
end

local function enqueue(K, a, message, event)
  local function last_event_id()
    local last = redis.call('XREVRANGE', K[3], '+', '-', 'COUNT', 1)
    if #last == 0 then
      return '0-0'
    end
    return last[1][1]
  end
  if redis.call('EXISTS', K[4]) == 0 then
    return redis.error_reply('COMPACTOR_NOSESSION')
  end
  if a.target ~= '' and redis.call('HEXISTS', K[5], a.target) == 0 then
    return redis.error_reply('COMPACTOR_NOENTRY ' .. a.target)
  end
  local current = redis.call('GET', K[1])
  if current then
    local token = string.match(current, ':(%x+)$')
    local record = a.records .. (token or '')
    local f = redis.call('HMGET', record, 'state', 'priority', 'targetId', 'instructions')
    if f[1] == 'queued' or f[1] == 'running' then
      if (f[3] or '') ~= a.target then
        return {'conflict', current, f[1], last_event_id(), 'target'}
      end
      local held = f[4] or ''
      if a.instructions ~= '' and a.instructions ~= held then
        if f[1] ~= 'queued' or held ~= '' then
          return {'conflict', current, f[1], last_event_id(), 'instructions'}
        end
        redis.call('HSET', record, 'instructions', a.instructions)
      end
      if f[1] == 'queued' and a.priority < tonumber(f[2]) then
        redis.call('HSET', record, 'priority', a.priority, 'queue', a.queue, 'reason', a.reason)
        if a.inbox then  -- the workers look at it again, at its new priority
          announce(K[6], a.inbox, current)
        end
        return {'upgraded', current, f[1], last_event_id()}
      end
      -- Only the job record changed (it keeps its own TTL): the session's keys are untouched.
      return {'coalesced', current, f[1], last_event_id()}
    end
  end
  local tag = nil
  if a.admit then
    tag = admit(K[6], a.admit.quota, a.admit.usage, a.admit.policy, a.job)
    if type(tag) == 'table' then
      return tag
    end
  end
  redis.call('HSET', K[2], unpack(a.fields))
  redis.call('EXPIRE', K[2], a.ttl)
  redis.call('SET', K[1], a.job, 'EX', a.ttl)
  if a.due then
    redis.call('ZADD', a.due.key, 'NX', a.due.at, a.job)
  end
  local placed = a.push
  if placed then
    if tag then
      place(placed.list, K[7], K[8], tag, a.job, message, a.ttl)
    else
      redis.call('LPUSH', placed.list, message)
    end
    if event ~= '' then
      redis.call('PUBLISH', placed.channel, event)
    end
  elseif a.inbox then
    announce(K[6], a.inbox, a.job)
  end
  -- The session's only key written: the slot, whose TTL was just set.
  retain_keys(K[4], a.retention, {{K[1], a.ttl * 1000}})
  if tag and not placed then
    return {'created', a.job, 'queued', last_event_id(), tag}
  end
  return {'created', a.job, 'queued', last_event_id()}
end
