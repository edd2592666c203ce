-- Job leases (worker/store/leases.py): which delivery runs a job right now (`<record>:lease`, a
-- PX key). Included with `-- include: _lease` (lease_acquire, lease_release and start_job).
--
-- A helper: its functions read no KEYS or ARGV.
-- lease_acquire(record, lease, owner, ttl_ms) takes (or re-takes) the lease on a job that is not
-- finished: 'acquired' | 'held' (another owner's lease is live) | 'finished'; a missing record
-- is the error COMPACTOR_NOJOB (a table: the caller returns it as it is).
-- lease_release(lease, owner) drops the lease if owner holds it: 1 or 0.
local function lease_acquire(record, lease, owner, ttl_ms)
  local state = redis.call('HGET', record, 'state')
  if not state then
    return redis.error_reply('COMPACTOR_NOJOB')
  end
  if state ~= 'queued' and state ~= 'running' then
    return 'finished'
  end
  local holder = redis.call('GET', lease)
  if holder and holder ~= owner then
    return 'held'
  end
  redis.call('SET', lease, owner, 'PX', ttl_ms)
  return 'acquired'
end

local function lease_release(lease, owner)
  if redis.call('GET', lease) == owner then
    return redis.call('DEL', lease)
  end
  return 0
end
