-- include: _walk _retention _apply_draft
-- observe(), near the threshold: note the agent's pace, then say what the session's draft and
-- speculative job are, in one round trip (the client decides: api_client/client/speculation.py).
-- The rate is the context's average growth since the base: the first observation, or the first
-- after the context went down (a compaction). An average over the phase, not the last step: turns
-- differ eightfold in size, and one large turn must not start a draft far too early; for the
-- same reason it is reported only after MIN_STEPS steps of growth (0 before: the band decides).
-- KEYS: apply_draft's 9 (see _apply_draft.lua), 10 pace hash, 11 inflight speculative
-- ARGV: apply_draft's 18 (mode 'check'; 17 is the session's retention), 19 context tokens,
--       20 pace TTL s
-- Returns {rate (tokens/s), draft seconds ('' = none measured), job id of the speculative job
--          queued or running ('' = none), then apply_draft's check reply...}
local MIN_STEPS = 3
local tokens, now = tonumber(ARGV[19]), tonumber(ARGV[13])
local pace = redis.call('HMGET', KEYS[10], 'tokens', 'fromTokens', 'fromAt', 'steps', 'draftS')
local last, base, since = tonumber(pace[1]), tonumber(pace[2]), tonumber(pace[3])
local steps = tonumber(pace[4]) or 0
if not (last and base and since) or tokens < last then
  base, since, steps = tokens, now, 0
elseif tokens > last then
  steps = steps + 1
end
local rate = 0
if steps >= MIN_STEPS and now > since then
  rate = (tokens - base) / (now - since)
end
local draft_s = pace[5] or ''

local check = apply_draft({unpack(KEYS, 1, 9)}, ARGV)
-- A stored draft says how long it took (enqueue → stored): the next one will take about as long.
if (check[1] == 'valid' or check[1] == 'stale') and check[3] ~= '' then
  draft_s = tostring(tonumber(check[3]) / 1000)
end
redis.call('HSET', KEYS[10], 'tokens', ARGV[19], 'fromTokens', tostring(base),
  'fromAt', tostring(since), 'steps', tostring(steps), 'draftS', draft_s)
redis.call('EXPIRE', KEYS[10], ARGV[20])
retain(KEYS[1], ARGV[17])
local reply = {tostring(rate), draft_s, redis.call('GET', KEYS[11]) or ''}
for i = 1, #check do
  reply[#reply + 1] = check[i]
end
return reply
