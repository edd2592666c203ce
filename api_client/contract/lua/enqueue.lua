-- include: _retention _admit _place _enqueue
-- A new job, in one step: see _enqueue.lua (its key layout and named arguments).
-- KEYS: enqueue()'s K
-- ARGV: 1 enqueue()'s named arguments, one JSON object; with its push: 2 the task message,
--       3 the task-sent event
return enqueue(KEYS, cjson.decode(ARGV[1]), ARGV[2], ARGV[3])
