-- include: _walk _retention _stored_bytes
-- One page of a session's path: the stored lines of an entry and of its parents, newest first,
-- so that a worker reads the path back only as far as its plan needs (worker/store/paths.py).
-- Bounded per call (lines and bytes): a long path takes several calls, none of them long.
-- KEYS: 1 entries, 2 order
-- ARGV: 1 entry id to start from, 2 most lines, 3 most bytes (one line at least),
--       4 where the start entry is likely in order (a negative index: -1 the newest entry)
-- Returns {line, line, ...}: the walk stops at the root, at an entry that is not stored (the
-- caller reads its parent id from the last line and finds it missing next time), or at a bound.
--
-- A path without branches is the tail of order, newest last: the lines are read in runs (one
-- LRANGE and one HMGET each, each run four times the one before, bounded by the lines left and
-- the bytes left at the mean line so far) while every parent is the entry before it in order:
-- a path of n entries costs a few commands, not n. Where the path leaves order's sequence (a
-- branch), or the start is not where ARGV[4] says, the walk goes on one HGET an entry. Every
-- line is still the one stored under the id its child names.
local id = ARGV[1]
local most, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local at = tonumber(ARGV[4] or '')
local out, size, seen = {}, 0, {}
local run_ids, run_lines, run_at, run_len = nil, nil, 0, 4

local function from_run()
  -- the line of `id` from the current run when `id` is the run's entry at `run_at`
  if not at or not KEYS[2] then
    return nil
  end
  if not run_ids or run_at < 1 then
    -- 16, 64, 256, ... lines, no more than the lines and (at the mean line so far) the bytes
    -- left (a page reads that far in any case: a short first run only saved bytes off a branch)
    run_len = math.min(run_len * 4, most - #out)
    if #out > 0 then
      run_len = math.min(run_len, math.ceil((budget - size) * #out / math.max(1, size)) + 1)
    end
    run_len = math.max(1, run_len)
    local ids = redis.call('LRANGE', KEYS[2], at - run_len + 1, at)
    if #ids == 0 or ids[#ids] ~= id then
      at = nil
      return nil
    end
    run_ids, run_lines, run_at = ids, redis.call('HMGET', KEYS[1], unpack(ids)), #ids
  end
  if run_ids[run_at] ~= id then
    at = nil
    return nil
  end
  local line = run_lines[run_at]
  run_at = run_at - 1
  at = at - 1
  if not line then
    at = nil
    return nil
  end
  return line
end

while id and #out < most and (#out == 0 or size < budget) and not seen[id] do
  seen[id] = true
  local line = from_run() or redis.call('HGET', KEYS[1], id)
  if not line then
    break
  end
  out[#out + 1] = line
  size = size + #line
  local _, parent = entry_info(line)
  id = parent
end
return out
