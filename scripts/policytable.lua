-- Write script of ratelimit's PolicyTable: one call changes the table, bumps
-- its version and publishes the change, atomically.
--
-- KEYS[1]  the table: a HASH whose fields are
--            'v'        the version, a decimal integer, > 0: max(previous + 1,
--                       the server's TIME in microseconds), so that it never
--                       repeats, not even after the table is deleted and
--                       written again
--            'p:' key   a policy, '<limit>/<window in ns>' in decimal
--            'f:' name  a flag, '1' (on) or '0' (off)
--          The HASH exists exactly while the table does: it always holds
--          'v', even with no policy and no flag.
-- ARGV[1]  the channel the change is published on
-- ARGV[2]  the operation:
--            'set'      set fields: ARGV[3], ARGV[4], ... are field, value
--                       pairs (exactly one pair is published incrementally;
--                       several are published as a reload)
--            'del'      delete the field ARGV[3]
--            'replace'  make the table hold exactly the pairs ARGV[3], ...
--            'seed'     'replace', but only if the table does not exist
-- 'set' and 'del' on a table that does not exist change nothing and fail
-- with the error 'PTMISSING', so that a write never makes a partial table
-- (after a FLUSHALL, say): only 'replace' and 'seed' create one. A key of
-- another type, or a HASH without 'v', fails with 'PTCORRUPT', unchanged.
--
-- The message published on ARGV[1] is '<prev>:<version>:<value>:<field>':
-- prev is the version the change was made on (0 when the table did not
-- exist), value is the field's new value, '' for a field deleted, or '*'
-- for a change that must be read whole (a replace or seed). A replica
-- holding version prev applies the change and holds version; one holding
-- another version reads the table again.
--
-- It returns {changed, version}: changed is 1 if the table changed, and
-- version the table's version after the call, as a string.
-- A PolicyTable with a CallerClock runs a variant that takes now (µs) off
-- the end of ARGV first, and reads it instead of TIME, which it never calls.

local key, channel, op = KEYS[1], ARGV[1], ARGV[2]
local exists = redis.call('EXISTS', key) == 1
if exists and redis.call('TYPE', key)['ok'] ~= 'hash' then
  return redis.error_reply('PTCORRUPT the table is not a HASH')
end
local prevs = exists and redis.call('HGET', key, 'v') or false
if exists and not prevs then
  return redis.error_reply('PTCORRUPT the table has no version')
end
if op == 'seed' and exists then
  return {0, prevs}
end
if (op == 'set' or op == 'del') and not exists then
  return redis.error_reply('PTMISSING')
end
local prev = tonumber(prevs or '0')
if prev == nil then
  return redis.error_reply('PTCORRUPT the table\'s version is not a number')
end

if op == 'del' and redis.call('HEXISTS', key, ARGV[3]) == 0 then
  return {0, prevs}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = string.format('%.0f', math.max(prev + 1, now))
local pv = string.format('%.0f', prev)

local function hset_pairs(from)
  -- HSET in chunks, to keep below Lua's limit on unpacked arguments.
  local i = from
  while i <= #ARGV do
    local last = math.min(i + 999, #ARGV)
    redis.call('HSET', key, unpack(ARGV, i, last))
    i = last + 1
  end
end

if op == 'set' then
  hset_pairs(3)
  redis.call('HSET', key, 'v', v)
  if #ARGV == 4 then
    redis.call('PUBLISH', channel, pv .. ':' .. v .. ':' .. ARGV[4] .. ':' .. ARGV[3])
  else
    redis.call('PUBLISH', channel, pv .. ':' .. v .. ':*:')
  end
elseif op == 'del' then
  redis.call('HDEL', key, ARGV[3])
  redis.call('HSET', key, 'v', v)
  redis.call('PUBLISH', channel, pv .. ':' .. v .. '::' .. ARGV[3])
elseif op == 'replace' or op == 'seed' then
  redis.call('DEL', key)
  redis.call('HSET', key, 'v', v)
  hset_pairs(3)
  redis.call('PUBLISH', channel, pv .. ':' .. v .. ':*:')
else
  return redis.error_reply('unknown operation ' .. tostring(op))
end
return {1, v}
