-- include: _admit _stored_bytes
-- The admission of a job from a tenant's inbox (worker/store/inbox.py): first the bytes its
-- session takes, as a worker measured it just now (worker/store/inbox_bytes.py), go into the
-- tenant's measured hash, and while the hash's sum is over the tenant's stored_bytes_max the job
-- is refused; then admit() (_admit.lua: queued jobs, the model budget, the fair tag). Included
-- with _admit.lua and _stored_bytes.lua. Every key is the tenant's (one slot).
-- KEYS: 1 the tenant's queued jobs, 2 its measured hash (session -> bytes, '*' -> their sum)
-- ARGV: 1 the policy, 2 the job's id, 3 the tenant's quota overrides, 4 today's usage (as
--       admit.lua), 5 the job's session (its field), 6 its bytes ('' = not measured: the last
--       admission saw no limit; 0 = none of its keys exists, its field goes), 7 the settings'
--       stored_bytes_max
-- Returns {the fair tag, the tenant's stored_bytes_max (0: none)}, or the error reply
-- COMPACTOR_QUOTA <quota> <limit> <value> (the measurement is kept; nothing else written).
local measured, field, bytes = KEYS[2], ARGV[5], ARGV[6]
if bytes == '0' then
  bytes_drop(measured, field)
elseif bytes ~= '' then
  bytes_set(measured, field, tonumber(bytes))
end
local limit = tonumber(redis.call('HGET', ARGV[3], 'stored_bytes_max') or ARGV[7]) or 0
if limit > 0 then
  local total = tonumber(redis.call('HGET', measured, BYTES_TOTAL) or '0')
  if total > limit then
    return over('stored_bytes', limit, total)
  end
end
local tag = admit(KEYS[1], ARGV[3], ARGV[4], ARGV[1], ARGV[2])
if type(tag) == 'table' then
  return tag  -- admit's own refusal
end
return {tag, limit}
