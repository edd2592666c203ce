-- include: _walk _retention _apply_draft
-- See _apply_draft.lua.
return apply_draft(KEYS, ARGV)
