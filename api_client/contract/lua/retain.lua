-- include: _retention
-- Refresh a session's retention (see _retention.lua) for writes made by plain commands in a
-- pipeline or transaction (progress events, token counts, the loop guard's count, a client's
-- refusal record): sent in the same MULTI or pipeline as the write.
-- KEYS: 1 any key of the session   ARGV: 1 retention s (0 = keep forever)
retain(KEYS[1], ARGV[1])
return 1
