-- include: _retention
-- Refresh a session's retention (see _retention.lua) for writes made by plain commands in a
-- pipeline or transaction (progress events, token counts, the loop guard's count, a client's
-- refusal record): sent in the same MULTI or pipeline as the write.
-- KEYS: 1 any key of the session   ARGV: 1 retention s (0 = keep forever),
--   2 'written': KEYS[1] is the only key of the session the write touched (retain_keys),
--   3 (with 'written', optional) the TTL s the write has just given KEYS[1] (an EXPIRE of its
--     own in the same pipeline): not read back
if ARGV[2] == 'written' then
  if ARGV[3] then
    retain_keys(KEYS[1], ARGV[1], {{KEYS[1], tonumber(ARGV[3]) * 1000}})
  else
    retain_keys(KEYS[1], ARGV[1], {KEYS[1]})
  end
else
  retain(KEYS[1], ARGV[1])
end
return 1
