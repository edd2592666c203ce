-- include: _retention _enqueue
-- See _enqueue.lua.
return enqueue(KEYS, ARGV)
