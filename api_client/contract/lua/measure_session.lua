-- The bytes one session's keys take in Redis (worker/store/inbox_bytes.py): MEMORY USAGE of
-- each. A string is exact; a hash, list, sorted set or stream of up to 1024 elements too, a
-- larger one is estimated from 1024 of them (Redis's own 5 took the demo session's entries
-- hash for 61 kB of its 212 kB); so one key costs Redis at most ~0.1 ms.
-- KEYS: every key of the session (SessionKeys.all: its hash tag, one slot)   ARGV: none
-- Returns their sum; 0 when none of them exists (MEMORY USAGE of a missing key is nil).
local total = 0
for _, key in ipairs(KEYS) do
  total = total + (redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '1024') or 0)
end
return total
