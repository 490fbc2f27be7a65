-- Fixed window for ratelimit's RedisFixedWindow: one call decides one request.
--
-- KEYS[1]  a STRING: the whole requests counted in the key's current window,
--          >= 1, written as decimal digits (no sign, point, exponent or
--          leading zero), below 2^53, with a PX TTL of the time left in the
--          window. The window opens at the key's first counted request and
--          lasts the window's length; when its time is up, the window has
--          ended: an absent key, or one whose PTTL is 0 (Redis keeps a key
--          through its expiry millisecond), has no window open. The window's
--          time is the server's own expiry clock.
-- ARGV[1]  limit: whole requests per window, >= 1
-- ARGV[2]  window: whole milliseconds, >= 1
-- ARGV[3]  n: requests asked for, 0 <= n <= limit; 0 only reads
--
-- Returns "allowed remaining retry_after reset_after": allowed is 1 or 0,
-- the waits in µs; one string, which costs the client less to read than an
-- array.
-- Denials do not count; a denial's retry_after is the time until the window
-- ends.
--
-- Anything else under KEYS[1] (another type, another value, a count without
-- a TTL) is not ours: the script touches nothing and returns an error reply
-- starting with RATELIMIT_STATE. Other Redis errors are passed on as they
-- are.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local n = tonumber(ARGV[3])

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

local count, left = 0, 0
-- pcall, so that a key of another type is answered rather than aborting.
local stored = redis.pcall('GET', key)
if type(stored) == 'table' then
  if string.sub(stored.err, 1, 9) == 'WRONGTYPE' then
    return refuse('not a STRING')
  end
  return stored
end
if stored then
  count = whole(stored)
  if not (count and count >= 1) then
    return refuse('not a count of whole requests from 1 below 2^53')
  end
  left = redis.call('PTTL', key)
  if left < 0 then
    return refuse('a count without the TTL every write sets')
  end
  if left == 0 then
    count = 0 -- the window's time is up: it has ended
  end
end

if count + n > limit then
  return string.format('%.0f %.0f %.0f %.0f', 0, math.max(0, limit - count), left * 1000, left * 1000)
end
if n > 0 then
  if count == 0 then
    -- Opens a window, replacing one whose time is up.
    redis.call('SET', key, n, 'PX', window)
    left = window
  else
    redis.call('INCRBY', key, n)
  end
  count = count + n
end
return string.format('%.0f %.0f %.0f %.0f', 1, limit - count, 0, left * 1000)
