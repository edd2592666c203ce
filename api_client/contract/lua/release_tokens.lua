-- Give back a job's reservation of its tenant's day budget (worker/store/tenant_usage.py).
-- KEYS: the tenant's reservations. ARGV: the job's id, the owner ('' = whoever holds it).
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and (ARGV[2] == '' or string.match(held, '%S+$') == ARGV[2]) then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
