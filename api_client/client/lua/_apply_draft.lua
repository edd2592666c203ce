-- The body of apply_draft.lua as a function of its KEYS and ARGV (included by apply_draft
-- and compact_auto; needs _walk). What it does, its KEYS, ARGV and replies:
-- Apply the session's speculative draft (api_client/drafts.py), or check it, in one step.
-- Valid when: the session exists, the draft's snapshot leaf is on the current leaf's path, no
-- compaction entry was appended on that path since the snapshot, and the entries appended since
-- weigh at most ARGV[4] tokens (sum of their stored JSON line lengths / 4). Apply then appends
-- the compaction entry as a child of the CURRENT leaf, bumps rev, records the effect, counts it
-- for the loop guard, writes a succeeded job record and its events (session stream), and
-- deletes the draft. An invalid draft is deleted in both modes.
-- The loop guard comes first (modes 'apply' and 'guard'): with ARGV[11] automatic compactions
-- already counted within the window, nothing is written and 'guarded' is returned (the draft
-- stays). The counter is the workers' (worker/store/loop_guard.py): job id → epoch seconds.
-- KEYS: 1 header, 2 entries, 3 order, 4 leaf, 5 rev, 6 effects, 7 draft, 8 new job record,
--       9 session event stream, 10 the session's compactions counter (loop guard)
-- ARGV: 1 mode 'apply' | 'check' | 'guard' (the loop guard only), 2 new job id, 3 walk limit,
--       4 growth bound (tokens), 5 timestamp (entry), 6 id candidates, 7 record TTL s,
--       8 stream MAXLEN, 9 session_compact event JSON (no entry/tokens/result/fromExtension),
--       10 compaction_end event JSON (same), 11 loop-guard limit (0 = off), 12 its window s,
--       13 now (epoch s), 14 ineffective above this many tokens after ('' = the draft's
--       ineffectiveAbove, the worker's line), 15 job record field/value pairs as one JSON
--       array (decoded only when the draft applies)
-- Returns {'applied', entry id, revision, line, result JSON, event 1 JSON, event 2 JSON}
--       | {'valid', growth tokens} | {'clear'} (guard mode) | {'guarded', count}
--       | {'discarded', cause}
--   cause: nodraft | nosession | corrupt | offpath | compacted | grown | noid
local function apply_draft(KEYS, ARGV)
  local limit, window, now = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
  if ARGV[1] ~= 'check' and limit > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', '(' .. tostring(now - window))
    local count = redis.call('ZCARD', KEYS[10])
    if count >= limit then
      return {'guarded', count}
    end
  end
  if ARGV[1] == 'guard' then
    return {'clear'}
  end
  local function discard(cause)
    redis.call('DEL', KEYS[7])
    return {'discarded', cause}
  end

  local raw = redis.call('GET', KEYS[7])
  if not raw then
    return {'discarded', 'nodraft'}
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return discard('nosession')
  end
  local ok, draft = pcall(cjson.decode, raw)
  if not ok or type(draft) ~= 'table' or type(draft['snapshotLeafId']) ~= 'string'
      or type(draft['lineTail']) ~= 'string' then
    return discard('corrupt')
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
  if grown > tonumber(ARGV[4]) then
    return discard('grown')
  end
  if ARGV[1] == 'check' then
    return {'valid', tostring(grown)}
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
  redis.call('SET', KEYS[4], new_id)
  redis.call('HSET', KEYS[6], ARGV[2], new_id)
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
  local result = '{"fromDraft":true,"draftJobId":' .. cjson.encode(tostring(draft['jobId']))
    .. ',"snapshotLeafId":' .. cjson.encode(target) .. ',"growthTokens":' .. tostring(grown)
    .. tokens .. ',"entry":' .. line .. '}'
  local fields = ',"entry":' .. line .. tokens .. ',"fromExtension":' .. ext
  if limit > 0 then
    redis.call('ZADD', KEYS[10], ARGV[13], ARGV[2])
    redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', '(' .. tostring(now - window))
    redis.call('EXPIRE', KEYS[10], math.max(1, math.ceil(window)))
  end
  local ev1 = string.sub(ARGV[9], 1, -2) .. fields .. '}'
  local ev2 = string.sub(ARGV[10], 1, -2) .. fields .. ',"result":' .. result .. '}'

  redis.call('HSET', KEYS[8], unpack(cjson.decode(ARGV[15])))
  redis.call('HSET', KEYS[8], 'entry', line, 'resultEntryId', new_id, 'result', result)
  redis.call('EXPIRE', KEYS[8], ARGV[7])
  redis.call('XADD', KEYS[9], 'MAXLEN', '~', ARGV[8], '*', 'type', 'session_compact',
    'job', ARGV[2], 'data', ev1)
  redis.call('XADD', KEYS[9], 'MAXLEN', '~', ARGV[8], '*', 'type', 'compaction_end',
    'job', ARGV[2], 'data', ev2)
  redis.call('DEL', KEYS[7])
  return {'applied', new_id, tostring(rev), line, result, ev1, ev2}
end
