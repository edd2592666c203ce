-- include: _retention _admit _enqueue
-- See _enqueue.lua.
return enqueue(KEYS, ARGV)
