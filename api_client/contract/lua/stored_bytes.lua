-- include: _stored_bytes
-- One change to a tenant's stored-bytes hash made apart from the session's own script: on a
-- Redis Cluster after each write of the session's lines (the hash lies in another slot), after a
-- session is deleted, and by the workers' reconcile of expired sessions.
-- KEYS: 1 the tenant's bytes hash
-- ARGV: 1 'add' | 'set' | 'drop', 2 session id,
--       3 add: the change in bytes; set: the new count; drop: the count it must still have
--       ('' = any)
-- Returns (drop) 1 if it dropped the count, else 0; (add, set) 0.
local op, sid = ARGV[1], ARGV[2]
if op == 'add' then
  bytes_add(KEYS[1], sid, tonumber(ARGV[3]))
elseif op == 'set' then
  bytes_set(KEYS[1], sid, tonumber(ARGV[3]))
elseif op == 'drop' then
  local expected = ARGV[3]
  if expected == '' then
    expected = nil
  end
  return bytes_drop(KEYS[1], sid, expected)
else
  return redis.error_reply('ERR stored_bytes: unknown op ' .. tostring(op))
end
return 0
