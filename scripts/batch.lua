-- Batch script of ratelimit's Redis limiters: one call decides many requests,
-- in order, on one reading of the server's TIME.
--
-- ARGV[1]   R, the number of requests, >= 1
-- then, for each request in order:
--   c       its number of checks, >= 1; the request is allowed only if every
--           check allows it, and then every check takes its cost (all or
--           nothing)
--   then, for each check, four arguments and one key, the next of KEYS:
--     kind    't' token bucket, 'g' GCRA, 'w' fixed window
--     limit   capacity or limit: whole units, 1 <= limit <= 2^52
--     param   't', 'g': whole microseconds per unit; 'w': the window in
--             whole milliseconds
--     n       cost, 0 <= n <= limit; 0 only reads
--
-- Returns an array of R strings, one per request. An answered request is
-- "allowed remaining retry_after reset_after" for each of its checks in
-- order, separated by spaces: allowed 1 or 0 (the request's, the same for
-- all its checks), remaining whole units, the waits in µs. A request whose
-- key does not hold the state its check writes gets "!" and the reason,
-- changes nothing, and the requests after it are decided as usual.
--
-- The state of each kind, which every write keeps, and anything else under
-- a key is refused (another type, other fields, other values, no TTL):
--   't'  a HASH of exactly credit and last_refill: refill time banked,
--        tokens × interval (0 empty, capacity × interval full), and the
--        server time it was computed at, both integer µs; PEXPIRE until full.
--   'g'  a STRING: the theoretical arrival time in integer µs, the server time
--        at which the key is full again; PX until then.
--   'w'  a STRING: the count of the window, >= 1, with PX the time left in
--        the window; a key with PTTL 0 has ended.
-- Numbers are decimal digits without sign, point, exponent or leading zero,
-- below 2^53, which Lua's doubles hold exactly, and are written with
-- string.format('%.0f') since tostring keeps only 14 significant digits.
-- An absent key is full (no window open), and every TTL is the time until
-- then, whole ms rounded up, so a key that expires is exactly a full one.
-- A server clock that steps back makes time stand still for a key until it
-- catches up, and the waits include the catching up.
--
-- A script holds the server while it runs: callers bound R.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- whole reads a number as this script writes it; nil for anything else.
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

-- read runs a read command under pcall, so that a key of another type is a
-- refusal rather than the end of the whole batch. It returns the reply, or
-- nil and the reason to refuse; other errors end the script.
local function read(cmd, key, want)
  local reply = redis.pcall(cmd, key)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
      return nil, 'not a ' .. want
    end
    error(reply.err)
  end
  return reply
end

local function ms(us)
  return math.max(1, math.ceil(us / 1000))
end

-- Each check function reads its key and returns allowed, remaining, retry,
-- reset and a function that writes the key if the request is allowed; or
-- nil and the reason its key is refused.

local function bucket(key, capacity, interval, n)
  local full = capacity * interval
  local state, why = read('HGETALL', key, 'HASH')
  if not state then
    return nil, why
  end
  local credit, last = full, now
  if #state > 0 then
    local fields = {}
    for i = 1, #state - 1, 2 do
      fields[state[i]] = state[i + 1]
    end
    credit, last = whole(fields['credit']), whole(fields['last_refill'])
    if #state ~= 4 or not (credit and last) then
      return nil, 'not a HASH of exactly credit and last_refill, whole numbers below 2^53'
    end
    if redis.call('PTTL', key) < 0 then
      return nil, 'a HASH without the TTL every write sets'
    end
    credit = math.min(credit, full)
  end
  local lag = 0
  if now > last then
    credit = math.min(full, credit + (now - last))
    last = now
  else
    lag = last - now
  end
  -- until_full is the wait until a bucket holding c is full again.
  local function until_full(c)
    if c < full then
      return lag + full - c
    end
    return 0
  end
  local cost = n * interval
  if credit < cost then
    return false, math.floor(credit / interval), lag + cost - credit, until_full(credit)
  end
  local left = credit - cost
  return true, math.floor(left / interval), 0, until_full(left), function()
    if n > 0 then
      redis.call('HSET', key, 'credit', string.format('%.0f', left), 'last_refill', string.format('%.0f', last))
      redis.call('PEXPIRE', key, ms(lag + full - left))
    end
  end
end

local function gcra(key, limit, interval, n)
  local tau = limit * interval
  local stored, why = read('GET', key, 'STRING')
  if why then
    return nil, why
  end
  local tat = now
  if stored then
    tat = whole(stored)
    if not tat then
      return nil, 'not a time in whole microseconds below 2^53'
    end
    if redis.call('PTTL', key) < 0 then
      return nil, 'a time without the TTL every write sets'
    end
    tat = math.max(tat, now)
  end
  local new_tat = tat + n * interval
  if n > 0 and new_tat - now > tau then
    return false, math.max(0, math.floor((tau - (tat - now)) / interval)), new_tat - tau - now, tat - now
  end
  if n == 0 then
    new_tat = tat
  end
  return true, math.max(0, math.floor((tau - (new_tat - now)) / interval)), 0, new_tat - now, function()
    if n > 0 then
      redis.call('SET', key, string.format('%.0f', new_tat), 'PX', ms(new_tat - now))
    end
  end
end

local function window(key, limit, length, n)
  local stored, why = read('GET', key, 'STRING')
  if why then
    return nil, why
  end
  local count, left = 0, 0
  if stored then
    count = whole(stored)
    if not (count and count >= 1) then
      return nil, 'not a count of whole requests from 1 below 2^53'
    end
    left = redis.call('PTTL', key)
    if left < 0 then
      return nil, 'a count without the TTL every write sets'
    end
    if left == 0 then
      count = 0 -- the window's time is up: it has ended
    end
  end
  if count + n > limit then
    return false, math.max(0, limit - count), left * 1000, left * 1000
  end
  if n > 0 and count == 0 then
    left = length
  end
  return true, limit - count - n, 0, left * 1000, function()
    if n > 0 then
      if count == 0 then
        redis.call('SET', key, n, 'PX', length) -- opens a window, replacing one whose time is up
      else
        redis.call('INCRBY', key, n)
      end
    end
  end
end

local checks = {t = bucket, g = gcra, w = window}

local replies = {}
local a, k = 2, 1
for r = 1, tonumber(ARGV[1]) do
  local c = tonumber(ARGV[a])
  a = a + 1
  local all, refused = true, nil
  local parts, writes = {}, {}
  for i = 1, c do
    local check = checks[ARGV[a]]
    local ok, remaining, retry, reset, write = check(KEYS[k], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]))
    if ok == nil and not refused then
      refused = KEYS[k] .. ': ' .. remaining
    end
    all = all and ok
    parts[i] = {remaining, retry, reset}
    writes[i] = write
    a, k = a + 4, k + 1
  end
  if refused then
    replies[r] = '!' .. refused
  else
    local out = {}
    local allowed = 0
    if all then
      allowed = 1
      for i = 1, c do
        writes[i]()
      end
    end
    for i = 1, c do
      local p = parts[i]
      local retry = p[2]
      if all then
        retry = 0
      end
      out[i] = string.format('%d %.0f %.0f %.0f', allowed, p[1], retry, p[3])
    end
    replies[r] = table.concat(out, ' ')
  end
end
return replies
