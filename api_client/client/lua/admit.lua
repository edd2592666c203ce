-- include: _admit
-- A new job's admission on its own (the broker is not the sessions' Redis): see _admit.lua.
-- KEYS: 1 the tenant's queued jobs, 2 its quota overrides, 3 today's usage
-- ARGV: 1 the policy, 2 the new job's id
-- Returns the job's fair tag (unused: its message goes to the end of its queue), or
-- COMPACTOR_QUOTA <quota> <limit> <value>.
return admit(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
