-- Batch script of ratelimit's Redis limiters: one call decides many requests,
-- in order, on one reading of the server's TIME.
--
-- ARGV[1]   R, the number of requests, >= 1
-- ARGV[2]   S, the number of limits the checks below refer to, >= 1
-- then, for each limit, three arguments:
--   kind    't' token bucket, 'g' GCRA, 'w' fixed window
--   limit   capacity or limit: whole units, 1 <= limit <= 2^52
--   param   't', 'g': whole microseconds per unit; 'w': the window in
--           whole milliseconds
-- then, for each request in order:
--   c       its number of checks, >= 1; the request is allowed only if every
--           check allows it, and then every check takes its cost (all or
--           nothing)
--   then, for each check, two arguments and one key, the next of KEYS:
--     s       the number of its limit, 1 to S
--     n       cost, 0 <= n <= limit; 0 only reads
--   the checks of one request are on different keys: each reads its key
--   before any of them writes
--
-- Returns one string: a line per request, in order, separated by "\n". An
-- answered request's line is "allowed remaining retry_after reset_after"
-- for each of its checks in order, all separated by spaces: allowed 1 or 0
-- (the request's, the same for all its checks), remaining whole units, the
-- waits in µs. A check that allows on its own reports 0 for retry_after;
-- when the request is denied it reports what it holds, since nothing was
-- taken from it. A request with a key that does not hold the state its
-- check writes gets "!i reason" instead, i the number of that check from
-- 1; it changes nothing, and the requests after it are decided as usual.
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

-- wrongtype tells whether a reply of redis.pcall is the error of a key of
-- another type; any other error ends the script.
local function wrongtype(reply)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
      return true
    end
    error(reply.err)
  end
  return false
end

local function ms(us)
  return math.max(1, math.ceil(us / 1000))
end

-- Each check function reads its key and returns allowed, remaining, retry
-- and reset as they are once its cost is taken (or, when it does not allow,
-- as they are), then the values its writer writes, nil when there is
-- nothing to write; or nil and the reason its key is refused. Nothing is
-- written before every check of a request has allowed.

local function bucket(key, capacity, interval, n)
  local full = capacity * interval
  local state = redis.pcall('HGETALL', key)
  if wrongtype(state) then
    return nil, 'not a HASH'
  end
  local credit, last = full, now
  if #state > 0 then
    if #state ~= 4 then
      credit = nil
    elseif state[1] == 'credit' and state[3] == 'last_refill' then
      credit, last = whole(state[2]), whole(state[4])
    elseif state[1] == 'last_refill' and state[3] == 'credit' then
      credit, last = whole(state[4]), whole(state[2])
    else
      credit = nil
    end
    if not (credit and last) then
      return nil, 'not a HASH of exactly credit and last_refill, whole numbers below 2^53'
    end
    if redis.call('PTTL', key) < 0 then
      return nil, 'a HASH without the TTL every write sets'
    end
    if credit > full then
      credit = full
    end
  end
  local lag = 0
  if now > last then
    credit = math.min(full, credit + (now - last))
    last = now
  else
    lag = last - now
  end
  local cost = n * interval
  if credit < cost then
    local reset = 0
    if credit < full then
      reset = lag + full - credit
    end
    return false, math.floor(credit / interval), lag + cost - credit, reset
  end
  local left = credit - cost
  local reset = 0
  if left < full then
    reset = lag + full - left
  end
  if n == 0 then
    return true, math.floor(left / interval), 0, reset
  end
  return true, math.floor(left / interval), 0, reset, left, last, ms(lag + full - left)
end

local function gcra(key, limit, interval, n)
  local stored = redis.pcall('GET', key)
  if wrongtype(stored) then
    return nil, 'not a STRING'
  end
  local tau = limit * interval
  local tat = now
  if stored then
    tat = whole(stored)
    if not tat then
      return nil, 'not a time in whole microseconds below 2^53'
    end
    if redis.call('PTTL', key) < 0 then
      return nil, 'a time without the TTL every write sets'
    end
    if tat < now then
      tat = now
    end
  end
  local new_tat = tat + n * interval
  if n > 0 and new_tat - now > tau then
    return false, math.max(0, math.floor((tau - (tat - now)) / interval)), new_tat - tau - now, tat - now
  end
  if n == 0 then
    return true, math.max(0, math.floor((tau - (tat - now)) / interval)), 0, tat - now
  end
  return true, math.max(0, math.floor((tau - (new_tat - now)) / interval)), 0, new_tat - now, new_tat, ms(new_tat - now)
end

local function window(key, limit, length, n)
  local stored = redis.pcall('GET', key)
  if wrongtype(stored) then
    return nil, 'not a STRING'
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
  if n == 0 then
    return true, limit - count, 0, left * 1000
  end
  if count == 0 then
    return true, limit - n, 0, length * 1000, n, length -- opens a window
  end
  return true, limit - count - n, 0, left * 1000, n
end

-- The writers write what their check returned, once every check of the
-- request has allowed.
local writers = {
  t = function(key, left, last, ttl)
    redis.call('HSET', key, 'credit', string.format('%.0f', left), 'last_refill', string.format('%.0f', last))
    redis.call('PEXPIRE', key, ttl)
  end,
  g = function(key, tat, ttl)
    redis.call('SET', key, string.format('%.0f', tat), 'PX', ttl)
  end,
  w = function(key, n, opens)
    if opens then
      redis.call('SET', key, n, 'PX', opens) -- replaces a window whose time is up
    else
      redis.call('INCRBY', key, n)
    end
  end,
}

local checks = {t = bucket, g = gcra, w = window}

local function line(allowed, remaining, retry, reset)
  return string.format('%d %.0f %.0f %.0f', allowed, remaining, retry, reset)
end

local kinds, limits, params = {}, {}, {}
local a = 3
for i = 1, tonumber(ARGV[2]) do
  kinds[i], limits[i], params[i] = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  if not checks[kinds[i]] then
    error('ratelimit batch script: unknown kind ' .. tostring(kinds[i]))
  end
  a = a + 3
end

local lines = {}
local k = 1
for r = 1, tonumber(ARGV[1]) do
  local c = tonumber(ARGV[a])
  a = a + 1
  if c == 1 then
    -- One check: it decides alone, and writes at once.
    local s, key = tonumber(ARGV[a]), KEYS[k]
    local kind = kinds[s]
    local ok, remaining, retry, reset, w1, w2, w3 = checks[kind](key, limits[s], params[s], tonumber(ARGV[a + 1]))
    if ok == nil then
      lines[r] = '!1 ' .. remaining
    elseif ok then
      if w1 then
        writers[kind](key, w1, w2, w3)
      end
      lines[r] = line(1, remaining, 0, reset)
    else
      lines[r] = line(0, remaining, retry, reset)
    end
    a, k = a + 2, k + 1
  else
    -- Several checks: all of them allow, and then all write, or none does.
    local all, refused = true, nil
    local specs, keys, parts = {}, {}, {}
    for i = 1, c do
      local s, key = tonumber(ARGV[a]), KEYS[k]
      local p = {checks[kinds[s]](key, limits[s], params[s], tonumber(ARGV[a + 1]))}
      if p[1] == nil then
        if not refused then
          refused = '!' .. i .. ' ' .. p[2]
        end
      elseif not p[1] then
        all = false
      end
      specs[i], keys[i], parts[i] = s, key, p
      a, k = a + 2, k + 1
    end
    if refused then
      lines[r] = refused
    else
      local out = {}
      for i = 1, c do
        local s, key, p = specs[i], keys[i], parts[i]
        if all then
          if p[5] then
            writers[kinds[s]](key, p[5], p[6], p[7])
          end
          out[i] = line(1, p[2], 0, p[4])
        elseif p[1] then
          -- It would allow, but the request is denied: report it untouched.
          local _, remaining, _, reset = checks[kinds[s]](key, limits[s], params[s], 0)
          out[i] = line(0, remaining, 0, reset)
        else
          out[i] = line(0, p[2], p[3], p[4])
        end
      end
      lines[r] = table.concat(out, ' ')
    end
  end
end
return table.concat(lines, '\n')
