-- The calendar window: kind 'k', a count in windows of a calendar, whose
-- bounds the client computes.
-- Its state, which every write keeps; anything else under a key is refused
-- (another type, other fields, other values, no TTL where the kind reads
-- it):
--   'k'  a STRING "start:count": the start (µs of Unix time) of the window
--        the count was counted in, and the count, >= 1 (above limit in
--        debt after a Settle), with PX until that window ends (whole ms
--        rounded up). A count whose start is before the start of the
--        window open now is of a window that has ended: it counts 0, also
--        during the millisecond in which Redis still keeps its key. A
--        Settle gives back only when the units were taken (now - age) at
--        or after the start of the window open now. A check on a window
--        that counts nothing (a peek) tells next_unit: the time until the
--        window open now ends.

-- calendar_state returns the count of a 'k' key in the window open now, 0
-- when it counted nothing in it, and the µs left until the window it
-- counted in ends; or nil and the reason the key is refused.
local function calendar_state(c, stored)
  local key, ws, we = c.key, c.param[1], c.param[2]
  stored = stored or redis.pcall('GET', key)
  if wrongtype(stored) then
    return nil, 'not a STRING'
  end
  if not stored then
    return 0, 0
  end
  local a, b = string.match(stored, '^(%d+):(%d+)$')
  local start, count = whole(a), whole(b)
  if not (start and count and count >= 1) then
    return nil, 'not "start:count", whole microseconds and a count from 1, below 2^53'
  end
  local left = redis.call('PTTL', key)
  if left < 0 then
    return nil, 'a count without the TTL every write sets'
  end
  if start < ws then
    return 0, 0 -- counted in an earlier window, which has ended
  end
  c.start = start
  if start == ws then
    return count, we - now
  end
  -- Counted in a later window, on a server clock that has stepped back
  -- since: the count stays until its key expires.
  return count, left * 1000
end

-- calendar decides a 'k' check; it sets c.add to the units to add (nil
-- when none), and c.start and c.left to the window the key counts in and
-- the µs left in it.
local function calendar(c, n, stored)
  c.start = c.param[1]
  local count, left = calendar_state(c, stored)
  if not count then
    return nil, left
  end
  local limit = c.limit
  c.add = nil
  if n > 0 and count + n > limit then
    return false, max(0, limit - count), left, left
  end
  if n == 0 then
    if count == 0 then
      c.next = c.param[2] - now -- an empty window: until it ends
    end
    return true, max(0, limit - count), 0, left
  end
  if count == 0 then
    left = c.param[2] - now
  end
  c.add, c.count, c.left = n, count + n, left
  return true, limit - count - n, 0, left
end

-- write_calendar writes a 'k' key's count c.count, when c.add is set, as
-- "start:count" with PX until its window ends.
local function write_calendar(c)
  if c.add then
    redis.call('SET', c.key, string.format('%.0f:%.0f', c.start, c.count), 'PX', ms(c.left))
  end
end

-- calendar_open opens a 'k' key's count in the window open now.
local function calendar_open(c, write)
  local left = c.param[2] - now
  c.add, c.start, c.count, c.left = c.cost, c.param[1], c.cost, left
  write(c)
  return left
end

-- calendar_settle settles a 'k' check, which gives back only into the
-- window open now, when the units were taken in it: age µs ago or less
-- since its start.
local function calendar_settle(c, age)
  local key, limit, d, ws = c.key, c.limit, c.d, c.param[1]
  c.start = ws
  local count, left = calendar_state(c)
  if d < 0 then
    if count > 0 and (age < 0 or now - age >= ws) then
      if count + d <= 0 then
        redis.call('DEL', key) -- nothing counted any more
        return limit, 0
      end
      c.add, c.count, c.left = d, count + d, left
      write_calendar(c)
      count = count + d
    end
  elseif d > 0 then
    -- At most limit + m, and 2^52; a count above it already stays.
    local most = min(limit + c.m, maxdebt)
    if count == 0 then
      left = c.param[2] - now
    end
    if count < most then
      count = count + min(d, most - count)
      c.add, c.count, c.left = d, count, left
      write_calendar(c)
    end
  end
  if count == 0 then
    left = 0
  end
  return max(0, limit - count), left
end

-- calendar_window returns, as the table {start, end}, the window that
-- holds the server's now among those of a 'k' limit's param
-- "prev:start:end:next" (µs), which the client's clock chose; a server
-- time outside all three (the clocks are more than a window apart) fails
-- the call before anything is written.
local function calendar_window(param)
  local p, s, e, n = string.match(param, '^(%d+):(%d+):(%d+):(%d+)$')
  p, s, e, n = tonumber(p), tonumber(s), tonumber(e), tonumber(n)
  if not (p and p < s and s < e and e < n) then
    error('ratelimit batch script: calendar windows ' .. param)
  end
  if now < s then
    if now >= p then
      return { p, s }
    end
  elseif now < e then
    return { s, e }
  elseif now < n then
    return { e, n }
  end
  error(string.format('ratelimit batch script: clock skew: the server time %.0f µs is outside the calendar windows [%.0f, %.0f) the client sent', now, p, n))
end

-- calendar_empty returns the next_unit of a peek at an absent key: the
-- time until the window open now ends.
local function calendar_empty(c)
  return c.param[2] - now
end

kinds.k = {
  decide = calendar, write = write_calendar, settle = calendar_settle, read = read_string, open = calendar_open,
  param = calendar_window, empty = calendar_empty,
}
