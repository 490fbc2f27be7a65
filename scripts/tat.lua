-- The arithmetic of a theoretical arrival time (tat), shared by the token
-- bucket (bucket.lua) and GCRA (gcra.lua), which differ only in how their
-- keys store it: a key is full again at tat, and holds (limit × interval −
-- (tat − now)) / interval units at now.

-- convert returns used (> 0) µs owed at one unit every from µs as the µs
-- owed for as many units at one every to, rounded up, at most maxdebt;
-- exact while r·to stays below 2^53 (r < from).
local function convert(used, from, to)
  local q = floor(used / from)
  local r = used - q * from
  if r < 0 then
    q, r = q - 1, r + from
  elseif r >= from then
    q, r = q + 1, r - from
  end
  return min(maxdebt, q * to + ceil(r * to / from))
end

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


-- gcra_state returns the theoretical arrival time, at least now, of a key
-- of kind 'g', 'G', 't' or 'T' decided at one unit every interval µs, and
-- whether it was converted from another interval (then the caller writes
-- it, even when it takes nothing: the new policy holds from this call on).
local function gcra_state(key, kind, interval, stored)
  local tat, t0 = nil, interval
  if kind == 't' or kind == 'T' then
    local state = stored or redis.pcall('HGETALL', key)
    if wrongtype(state) then
      return nil, 'not a HASH'
    end
    if #state == 0 then
      return now, false
    end
    if kind == 't' then
      if #state == 2 and state[1] == 'tat' then
        tat = whole(state[2])
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
    if kind == 'G' then
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
    return now, false
  end
  if t0 ~= interval then
    -- Written under another policy: keep the units used.
    return now + convert(tat - now, t0, interval), true
  end
  return tat, false
end

-- gcra decides a 'g', 'G', 't' or 'T' check; it sets c.tat and c.ttl, or
-- c.tat to nil when there is nothing to write.
local function gcra(c, n, stored)
  local interval = c.param
  local tat, converted = gcra_state(c.key, c.kind, interval, stored)
  if not tat then
    return nil, converted
  end
  local tau = c.limit * interval
  local new_tat = tat + n * interval
  local denied = n > 0 and new_tat - now > tau
  if not denied and n ~= 0 then
    c.tat, c.ttl = new_tat, ms(new_tat - now)
    return true, max(0, floor((tau - (new_tat - now)) / interval)), 0, new_tat - now
  end
  -- Takes nothing: writes only a conversion, the key as it is.
  c.tat, c.ttl = nil, nil
  if converted then
    c.tat, c.ttl = tat, ms(tat - now)
  end
  local retry = 0
  if denied then
    retry = new_tat - tau - now
  end
  return not denied, max(0, floor((tau - (tat - now)) / interval)), retry, tat - now
end

-- gcra_open opens a 't' or 'g' key.
local function gcra_open(c, write)
  local owed = c.cost * c.param
  c.tat, c.ttl = now + owed, ms(owed)
  write(c)
  return owed
end

-- gcra_settle settles a 'g', 'G', 't' or 'T' check.
local function gcra_settle(c)
  local d, limit, interval = c.d, c.limit, c.param
  local tat, converted = gcra_state(c.key, c.kind, interval)
  local new_tat
  if d > 0 then
    -- At most (limit + m) units owed, and 2^52 µs; (limit + m) × interval
    -- is exact up to 2^53 and rounds to at least 2^52 beyond it. A key
    -- owing more already keeps its tat.
    local most = now + min(maxdebt, (limit + c.m) * interval)
    new_tat = max(tat, min(tat + d * interval, most))
  else
    new_tat = min(now + maxdebt, max(now, tat + d * interval))
  end
  if new_tat <= now then
    redis.call('DEL', c.key)
    return limit, 0
  end
  if d ~= 0 or converted then
    c.tat, c.ttl = new_tat, ms(new_tat - now)
    c.impl.write(c)
  end
  return max(0, floor((limit * interval - (new_tat - now)) / interval)), new_tat - now
end
