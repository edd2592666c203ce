-- include: _lease
-- Drop the lease if this worker holds it. KEYS: lease  ARGV: 1 worker id. Returns 1 or 0.
return lease_release(KEYS[1], ARGV[1])
