-- Rewrite pruned tool results in place (SPEC §8), all or nothing. Each entry is rewritten only
-- if its stored line still has the SHA-1 the plan was made from, so a concurrent change to any
-- of them makes the whole step stale instead of overwriting it. The plan protects the newest
-- results of the snapshot's path, so it also needs the snapshot leaf on the current leaf's path
-- (appends only add newer results; a move back would expose pruned results as the newest).
-- KEYS: 1 header, 2 entries, 3 order (unused), 4 leaf, 5 rev, 6 effects, 7 job record, 8 effects:at
-- ARGV: 1 job id, 2 record the effect ('1' | '0'), 3 job result JSON, 4 n,
--       5 snapshot leaf id ('' = not checked), 6 walk limit,
--       then per entry: id, SHA-1 of the planned line, new line
--       last: effect marker retention ms
-- Returns {status, '', revision, ''}
if ARGV[2] == '1' then
  local refused = job_guard(KEYS[1], KEYS[7], KEYS[6], ARGV[1])
  if refused then
    return refused
  end
else
  -- The prune pass of a compaction job: no effect of its own, same liveness checks.
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'nosession', '', '', ''}
  end
  local f = redis.call('HMGET', KEYS[7], 'state', 'cancelRequested')
  if f[1] ~= 'running' then
    return {'finished', f[1] or '', '', ''}
  end
  if f[2] == '1' then
    return {'cancelled', '', '', ''}
  end
end
if ARGV[5] ~= '' then
  local leaf = redis.call('GET', KEYS[4]) or ''
  if not reaches_without_compaction(KEYS[2], leaf, ARGV[5], tonumber(ARGV[6]), true) then
    return {'stale', '', redis.call('GET', KEYS[5]) or '0', ''}
  end
end
local n = tonumber(ARGV[4])
for i = 0, n - 1 do
  local id, digest = ARGV[7 + 3 * i], ARGV[8 + 3 * i]
  local line = redis.call('HGET', KEYS[2], id)
  if not line or redis.sha1hex(line) ~= digest then
    return {'stale', id, redis.call('GET', KEYS[5]) or '0', ''}
  end
end
for i = 0, n - 1 do
  redis.call('HSET', KEYS[2], ARGV[7 + 3 * i], ARGV[9 + 3 * i])
end
if ARGV[2] == '1' then
  remember_effect(KEYS[6], KEYS[8], ARGV[1], '', ARGV[#ARGV])
  redis.call('HSET', KEYS[7], 'result', ARGV[3])
end
local rev = redis.call('INCR', KEYS[5])
return {'committed', '', tostring(rev), ''}
