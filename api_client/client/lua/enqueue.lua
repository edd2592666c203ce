-- include: _enqueue
-- See _enqueue.lua.
return enqueue(KEYS, ARGV)
