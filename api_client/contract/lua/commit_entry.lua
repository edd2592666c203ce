-- include: _walk _retention _stored_bytes
-- Conditional append of a compaction entry (docs/rules.md "Invariants").
-- The entry becomes a child of the CURRENT leaf only if the snapshot's leaf is still on the
-- current leaf's path and no compaction entry was added on it since; the job's effect is
-- recorded in the same step (the record's `effect` field, written with its `result`), so a job
-- appends at most one entry however often it runs.
-- The tenant's count of stored bytes grows by the line (never refused by its quota).
-- KEYS: 1 header, 2 entries, 3 order, 4 leaf, 5 rev, 6 job record,
--       [7 the tenant's bytes hash: a single Redis only (_stored_bytes.lua)]
--       (derived, read on a redelivery only: the session's `effects`, see job_guard in _walk)
-- ARGV: 1 job id, 2 snapshot leaf id, 3 walk limit, 4 line head (up to '"id":'),
--       5 line tail (from ',"timestamp"' on, leading comma included), 6 id candidates,
--       7 job result JSON (stored on the record)
--       8 the session's retention s (0 = forever), 9 the session's field in the bytes hash
-- Returns {status, entry id, revision, stored line, bytes added}
--   status: committed | duplicate | stale | cancelled | finished | nosession | noid
local refused = job_guard(KEYS[1], KEYS[6], ARGV[1])
if refused then
  return refused
end
local leaf = redis.call('GET', KEYS[4]) or ''
if ARGV[2] == '' or not reaches_without_compaction(KEYS[2], leaf, ARGV[2], tonumber(ARGV[3])) then
  return {'stale', '', redis.call('GET', KEYS[5]) or '0', ''}
end
local id = free_id(KEYS[2], ARGV[6])
if not id then
  return {'noid', '', '', ''}
end
local parent = 'null'
if leaf ~= '' then
  parent = cjson.encode(leaf)
end
local line = ARGV[4] .. cjson.encode(id) .. ',"parentId":' .. parent .. ARGV[5]
redis.call('HSET', KEYS[2], id, line)
local listed = redis.call('RPUSH', KEYS[3], id)
bytes_add(KEYS[7] or '', ARGV[9], #line)
redis.call('SET', KEYS[4], id, 'KEEPTTL')  -- the session's expiry instant stays
redis.call('HSET', KEYS[6], 'result', ARGV[7], 'effect', id)
local rev = redis.call('INCR', KEYS[5])
-- A key that was there before this write has its TTL already (see retain_keys): only those the
-- write may have made are looked at. A leaf there was (the walk read its entry) means the leaf
-- and entries keys were; order and rev were when RPUSH and INCR find them (above 1).
local written = {}
if leaf == '' then
  written[#written + 1] = KEYS[2]
  written[#written + 1] = KEYS[4]
end
if listed == 1 then
  written[#written + 1] = KEYS[3]
end
if rev == 1 then
  written[#written + 1] = KEYS[5]
end
retain_keys(KEYS[1], ARGV[8], written)
return {'committed', id, tostring(rev), line, tostring(#line)}
