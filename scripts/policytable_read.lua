-- Read script of ratelimit's PolicyTable: in one call, what a replica that
-- holds a version of the table needs to hold the table's current one. It
-- only reads.
--
-- KEYS[1]  the table (see scripts/policytable.lua)
-- ARGV[1]  the version the replica holds, '0' for none
--
-- It returns
--   {'same', v}                  the table is at version v, the replica's
--   {'changes', v, f1, x1, ...}  the table is at version v, and the changes
--                                logged since the replica's version (at
--                                most 64) set or deleted the fields f1, ...,
--                                each once: xi is '=' .. its value now, or
--                                '' for a field that is gone
--   {'reload', v}                the log does not reach back to the
--                                replica's version (more than 64 changes,
--                                or the table was written whole since): the
--                                replica reads the whole table
-- and fails with 'PTMISSING' when the table does not exist, 'PTCORRUPT' for
-- a HASH without 'v' (WRONGTYPE for a key of another type).

local key, have = KEYS[1], ARGV[1]
local v = redis.call('HGET', key, 'v')
if not v then
  if redis.call('EXISTS', key) == 1 then
    return redis.error_reply('PTCORRUPT the table has no version')
  end
  return redis.error_reply('PTMISSING')
end
if v == have then
  return {'same', v}
end
local n = tonumber(redis.call('HGET', key, 'n') or '0')
if n == nil or n ~= math.floor(n) then
  return {'reload', v}
end
local want, fields, seen = v, {}, {}
for m = n, math.max(1, n - 63), -1 do
  local e = redis.call('HGET', key, 'log:' .. (m % 64))
  if not e then
    break
  end
  local prev, ver, field = string.match(e, '^(%d+):(%d+):(.*)$')
  if ver ~= want then
    break
  end
  if not seen[field] then
    seen[field] = true
    fields[#fields + 1] = field
  end
  if prev == have then
    local out = {'changes', v}
    for _, f in ipairs(fields) do
      local x = redis.call('HGET', key, f)
      out[#out + 1] = f
      out[#out + 1] = x and ('=' .. x) or ''
    end
    return out
  end
  want = prev
end
return {'reload', v}
