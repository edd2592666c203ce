-- GET /v1/workers and workerLost (api_client/server/worker_routes.py), by Redis's clock.
-- KEYS: workers zset   ARGV: 1 a worker id ("" for none)
-- Returns {fresh heartbeats, 1 when that worker's heartbeat is known and stale else 0}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local alive = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local stale = 0
if ARGV[1] ~= '' then
  local until_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if until_ms and tonumber(until_ms) <= now then stale = 1 end
end
return {alive, stale}
