-- fast_pack (declared in the prelude) packs the records the fast paths
-- kept; this file follows them, and is assembled only with a kind that
-- keeps one. A call the fast paths decided whole ends here.

-- fast_pack packs vals, four numbers a record (or five, the fifth
-- next_unit, when vals.five is set: the first is then allowed + 2), with
-- Redis's struct library, eight records a call of it, then one at a time
-- (formats written out here, since building one per call costs more than
-- the packing); without it (an embedded server for tests), as compact's
-- line would, record by record.
function fast_pack(vals)
  local lib = rawget(_G, 'struct')
  local out, n = {}, #vals
  if lib then
    local pack = lib.pack
    local i = 1
    if vals.five then
      while i <= n do
        out[#out + 1] = pack('>Bi8i8i8i8', vals[i], vals[i + 1], vals[i + 2], vals[i + 3], vals[i + 4])
        i = i + 5
      end
      return table.concat(out)
    end
    local eight = '>Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8'
    while i + 31 <= n do
      out[#out + 1] = pack(eight, unpack(vals, i, i + 31))
      i = i + 32
    end
    while i <= n do
      out[#out + 1] = pack('>Bi8i8i8', vals[i], vals[i + 1], vals[i + 2], vals[i + 3])
      i = i + 4
    end
  else
    local char = string.char
    local function be8(v)
      local b = {}
      for i = 8, 1, -1 do
        b[i] = v % 256
        v = (v - b[i]) / 256
      end
      return char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
    end
    local width = vals.five and 5 or 4
    for i = 1, n, width do
      local rec = char(vals[i]) .. be8(vals[i + 1]) .. be8(vals[i + 2]) .. be8(vals[i + 3])
      if width == 5 then
        rec = rec .. be8(vals[i + 4])
      end
      out[#out + 1] = rec
    end
  end
  return table.concat(out)
end
if fast_done then
  return fast_pack(fast_vals)
end
