-- The entry a job record's field/value pairs name, and whether they hold a copy of it
-- (docs/storage.md "The entry is stored once"): _finish.lua drops the copy a finish would write
-- when the session holds the entry; read_record.lua reads the entry when the record names it
-- and holds no copy (an older worker's record does).
-- A helper: its functions read no KEYS or ARGV; the including script passes them its own.
--
-- named_entry(flat, first): scans flat[first], flat[first + 1], ... as field/value pairs.
-- Returns the value of `resultEntryId` (nil: none) and the index of the `entry` field (nil:
-- no copy).
local function named_entry(flat, first)
  local named, copy = nil, nil
  for i = first, #flat - 1, 2 do
    if flat[i] == 'resultEntryId' then
      named = flat[i + 1]
    elseif flat[i] == 'entry' then
      copy = i
    end
  end
  return named, copy
end
