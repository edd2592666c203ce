-- Drop the lease if this worker holds it. KEYS: lease  ARGV: 1 worker id. Returns 1 or 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
