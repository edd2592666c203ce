-- include: _retention
-- Move the leaf (branch / resetLeaf: docs/rules.md "Tree, leaf and labels") and bump the revision.
-- KEYS: header, entries, leaf, rev
-- ARGV[1]: the new leaf id, or '' to reset (the next append makes a new root),
--   ARGV[2]: the session's retention in s (0 = forever)
-- Returns the new revision.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('COMPACTOR_NOSESSION')
end
if ARGV[1] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return redis.error_reply('COMPACTOR_NOENTRY ' .. ARGV[1])
end
redis.call('SET', KEYS[3], ARGV[1], 'KEEPTTL')  -- the session's expiry instant stays
local rev = redis.call('INCR', KEYS[4])
retain(KEYS[1], ARGV[2])
return rev
