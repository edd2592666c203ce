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

-- Guard shared by every commit: the job must still be running and not asked to stop, and the
-- session must exist. Returns nil to go on, or the reply to return.
local function job_guard(header_key, record_key, effects_key, job_id)
  if redis.call('EXISTS', header_key) == 0 then
    return {'nosession', '', '', ''}
  end
  local effect = redis.call('HGET', effects_key, job_id)
  if effect then
    return {'duplicate', effect, redis.call('GET', KEYS[5]) or '0', ''}
  end
  local f = redis.call('HMGET', record_key, 'state', 'cancelRequested')
  if f[1] ~= 'running' then
    return {'finished', f[1] or '', '', ''}
  end
  if f[2] == '1' then
    return {'cancelled', '', '', ''}
  end
  return nil
end

-- Record a job's effect (the exactly-once marker) and forget markers older than retention_ms
-- (a few per commit, so the trim stays cheap): a job commits only while its record says
-- running, and no record lives longer than the retention (job_ttl_s).
local function remember_effect(effects_key, at_key, job_id, value, retention_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', effects_key, job_id, value)
  redis.call('ZADD', at_key, now, job_id)
  local old = redis.call('ZRANGEBYSCORE', at_key, '-inf', now - tonumber(retention_ms),
    'LIMIT', 0, 16)
  if #old > 0 then
    redis.call('HDEL', effects_key, unpack(old))
    redis.call('ZREM', at_key, unpack(old))
  end
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
