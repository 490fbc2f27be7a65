-- Token bucket for ratelimit's RedisTokenBucket: one call decides one request.
--
-- KEYS[1]  the bucket, a HASH of exactly two fields, both integer microseconds
--          written as decimal digits (no sign, point, exponent or leading
--          zero), below 2^53:
--            credit       refill time banked in the bucket, tokens × interval:
--                         0 is empty, capacity × interval is full
--            last_refill  the server time credit was computed at
--          An absent key is a full bucket. Every write sets PEXPIRE to the
--          time until the bucket is full again, in whole ms rounded up, so a
--          key that expires is exactly a full bucket, and a key of ours always
--          has a TTL.
-- ARGV[1]  capacity: whole tokens, >= 1
-- ARGV[2]  interval: whole microseconds per token, >= 1
-- ARGV[3]  n: tokens asked for, 0 <= n <= capacity; 0 only reads
--
-- Returns "allowed remaining retry_after reset_after": allowed is 1 or 0,
-- remaining whole tokens, the waits in µs; one string, which costs the client
-- less to read than an array.
--
-- Anything else under KEYS[1] (another type, a HASH with other fields or
-- other values, a bucket without a TTL) is not ours: the script touches
-- nothing and returns an error reply starting with RATELIMIT_STATE. Other
-- Redis errors are passed on as they are.
--
-- Time is the server's TIME, so clients' clocks do not matter. A server clock
-- that steps back makes time stand still for the bucket until it catches up,
-- and the waits returned include the catching up. Every value is an integer
-- below 2^53, which Lua's doubles hold exactly; values are written with
-- string.format('%.0f'), since tostring keeps only 14 significant digits.

local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local full = capacity * interval

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

local credit, last = full, now
-- pcall, so that a key of another type is answered rather than aborting.
local state = redis.pcall('HGETALL', key)
if state.err then
  if string.sub(state.err, 1, 9) == 'WRONGTYPE' then
    return refuse('not a HASH')
  end
  return state
end
if #state > 0 then
  local fields = {}
  for i = 1, #state - 1, 2 do
    fields[state[i]] = state[i + 1]
  end
  credit, last = whole(fields['credit']), whole(fields['last_refill'])
  if #state ~= 4 or not (credit and last) then
    return refuse('not a HASH of exactly credit and last_refill, whole numbers below 2^53')
  end
  if redis.call('PTTL', key) < 0 then
    return refuse('a HASH without the TTL every write sets')
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
    redis.call('HSET', key,
      'credit', string.format('%.0f', credit),
      'last_refill', string.format('%.0f', last))
    redis.call('PEXPIRE', key, math.max(1, math.ceil((lag + full - credit) / 1000)))
  end
else
  retry = lag + cost - credit
end

local reset = 0
if credit < full then
  reset = lag + full - credit
end
return string.format('%.0f %.0f %.0f %.0f', allowed, math.floor(credit / interval), retry, reset)
