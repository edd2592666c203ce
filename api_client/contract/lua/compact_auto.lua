-- include: _walk _retention _apply_draft _admit _place _enqueue
-- An automatic (threshold/overflow) compaction in one round trip: the loop guard and the draft
-- (_apply_draft.lua), then, when no draft was there (or the request may not use one) and the
-- guard let it pass, the enqueue (_enqueue.lua) in the same script.
-- KEYS: apply_draft's ARGV[1] keys, then enqueue's keys.
-- ARGV: 1 number of apply_draft keys, 2 number of apply_draft args, then apply_draft's args,
--       then enqueue's.
-- Returns apply_draft's reply ('applied', 'guarded', or 'discarded' with a cause other than
-- 'nodraft': the caller notes the discard, then enqueues), or {'enqueued', enqueue's reply...},
-- or enqueue's error reply.
local nkeys, nargs = tonumber(ARGV[1]), tonumber(ARGV[2])
-- unpack copies in C: a Lua loop over the arguments was a visible share of the call.
local draft_keys, job_keys = {unpack(KEYS, 1, nkeys)}, {unpack(KEYS, nkeys + 1)}
local draft_args, job_args = {unpack(ARGV, 3, nargs + 2)}, {unpack(ARGV, nargs + 3)}
local tried = apply_draft(draft_keys, draft_args)
if not (tried[1] == 'clear' or (tried[1] == 'discarded' and tried[2] == 'nodraft')) then
  return tried
end
local enqueued = enqueue(job_keys, job_args)
if enqueued.err then
  return enqueued
end
local reply = {'enqueued'}
for i = 1, #enqueued do
  reply[#reply + 1] = enqueued[i]
end
return reply
