-- Create or replace a whole session: header, entries (file order), leaf. Bumps the revision
-- (never resets it, so a replaced session cannot repeat a revision a worker has seen).
-- KEYS: header, entries, order, leaf, rev, effects, effects:at
-- ARGV: replace ('1' | '0'), header JSON, leaf id ('' = none), then id, line, id, line, ...
-- Returns the new revision.
if ARGV[1] ~= '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('COMPACTOR_SESSION_EXISTS')
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7])
redis.call('SET', KEYS[1], ARGV[2])
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('RPUSH', KEYS[3], ARGV[i])
end
redis.call('SET', KEYS[4], ARGV[3])
return redis.call('INCR', KEYS[5])
