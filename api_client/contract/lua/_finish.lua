-- include: _events _record_entry
-- The body of finish.lua as a function of its KEYS and ARGV (included by finish and end_job;
-- needs _retention, brings _events and _record_entry). What it does, its KEYS, ARGV and replies:
-- End a job exactly once: terminal state, single-flight key cleared, lease dropped, record TTL,
-- and its completion event on the session stream, all atomically.
-- KEYS: record, lease, inflight compact, inflight prune, inflight branch_summary, session stream,
--       inflight speculative, the session's entries
-- ARGV: 1 job id, 2 terminal state, 3 finishedAt, 4 record TTL s, 5 stream MAXLEN,
--       6 event type ('' = no event), 7 event JSON, 8 mode: 'finish' | 'cancel'
--       ('cancel' ends only a queued job; on a running one it sets cancelRequested),
--       9 the session's retention s (0 = forever), 10.. extra record field/value pairs (an
--       `entry` pair is left out when the session holds the entry its `resultEntryId` names:
--       readers read it there, docs/storage.md "The entry is stored once")
-- Returns {1 if this call ended the job else 0, state before, event stream id or ''}

-- The extra record pairs of ARGV 10.., without `entry` when the session holds that entry.
local function record_pairs(entries, ARGV)
  local named, copy = named_entry(ARGV, 10)
  if not copy or not named or named == ''
      or redis.call('HEXISTS', entries, named) == 0 then
    return {unpack(ARGV, 10)}
  end
  local pairs_ = {}
  for i = 10, #ARGV - 1, 2 do
    if i ~= copy then
      pairs_[#pairs_ + 1] = ARGV[i]
      pairs_[#pairs_ + 1] = ARGV[i + 1]
    end
  end
  return pairs_
end

local function finish_job(KEYS, ARGV)
  local state = redis.call('HGET', KEYS[1], 'state')
  if not state then
    return redis.error_reply('COMPACTOR_NOJOB')
  end
  if state ~= 'queued' and state ~= 'running' then
    return {0, state, ''}
  end
  if ARGV[8] == 'cancel' and state == 'running' then
    redis.call('HSET', KEYS[1], 'cancelRequested', '1')
    return {0, state, ''}
  end
  redis.call('HSET', KEYS[1], 'state', ARGV[2], 'finishedAt', ARGV[3],
    unpack(record_pairs(KEYS[8], ARGV)))
  -- Only the slot holding this job is freed: a newer job of the kind may hold it already.
  local slots = {3, 4, 5, 7}
  local holders = redis.call('MGET', KEYS[3], KEYS[4], KEYS[5], KEYS[7])
  for i, k in ipairs(slots) do
    if holders[i] == ARGV[1] then
      redis.call('DEL', KEYS[k])
    end
  end
  redis.call('DEL', KEYS[2])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  local id = ''
  local written = KEYS[6]  -- of the session's keys, only the stream is written
  if ARGV[6] ~= '' then
    -- A session's stream lives as long as the records of its jobs, then goes.
    id = emit_event(KEYS[6], ARGV[5], ARGV[4], ARGV[6], ARGV[1], ARGV[7])
    written = {KEYS[6], tonumber(ARGV[4]) * 1000}
  end
  retain_keys(KEYS[6], ARGV[9], {written})
  return {1, state, id}
end
