-- Job events (docs/storage.md "Job events in Redis"): the one way a script writes an event to a
-- session's stream. Included with `-- include: _events` (finish and apply_draft's body); the
-- Python writers build the same writes with api_client.contract.job_events.event_writes.
--
-- A helper: its function reads no KEYS or ARGV. emit_event(stream, maxlen, ttl_s, kind, job,
-- data) adds the event (fields type, job, data; `MAXLEN ~ maxlen`) and gives the stream its
-- lifetime: it lives `ttl_s` (the job records' TTL) after its last event. `data` is the event's
-- JSON as stored: an event about an entry the job wrote holds that entry's id as its "entry",
-- not the entry (nor does an applied draft's result hold it: readers put it back there too). Returns the stream id. The caller refreshes the session's retention
-- (retain_keys with {stream, ttl_s * 1000}); the global copy follows the script, or is made in
-- it by copy_event where the script reaches the global stream (end_job.lua, on one Redis).
local function add_event(stream, maxlen, kind, job, data)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'type', kind, 'job', job,
    'data', data)
end

local function emit_event(stream, maxlen, ttl_s, kind, job, data)
  local id = add_event(stream, maxlen, kind, job, data)
  redis.call('EXPIRE', stream, ttl_s)
  return id
end

-- An event added with no lifetime of its own: the copy on the global stream (which has none),
-- or an event the script's emit_event on the same stream follows (end_job's announced ones).
local function copy_event(stream, maxlen, kind, job, data)
  return add_event(stream, maxlen, kind, job, data)
end
