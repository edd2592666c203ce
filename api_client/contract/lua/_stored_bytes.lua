-- Stored bytes per tenant (api_client/contract/stored_bytes.py): the tenant's hash
-- `<p>:tenant:<t>:bytes` holds session id -> bytes of its stored entry lines, and BYTES_TOTAL ->
-- their sum, so that the quota check reads one field, not one per session. Every function keeps
-- the two in step. On a single Redis the scripts that change a session's lines call them in the
-- same atomic step (the hash is then one of their KEYS); on a Redis Cluster the hash lies in
-- another slot, and stored_bytes.lua runs them after the session's script. Included with
-- `-- include: _stored_bytes` (the client's and the worker's scripts alike).
-- A helper: its functions read no KEYS or ARGV; the including script passes them its own.

-- No session id can be it (an id starts with a letter or digit).
local BYTES_TOTAL = '*'

-- The session's lines grew (or shrank) by `delta` bytes. `key` '' = counted elsewhere (Cluster).
local function bytes_add(key, sid, delta)
  if key == '' or delta == 0 then
    return
  end
  redis.call('HINCRBY', key, sid, delta)
  redis.call('HINCRBY', key, BYTES_TOTAL, delta)
end

-- The session's lines are now `value` bytes in all (an import replaced them).
local function bytes_set(key, sid, value)
  if key == '' then
    return
  end
  local old = tonumber(redis.call('HGET', key, sid) or '0')
  redis.call('HSET', key, sid, value)
  if value ~= old then
    redis.call('HINCRBY', key, BYTES_TOTAL, value - old)
  end
end

-- The session is gone: its count leaves the total. With `expected`, only while the count is
-- still that value (the reconcile's guard: a session made again meanwhile keeps its count).
local function bytes_drop(key, sid, expected)
  local old = redis.call('HGET', key, sid)
  if not old or (expected and old ~= expected) then
    return 0
  end
  redis.call('HDEL', key, sid)
  local bytes = tonumber(old)
  if bytes ~= 0 then  -- and never -0: HINCRBY refuses the "-0" Lua makes of it
    redis.call('HINCRBY', key, BYTES_TOTAL, 0 - bytes)
  end
  return 1
end

-- The error reply that refuses a write growing the tenant's lines by `growth` bytes over its
-- stored_bytes_max (the field of the quota hash `quota_key`, else `default_limit`; 0 = no
-- limit), or nil. A write that does not grow them is never refused: a tenant over its quota can
-- still shrink.
local function bytes_refusal(key, quota_key, default_limit, growth)
  if key == '' or quota_key == '' or growth <= 0 then
    return nil
  end
  local limit = tonumber(redis.call('HGET', quota_key, 'stored_bytes_max') or default_limit)
  if not limit or limit <= 0 then
    return nil
  end
  local value = tonumber(redis.call('HGET', key, BYTES_TOTAL) or '0') + growth
  if value <= limit then
    return nil
  end
  return redis.error_reply(string.format('COMPACTOR_QUOTA stored_bytes %d %d', limit, value))
end
