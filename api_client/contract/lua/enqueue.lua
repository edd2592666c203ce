-- include: _retention _admit _place _enqueue
-- See _enqueue.lua.
return enqueue(KEYS, ARGV)
