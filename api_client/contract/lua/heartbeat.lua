-- A worker's heartbeat: its member of the workers zset counts until now + TTL (Redis's clock,
-- so workers and servers on hosts whose clocks differ agree). Members silent for longer than
-- the keep time are dropped; the key itself ends that long after the last heartbeat.
-- KEYS: 1 workers zset   ARGV: 1 worker id, 2 TTL ms, 3 keep ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return now
