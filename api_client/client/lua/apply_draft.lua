-- include: _walk _apply_draft
-- See _apply_draft.lua.
return apply_draft(KEYS, ARGV)
