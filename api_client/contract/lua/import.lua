-- include: _retention _stored_bytes
-- Create or replace a whole session: header, entries (file order), leaf. Bumps the revision
-- (never resets it, so a replaced session cannot repeat a revision a worker has seen) and the
-- rewrites counter (a prune planned on the replaced lines is stale). A large import arrives in
-- steps (api_client/client/imports.py): its entries and order were written to staging keys,
-- renamed into place here, so the session changes at once, whatever its size.
-- KEYS: header, entries, order, leaf, rev, effects, effects:at, rewrites, rewriting, pruned,
--       staged entries, staged order (a small import: any keys of the session stand in),
--       [the tenant's bytes hash: a single Redis only (_stored_bytes.lua)]
-- ARGV: replace ('1' | '0'), header JSON, leaf id ('' = none), staged entries ('0' = none),
--       the session's retention in s (0 = forever), bytes of the entry lines,
--       the session's field in the bytes hash, the tenant's quota hash (read only, so not a
--       declared key), the default stored_bytes_max,
--       then id, line, id, line, ... (a small import: no staging)
-- Returns the new revision. Over the tenant's stored_bytes quota (the lines grow its total past
-- it) nothing is stored, the staged keys go, and the reply is COMPACTOR_QUOTA stored_bytes
-- <limit> <value>.
if ARGV[1] ~= '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('COMPACTOR_SESSION_EXISTS')
end
local staged = tonumber(ARGV[4])
if staged > 0 and (redis.call('HLEN', KEYS[11]) ~= staged
    or redis.call('LLEN', KEYS[12]) ~= staged) then
  return redis.error_reply('COMPACTOR_IMPORT_INCOMPLETE')
end
local bytes, count = KEYS[13] or '', tonumber(ARGV[6])
if bytes ~= '' then
  local own = tonumber(redis.call('HGET', bytes, ARGV[7]) or '0')
  local refused = bytes_refusal(bytes, ARGV[8], ARGV[9], count - own)
  if refused then
    if staged > 0 then
      redis.call('UNLINK', KEYS[11], KEYS[12])
    end
    return refused
  end
end
-- UNLINK: a replaced session's large values are freed by a background thread, not while every
-- other client waits.
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[9], KEYS[10])
redis.call('SET', KEYS[1], ARGV[2])
if staged > 0 then
  redis.call('RENAME', KEYS[11], KEYS[2])
  redis.call('PERSIST', KEYS[2])
  redis.call('RENAME', KEYS[12], KEYS[3])
  redis.call('PERSIST', KEYS[3])
end
for i = 10, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('RPUSH', KEYS[3], ARGV[i])
end
redis.call('SET', KEYS[4], ARGV[3])
redis.call('INCR', KEYS[8])
bytes_set(bytes, ARGV[7], count)
local rev = redis.call('INCR', KEYS[5])
retain(KEYS[1], ARGV[5])
return rev
