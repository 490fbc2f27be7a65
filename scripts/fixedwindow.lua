-- Fixed window for ratelimit's RedisFixedWindow: one call decides one request.
--
-- KEYS[1]  a STRING: the whole requests counted in the key's current window,
--          with a PX TTL of the time left in the window. The window opens at
--          the key's first counted request and lasts the window's length; when
--          the key expires, the window has ended. An absent key has no window
--          open. The window's time is the server's own expiry clock.
-- ARGV[1]  limit: whole requests per window, >= 1
-- ARGV[2]  window: whole milliseconds, >= 1
-- ARGV[3]  n: requests asked for, 0 <= n <= limit; 0 only reads
--
-- Returns "allowed remaining retry_after reset_after": allowed is 1 or 0,
-- the waits in µs; one string, which costs the client less to read than an
-- array.
-- Denials do not count; a denial's retry_after is the time until the window
-- ends.

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local n = tonumber(ARGV[3])

local count, left = 0, 0
local stored = redis.call('GET', KEYS[1])
if stored then
  count = tonumber(stored)
  left = redis.call('PTTL', KEYS[1])
  -- The comparisons are false for nil and NaN as well as out-of-range values.
  if not (count and count >= 0 and count == math.floor(count) and left > 0) then
    return redis.error_reply('ERR ratelimit: corrupt fixed window at ' .. KEYS[1])
  end
end

if count + n > limit then
  return string.format('%.0f %.0f %.0f %.0f', 0, math.max(0, limit - count), left * 1000, left * 1000)
end
if n > 0 then
  if count == 0 then
    redis.call('SET', KEYS[1], n, 'PX', window)
    left = window
  else
    redis.call('INCRBY', KEYS[1], n)
  end
  count = count + n
end
return string.format('%.0f %.0f %.0f %.0f', 1, limit - count, 0, left * 1000)
