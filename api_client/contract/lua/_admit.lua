-- A tenant's admission of a new job and its place in the fair order (docs/tenants.md).
-- Included by _enqueue.lua (one Redis: in the enqueue script), admit.lua (run on its own before
-- the enqueue on a Redis Cluster) and inbox_admit.lua. Every key it takes is the tenant's: one
-- Cluster slot; the reservations and the stored-bytes count are named after the quota key (its
-- siblings `<...>:reserved` and `<...>:bytes`: the one rule for its keys outside KEYS).
-- A helper: its functions read no KEYS or ARGV; the including script passes them its own.
--
-- admit(queued, quota, usage, policy, job_id)
--   queued: the tenant's zset of queued jobs (score: route priority x 1e13 + Unix ms)
--   quota:  the tenant's hash of quota overrides (fields override the policy's defaults)
--   usage:  the tenant's model spend of today (hash, written by the workers)
--   policy: ARGV string of space-separated fields, in this order:
--     now (Unix ms), priority (the route's), delay (fair_delay_ms), weight, queued_max,
--     tokens_per_day, usd_per_day, budget ('refuse' | 'draft' | 'none'), draft_share,
--     pending_ttl_s, estimate (tokens the job reserves), fit (1: refused unless spent + reserved
--     + estimate stays within the budget; 0: while any budget is left), span_cap, output,
--     field: when span_cap > 0 (a compaction, a branch summary) the estimate is the session's
--     stored bytes / 4 (field of the tenant's bytes hash, <quota key's prefix>:bytes) capped at
--     span_cap, plus output; the flat estimate when the hash does not know the session
-- The tenant's reservations (hash <quota key's prefix>:reserved, job id -> '<tokens> <until ms>
-- <owner>': api_client/contract/reservations.py) count as spent; under a daily budget an
-- admitted job's estimate is written there (owner '-') until its worker's calls replace it or
-- it ends (with no budget nothing is reserved: nothing would read it).
-- Returns the job's fair tag (Unix ms: see place()), or the error reply
-- 'COMPACTOR_QUOTA <quota> <limit> <value>' (nothing was written).
--
-- Fair order: the tag is now + delay / weight for each queued job of the tenant of the same or
-- a more urgent priority. place() (_place.lua) puts the task message among the queue's
-- messages in tag order, so another tenant's next job goes ahead of a flood (which waits at
-- most that long), a tenant's overflow recovery (its own queue, priority 0) stays ahead of its
-- other jobs, and with one tenant, or a delay of 0, the order is first come, first served.
local PRIORITY_SCALE = 1e13

local function policy_of(text)
  local f = {}
  for word in string.gmatch(text, '%S+') do
    f[#f + 1] = word
  end
  return {now = tonumber(f[1]), priority = tonumber(f[2]), delay = tonumber(f[3]),
          weight = tonumber(f[4]), queued_max = tonumber(f[5]), tokens_day = tonumber(f[6]),
          usd_day = tonumber(f[7]), budget = f[8], draft_share = tonumber(f[9]),
          pending_ttl = tonumber(f[10]), estimate = tonumber(f[11]) or 0,
          fit = f[12] == '1', span_cap = tonumber(f[13]) or 0, output = tonumber(f[14]) or 0,
          field = f[15]}
end

-- A compaction's estimate from its session's stored bytes (one HGET: the session is not
-- walked), read only as it is reserved (a compaction need not fit: budget_refusal never reads
-- it). pcall: a caller whose ACL user may not read the count keeps the flat estimate.
local function span_estimate(quota, p)
  if p.span_cap <= 0 or not p.field then
    return p.estimate
  end
  local stored = redis.pcall('HGET', string.gsub(quota, 'quota$', 'bytes'), p.field)
  if type(stored) ~= 'string' then
    return p.estimate
  end
  return math.min(math.ceil(tonumber(stored) / 4), p.span_cap) + p.output
end

local function over(quota, limit, value)
  return redis.error_reply('COMPACTOR_QUOTA ' .. quota .. ' ' .. limit .. ' ' .. value)
end

-- Jobs whose start was never seen (a lost message, a dead client) leave after pending_ttl:
-- the record and single-flight slot of such a job expire then too.
-- Returns how many it dropped.
local function trim(queued, p)
  local cutoff, dropped = p.now - p.pending_ttl * 1000, 0
  for _, level in ipairs({0, 3, 6, 9}) do
    local base = level * PRIORITY_SCALE
    dropped = dropped + redis.call('ZREMRANGEBYSCORE', queued, base, '(' .. (base + cutoff))
  end
  return dropped
end

-- The tokens the tenant's jobs hold (fields whose time is up count for nothing) and those
-- fields (dropped once the job is admitted: the script's first write must be its ZADD). A
-- caller whose ACL user may not reach the hash (a tenant's own user on the line before issue
-- 39, docs/tenants.md) admits without reservations: pcall, here and in reserve().
local function held_tokens(reserved, now)
  local total, expired = 0, {}
  local all = redis.pcall('HGETALL', reserved)
  if all['err'] then
    return 0, {}, false
  end
  for i = 1, #all, 2 do
    local tokens, till = string.match(all[i + 1], '^(%d+) (%d+)')
    if tokens and tonumber(till) > now then
      total = total + tonumber(tokens)
    else
      expired[#expired + 1] = all[i]
    end
  end
  return total, expired, true
end

local function reserve(reserved, expired, job_id, p, quota)
  for _, field in ipairs(expired) do
    redis.call('HDEL', reserved, field)
  end
  local estimate = span_estimate(quota, p)
  if estimate > 0 then
    local till = p.now + p.pending_ttl * 1000
    redis.call('HSET', reserved, job_id, estimate .. ' ' .. till .. ' -')
    redis.call('EXPIRE', reserved, 172800)  -- RESERVED_KEY_TTL_S
  end
end

local function budget_refusal(usage, p, tokens_day, usd_day, held)
  if p.budget == 'none' or (tokens_day <= 0 and usd_day <= 0) then
    return nil  -- no budget to check: the day's spend is not read
  end
  local share = 1
  if p.budget == 'draft' then
    share = p.draft_share
  end
  -- held: what admitted jobs and model calls under way have reserved; it counts as spent
  -- until their real spend replaces it.
  local u = redis.call('HMGET', usage, 'input_tokens', 'output_tokens', 'draft_input_tokens',
                       'draft_output_tokens', 'usd', 'draft_usd')
  local tokens = (tonumber(u[1]) or 0) + (tonumber(u[2]) or 0) + (tonumber(u[3]) or 0)
    + (tonumber(u[4]) or 0) + held
  local usd = (tonumber(u[5]) or 0) + (tonumber(u[6]) or 0)
  if tokens_day > 0 and p.fit and p.estimate > 0 and tokens + p.estimate > tokens_day * share then
    return over('tokens_per_day', tokens_day * share, tokens + p.estimate)
  end
  if tokens_day > 0 and tokens >= tokens_day * share then
    return over('tokens_per_day', tokens_day * share, tokens)
  end
  if usd_day > 0 and usd >= usd_day * share then
    return over('usd_per_day', usd_day * share, usd)
  end
  return nil
end

local function admit(queued, quota, usage, policy, job_id)
  local p = policy_of(policy)
  local q = redis.call('HMGET', quota, 'queued_jobs_max', 'tokens_per_day', 'usd_per_day',
                       'weight')
  local reserved = string.gsub(quota, 'quota$', 'reserved')
  local tokens_day, usd_day = tonumber(q[2]) or p.tokens_day, tonumber(q[3]) or p.usd_day
  -- Reservations exist for a daily budget to read: a tenant with none reserves nothing and
  -- reads nothing of them (4 commands an enqueue less; with thousands of its jobs queued, no
  -- walk). A budget set later counts the jobs admitted before it once they spend.
  local budgeted = p.budget ~= 'none' and (tokens_day > 0 or usd_day > 0)
  local held, expired, reachable = 0, {}, false
  if budgeted then
    held, expired, reachable = held_tokens(reserved, p.now)
  end
  local refused = budget_refusal(usage, p, tokens_day, usd_day, held)
  if refused then
    return refused
  end
  -- The first write of the script must be one Redis refuses when out of memory (ZADD): once a
  -- script has written (a trim), Redis lets it finish, and a full Redis would take the job.
  redis.call('ZADD', queued, p.priority * PRIORITY_SCALE + p.now, job_id)
  -- Alone in the set, the job has nothing to trim and nothing ahead of it.
  local before = redis.call('ZCARD', queued) - 1
  if before > 0 then
    before = before - trim(queued, p)
  end
  local queued_max = tonumber(q[1]) or p.queued_max
  if queued_max > 0 and before >= queued_max then
    redis.call('ZREM', queued, job_id)
    return over('queued_jobs', queued_max, before)
  end
  redis.call('PEXPIRE', queued, p.pending_ttl * 1000)
  if reachable then
    reserve(reserved, expired, job_id, p, quota)
  end
  local ahead = 0
  if before > 0 then
    ahead = redis.call('ZCOUNT', queued, '-inf', '(' .. ((p.priority + 1) * PRIORITY_SCALE)) - 1
  end
  return p.now + math.floor(ahead * p.delay / (tonumber(q[4]) or p.weight))
end
