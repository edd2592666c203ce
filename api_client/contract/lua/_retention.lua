-- Retention (docs/storage.md "Redis layout"): every key of a session expires once the session has
-- been idle for COMPACTOR_SESSION_TTL_S, so every script that writes a session ends its writing
-- paths with retain(<any key of the session>, ttl s): the TTLs of all the session's keys are
-- refreshed in the same atomic step as the write. Included with `-- include: _retention`
-- (api_client/contract/lua_scripts.py), by the client's and the worker's scripts alike.
--
-- A helper: its functions read no KEYS or ARGV; the including script passes them a key of the
-- session from its KEYS and the retention (s) from its ARGV.
--
-- Keys not in KEYS follow the loader's one rule (api_client/contract/lua_scripts.py, "Keys"):
-- retain() and retain_keys() touch `<base><suffix>`, where <base> is the session key they are
-- given cut after its hash tag ('<p>:session:{<sid>}:') and <suffix> is one of
-- RETAIN_WITH_SESSION or RETAIN_CAPPED below. So every key they touch carries the session's
-- hash tag: the call stays in the session's one Cluster slot. The keys are named here by suffix, not
-- passed as KEYS: twenty more key names on every call would cost the request path more than
-- deriving them. tests/client/test_client_retention.py checks both lists against
-- api_client/contract/keys.py (SessionKeys.all()).

-- Keys that live as long as the session ('header' first). They share one expiry instant, the
-- header's: a key new to the session (no TTL yet) joins it, and the instant moves to now + the
-- retention once the header has run down by REFRESH_SHARE of it. Moving it on every write would
-- log and replicate a PEXPIREAT per key per write (+50 % of the AOF of a short append); so a
-- session expires between 99 % and 100 % of the retention after its last write. The scripts SET
-- the session's strings with KEEPTTL, so that a write does not take one off the instant. With a
-- retention of 0 they are PERSISTed (kept forever, also when written under another setting).
-- (`effects` and `effects:at`, the exactly-once markers of older versions, are in neither list:
-- nothing writes them now, and what an older version left expires on the TTL it has.)
local RETAIN_WITH_SESSION = {'header', 'entries', 'order', 'leaf', 'rev', 'rewrites', 'pruned'}
local REFRESH_SHARE = 0.01
-- Keys with a shorter lifetime of their own (events: job_ttl_s after the last event; the
-- single-flight slots, the draft, the pace, the loop guard's window, the token counts, the
-- rewriting marker, the append replies): never lengthened, only capped at the session's
-- instant, so a short retention still bounds them and a key written without a TTL gets one.
local RETAIN_CAPPED = {'events', 'inflight:compact', 'inflight:prune',
  'inflight:branch_summary', 'inflight:speculative', 'draft', 'pace', 'compactions', 'tokens',
  'rewriting', 'appends'}

local function retain(session_key, ttl_s)
  -- '<p>:session:{<sid>}:' (a session id and the prefix never contain braces)
  local base = string.match(session_key, '^(.-}:)')
  local ttl = tonumber(ttl_s)
  if not base or not ttl then
    return
  end
  if ttl <= 0 then
    for _, suffix in ipairs(RETAIN_WITH_SESSION) do
      redis.call('PERSIST', base .. suffix)
    end
    return
  end
  local ms = ttl * 1000
  -- -1: no TTL yet (a new header, a session stored before retention); -2: no header.
  local left = redis.call('PTTL', base .. 'header')
  if left < ms - ms * REFRESH_SHARE or left > ms then
    for _, suffix in ipairs(RETAIN_WITH_SESSION) do
      redis.call('PEXPIRE', base .. suffix, ms)
    end
    left = ms
  else
    for i = 2, #RETAIN_WITH_SESSION do
      local key = base .. RETAIN_WITH_SESSION[i]
      if redis.call('PTTL', key) == -1 then
        redis.call('PEXPIRE', key, left)
      end
    end
  end
  -- PTTL, not `PEXPIRE ... LT`: that needs Redis 7, and the demo's embedded Redis is 6.2.
  for _, suffix in ipairs(RETAIN_CAPPED) do
    local own = redis.call('PTTL', base .. suffix)
    if own == -1 or own > left then
      redis.call('PEXPIRE', base .. suffix, left)
    end
  end
end

-- retain() for a write that touched only the session keys `written` (full key names): the same
-- outcome at two or three commands instead of twenty. While the header's instant holds (no
-- refresh due) every other key of the session already has its TTL, capped at that instant:
-- the write before this one left it so (each write ends in retain or retain_keys naming what
-- it wrote), and the instant only moves in a full retain(). So only the written keys can need
-- a TTL or a cap. A refresh, a retention of 0 or no header: the full retain().
-- An entry of `written` may be {key, ms}: the write has just given the key that TTL (an
-- EXPIRE or SET ... EX of its own), so it is capped without reading it back.
local CAPPED_SUFFIX = {}
for _, suffix in ipairs(RETAIN_CAPPED) do
  CAPPED_SUFFIX[suffix] = true
end

local function retain_keys(session_key, ttl_s, written)
  local base = string.match(session_key, '^(.-}:)')
  local ttl = tonumber(ttl_s)
  if not base or not ttl or ttl <= 0 then
    return retain(session_key, ttl_s)
  end
  local ms = ttl * 1000
  local left = redis.call('PTTL', base .. 'header')
  if left < ms - ms * REFRESH_SHARE or left > ms then
    return retain(session_key, ttl_s)
  end
  for _, key in ipairs(written) do
    local own = nil
    if type(key) == 'table' then
      key, own = key[1], tonumber(key[2])
    end
    local suffix = string.sub(key, #base + 1)
    if string.sub(key, 1, #base) == base and suffix ~= 'header' then
      own = own or redis.call('PTTL', key)
      if own == -1 or (own > left and CAPPED_SUFFIX[suffix]) then
        redis.call('PEXPIRE', key, left)
      end
    end
  end
end
