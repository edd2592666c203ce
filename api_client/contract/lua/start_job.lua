-- include: _retention _events _lease _tenant_slot _running _walk _path_page
-- A job's start on one Redis, in one step (docs/storage.md "A job's start";
-- worker/store/job_start.py): the lease (_lease), the jobs-due index, the tenant's max_running
-- slot (_tenant_slot), the record running for one more attempt (_running), the job out of its
-- tenant's queued set and its queue list's fair index, what the budget check reads (the
-- tenant's quota, once; the day's spend only when a budget may apply) and, when nothing the
-- worker checks can come between them, the compaction_start event (_events) with its
-- retention and its global copy; and for a job that reads its session's path (a compaction, not
-- a draft's; a prune) the read's start (_path_page: the session's stored bytes, its header,
-- revision, leaf, rewrites and prune watermark, and the path's first page), which the job then
-- does not read again. Never on a Redis Cluster (its keys lie in many slots): there
-- the worker sends the steps one by one.
-- KEYS: 1 record, 2 lease, 3 jobs-due index, 4 the tenant's running jobs, 5 its quota, 6 its
--       queued jobs, 7 its spend of the day, 8 its admitted jobs (an inbox tenant's), 9 the
--       session's event stream, 10 the tenant's global event stream, 11 the session's effects,
--       12 the tenant's stored bytes, 13-17 the session's header, rev, leaf, rewrites, pruned,
--       18 its entries, 19 its order
-- ARGV: 1 job id, 2 the delivery (lease owner), 3 lease TTL ms, 4 now (Unix ms), 5 startedAt
--       (ISO), 6 job_ttl_s (the running record's TTL, the event stream's lifetime), 7 until
--       when a slot is held (Unix ms; '' = no max_running cap is applied), 8 the setting's
--       max_running (the quota's field wins), 9 when a job put back is due again (Unix ms),
--       10-11 the settings' tokens_per_day and usd_per_day (the quota's fields win; '' = no
--       budget check), 12 '1': the job's admitted kind and reason (KEYS[8]) override its
--       record's, 13 the fair index's key prefix ('<p>:fair:'; '' = the broker's lists are not
--       in this Redis), 14 the session stream's MAXLEN, 15 the global stream's MAXLEN, 16 the
--       session's retention s, 17 the session's field of KEYS[12] ('' = no path read with
--       the start), 18 the most stored bytes of a session a job reads ('0' = no bound),
--       19-20 a page's most lines and bytes
-- Keys not in KEYS: the two keys of the fair index of the job's queue list,
--   '<ARGV[13]><queue>:<priority>:tags|messages' (KeyLayout.fair_index), named by the record
--   this step reads (the exception to api_client/contract/lua_scripts.py's rule, on a single
--   Redis only); the session's others by _retention's rule.
-- Returns {'held'} | {'finished'} | {'deferred'} (over max_running: the lease let go, the job
--   due again at ARGV[9]) | {'acquired', slot (1 held, 2 no cap applied), the start event's
--   stream id ('' = not written: the worker publishes it after its checks), admitted ('' =
--   none), the quota (flat field/value pairs), the day's spend (flat pairs; false = not read),
--   mark_running's reply, the path read ('' = none: the job reads it; else {the stored bytes
--   (false: not read, no bound), and when within the bound: {header, rev, leaf, rewrites,
--   pruned}, the first page's lines})}
local job, owner, now, started_at, job_ttl = ARGV[1], ARGV[2], ARGV[4], ARGV[5], ARGV[6]

-- A budget field's limit when Lua and Python read its text alike (the CLI writes plain
-- numbers); nil: unknown, so a budget may apply.
local function budget_limit(value, default)
  if value == nil then
    return tonumber(default)
  end
  if string.find(value, '[xX]') then  -- hex: Lua reads it, Python's float() does not
    return nil
  end
  return tonumber(value)
end

local function budget_may_apply(quota)
  for i, name in ipairs({'tokens_per_day', 'usd_per_day'}) do
    local limit = budget_limit(quota[name], ARGV[9 + i])
    if limit == nil or limit > 0 then
      return true
    end
  end
  return false
end

-- The event's JSON as JobEvent.for_record(record, COMPACTION_START).to_json() has it: the
-- same fields in the same order, the unset ones left out.
local function start_event_data(record, kind, reason, attempt)
  local parts = {'{"type":"compaction_start","jobId":', cjson.encode(record.id),
    ',"sessionId":', cjson.encode(record.sessionId), ',"kind":', cjson.encode(kind)}
  if reason ~= '' then
    parts[#parts + 1] = ',"reason":' .. cjson.encode(reason)
  end
  parts[#parts + 1] = ',"attempt":' .. tostring(attempt)
  if (record.model or '') ~= '' then
    parts[#parts + 1] = ',"model":' .. cjson.encode(record.model)
  end
  parts[#parts + 1] = ',"timestamp":' .. cjson.encode(started_at) .. '}'
  return table.concat(parts)
end

local lease = lease_acquire(KEYS[1], KEYS[2], owner, ARGV[3])
if type(lease) == 'table' then
  return lease  -- COMPACTOR_NOJOB
end
if lease ~= 'acquired' then
  return {lease}
end
-- Budgets and caps come from the quota, read once.
local quota, quota_flat = {}, {}
if ARGV[7] ~= '' or ARGV[10] ~= '' then
  quota_flat = redis.call('HGETALL', KEYS[5])
  for i = 1, #quota_flat, 2 do
    quota[quota_flat[i]] = quota_flat[i + 1]
  end
end
local slot = 2
if ARGV[7] ~= '' then
  slot = take_slot(KEYS[4], job, now, ARGV[7], tonumber(quota.max_running) or tonumber(ARGV[8]))
end
if slot == 0 then
  -- Put back, still queued: the lease let go, the sweep sends the job again at ARGV[9].
  lease_release(KEYS[2], owner)
  redis.call('ZADD', KEYS[3], ARGV[9], job)
  return {'deferred'}
end
-- The sweep looks again when this lease would end (the worker died if it did).
redis.call('ZADD', KEYS[3], tonumber(now) + tonumber(ARGV[3]), job)
local running = mark_running(KEYS[1], started_at, '', job_ttl)
if running.err or running[1] == -1 then  -- (the lease's read of the state makes -1 unlikely)
  return running.err and running or {'acquired', slot, '', '', quota_flat, false, running, ''}
end
-- Started: no longer queued for its tenant (the fair order, the queued_jobs quota), nor a pivot
-- of its queue list's fair index.
local record = {}
for i = 4, #running, 2 do
  record[running[i]] = running[i + 1]
end
redis.call('ZREM', KEYS[6], job)
local queue, priority = running[2], running[3]
if ARGV[13] ~= '' and queue ~= '' and string.match(priority, '^%d+$') then
  local fair = ARGV[13] .. queue .. ':' .. priority .. ':'
  redis.call('ZREM', fair .. 'tags', job)
  redis.call('HDEL', fair .. 'messages', job)
end
local kind, reason = record.kind or '', record.reason or ''
local admitted = ''
if ARGV[12] == '1' then
  admitted = redis.call('HGET', KEYS[8], job) or ''
  if admitted ~= '' then  -- run as admitted, whatever the record says since
    local space = string.find(admitted, ' ', 1, true)
    kind = space and string.sub(admitted, 1, space - 1) or admitted
    reason = space and string.sub(admitted, space + 1) or ''
  end
end
-- The day's spend only when a budget may apply; then the worker's check may refuse the job,
-- and the start event waits for it (the worker publishes it).
local spend = false
local event = ARGV[10] == '' or not budget_may_apply(quota)
if not event then
  spend = redis.call('HGETALL', KEYS[7])
end
-- compaction_start is a compaction's (and a draft's) first event; a later attempt whose earlier
-- delivery committed finishes with that commit and starts nothing (its marker: the record's
-- effect, or, left by an older worker, the session's effects hash).
event = event and (kind == 'compact' or reason == 'speculative')
if event and running[1] > 1 and (record.effect or redis.call('HGET', KEYS[11], job)) then
  event = false
end
local function path_read()
  -- The start of the job's read (worker/store/paths.py load_path): what it checks the session
  -- against, then what a page reads. A session the count does not know is measured by the job.
  local counted = false
  if ARGV[18] ~= '0' then
    counted = redis.call('HGET', KEYS[12], ARGV[17])
    if not counted then
      return ''
    end
    if tonumber(counted) > tonumber(ARGV[18]) then
      return {counted}
    end
  end
  local values = redis.call('MGET', KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17])
  local lines = {}
  if values[1] and values[3] and values[3] ~= '' then
    lines = path_page(KEYS[18], KEYS[19], values[3], ARGV[19], ARGV[20], -1)
  end
  return {counted, values, lines}
end

-- A compaction (a draft's reads its whole session) and a prune read the path first thing,
-- unless an earlier delivery committed (the job ends with that commit).
local read = ''
if ARGV[17] ~= '' and ((kind == 'compact' and reason ~= 'speculative') or kind == 'prune')
    and not (running[1] > 1 and record.effect) then
  read = path_read()
end
local id = ''
if event then
  local data = start_event_data(record, kind, reason, running[1])
  id = emit_event(KEYS[9], ARGV[14], job_ttl, 'compaction_start', job, data)
  retain_keys(KEYS[9], ARGV[16], {{KEYS[9], tonumber(job_ttl) * 1000}})
  copy_event(KEYS[10], ARGV[15], 'compaction_start', job, data)
end
return {'acquired', slot, id, admitted, quota_flat, spend, running, read}
