-- Extend the lease if this worker still holds it. KEYS: lease  ARGV: 1 worker id, 2 TTL ms
-- Returns 1 when extended, 0 when the lease was lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
