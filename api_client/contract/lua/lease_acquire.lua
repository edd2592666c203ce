-- Take (or re-take) the lease on a job that is not finished.
-- KEYS: record, lease   ARGV: 1 worker id, 2 TTL ms
-- Returns 'acquired' | 'held' (another worker's lease is live) | 'finished'
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return redis.error_reply('COMPACTOR_NOJOB')
end
if state ~= 'queued' and state ~= 'running' then
  return 'finished'
end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then
  return 'held'
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 'acquired'
