-- include: _walk _retention _apply_draft
-- See _apply_draft.lua. KEYS and ARGV: apply_draft()'s, listed there.
return apply_draft(KEYS, ARGV)
