-- One page of a session's path: the stored lines of an entry and of its parents, newest first,
-- so that a worker reads the path back only as far as its plan needs (worker/store/paths.py).
-- Bounded per call (lines and bytes): a long path takes several calls, none of them long.
-- KEYS: 1 entries
-- ARGV: 1 entry id to start from, 2 most lines, 3 most bytes (one line at least)
-- Returns {line, line, ...}: the walk stops at the root, at an entry that is not stored (the
-- caller reads its parent id from the last line and finds it missing next time), or at a bound.
local id = ARGV[1]
local most, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local out, size, seen = {}, 0, {}
while id and #out < most and (#out == 0 or size < budget) and not seen[id] do
  seen[id] = true
  local line = redis.call('HGET', KEYS[1], id)
  if not line then
    break
  end
  out[#out + 1] = line
  size = size + #line
  local _, parent = entry_info(line)
  id = parent
end
return out
