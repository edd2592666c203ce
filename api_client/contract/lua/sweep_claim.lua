-- Claim the jobs whose time to be looked at has come, so that only one sweeping worker acts on
-- each: their score moves ARGV[2] ms into the future (the claimer sets the real next time).
-- One key only (the global index lives in a slot of its own on a Cluster).
-- KEYS: 1 jobs-due index   ARGV: 1 now (Unix ms), 2 hold ms, 3 at most this many
-- Returns the claimed job ids, oldest first.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local later = tonumber(ARGV[1]) + tonumber(ARGV[2])
for _, id in ipairs(due) do
  redis.call('ZADD', KEYS[1], later, id)
end
return due
