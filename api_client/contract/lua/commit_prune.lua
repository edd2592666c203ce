-- include: _walk _retention _stored_bytes
-- Rewrite pruned tool results in place (docs/compaction.md "Pruning"), in one step or, for many
-- lines, in bounded
-- steps that still apply as one (worker/store/_commits.py ``rewrite``).
-- The first step decides, atomically: the job may still commit, the lines are still those the
-- plan read (the rewrites counter, +1 on every rewrite of stored lines, is the value the plan
-- saw) and the snapshot leaf is still on the current leaf's path (appends only add newer
-- results; a move back would expose pruned results as the newest). A plan that fails any of
-- these writes nothing. A first step of several takes the rewriting marker (this job, PX): other
-- rewrites of the session wait until the last step drops it, so nothing can make the decided
-- plan stale half-way. The last step records the watermark (no tool result on the path up to
-- it is left to prune), the job's effect (the record's `effect` field, '': a change without an
-- entry) with its result, and bumps the revision.
-- Each step changes the tenant's count of stored bytes by its new lines' bytes less the old.
-- KEYS: 1 header, 2 entries, 3 order (unused), 4 leaf, 5 rev, 6 job record, 7 rewrites,
--       8 rewriting, 9 pruned,
--       [10 the tenant's bytes hash: a single Redis only (_stored_bytes.lua)]
--       (derived, read on a redelivery only: the session's `effects`, see job_guard in _walk)
-- ARGV: 1 job id, 2 record the effect ('1' | '0'), 3 job result JSON,
--       4 step: 'all' (the only one) | 'begin' | 'more' | 'end',
--       5 snapshot leaf id ('' = not checked), 6 walk limit, 7 rewrites counter the plan saw,
--       8 watermark entry id ('' = none), 9 marker TTL ms,
--       10 the session's retention s (0 = forever), 11 the session's field in the bytes hash,
--       then per entry: id, new line
-- Returns {status, '', revision, '', bytes changed}; status committed (this step is in) |
--   stale | busy (another job is rewriting) | cancelled | finished | duplicate | nosession
local step = ARGV[4]
local function revision()
  return redis.call('GET', KEYS[5]) or '0'
end
if step == 'all' or step == 'begin' then
  if ARGV[2] == '1' then
    local refused = job_guard(KEYS[1], KEYS[6], ARGV[1])
    if refused then
      return refused
    end
  else
    -- The prune pass of a compaction job: no effect of its own, same liveness checks.
    if redis.call('EXISTS', KEYS[1]) == 0 then
      return {'nosession', '', '', ''}
    end
    local f = redis.call('HMGET', KEYS[6], 'state', 'cancelRequested')
    if f[1] ~= 'running' then
      return {'finished', f[1] or '', '', ''}
    end
    if f[2] == '1' then
      return {'cancelled', '', '', ''}
    end
  end
  local holder = redis.call('GET', KEYS[8])
  if holder and holder ~= ARGV[1] then
    return {'busy', '', revision(), ''}
  end
  if (redis.call('GET', KEYS[7]) or '0') ~= ARGV[7] then
    return {'stale', '', revision(), ''}
  end
  if ARGV[5] ~= '' then
    local leaf = redis.call('GET', KEYS[4]) or ''
    if not reaches_without_compaction(KEYS[2], leaf, ARGV[5], tonumber(ARGV[6]), true) then
      return {'stale', '', revision(), ''}
    end
  end
  redis.call('INCR', KEYS[7])
  if step == 'begin' then
    redis.call('SET', KEYS[8], ARGV[1], 'PX', ARGV[9])
  end
elseif redis.call('GET', KEYS[8]) ~= ARGV[1] then
  -- The marker lapsed (this job stalled longer than its TTL) or the session was replaced: the
  -- steps written so far stay (each line is a valid prune), the job plans again.
  return {'stale', '', revision(), ''}
else
  redis.call('PEXPIRE', KEYS[8], ARGV[9])
end
local changed = 0
for i = 12, #ARGV, 2 do
  changed = changed + #ARGV[i + 1] - redis.call('HSTRLEN', KEYS[2], ARGV[i])
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
bytes_add(KEYS[10] or '', ARGV[11], changed)
if step == 'begin' or step == 'more' then
  retain(KEYS[1], ARGV[10])  -- every step writes, so each refreshes the retention
  return {'committed', '', revision(), '', tostring(changed)}
end
if ARGV[8] ~= '' then
  redis.call('SET', KEYS[9], ARGV[8], 'KEEPTTL')
end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[6], 'result', ARGV[3], 'effect', '')
end
redis.call('DEL', KEYS[8])
local rev = redis.call('INCR', KEYS[5])
retain(KEYS[1], ARGV[10])
return {'committed', '', tostring(rev), '', tostring(changed)}
