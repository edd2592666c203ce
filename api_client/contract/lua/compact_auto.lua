-- include: _walk _retention _apply_draft _admit _place _enqueue
-- An automatic (threshold/overflow) compaction in one round trip: the loop guard and the draft
-- (_apply_draft.lua), then, when no draft was there (or the request may not use one) and the
-- guard let it pass, the enqueue (_enqueue.lua) in the same script.
-- KEYS: 1-9 apply_draft's (see _apply_draft.lua), 10.. enqueue()'s K (see _enqueue.lua)
-- ARGV: 1-18 apply_draft's, 19 enqueue()'s named arguments (one JSON object), with its push:
--       20 the task message, 21 the task-sent event
-- Returns apply_draft's reply ('applied', 'guarded', or 'discarded' with a cause other than
-- 'nodraft': the caller notes the discard, then enqueues), or {'enqueued', enqueue's reply...},
-- or enqueue's error reply.
local DRAFT_KEYS, DRAFT_ARGS = 9, 18
-- apply_draft reads only its own KEYS[1-9] and ARGV[1-18]: it is given both tables as they are.
local tried = apply_draft(KEYS, ARGV)
if not (tried[1] == 'clear' or (tried[1] == 'discarded' and tried[2] == 'nodraft')) then
  return tried
end
-- unpack copies in C: the enqueue's keys are the few after apply_draft's.
local enqueued = enqueue({unpack(KEYS, DRAFT_KEYS + 1)}, cjson.decode(ARGV[DRAFT_ARGS + 1]),
                        ARGV[DRAFT_ARGS + 2], ARGV[DRAFT_ARGS + 3])
if enqueued.err then
  return enqueued
end
local reply = {'enqueued'}
for i = 1, #enqueued do
  reply[#reply + 1] = enqueued[i]
end
return reply
