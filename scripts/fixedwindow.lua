-- The fixed window: kind 'w'.
-- Its state, which every write keeps; anything else under a key is refused
-- (another type, other fields, other values, no TTL where the kind reads
-- it):
--   'w'  a STRING: the count of the window, >= 1 (above limit in debt after
--        a Settle), with PX the time left in the window; a key with PTTL 0
--        has ended.

-- window_state returns the count of a key's window, 0 when none is open,
-- and the ms left in it.
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

-- write_window adds c.add to a 'w' key's count, or, when c.opens, opens its
-- window with the count c.add and PX c.opens, replacing one whose time is
-- up.
local function write_window(c)
  local add, opens = c.add, c.opens
  if add then
    if opens then
      redis.call('SET', c.key, add, 'PX', opens)
    else
      redis.call('INCRBY', c.key, add)
    end
  end
end

-- window decides a 'w' check; it sets c.add to the units to add, nil when
-- none, and c.opens to the window's length when it opens one.
local function window(c, n, stored)
  local count, left = window_state(c.key, stored)
  if not count then
    return nil, left
  end
  local limit = c.limit
  c.add, c.opens = nil, nil
  if n > 0 and count + n > limit then
    return false, max(0, limit - count), left * 1000, left * 1000
  end
  if n == 0 then
    return true, max(0, limit - count), 0, left * 1000
  end
  c.add = n
  if count == 0 then
    c.opens = c.param
    return true, limit - n, 0, c.param * 1000 -- opens a window
  end
  return true, limit - count - n, 0, left * 1000
end

-- window_open opens a 'w' key's window.
local function window_open(c, write)
  c.add, c.opens = c.cost, c.param
  write(c)
  return c.param * 1000
end

-- window_settle settles a 'w' check, which gives back only into the window
-- that had opened age µs ago or earlier.
local function window_settle(c, age)
  local key, limit, length, d = c.key, c.limit, c.param, c.d
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
    -- At most limit + m, and 2^52; a count above it already stays.
    local most = min(limit + c.m, maxdebt)
    if count == 0 then
      count, left = min(d, most), length
      redis.call('SET', key, count, 'PX', length) -- opens a window
    elseif count < most then
      local more = min(d, most - count)
      redis.call('INCRBY', key, more)
      count = count + more
    end
  end
  return max(0, limit - count), left * 1000
end

kinds.w = { decide = window, write = write_window, settle = window_settle, read = read_string, open = window_open }
