-- Token bucket for ratelimit's RedisTokenBucket: one call decides one request.
--
-- KEYS[1]  the bucket, a HASH of two fields, both integer microseconds:
--            credit       refill time banked in the bucket, tokens × interval:
--                         0 is empty, capacity × interval is full
--            last_refill  the server time credit was computed at
--          An absent key is a full bucket. Every write sets PEXPIRE to the
--          time until the bucket is full again, in whole ms rounded up, so a
--          key that expires is exactly a full bucket.
-- ARGV[1]  capacity: whole tokens, >= 1
-- ARGV[2]  interval: whole microseconds per token, >= 1
-- ARGV[3]  n: tokens asked for, 0 <= n <= capacity; 0 only reads
--
-- Returns "allowed remaining retry_after reset_after": allowed is 1 or 0,
-- remaining whole tokens, the waits in µs; one string, which costs the client
-- less to read than an array.
--
-- Time is the server's TIME, so clients' clocks do not matter. A server clock
-- that steps back makes time stand still for the bucket until it catches up,
-- and the waits returned include the catching up. Every value is an integer
-- below 2^53, which Lua's doubles hold exactly; values are written with
-- string.format('%.0f'), since tostring keeps only 14 significant digits.

local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local full = capacity * interval

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local credit, last = full, now
local state = redis.call('HMGET', KEYS[1], 'credit', 'last_refill')
if state[1] or state[2] then
  credit, last = tonumber(state[1]), tonumber(state[2])
  -- The comparisons are false for nil and NaN as well as out-of-range values.
  if not (credit and last and credit >= 0 and last >= 0 and last < 9007199254740992) then
    return redis.error_reply('ERR ratelimit: corrupt token bucket at ' .. KEYS[1])
  end
  credit = math.min(credit, full) -- a smaller capacity than the key was written with
end

local lag = 0
if now > last then
  credit = math.min(full, credit + (now - last))
  last = now
else
  lag = last - now
end

local cost = n * interval
local allowed, retry = 0, 0
if credit >= cost then
  allowed = 1
  if n > 0 then
    credit = credit - cost
    redis.call('HSET', KEYS[1],
      'credit', string.format('%.0f', credit),
      'last_refill', string.format('%.0f', last))
    redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil((lag + full - credit) / 1000)))
  end
else
  retry = lag + cost - credit
end

local reset = 0
if credit < full then
  reset = lag + full - credit
end
return string.format('%.0f %.0f %.0f %.0f', allowed, math.floor(credit / interval), retry, reset)
