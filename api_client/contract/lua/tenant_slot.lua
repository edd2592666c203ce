-- include: _tenant_slot
-- Take a running slot of the job's tenant, when a max_running cap applies (docs/tenants.md;
-- _tenant_slot.lua's take_slot).
-- KEYS: 1 the tenant's running jobs (zset: job id → until when, Unix ms), 2 its quota hash
-- ARGV: 1 job id, 2 now (Unix ms), 3 until when the slot is held (ms: the job's deadline; a
--       worker that dies frees it then), 4 the setting's max_running (the quota's field wins)
-- Returns 1 (run it: a slot is held for it), 2 (run it: no cap, nothing held) or 0 (the tenant
-- runs max_running jobs already).
local limit = tonumber(redis.call('HGET', KEYS[2], 'max_running')) or tonumber(ARGV[4])
return take_slot(KEYS[1], ARGV[1], ARGV[2], ARGV[3], limit)
