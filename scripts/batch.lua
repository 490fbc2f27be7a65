-- Batch script of ratelimit's Redis limiters: one call decides many requests,
-- in order, on one reading of the server's TIME.
--
-- ARGV[1]   R, the number of requests, >= 1; or -R for the compact form,
--           R Allows of one check each on limit 1 (S = 1), whose only
--           argument is their cost n (no c, no s): a plain limiter's batch;
--           when R > 1 and only one argument follows the limit, it is the
--           cost of every request
-- ARGV[2]   S, the number of limits the checks below refer to, >= 1
-- then, for each limit, three arguments:
--   kind    't' token bucket, 'g' GCRA, 'w' fixed window; 'T', 'G' a
--           token bucket or GCRA that keeps its interval (and capacity)
--           with each key's state, for a policy chosen per key: a key
--           written at another interval keeps the units it has used,
--           converted to this one and rounded up, and is written so by
--           its next call, whatever that decides
--   limit   capacity or limit: whole units, 1 <= limit <= 2^52
--   param   't', 'g', 'T', 'G': whole microseconds per unit; 'w': the
--           window in whole milliseconds
-- then, for each request in order, one of three kinds:
--   an Allow:
--     c       its number of checks, >= 1; the request is allowed only if
--             every check allows it, and then every check takes its cost
--             (all or nothing)
--     then, for each check, two arguments and one key, the next of KEYS:
--       s       the number of its limit, 1 to S
--       n       cost, 0 <= n <= limit; 0 only reads
--   a Settle, which replaces the units an allowed request took by its
--   true cost on every check, or on none:
--     'S', c, age, tokttl
--       age     µs since the units were taken, or -1 when not known
--       tokttl  ms, > 0 when one more key follows the checks' keys: a
--               token key, which the Settle creates with PX tokttl and
--               which, when it is there already, makes the Settle change
--               nothing; 0 without
--     then, for each check, two arguments and one key:
--       s       the number of its limit
--       d       cost minus taken, whole units, |d| <= 2^52: > 0 takes d
--               more (into debt if need be), < 0 gives -d back (never
--               above full; a window only when it had opened age µs ago or
--               earlier)
--   a Reset, which empties every check's key, or none:
--     'X', c, then for each check, one argument (s) and one key
--   the checks of one request are on different keys: each reads its key
--   before any of them writes
--
-- Returns one binary string: a record per request, in order, with nothing
-- between them, so that no number is formatted as text. An answered
-- request's record is, for each of its checks in order, 25 bytes: allowed
-- (one byte, 1 or 0: the request's, the same for all its checks), then
-- remaining (whole units), retry_after and reset_after (µs), each a
-- big-endian signed 64-bit integer. A check that allows on its own reports
-- 0 for retry_after; when the request is denied it reports what it holds,
-- since nothing was taken from it. A request with a key that does not hold
-- the state its check writes gets a refusal instead: the byte 255, the
-- number of that check from 1 (one byte), the length of the reason (two
-- bytes, big-endian) and the reason's text; it changes nothing, and the
-- requests after it are decided as usual. A Settle's record is
-- (1, remaining, 0, reset_after) per check, as the keys are after it (after
-- the earlier Settle, when its token was there); a Reset's is
-- (1, limit, 0, 0) per check.
--
-- The state of each kind, which every write keeps, and anything else under
-- a key is refused (another type, other fields, other values, no TTL):
--   't'  a HASH of exactly tat: the token bucket kept as the GCRA whose
--        decisions are the same, tat being the server time in integer µs at
--        which the bucket is full again; at now it holds (capacity ×
--        interval − (tat − now)) / interval tokens, below 0 in debt after a
--        Settle or a clock step back (see below); PEXPIRE until tat. A
--        HASH of exactly credit and last_refill, as an earlier version of
--        this script kept a bucket (refill time banked, tokens × interval,
--        and the time it was computed at, both integer µs), is read as the
--        bucket it is, and written in this shape by its next call.
--   'g'  a STRING: the theoretical arrival time in integer µs, the server time
--        at which the key is full again; PX until then.
--   'T'  a HASH of exactly tat and interval: as 't', with the interval (µs)
--        the tat was computed with.
--   'G'  as 'g', a STRING "tat:interval", the interval the tat was
--        computed with, in µs.
--   'w'  a STRING: the count of the window, >= 1 (above limit in debt after
--        a Settle), with PX the time left in the window; a key with PTTL 0
--        has ended.
-- Numbers are decimal digits without sign (credit may have a '-'), point,
-- exponent or leading zero, below 2^53 in size, which Lua's doubles hold
-- exactly, and are passed to redis.call as numbers, which Redis writes as
-- plain digits below 10^20 (tostring would keep only 14 significant
-- digits). A debt is bounded: a key is never more than
-- 2^52 µs (or units) from full.
-- An absent key is full (no window open), and every TTL is the time until
-- then, whole ms rounded up, so a key that expires is exactly a full one.
-- A server clock that steps back never creates a unit: a token-bucket or
-- GCRA key's tat stays where it was, so what the key owes (tat - now) grows
-- by the step until the clock catches up, and its waits include the
-- catching up; a window's count stays, and the window lasts as long as its
-- key's TTL.
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

-- signed reads a number as whole does, or its negative with a '-'.
local function signed(s)
  if type(s) == 'string' and string.sub(s, 1, 1) == '-' and s ~= '-0' then
    local v = whole(string.sub(s, 2))
    return v and -v
  end
  return whole(s)
end

local maxdebt = 4503599627370496 -- 2^52

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

-- convert returns used (> 0) µs owed at one unit every from µs as the µs
-- owed for as many units at one every to, rounded up, at most maxdebt;
-- exact while r·to stays below 2^53 (r < from).
local function convert(used, from, to)
  local q = math.floor(used / from)
  local r = used - q * from
  if r < 0 then
    q, r = q - 1, r + from
  elseif r >= from then
    q, r = q + 1, r - from
  end
  return math.min(maxdebt, q * to + math.ceil(r * to / from))
end

-- Each check function reads its key and returns allowed, remaining, retry
-- and reset as they are once its cost is taken (or, when it does not allow,
-- as they are), then the values its writer writes, nil when there is
-- nothing to write; or nil and the reason its key is refused. Nothing is
-- written before every check of a request has allowed, but for a 'T' or
-- 'G' key read at another interval, or a 't' key in the earlier shape: its
-- conversion is written by any call of one check, a peek or a denial too.

-- The state functions read a key as of now, or return nil and the reason
-- it is refused.

-- pair returns the values of fields a and b of a HASH read by HGETALL
-- (state) that has exactly these two fields, in either order; nil for
-- anything else.
local function pair(state, a, b)
  if #state ~= 4 then
    return nil
  end
  if state[1] == a and state[3] == b then
    return state[2], state[4]
  elseif state[1] == b and state[3] == a then
    return state[4], state[2]
  end
  return nil
end

-- bucket_tat reads a HASH of exactly credit and last_refill, a bucket as an
-- earlier version of this script kept it, as the tat it is for a bucket
-- full at full µs of credit; nil for anything else.
local function bucket_tat(state, full)
  local c, l = pair(state, 'credit', 'last_refill')
  local credit, last = signed(c), whole(l)
  if not (credit and last) then
    return nil
  end
  -- Owing more than a debt's bound (a last_refill far ahead of the clock)
  -- is owing the bound: a key is never more than maxdebt from full.
  return math.min(last + full - math.min(credit, full), now + maxdebt)
end

-- gcra_state returns the theoretical arrival time, at least now, of a key
-- of shape 'g' (or nil), 'G', 't' or 'T', and whether it was converted
-- from another interval or an earlier shape (then the caller writes it,
-- even when it takes nothing: the new policy holds from this call on).
-- stored, when not nil, is the key's reply to the read, made already.
local function gcra_state(key, limit, interval, stored, shape)
  local tat, t0, earlier = nil, interval, false
  if shape == 't' or shape == 'T' then
    local state = stored or redis.pcall('HGETALL', key)
    if wrongtype(state) then
      return nil, 'not a HASH'
    end
    if #state == 0 then
      return now, false
    end
    if shape == 't' then
      if #state == 2 and state[1] == 'tat' then
        tat = whole(state[2])
      elseif #state == 4 then
        tat, earlier = bucket_tat(state, limit * interval), true
      end
      if not tat then
        return nil, 'not a HASH of exactly tat, whole microseconds below 2^53'
      end
    else
      local a, b = pair(state, 'tat', 'interval')
      tat, t0 = whole(a), whole(b)
      if not (tat and t0 and t0 >= 1) then
        return nil, 'not a HASH of exactly tat and interval, whole microseconds below 2^53'
      end
    end
  else
    stored = stored or redis.pcall('GET', key)
    if wrongtype(stored) then
      return nil, 'not a STRING'
    end
    if not stored then
      return now, false
    end
    if shape == 'G' then
      local a, b = string.match(stored, '^(%d+):(%d+)$')
      tat, t0 = whole(a), whole(b)
      if not (tat and t0 and t0 >= 1) then
        return nil, 'not "tat:interval", whole microseconds below 2^53'
      end
    else
      tat = whole(stored)
      if not tat then
        return nil, 'not a time in whole microseconds below 2^53'
      end
    end
  end
  if redis.call('PTTL', key) < 0 then
    return nil, 'a time without the TTL every write sets'
  end
  if tat <= now then
    return now, earlier
  end
  if t0 ~= interval then
    -- Written under another policy: keep the units used.
    return now + convert(tat - now, t0, interval), true
  end
  return tat, earlier
end

-- window_state returns a window's count, 0 when none is open, and the ms
-- left in it; stored as gcra_state's.
local function window_state(key, stored)
  stored = stored or redis.pcall('GET', key)
  if wrongtype(stored) then
    return nil, 'not a STRING'
  end
  if not stored then
    return 0, 0
  end
  local count = whole(stored)
  if not (count and count >= 1) then
    return nil, 'not a count of whole requests from 1 below 2^53'
  end
  local left = redis.call('PTTL', key)
  if left < 0 then
    return nil, 'a count without the TTL every write sets'
  end
  if left == 0 then
    return 0, 0 -- the window's time is up: it has ended
  end
  return count, left
end

local function gcra(key, limit, interval, n, stored, shape)
  local tat, converted = gcra_state(key, limit, interval, stored, shape)
  if not tat then
    return nil, converted
  end
  local tau = limit * interval
  local new_tat = tat + n * interval
  local denied = n > 0 and new_tat - now > tau
  if denied or n == 0 then
    -- Takes nothing: writes only a conversion, the key as it is.
    local retry, w1, w2, w3 = 0, nil, nil, nil
    if denied then
      retry = new_tat - tau - now
    end
    if converted then
      w1, w2, w3 = tat, ms(tat - now), true
    end
    return not denied, math.max(0, math.floor((tau - (tat - now)) / interval)), retry, tat - now, w1, w2, w3
  end
  return true, math.max(0, math.floor((tau - (new_tat - now)) / interval)), 0, new_tat - now, new_tat, ms(new_tat - now), converted
end

local function window(key, limit, length, n, stored)
  local count, left = window_state(key, stored)
  if not count then
    return nil, left
  end
  if n > 0 and count + n > limit then
    return false, math.max(0, limit - count), left * 1000, left * 1000
  end
  if n == 0 then
    return true, math.max(0, limit - count), 0, left * 1000
  end
  if count == 0 then
    return true, limit - n, 0, length * 1000, n, length -- opens a window
  end
  return true, limit - count - n, 0, left * 1000, n
end

-- The settle functions apply d (units: more taken when > 0, given back when
-- < 0) to a key whose state has been checked, and return its remaining and
-- reset_after. A key that is full again is deleted.

local writers

local function gcra_settle(key, limit, interval, d, _, shape)
  local tat, converted = gcra_state(key, limit, interval, nil, shape)
  local new_tat = math.min(now + maxdebt, math.max(now, tat + d * interval))
  if new_tat <= now then
    redis.call('DEL', key)
    return limit, 0
  end
  if d ~= 0 or converted then
    writers[shape or 'g'](key, new_tat, ms(new_tat - now), converted, limit, interval)
  end
  return math.max(0, math.floor((limit * interval - (new_tat - now)) / interval)), new_tat - now
end

local function window_settle(key, limit, length, d, age)
  local count, left = window_state(key)
  if d < 0 then
    -- Only into the window that took the units: one that had opened by
    -- then, age µs ago, give or take the 1 ms of PTTL's unit.
    if count > 0 and (age < 0 or age <= (length - left + 1) * 1000) then
      if count + d <= 0 then
        redis.call('DEL', key) -- the window ends
        return limit, 0
      end
      redis.call('DECRBY', key, -d)
      count = count + d
    end
  elseif d > 0 then
    if count == 0 then
      count, left = math.min(d, maxdebt), length
      redis.call('SET', key, count, 'PX', length) -- opens a window
    else
      local more = math.min(count + d, maxdebt) - count
      redis.call('INCRBY', key, more)
      count = count + more
    end
  end
  return math.max(0, limit - count), left * 1000
end

-- The writers write what their check returned, once every check of the
-- request has allowed.
-- A writer gets the check's three values (nil for those it has not), then
-- its limit and param.
writers = {
  t = function(key, tat, ttl, converted)
    if converted then
      redis.call('DEL', key) -- a bucket kept in an earlier shape
    end
    redis.call('HSET', key, 'tat', tat)
    redis.call('PEXPIRE', key, ttl)
  end,
  T = function(key, tat, ttl, _, _, interval)
    redis.call('HSET', key, 'tat', tat, 'interval', interval)
    redis.call('PEXPIRE', key, ttl)
  end,
  g = function(key, tat, ttl)
    redis.call('SET', key, tat, 'PX', ttl)
  end,
  G = function(key, tat, ttl, _, _, interval)
    redis.call('SET', key, string.format('%.0f:%.0f', tat, interval), 'PX', ttl)
  end,
  w = function(key, n, opens)
    if opens then
      redis.call('SET', key, n, 'PX', opens) -- replaces a window whose time is up
    else
      redis.call('INCRBY', key, n)
    end
  end,
}

-- shaped returns f (gcra or gcra_settle) for keys of one shape: f with
-- shape as its sixth argument, after the five of every check or settle.
local function shaped(f, shape)
  return function(key, limit, param, n, x)
    return f(key, limit, param, n, x, shape)
  end
end

local checks = {
  t = shaped(gcra, 't'),
  g = gcra,
  w = window,
  T = shaped(gcra, 'T'),
  G = shaped(gcra, 'G'),
}

-- The compact form's reads. A read returns a key's reply to the read of
-- its check, or nil when the key is absent.
local reads = {
  t = function(key)
    local state = redis.pcall('HGETALL', key)
    if #state > 0 or state.err then
      return state
    end
  end,
  g = function(key)
    return redis.pcall('GET', key) or nil
  end,
}
reads.w = reads.g
local settles = {
  t = shaped(gcra_settle, 't'),
  g = gcra_settle,
  w = window_settle,
  T = shaped(gcra_settle, 'T'),
  G = shaped(gcra_settle, 'G'),
}

-- pack writes a check's record. Redis has the struct library; a server
-- without it (an embedded one for tests) gets the same bytes from Lua.
local lib = rawget(_G, 'struct')
local pack = lib and lib.pack
if not pack then
  local function be8(v)
    local b = {}
    for i = 8, 1, -1 do
      b[i] = v % 256
      v = (v - b[i]) / 256
    end
    return string.char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
  end
  pack = function(_, allowed, remaining, retry, reset)
    return string.char(allowed) .. be8(remaining) .. be8(retry) .. be8(reset)
  end
end

local function line(allowed, remaining, retry, reset)
  return pack('>Bi8i8i8', allowed, remaining, retry, reset)
end

-- refusal is the record of a request whose check i's key holds no state of
-- its own.
local function refusal(i, reason)
  return string.char(255, i, math.floor(#reason / 256), #reason % 256) .. reason
end

-- record returns the record of a request of one check, given its key, its
-- kind's writer, its limit and param, and what the check returned; a check
-- that allows returns 0 for retry. It writes what the check took, or its
-- key's conversion (to a new interval, 'T' or 'G', so that the new policy
-- holds from this call on, or from the earlier shape, 't'), which a peek or
-- a denial writes too.
local function record(key, write, limit, param, ok, remaining, retry, reset, w1, w2, w3)
  if ok == nil then
    return refusal(1, remaining)
  end
  if w1 then
    write(key, w1, w2, w3, limit, param)
  end
  return line(ok and 1 or 0, remaining, retry, reset)
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
-- The columns of a request's checks, by check number.
local cs, ck, cok, crem, cretry, creset, cw1, cw2, cw3 = {}, {}, {}, {}, {}, {}, {}, {}, {}
local nreq = tonumber(ARGV[1])
if nreq < 0 then
  -- The compact form: -nreq Allows of one check on limit 1, a cost each.
  local kind, limit, param = kinds[1], limits[1], params[1]
  local check, write, read = checks[kind], writers[kind], reads[kind]
  if not read then
    error('ratelimit batch script: no compact form for kind ' .. kind)
  end
  local windows = kind == 'w'
  local same = nil -- the cost of every request, when only one is given
  if nreq < -1 and #ARGV == a then
    same = tonumber(ARGV[a])
  end
  for r = 1, -nreq do
    local key = KEYS[r]
    local n = same or tonumber(ARGV[a + r - 1])
    local stored = read(key)
    -- An absent key is full (no window open): a cost n from 1 to the limit
    -- opens it, written at once by its writer as its check would write it,
    -- without its steps.
    if stored or n > limit then
      lines[r] = record(key, write, limit, param, check(key, limit, param, n, stored))
    elseif n == 0 then
      lines[r] = line(1, limit, 0, 0) -- full
    elseif windows then
      write(key, n, param)
      lines[r] = line(1, limit - n, 0, param * 1000)
    else
      local owed = n * param
      write(key, now + owed, ms(owed))
      lines[r] = line(1, limit - n, 0, owed)
    end
  end
  nreq = 0
end
for r = 1, nreq do
  local head = ARGV[a]
  local c = tonumber(head)
  a = a + 1
  if c == 1 then
    -- One check: it decides alone, and writes at once.
    local s, key = tonumber(ARGV[a]), KEYS[k]
    local kind, limit, param = kinds[s], limits[s], params[s]
    lines[r] = record(key, writers[kind], limit, param, checks[kind](key, limit, param, tonumber(ARGV[a + 1])))
    a, k = a + 2, k + 1
  elseif c then
    -- Several checks: all of them allow, and then all write, or none does.
    -- Their answers are kept in the columns below, reused by every request.
    local all, refused = true, nil
    for i = 1, c do
      local s, key = tonumber(ARGV[a]), KEYS[k]
      local ok, remaining, retry, reset, w1, w2, w3 = checks[kinds[s]](key, limits[s], params[s], tonumber(ARGV[a + 1]))
      if ok == nil then
        if not refused then
          refused = refusal(i, remaining)
        end
      elseif not ok then
        all = false
      end
      cs[i], ck[i], cok[i], crem[i], cretry[i], creset[i], cw1[i], cw2[i], cw3[i] = s, key, ok, remaining, retry, reset, w1, w2, w3
      a, k = a + 2, k + 1
    end
    if refused then
      lines[r] = refused
    else
      local out = ''
      for i = 1, c do
        local s, key = cs[i], ck[i]
        local text
        if all then
          if cw1[i] then
            writers[kinds[s]](key, cw1[i], cw2[i], cw3[i], limits[s], params[s])
          end
          text = line(1, crem[i], 0, creset[i])
        elseif cok[i] then
          -- It would allow, but the request is denied: report it untouched.
          local _, remaining, _, reset = checks[kinds[s]](key, limits[s], params[s], 0)
          text = line(0, remaining, 0, reset)
        else
          text = line(0, crem[i], cretry[i], creset[i])
        end
        out = out .. text
      end
      lines[r] = out
    end
  else
    -- A Settle ('S') or a Reset ('X'): every key is checked first, and
    -- then all are changed, or none is.
    c = tonumber(ARGV[a])
    local age, tokttl, step = -1, 0, 1
    if head == 'S' then
      age, tokttl, step = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), 2
      a = a + 3
    elseif head == 'X' then
      a = a + 1
    else
      error('ratelimit batch script: unknown request ' .. tostring(head))
    end
    local refused
    for i = 1, c do
      local s, key = tonumber(ARGV[a]), KEYS[k]
      local ok, reason = checks[kinds[s]](key, limits[s], params[s], 0)
      if ok == nil and not refused then
        refused = refusal(i, reason)
      end
      cs[i], ck[i], cw1[i] = s, key, tonumber(ARGV[a + 1])
      a, k = a + step, k + 1
    end
    local tokkey
    if tokttl > 0 then
      tokkey = KEYS[k]
      k = k + 1
    end
    if refused then
      lines[r] = refused
    else
      local out = {}
      -- A token seen before: that Settle has been applied; answer the
      -- keys as they are.
      local seen = tokkey and not redis.call('SET', tokkey, '1', 'NX', 'PX', tokttl)
      for i = 1, c do
        local s, key = cs[i], ck[i]
        if head == 'X' then
          redis.call('DEL', key)
          out[i] = line(1, limits[s], 0, 0)
        elseif seen then
          local _, remaining, _, reset = checks[kinds[s]](key, limits[s], params[s], 0)
          out[i] = line(1, remaining, 0, reset)
        else
          local remaining, reset = settles[kinds[s]](key, limits[s], params[s], cw1[i], age)
          out[i] = line(1, remaining, 0, reset)
        end
      end
      lines[r] = table.concat(out)
    end
  end
end
return table.concat(lines)
