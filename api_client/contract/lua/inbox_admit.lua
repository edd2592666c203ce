-- include: _admit _stored_bytes
-- The admission of a job from a tenant's inbox (worker/store/inbox.py): first the bytes its
-- session takes, as a worker measured it just now (worker/store/inbox_bytes.py), go into the
-- tenant's measured hash, and while the hash's sum is over the tenant's stored_bytes_max the job
-- is refused; then admit() (_admit.lua: queued jobs, the model budget, the fair tag). Included
-- with _admit.lua and _stored_bytes.lua. Every key is the tenant's (one slot). Run by the
-- workers' Redis user, which may write them all: every key it names is in KEYS (admit.lua,
-- run by a tenant's user, passes 3 and 4 in ARGV instead); admit() derives the quota key's
-- siblings (`bytes`, `reserved`) by the loader's rule (api_client/contract/lua_scripts.py).
-- KEYS: 1 the tenant's queued jobs, 2 its measured hash (session -> bytes, '*' -> their sum),
--       3 its quota overrides, 4 today's usage
-- ARGV: 1 the policy, 2 the job's id, 3 the job's session (its field), 4 its bytes ('' = not
--       measured: the last admission saw no limit; 0 = none of its keys exists, its field
--       goes), 5 the settings' stored_bytes_max
-- Returns {the fair tag, the tenant's stored_bytes_max (0: none)}, or the error reply
-- COMPACTOR_QUOTA <quota> <limit> <value> (the measurement is kept; nothing else written).
local measured, quota, field, bytes = KEYS[2], KEYS[3], ARGV[3], ARGV[4]
if bytes == '0' then
  bytes_drop(measured, field)
elseif bytes ~= '' then
  bytes_set(measured, field, tonumber(bytes))
end
local limit = tonumber(redis.call('HGET', quota, 'stored_bytes_max') or ARGV[5]) or 0
if limit > 0 then
  local total = tonumber(redis.call('HGET', measured, BYTES_TOTAL) or '0')
  if total > limit then
    return over('stored_bytes', limit, total)
  end
end
local tag = admit(KEYS[1], quota, KEYS[4], ARGV[1], ARGV[2])
if type(tag) == 'table' then
  return tag  -- admit's own refusal
end
return {tag, limit}
