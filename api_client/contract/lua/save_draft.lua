-- include: _retention
-- Store a speculative job's draft beside the session (never on its path), replacing an older
-- one (the stale draft it extended, when it built on one: the new draft carries its summary and
-- cost), only while the job is running and not asked to stop (a cancelled job leaves no draft).
-- KEYS: 1 session header, 2 job record, 3 draft
-- ARGV: 1 draft JSON, 2 TTL s, 3 the session's retention s (0 = forever)
-- Returns 'saved' | 'cancelled' | 'finished' | 'nosession'
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'nosession'
end
local f = redis.call('HMGET', KEYS[2], 'state', 'cancelRequested')
if f[1] ~= 'running' then
  return 'finished'
end
if f[2] == '1' then
  return 'cancelled'
end
redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[2])
retain(KEYS[1], ARGV[3])
return 'saved'
