-- include: _lease
-- Take (or re-take) the lease on a job that is not finished (_lease.lua's lease_acquire).
-- KEYS: record, lease   ARGV: 1 worker id, 2 TTL ms
-- Returns 'acquired' | 'held' (another worker's lease is live) | 'finished'
return lease_acquire(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
