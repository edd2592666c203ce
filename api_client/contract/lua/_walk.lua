-- Shared path-walk helpers of the session scripts (worker commits and the client's draft
-- apply). Included with `-- include: _walk` (api_client/contract/lua_scripts.py: Redis scripts
-- cannot import).
-- A helper: its functions read no KEYS or ARGV; the including script passes them its own.

-- (type, parentId) of a stored entry line; parentId false for null/missing. Lines written by
-- Compactor and by pi start with type, id, parentId: read those without decoding the whole
-- (possibly large) line, and fall back to cjson for any other layout.
local function entry_info(line)
  local kind, head = string.match(line, '^{"type":"([%w_]+)","id":"[^"\\]*","parentId":(.)')
  if kind then
    if head == 'n' then
      return kind, false
    end
    local parent = string.match(line, '^{"type":"[%w_]+","id":"[^"\\]*","parentId":"([^"\\]*)"')
    if parent then
      return kind, parent
    end
  end
  local ok, obj = pcall(cjson.decode, line)
  if not ok or type(obj) ~= 'table' then
    return nil, false
  end
  local parent = obj['parentId']
  if type(parent) ~= 'string' then
    parent = false
  end
  return obj['type'], parent
end

-- Is `target` on the path of `leaf` with no compaction entry between them (both exclusive of
-- `target`; `through_compaction` lifts that condition)? Walks at most `limit` parent links; a
-- longer walk, a cycle or a missing entry answers false (the caller re-plans, always safe).
local function reaches_without_compaction(entries_key, leaf, target, limit, through_compaction)
  local id = leaf
  local seen = {}
  for _ = 0, limit do
    if id == target then
      return true
    end
    if not id or id == '' or seen[id] then
      return false
    end
    seen[id] = true
    local line = redis.call('HGET', entries_key, id)
    if not line then
      return false
    end
    local kind, parent = entry_info(line)
    if kind == 'compaction' and not through_compaction then
      return false
    end
    id = parent
  end
  return false
end

-- Guard shared by every commit: the session must exist, the job must not have committed yet
-- (its effect marker, the record's `effect` field: the entry id it wrote, '' for a change
-- without an entry), and it must still be running and not asked to stop. One HMGET of the
-- record reads all three. A record a worker of an older version committed has no `effect`
-- field: that version kept the marker in the session's `effects` hash (derived from the header
-- key: `<base>effects`), read only for a redelivery (attempts > 1), as no earlier delivery can
-- have committed before a first attempt. Returns nil to go on, or the reply to return.
local function job_guard(header_key, record_key, job_id)
  if redis.call('EXISTS', header_key) == 0 then
    return {'nosession', '', '', ''}
  end
  local f = redis.call('HMGET', record_key, 'state', 'cancelRequested', 'effect', 'attempts')
  local effect = f[3]
  if not effect and (tonumber(f[4]) or 0) > 1 then
    effect = redis.call('HGET', string.match(header_key, '^(.-}:)') .. 'effects', job_id)
  end
  if effect then
    return {'duplicate', effect, redis.call('GET', KEYS[5]) or '0', ''}
  end
  if f[1] ~= 'running' then
    return {'finished', f[1] or '', '', ''}
  end
  if f[2] == '1' then
    return {'cancelled', '', '', ''}
  end
  return nil
end

-- First candidate id not used in the session.
local function free_id(entries_key, candidates)
  for candidate in string.gmatch(candidates, '%S+') do
    if redis.call('HEXISTS', entries_key, candidate) == 0 then
      return candidate
    end
  end
  return nil
end
