-- include: _record_entry
-- A job's record, and the entry it names read from its session in the same step
-- (api_client/contract/job_records.py get_record): a finished job's record names the entry it
-- wrote (`resultEntryId`) and holds no copy of it when the session does (_finish.lua,
-- _apply_draft.lua); a record written with its `entry` (an older worker's) needs no read.
-- KEYS: 1 the record, 2 the session's entries (the same hash slot); ARGV: none
-- Returns {the entry's line ('' = none to read, or the session no longer holds it), then the
-- record's fields and values as HGETALL gives them (none: no such record)}
local flat = redis.call('HGETALL', KEYS[1])
local named, copy = named_entry(flat, 1)
local line = ''
if named and named ~= '' and not copy then
  line = redis.call('HGET', KEYS[2], named) or ''
end
return {line, unpack(flat)}
