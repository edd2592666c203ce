-- include: _retention _admit _place _enqueue
-- See _enqueue.lua. KEYS and ARGV: enqueue()'s, listed there.
return enqueue(KEYS, ARGV)
