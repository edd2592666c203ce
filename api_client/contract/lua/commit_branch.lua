-- include: _walk _retention _stored_bytes
-- Branch navigation with an optional branch_summary entry (docs/compaction.md "Branch navigation"),
-- atomically.
-- Applies only if the leaf is still the snapshot's leaf (the summarised branch is exactly the
-- one being left). With a summary line, the entry is appended under the destination and
-- becomes the leaf; without one, the leaf moves to the destination ('' = reset).
-- The tenant's count of stored bytes grows by the line (never refused by its quota).
-- The job's effect (the record's `effect` field: the entry id, '' for a leaf move) is written
-- with its `result`: a job commits at most once however often it runs.
-- KEYS: 1 header, 2 entries, 3 order, 4 leaf, 5 rev, 6 job record,
--       [7 the tenant's bytes hash: a single Redis only (_stored_bytes.lua)]
--       (derived, read on a redelivery only: the session's `effects`, see job_guard in _walk)
-- ARGV: 1 job id, 2 snapshot leaf id, 3 destination id ('' = none), 4 line head ('' = no entry),
--       5 line tail, 6 id candidates, 7 job result JSON
--       8 the session's retention s (0 = forever), 9 the session's field in the bytes hash
-- Returns {status, entry id ('' = none), revision, stored line, bytes added}
local refused = job_guard(KEYS[1], KEYS[6], ARGV[1])
if refused then
  return refused
end
local leaf = redis.call('GET', KEYS[4]) or ''
if leaf ~= ARGV[2] then
  return {'stale', '', redis.call('GET', KEYS[5]) or '0', ''}
end
local dest = ARGV[3]
if dest ~= '' and redis.call('HEXISTS', KEYS[2], dest) == 0 then
  return {'stale', '', redis.call('GET', KEYS[5]) or '0', ''}
end
local id, line = '', ''
if ARGV[4] ~= '' then
  id = free_id(KEYS[2], ARGV[6])
  if not id then
    return {'noid', '', '', ''}
  end
  local parent = 'null'
  if dest ~= '' then
    parent = cjson.encode(dest)
  end
  line = ARGV[4] .. cjson.encode(id) .. ',"parentId":' .. parent .. ARGV[5]
  redis.call('HSET', KEYS[2], id, line)
  redis.call('RPUSH', KEYS[3], id)
  bytes_add(KEYS[7] or '', ARGV[9], #line)
  redis.call('SET', KEYS[4], id, 'KEEPTTL')
else
  redis.call('SET', KEYS[4], dest, 'KEEPTTL')
end
redis.call('HSET', KEYS[6], 'result', ARGV[7], 'effect', id)
local rev = redis.call('INCR', KEYS[5])
retain(KEYS[1], ARGV[8])
return {'committed', id, tostring(rev), line, tostring(#line)}
