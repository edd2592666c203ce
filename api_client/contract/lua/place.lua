-- include: _place
-- A new job's task message into its queue list on a broker Redis of its own, at the place of the
-- tag the admission gave it (enqueue.lua or admit.lua on the sessions' Redis): see _place.lua.
-- KEYS: 1 the queue list, 2-3 its fair index (tags, messages)
-- ARGV: 1 tag, 2 job id, 3 task message, 4 index entries' lifetime s, 5 event channel,
--       6 task-sent event to PUBLISH ('' = none)
place(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4])
if ARGV[6] ~= '' then
  redis.call('PUBLISH', ARGV[5], ARGV[6])
end
return 1
