-- include: _admit
-- A new job's admission on its own (a Redis Cluster, where the tenant's keys lie in another
-- slot than the session's, and summaries): see _admit.lua.
-- KEYS: 1 the tenant's queued jobs
-- ARGV: 1 the policy, 2 the new job's id, 3 the tenant's quota overrides and 4 today's usage
--       (keys of KEYS[1]'s slot, not declared: the tenant's ACL user may only read them, and
--       Redis checks declared keys for reading and writing both; see _enqueue.lua)
-- Returns the job's fair tag (place.lua puts a Redis broker's message there), or
-- COMPACTOR_QUOTA <quota> <limit> <value>.
return admit(KEYS[1], ARGV[3], ARGV[4], ARGV[1], ARGV[2])
