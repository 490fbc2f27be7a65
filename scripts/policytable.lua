-- Write script of ratelimit's PolicyTable: one call changes the table, bumps
-- its version, logs the change and publishes a notice of it, atomically.
--
-- KEYS[1]  the table: a HASH whose fields are
--            'v'          the version, a decimal integer, > 0: max(previous
--                         + 1, now in microseconds), so that it
--                         never repeats, not even after the table is deleted
--                         and written again
--            'p:' key     the key's entry: its own policy, or '@' .. plan
--            'plan:' name a plan: its policies by part (policytable_codec.go)
--            'f:' name    a flag, '1' (on) or '0' (off)
--            'c:' name    the number of entries that name the plan, while
--                         above 0
--            'n'          the number of changes logged since the table was
--                         last written whole (absent: none)
--            'log:' i     change number m, for i = m % 64, the last 64 of
--                         them: '<prev>:<version>:<field>', the version the
--                         change was made on, the one it made, and the
--                         field it set or deleted
--          The HASH exists exactly while the table does: it always holds
--          'v', even with no entry. A replica reads it through
--          scripts/policytable_read.lua, and never trusts a notice.
-- ARGV[1]  the channel the notice is published on
-- ARGV[2]  the operation:
--            'set'      set the field ARGV[3] to ARGV[4]; an entry naming a
--                       plan the table does not hold fails with 'PTNOPLAN'
--            'del'      delete the field ARGV[3]; a plan some entry names
--                       fails with 'PTINUSE'
--            'replace'  make the table hold exactly the field, value pairs
--                       ARGV[3], ARGV[4], ... (checked by the caller)
--            'seed'     'replace', but only if the table does not exist
-- 'set' and 'del' on a table that does not exist change nothing and fail
-- with the error 'PTMISSING', so that a write never makes a partial table
-- (after a FLUSHALL, say): only 'replace' and 'seed' create one. A key of
-- another type, or a HASH without 'v', fails with 'PTCORRUPT', unchanged.
-- A 'set' to the value the field holds, and a 'del' of a field the table
-- does not hold, change nothing.
--
-- The notice published on ARGV[1] is the new version: a hint that the
-- table changed, which tells a replica nothing it applies.
--
-- It returns {changed, version}: changed is 1 if the table changed, and
-- version the table's version after the call, as a string.
-- now, the µs the version is made from, is set by the time file the script
-- is assembled after (internal/redisbatch.AssembleTimed): the server's
-- TIME, or, for a PolicyTable with a CallerClock, the caller's time, which
-- that script takes off ARGV[1] before ARGV above is read.

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

-- plan_of returns the plan an entry's value names, or nil.
local function plan_of(field, value)
  if value and string.sub(field, 1, 2) == 'p:' and string.sub(value, 1, 1) == '@' then
    return string.sub(value, 2)
  end
  return nil
end

if (op == 'set' and #ARGV ~= 4) or (op == 'del' and #ARGV ~= 3) then
  return redis.error_reply('wrong number of arguments for ' .. op)
end
local old
if op == 'set' or op == 'del' then
  old = redis.call('HGET', key, ARGV[3])
  if (op == 'del' and not old) or (op == 'set' and old == ARGV[4]) then
    return {0, prevs}
  end
  local plan = op == 'set' and plan_of(ARGV[3], ARGV[4])
  if plan and redis.call('HEXISTS', key, 'plan:' .. plan) == 0 then
    return redis.error_reply('PTNOPLAN')
  end
  if op == 'del' and string.sub(ARGV[3], 1, 5) == 'plan:' and
      tonumber(redis.call('HGET', key, 'c:' .. string.sub(ARGV[3], 6)) or '0') > 0 then
    return redis.error_reply('PTINUSE')
  end
end

local v = string.format('%.0f', math.max(prev + 1, now))
local pv = string.format('%.0f', prev)

-- count adds d to the number of entries that name plan.
local function count(plan, d)
  if plan and redis.call('HINCRBY', key, 'c:' .. plan, d) <= 0 then
    redis.call('HDEL', key, 'c:' .. plan)
  end
end

if op == 'set' or op == 'del' then
  count(plan_of(ARGV[3], old), -1)
  if op == 'set' then
    redis.call('HSET', key, ARGV[3], ARGV[4])
    count(plan_of(ARGV[3], ARGV[4]), 1)
  else
    redis.call('HDEL', key, ARGV[3])
  end
  local n = redis.call('HINCRBY', key, 'n', 1)
  redis.call('HSET', key, 'v', v, 'log:' .. (n % 64), pv .. ':' .. v .. ':' .. ARGV[3])
elseif op == 'replace' or op == 'seed' then
  redis.call('DEL', key)
  redis.call('HSET', key, 'v', v)
  -- HSET in chunks, to keep below Lua's limit on unpacked arguments.
  local i = 3
  while i <= #ARGV do
    local last = math.min(i + 999, #ARGV)
    redis.call('HSET', key, unpack(ARGV, i, last))
    i = last + 1
  end
  for j = 3, #ARGV - 1, 2 do
    count(plan_of(ARGV[j], ARGV[j + 1]), 1)
  end
else
  return redis.error_reply('unknown operation ' .. tostring(op))
end
redis.call('PUBLISH', channel, v)
return {1, v}
