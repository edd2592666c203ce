-- include: _retention _stored_bytes
-- Append entries as a chain under the current leaf, move the leaf, bump the revision. O(n).
-- KEYS: header, entries, order, leaf, rev, appends (idempotency key -> reply),
--   [the tenant's bytes hash: a single Redis only (_stored_bytes.lua)]
-- ARGV: n, then per entry i: head (ARGV[3i-1]), tail (ARGV[3i]), ids (ARGV[3i+1]),
--   then the idempotency key (ARGV[3n+2]), the replies' TTL in s (ARGV[3n+3]), how many
--   replies to keep (ARGV[3n+4]), the session's retention in s (ARGV[3n+5], 0 = forever),
--   its field in the bytes hash (ARGV[3n+6]), the tenant's quota hash (ARGV[3n+7]: read
--   only, so not a declared key) and the default stored_bytes_max (ARGV[3n+8])
--   the stored line is head .. <id JSON> .. ',"parentId":' .. <parent JSON> .. tail
--   ids: '=<id>' (the caller's id, must be new) or space-separated candidates (first unused wins)
-- Returns {id_1, ..., id_n, revision, bytes added}. Writes nothing when any id is refused or
-- the lines would take the tenant over its stored_bytes quota (COMPACTOR_QUOTA stored_bytes
-- <limit> <value>). The reply is kept under its key: the same append sent again (its reply was
-- lost) returns it without the bytes (nothing was added), writing nothing.
local n = tonumber(ARGV[1])
local done = redis.call('HGET', KEYS[6], ARGV[3 * n + 2])
if done then
  return cjson.decode(done)
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('COMPACTOR_NOSESSION')
end
local chosen, taken = {}, {}
for i = 1, n do
  local spec = ARGV[3 * i + 1]
  local id = nil
  if string.sub(spec, 1, 1) == '=' then
    id = string.sub(spec, 2)
    if taken[id] or redis.call('HEXISTS', KEYS[2], id) == 1 then
      return redis.error_reply('COMPACTOR_EXISTS ' .. id)
    end
  else
    for candidate in string.gmatch(spec, '%S+') do
      if not taken[candidate] and redis.call('HEXISTS', KEYS[2], candidate) == 0 then
        id = candidate
        break
      end
    end
    if not id then
      return redis.error_reply('COMPACTOR_NOID')
    end
  end
  taken[id] = true
  chosen[i] = id
end
local parent = redis.call('GET', KEYS[4])
local lines, added = {}, 0
for i = 1, n do
  local parent_json = 'null'
  if parent and parent ~= '' then
    parent_json = cjson.encode(parent)
  end
  lines[i] = ARGV[3 * i - 1] .. cjson.encode(chosen[i]) .. ',"parentId":' .. parent_json
    .. ARGV[3 * i]
  added = added + #lines[i]
  parent = chosen[i]
end
local bytes = KEYS[7] or ''
local refused = bytes_refusal(bytes, ARGV[3 * n + 7], ARGV[3 * n + 8], added)
if refused then
  return refused
end
for i = 1, n do
  redis.call('HSET', KEYS[2], chosen[i], lines[i])
  redis.call('RPUSH', KEYS[3], chosen[i])
end
bytes_add(bytes, ARGV[3 * n + 6], added)
redis.call('SET', KEYS[4], parent, 'KEEPTTL')  -- the session's expiry instant stays
chosen[n + 1] = redis.call('INCR', KEYS[5])
if redis.call('HLEN', KEYS[6]) >= tonumber(ARGV[3 * n + 4]) then
  redis.call('DEL', KEYS[6])  -- the older replies go: a retry comes at once
end
redis.call('HSET', KEYS[6], ARGV[3 * n + 2], cjson.encode(chosen))
redis.call('EXPIRE', KEYS[6], ARGV[3 * n + 3])
retain(KEYS[1], ARGV[3 * n + 5])
chosen[n + 2] = added
return chosen
