-- GCRA for ratelimit's RedisGCRA: one call decides one request.
--
-- KEYS[1]  a STRING: the key's theoretical arrival time (tat), the server time
--          in integer microseconds at which the key is back to its full
--          limit. An absent key is at its full limit. Every write sets PX to
--          the time until then, in whole ms rounded up, so a key that expires
--          is exactly a full one.
-- ARGV[1]  limit: the burst, whole requests, >= 1
-- ARGV[2]  interval: the emission interval, period/limit, whole µs, >= 1
-- ARGV[3]  n: requests asked for, 0 <= n <= limit; 0 only reads
--
-- Returns "allowed remaining retry_after reset_after": allowed is 1 or 0,
-- the waits in µs; one string, which costs the client less to read than an
-- array.
--
-- With tau = limit × interval, a request for n at now moves tat to
-- max(tat, now) + n × interval and is allowed iff that is at most tau ahead
-- of now: exactly a token bucket of capacity limit refilling one token per
-- interval. A server clock that steps back withholds requests for up to the
-- length of the step; the waits returned include it. Every value is an integer
-- below 2^53, written with string.format('%.0f'), since tostring keeps only
-- 14 significant digits.

local limit = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tau = limit * interval

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local tat = now
local stored = redis.call('GET', KEYS[1])
if stored then
  tat = tonumber(stored)
  -- The comparisons are false for nil and NaN as well as out-of-range values.
  if not (tat and tat >= 0 and tat < 9007199254740992) then
    return redis.error_reply('ERR ratelimit: corrupt GCRA state at ' .. KEYS[1])
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
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
end
return string.format('%.0f %.0f %.0f %.0f', 1, math.max(0, math.floor((tau - (tat - now)) / interval)), 0, tat - now)
