-- include: _events
-- The body of apply_draft.lua as a function of its KEYS and ARGV (included by apply_draft,
-- compact_auto and observe; needs _walk and _retention, brings _events). What it does, its
-- KEYS, ARGV and replies:
-- Apply the session's speculative draft (api_client/client/draft_apply.py), or check it, in one
-- step. The draft summarises a prefix of the path up to its cut; what was appended after its
-- snapshot only lengthens the kept part. So it applies while
--   * the session exists and the draft's snapshot leaf is on the current leaf's path (the prefix
--     it summarised is unchanged),
--   * no compaction entry was appended on that path since the snapshot, and
--   * it fits: tokensAfter (summary + kept entries, at the snapshot) + the entries appended
--     since (their stored JSON line lengths / 4) <= the line (window - reserve tokens: ARGV[4],
--     else the draft's own `threshold`).
-- Apply then appends the compaction entry as a child of the CURRENT leaf, bumps rev, counts it
-- for the loop guard, writes a succeeded job record (its effect marker, `effect`, the entry's id,
-- with its result: the worker commits' marker, docs/recovery.md) and its events (session
-- stream), and deletes the draft. A draft off the path, after a compaction or unreadable is
-- deleted in both modes; one that no longer fits is kept: the job that runs instead (or the
-- next speculative job) extends it rather than summarising its span again.
-- The loop guard comes first (modes 'apply' and 'guard'): with ARGV[11] automatic compactions
-- already counted within the window, nothing is written and 'guarded' is returned (the draft
-- stays). The counter is the workers' (worker/store/compaction_counter.py): job id → epoch s.
-- KEYS: 1 header, 2 entries, 3 order, 4 leaf, 5 rev, 6 draft, 7 new job record,
--       8 session event stream, 9 the session's compactions counter (loop guard)
-- ARGV: 1 mode 'apply' | 'check' | 'guard' (the loop guard only), 2 new job id, 3 walk limit,
--       4 the line the context must fit under, tokens ('' = the draft's `threshold`),
--       5 timestamp (entry), 6 id candidates, 7 record TTL s,
--       8 stream MAXLEN, 9 session_compact event JSON (no entry/tokens/result/fromExtension;
--       the events get the entry's id as their entry, _events.lua),
--       10 compaction_end event JSON (same), 11 loop-guard limit (0 = off), 12 its window s,
--       13 now (epoch s), 14 ineffective above this many tokens after ('' = the draft's
--       ineffectiveAbove, the worker's line), 15 job record field/value pairs as one JSON
--       array (decoded only when the draft applies), 16 (check) tokens the context will still
--       grow before the draft is applied ('' = 0), 17 the session's retention s (0 = forever),
--       18 the request's agent settings key ('' = none): a draft with another `agentKey` is
--       deleted ('settings')
-- Returns {'applied', entry id, revision, line, result JSON, event 1 JSON, event 2 JSON} (the
--       events' data as stored: the global copies follow)
--       | {'valid', growth tokens, draft leadMs or ''} | {'stale', growth tokens, leadMs or ''}
--       | {'clear'} (guard mode) | {'guarded', count} | {'discarded', cause}
--   cause: nodraft | nosession | corrupt | settings | offpath | compacted | grown (kept) | noid
--          | moved (kept: an agent-cut draft, something appended since its snapshot)
local function apply_draft(KEYS, ARGV)
  local limit, window, now = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
  if ARGV[1] ~= 'check' and limit > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', '(' .. tostring(now - window))
    local count = redis.call('ZCARD', KEYS[9])
    if count >= limit then
      return {'guarded', count}
    end
  end
  if ARGV[1] == 'guard' then
    return {'clear'}
  end
  local function discard(cause)
    redis.call('DEL', KEYS[6])
    return {'discarded', cause}
  end

  local raw = redis.call('GET', KEYS[6])
  if not raw then
    return {'discarded', 'nodraft'}
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return discard('nosession')
  end
  local ok, draft = pcall(cjson.decode, raw)
  if not ok or type(draft) ~= 'table' or type(draft['snapshotLeafId']) ~= 'string'
      or type(draft['lineTail']) ~= 'string' or type(draft['tokensAfter']) ~= 'number' then
    return discard('corrupt')
  end
  if (draft['agentKey'] or '') ~= (ARGV[18] or '') then
    return discard('settings')  -- planned with other agent settings than the request's
  end
  local line_limit = tonumber(ARGV[4]) or tonumber(draft['threshold'])
  if not line_limit then
    return discard('corrupt')  -- a draft of an older worker: no line to fit under
  end

  -- Walk from the current leaf up to the snapshot leaf, weighing what was appended since.
  local leaf = redis.call('GET', KEYS[4]) or ''
  local target = draft['snapshotLeafId']
  local id, grown, found, seen = leaf, 0, false, {}
  for _ = 0, tonumber(ARGV[3]) do
    if id == target then
      found = true
      break
    end
    if not id or id == '' or seen[id] then
      break
    end
    seen[id] = true
    local line = redis.call('HGET', KEYS[2], id)
    if not line then
      break
    end
    local kind, parent = entry_info(line)
    if kind == 'compaction' then
      return discard('compacted')
    end
    grown = grown + math.floor(#line / 4)
    id = parent
  end
  if not found then
    return discard('offpath')
  end
  local lead = ''
  if type(draft['leadMs']) == 'number' then
    lead = string.format('%d', draft['leadMs'])
  end
  -- A draft planned with the agent's own cut (summaryFormat pi-*) is exact only for the state it
  -- was planned on: anything appended since may move the agent's cut. It is kept (stale): the
  -- job that runs instead commits it as is when the cut did not move, else extends it.
  if leaf ~= target and string.find(draft['agentKey'] or '', '"summaryFormat":"pi-', 1, true) then
    if ARGV[1] == 'check' then
      return {'stale', tostring(grown), lead}
    end
    return {'discarded', 'moved'}
  end
  if draft['tokensAfter'] + grown + (tonumber(ARGV[16]) or 0) > line_limit then
    if ARGV[1] == 'check' then
      return {'stale', tostring(grown), lead}
    end
    return {'discarded', 'grown'}
  end
  if ARGV[1] == 'check' then
    return {'valid', tostring(grown), lead}
  end

  local new_id = free_id(KEYS[2], ARGV[6])
  if not new_id then
    return discard('noid')
  end
  local function int(value)
    if type(value) == 'number' then
      return string.format('%d', value)
    end
    return nil
  end
  local line = '{"type":"compaction","id":' .. cjson.encode(new_id) .. ',"parentId":'
    .. cjson.encode(leaf) .. ',"timestamp":' .. cjson.encode(ARGV[5]) .. draft['lineTail']
  redis.call('HSET', KEYS[2], new_id, line)
  redis.call('RPUSH', KEYS[3], new_id)
  redis.call('SET', KEYS[4], new_id, 'KEEPTTL')  -- the session's expiry instant stays
  local rev = redis.call('INCR', KEYS[5])

  local before = int(draft['tokensBefore']) or '0'
  local after_ = int(draft['tokensAfter'])
  local tokens = ',"tokensBefore":' .. before
  if after_ then
    tokens = tokens .. ',"tokensAfter":' .. string.format('%d', tonumber(after_) + grown)
  end
  -- The loop guard's ineffective flag: what the context holds after (the draft's own tokensAfter
  -- plus what was appended since) above the line (share × threshold tokens).
  local above = tonumber(ARGV[14]) or tonumber(draft['ineffectiveAbove'])
  if after_ and above then
    tokens = tokens .. ',"ineffective":' .. tostring(tonumber(after_) + grown > above)
  end
  local ext = 'false'
  if draft['fromExtension'] == true then
    ext = 'true'
  end
  local said = '{"fromDraft":true,"draftJobId":' .. cjson.encode(tostring(draft['jobId']))
    .. ',"snapshotLeafId":' .. cjson.encode(target) .. ',"growthTokens":' .. tostring(grown)
    .. tokens
  local result = said .. ',"entry":' .. line .. '}'
  -- The events hold the entry's id, not the entry (_events.lua): it is in `entries` (the record
  -- names it too, below; the caller gets `result` with the entry).
  local fields = ',"entry":' .. cjson.encode(new_id) .. tokens .. ',"fromExtension":' .. ext
  -- What the draft cost (its extensions summed), apart from the compaction's own usage (none).
  local draft_usage = nil
  if type(draft['usage']) == 'table' then
    draft_usage = cjson.encode(draft['usage'])
    fields = fields .. ',"draftUsage":' .. draft_usage
  end
  -- ... and its USD, so that a platform bills the job from its record or event alone.
  local draft_cost = tonumber(draft['costUsd'])
  if draft_cost then
    draft_cost = cjson.encode(draft_cost)
    fields = fields .. ',"draftCostUsd":' .. draft_cost
  end
  if limit > 0 then
    redis.call('ZADD', KEYS[9], ARGV[13], ARGV[2])
    redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', '(' .. tostring(now - window))
    redis.call('EXPIRE', KEYS[9], math.max(1, math.ceil(window)))
  end
  local ev1 = string.sub(ARGV[9], 1, -2) .. fields .. '}'
  -- The event's result without its entry too: a reader puts it back in both (_events.lua).
  local ev2 = string.sub(ARGV[10], 1, -2) .. fields .. ',"result":' .. said .. '}}'

  redis.call('HSET', KEYS[7], unpack(cjson.decode(ARGV[15])))
  -- The record names the entry (resultEntryId) and holds no copy of it, in `entry` nor in
  -- `result`: a reader puts it back from `entries` in both (job_records.get_record).
  redis.call('HSET', KEYS[7], 'resultEntryId', new_id, 'result', said .. '}', 'effect', new_id)
  if draft_usage then
    redis.call('HSET', KEYS[7], 'draftUsage', draft_usage)
  end
  if draft_cost then
    redis.call('HSET', KEYS[7], 'draftCostUsd', draft_cost)
  end
  redis.call('EXPIRE', KEYS[7], ARGV[7])
  -- As finish.lua: the stream lives as long as records.
  emit_event(KEYS[8], ARGV[8], ARGV[7], 'session_compact', ARGV[2], ev1)
  emit_event(KEYS[8], ARGV[8], ARGV[7], 'compaction_end', ARGV[2], ev2)
  redis.call('DEL', KEYS[6])
  retain(KEYS[1], ARGV[17])
  return {'applied', new_id, tostring(rev), line, result, ev1, ev2}
end
