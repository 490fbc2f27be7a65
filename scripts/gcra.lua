-- GCRA for ratelimit's RedisGCRA: one call decides one request.
--
-- KEYS[1]  a STRING: the key's theoretical arrival time (tat), the server time
--          in integer microseconds at which the key is back to its full
--          limit, written as decimal digits (no sign, point, exponent or
--          leading zero), below 2^53. An absent key is at its full limit.
--          Every write sets PX to the time until then, in whole ms rounded
--          up, so a key that expires is exactly a full one, and a key of ours
--          always has a TTL.
-- ARGV[1]  limit: the burst, whole requests, >= 1
-- ARGV[2]  interval: the emission interval, period/limit, whole µs, >= 1
-- ARGV[3]  n: requests asked for, 0 <= n <= limit; 0 only reads
--
-- Returns "allowed remaining retry_after reset_after": allowed is 1 or 0,
-- the waits in µs; one string, which costs the client less to read than an
-- array.
--
-- Anything else under KEYS[1] (another type, another value, a STRING without
-- a TTL) is not ours: the script touches nothing and returns an error reply
-- starting with RATELIMIT_STATE. Other Redis errors are passed on as they
-- are.
--
-- With tau = limit × interval, a request for n at now moves tat to
-- max(tat, now) + n × interval and is allowed iff that is at most tau ahead
-- of now: exactly a token bucket of capacity limit refilling one token per
-- interval. A server clock that steps back withholds requests for up to the
-- length of the step; the waits returned include it. Every value is an integer
-- below 2^53, written with string.format('%.0f'), since tostring keeps only
-- 14 significant digits.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tau = limit * interval

-- refuse answers a key that does not hold our state.
local function refuse(why)
  return redis.error_reply('RATELIMIT_STATE ' .. why)
end

-- whole reads a value as this script writes it: decimal digits without a
-- leading zero, below 2^53. It returns nil for anything else.
local function whole(s)
  if type(s) ~= 'string' or #s > 16 or not (s == '0' or string.find(s, '^[1-9]%d*$')) then
    return nil
  end
  local v = tonumber(s)
  if v >= 9007199254740992 then
    return nil
  end
  return v
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local tat = now
-- pcall, so that a key of another type is answered rather than aborting.
local stored = redis.pcall('GET', key)
if type(stored) == 'table' then
  if string.sub(stored.err, 1, 9) == 'WRONGTYPE' then
    return refuse('not a STRING')
  end
  return stored
end
if stored then
  tat = whole(stored)
  if not tat then
    return refuse('not a time in whole microseconds below 2^53')
  end
  if redis.call('PTTL', key) < 0 then
    return refuse('a time without the TTL every write sets')
  end
  tat = math.max(tat, now)
end

local new_tat = tat + n * interval
-- A peek is always answered; after a clock step back, tat may be more than
-- tau ahead even with nothing asked for.
if n > 0 and new_tat - now > tau then
  return string.format('%.0f %.0f %.0f %.0f', 0, math.max(0, math.floor((tau - (tat - now)) / interval)), new_tat - tau - now, tat - now)
end
if n > 0 then
  tat = new_tat
  redis.call('SET', key, string.format('%.0f', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
end
return string.format('%.0f %.0f %.0f %.0f', 1, math.max(0, math.floor((tau - (tat - now)) / interval)), 0, tat - now)
