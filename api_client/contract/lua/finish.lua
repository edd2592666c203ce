-- include: _retention _finish
-- See _finish.lua. KEYS and ARGV: finish_job()'s, listed there.
return finish_job(KEYS, ARGV)
