-- One page of a session's path (docs/storage.md "A job's start"; worker/store/paths.py): the
-- stored lines of an entry and of its parents, newest first, bounded per call (lines and
-- bytes). Included by path_page.lua (a page of its own) and start_job.lua (a job's first page,
-- with its start); it needs _walk's entry_info, included before it.
-- A helper: its function reads no KEYS or ARGV; the including script passes them its own.
--
-- A path without branches is the tail of order, newest last: the lines are read in runs (one
-- LRANGE and one HMGET each, each run four times the one before, bounded by the lines left and
-- the bytes left at the mean line so far) while every parent is the entry before it in order:
-- a path of n entries costs a few commands, not n. Where the path leaves order's sequence (a
-- branch), or the start is not where `at` says, the walk goes on one HGET an entry. Every
-- line is still the one stored under the id its child names.

-- The lines from entry `id` back: the walk stops at the root, at an entry that is not stored
-- (the caller reads its parent id from the last line and finds it missing next time), or at a
-- bound. entries_key, order_key: the session's entries and order (order_key false: no runs);
-- most: lines; budget: bytes (one line at least); at: where `id` likely is in order (a negative
-- index: -1 the newest entry; nil: unknown).
local function path_page(entries_key, order_key, id, most, budget, at)
  most, budget, at = tonumber(most), tonumber(budget), tonumber(at or '')
  local out, size, seen = {}, 0, {}
  local run_ids, run_lines, run_at, run_len = nil, nil, 0, 4

  local function from_run()
    -- the line of `id` from the current run when `id` is the run's entry at `run_at`
    if not at or not order_key then
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
      local ids = redis.call('LRANGE', order_key, at - run_len + 1, at)
      if #ids == 0 or ids[#ids] ~= id then
        at = nil
        return nil
      end
      run_ids, run_lines, run_at = ids, redis.call('HMGET', entries_key, unpack(ids)), #ids
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
    local line = from_run() or redis.call('HGET', entries_key, id)
    if not line then
      break
    end
    out[#out + 1] = line
    size = size + #line
    local _, parent = entry_info(line)
    id = parent
  end
  return out
end
