-- The fair order's placement of a task message in its queue list (docs/tenants.md "Fair scheduling").
-- Included by _enqueue.lua (the broker is the sessions' Redis: in the enqueue script) and
-- place.lua (a broker Redis of its own: run there after the admission gave the tag).
-- A helper: its functions read no KEYS or ARGV; the including script passes them its own.
--
-- Push a task message into its queue list at its tag's place. kombu pops from the right end,
-- so the list is kept in tag order from the right: the message goes right after (LINSERT
-- AFTER) the nearest message with a later tag, or to the left end when none has one. The
-- list's index (tags: job id → tag; messages: job id → message) names the pivots; a worker
-- drops a job from it when it starts the job. An index entry whose message is gone (popped by
-- a worker that died, trimmed) is dropped on the way; after three such, the message simply
-- goes to the end: never lost, only less fairly placed.
local function place(list, tags, messages, tag, job_id, message, pending_ttl)
  redis.call('ZREMRANGEBYSCORE', tags, '-inf', '(' .. (tag - pending_ttl * 1000))
  local placed = false
  for _ = 1, 3 do
    local later = redis.call('ZRANGEBYSCORE', tags, '(' .. tag, '+inf', 'LIMIT', 0, 1)
    if #later == 0 then
      break
    end
    local pivot = redis.call('HGET', messages, later[1])
    if pivot and redis.call('LINSERT', list, 'AFTER', pivot, message) > 0 then
      placed = true
      break
    end
    redis.call('ZREM', tags, later[1])
    redis.call('HDEL', messages, later[1])
  end
  if not placed then
    redis.call('LPUSH', list, message)
  end
  redis.call('ZADD', tags, tag, job_id)
  redis.call('HSET', messages, job_id, message)
  redis.call('PEXPIRE', tags, pending_ttl * 1000)
  redis.call('PEXPIRE', messages, pending_ttl * 1000)
end
