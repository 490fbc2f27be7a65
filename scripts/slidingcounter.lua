-- The sliding-window counter: kind 's'. W is the window in µs.
-- Its state, which every write keeps; anything else under a key is refused
-- (another type, other fields, other values, no TTL where the kind reads
-- it):
--   's'  a STRING "start:expiry:prev:cur": the window open now is [start,
--        start + W) (µs), cur the units counted in it and prev those
--        counted in the window before it, [start − W, start) (0 when it
--        counted none); prev + cur >= 1, start < expiry. expiry is start +
--        2W at the W of its last counted request, and the key holds
--        nothing from then on; PX until then. Its TTL is not read: the
--        value tells the key as this state's, and its expiry, not the
--        TTL, when it holds nothing. When now reaches start + W,
--        cur becomes prev and a new window opens at start + W; from start
--        + 2W (or expiry) on the key holds nothing, and its next counted
--        request opens a window at its now. With e = now − start, the
--        estimate is cur + ⌈prev × (W − e) / W⌉, n is allowed iff estimate
--        + n <= limit, and a denial's retry_after is the least wait after
--        which n is allowed, in the window open now or the next one. Its
--        next_unit, with left = limit − estimate after the call, is the
--        least wait after which left + 1 can have been taken: in the
--        window open now, when ⌈prev × (W − e) / W⌉ <= limit − cur − left
--        − 1; else in the next one, whose prev is cur + left (the units
--        left taken before the roll), when ⌈(cur + left) × (W − e) / W⌉
--        <= limit − 1. The
--        products are exact (see muldiv): below 2^53 the product itself,
--        else a long division by shift and subtract whose every value
--        stays below 2^53. A Settle's d > 0 counts in the window open now;
--        d < 0 gives back to the window that took the units: the one open
--        now if they were taken (age µs ago) at or after start, the
--        previous one if at or after start − W, else none.
-- muldiv, counter_at, counter_left, counter_next and counter_value, which
-- the fast path uses too, are in slidingcounter_fast.lua, assembled before
-- the frame.

local counter_bad = 'not "start:expiry:prev:cur", whole numbers below 2^53, start before expiry, prev or cur above 0'

-- counter_state returns an 's' key's start, expiry, prev and cur as
-- stored; 0, 0, 0 and 0 when it is absent.
local function counter_state(key, stored)
  stored = stored or redis.pcall('GET', key)
  if wrongtype(stored) then
    return nil, 'not a STRING'
  end
  if not stored then
    return 0, 0, 0, 0
  end
  local a, b, p, q = string.match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
  local s, x, prev, cur = whole(a), whole(b), whole(p), whole(q)
  if not (s and x and prev and cur and s < x and prev + cur >= 1) then
    return nil, counter_bad
  end
  return s, x, prev, cur
end

-- counter_reset returns the µs from now until the estimate of a key as
-- counter_at returns it is 0.
local function counter_reset(w, s, x, prev, cur)
  if cur > 0 then
    return min(s + 2 * w, x) - now
  end
  if prev > 0 then
    return min(s + w, x) - now
  end
  return 0
end

-- counter_allowed_at returns the earliest time at which n (1 <= n <= limit)
-- is allowed on a key as counter_at returns it, which denies it now, were
-- no other call made: in the window open now, ⌈prev × (W − e) / W⌉ <= rest
-- iff e >= W − ⌊rest × W / prev⌋ with rest = limit − cur − n; in the next,
-- cur is prev; from start + 2W (or expiry) on the key holds nothing.
local function counter_allowed_at(limit, w, s, x, prev, cur, n)
  local rest = limit - cur - n
  if rest >= 0 and rest < prev then
    local f = muldiv(w, rest, prev)
    if f >= 1 then
      return min(s + w - f, x)
    end
  end
  local at = s + 2 * w
  rest = limit - n
  if cur <= rest then
    at = s + w
  else
    local f = muldiv(w, rest, cur)
    if f >= 1 then
      at = s + 2 * w - f
    end
  end
  return min(at, x)
end

-- counter decides an 's' check; it sets c.value, the key's new value, and
-- c.ttl, or c.value to nil when there is nothing to write, and c.next to
-- its next_unit when the key holds units after the call. A clock behind
-- the key's start stands still at it: t is the time of the decision, and
-- every wait counts from now.
local function counter(c, n, stored)
  local s, x, prev, cur = counter_state(c.key, stored)
  if not s then
    return nil, x
  end
  local limit, w = c.limit, c.param * 1000
  c.value = nil
  local t = max(now, s)
  s, x, prev, cur = counter_at(s, x, prev, cur, t, w)
  local left = counter_left(limit, w, s, prev, cur, t)
  if n > left then
    local at = counter_allowed_at(limit, w, s, x, prev, cur, n)
    c.next = counter_next(limit, w, s, prev, cur, left) - now
    return false, left, at - now, counter_reset(w, s, x, prev, cur)
  end
  if n == 0 then
    if prev + cur > 0 then
      c.next = counter_next(limit, w, s, prev, cur, left) - now
    end
    return true, left, 0, counter_reset(w, s, x, prev, cur)
  end
  if prev + cur == 0 then
    s = t
  end
  cur, x = cur + n, s + 2 * w
  c.value, c.ttl = counter_value(s, x, prev, cur), ms(x - now)
  c.next = counter_next(limit, w, s, prev, cur, left - n) - now
  return true, left - n, 0, x - now
end

-- write_counter writes an 's' key: c.value, with PX c.ttl.
local function write_counter(c)
  local value = c.value
  if value then
    redis.call('SET', c.key, value, 'PX', c.ttl)
  end
end

-- counter_open opens an 's' key's window with the cost c.cost; it sets
-- c.next.
local function counter_open(c, write)
  local w, n = c.param * 1000, c.cost
  c.value, c.ttl = counter_value(now, now + 2 * w, 0, n), ms(2 * w)
  write(c)
  c.next = counter_next(c.limit, w, now, 0, n, c.limit - n) - now
  return 2 * w
end

-- counter_settle settles an 's' check: d > 0 counts in the window open now
-- (or one it opens), up to limit + m there, and 2^52, a count above it
-- staying; d < 0 gives back to the window that took the units, age µs
-- ago (the one open now when age is -1), never below 0.
local function counter_settle(c, age)
  local key, limit, w, d = c.key, c.limit, c.param * 1000, c.d
  local s, x, prev, cur = counter_state(key)
  local t = max(now, s)
  s, x, prev, cur = counter_at(s, x, prev, cur, t, w)
  if d > 0 then
    if prev + cur == 0 then
      s = t
    end
    x = s + 2 * w
    local most = min(limit + c.m, maxdebt)
    if cur < most then
      cur = cur + min(d, most - cur)
    end
  elseif d < 0 and prev + cur > 0 then
    if age < 0 or age <= now - s then
      cur = max(0, cur + d)
    elseif age <= now - s + w then
      prev = max(0, prev + d)
    end
  end
  if prev + cur == 0 then
    redis.call('DEL', key)
    return limit, 0
  end
  if d ~= 0 then
    redis.call('SET', key, counter_value(s, x, prev, cur), 'PX', ms(x - now))
  end
  return counter_left(limit, w, s, prev, cur, t), counter_reset(w, s, x, prev, cur)
end

kinds.s = { decide = counter, write = write_counter, settle = counter_settle, read = read_string, open = counter_open }
