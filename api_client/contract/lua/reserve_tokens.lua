-- A model call's reservation of a tenant's day budget (worker/store/tenant_usage.py).
-- KEYS: the day's usage hash, the tenant's quota hash, the tenant's reservations. ARGV: tokens
-- wanted, the default tokens_per_day, the share of it this job may reach (drafts:
-- draft_budget_share), the job's id, the delivery's owner token, now and the reservation's end
-- (Unix ms), the reservations' TTL. Reserves when spent + every reservation held + wanted stays
-- within the limit (0: none), in one step, so that calls of parallel jobs cannot together pass
-- it. The job's own field counts only when this delivery owns it: an admission's estimate, or a
-- dead delivery's calls, are replaced by this one's. Returns {1|0, spent, reserved, limit}
-- ({1, 0, 0, '0'} without a budget: nothing is read or reserved).
local limit = tonumber(redis.call('HGET', KEYS[2], 'tokens_per_day') or '') or tonumber(ARGV[2])
limit = limit * tonumber(ARGV[3])
if limit <= 0 then
  return {1, 0, 0, '0'}  -- no budget: nothing to check a call against, nothing reserved
end
local u = redis.call('HMGET', KEYS[1], 'input_tokens', 'output_tokens', 'draft_input_tokens',
                     'draft_output_tokens')
local spent = 0
for i = 1, 4 do spent = spent + (tonumber(u[i]) or 0) end
local now, mine, others, expired = tonumber(ARGV[6]), 0, 0, {}
local all = redis.call('HGETALL', KEYS[3])
for i = 1, #all, 2 do
  local tokens, till, owner = string.match(all[i + 1], '^(%d+) (%d+) (%S+)')
  if not tokens or tonumber(till) <= now then
    expired[#expired + 1] = all[i]
  elseif all[i] == ARGV[4] then
    if owner == ARGV[5] then mine = tonumber(tokens) end
  else
    others = others + tonumber(tokens)
  end
end
local wanted = tonumber(ARGV[1])
if limit > 0 and spent + others + mine + wanted > limit then
  return {0, spent, others + mine, tostring(limit)}
end
for _, field in ipairs(expired) do redis.call('HDEL', KEYS[3], field) end
redis.call('HSET', KEYS[3], ARGV[4], (mine + wanted) .. ' ' .. ARGV[7] .. ' ' .. ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[8])
return {1, spent, others + mine, tostring(limit)}
