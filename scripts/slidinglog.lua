-- The sliding log: kind 'l', at most limit units in any window.
-- Its state, which every write keeps; anything else under a key is refused
-- (another type, other fields, other values, no TTL where the kind reads
-- it):
--   'l'  a HASH of a sliding log: n, the units of its entries, >= 1; h and
--        t, the numbers of its oldest and newest entries (1 <= h <= t,
--        t - h < n); a and z, their times (server time in integer µs, a
--        <= z); and a field per entry, its number h to t: its time, for
--        an entry of one unit, or "time:units" (units >= 2), times in the
--        order of the numbers. An entry counts while now < time + window
--        and leaves at time + window; PEXPIRE until the newest entry
--        leaves. A call reads n, h, t, a and z (HMGET) and checks them;
--        while the oldest entry has left (a + window <= now), it reads it
--        and the next (HMGET) to drop it. An allowed call appends an
--        entry (HSET of n, t, z and the entry, with h and a when entries
--        left, and HDEL of those), stamped max(now, z) so that times stay
--        in order; a log holding limit entries (a Settle's, in debt) adds
--        the units to its newest entry instead, whose time moves to now.
--        A denial reads the entries from the oldest on (HMGET, in chunks
--        that double) until it has those whose units must go for n to
--        fit: its retry_after is the time until the last of them leaves.
--        Its next_unit is the time until the oldest entry leaves (a +
--        window − now), or, in debt, until the entries that hold the
--        units beyond the limit and one more have left, read as a
--        denial's are; units taken meanwhile leave after them.
--        A Refund reads them from the newest back, skipping those taken
--        after now - age, until it has given its units back; the entries
--        it empties go, and the newer ones move down to close the gap. A
--        Settle that adds to the newest entry reads that one. Each reads
--        HLEN first (but the merge): the HASH holds exactly 5 + t - h + 1
--        fields. Every entry read is checked: its value, and its time
--        between its neighbours', a and z. Its TTL is not read: every
--        write sets it.

local log_bad = 'not a HASH of n, h, t, a, z and entries "time" or "time:units" that agree, whole numbers below 2^53'

-- log_entry reads an entry's value, "time" or "time:units", and returns
-- its time and units; nil for anything else.
local function log_entry(v)
  local a, b = one_or_two(v)
  if a and not b then
    return a, 1
  end
  if b and b >= 2 then
    return a, b
  end
  return nil
end

-- log_value returns the value of an entry of units taken at at.
local function log_value(at, units)
  if units == 1 then
    return at
  end
  return string.format('%.0f:%.0f', at, units)
end

-- log_state reads check c's 'l' key as of now and returns the units of
-- its entries still in the window (0 when it is absent or all have left),
-- having set c.n0, c.h0 and c.a0, the header as read (c.n0 0 when absent);
-- c.h, c.a, the oldest entry still in the window and its time; c.t and
-- c.z, the newest's; and c.dead, the number of entries that have left
-- (h0 to h - 1); or nil and the reason the key is refused. stored, when
-- not nil, is the key's HMGET of n, h, t, a and z, made already: the key
-- exists.
local function log_state(c, stored)
  local key, w = c.key, c.param * 1000
  local v = stored or redis.pcall('HMGET', key, 'n', 'h', 't', 'a', 'z')
  if wrongtype(v) then
    return nil, 'not a HASH'
  end
  c.n0, c.dead, c.z = 0, 0, 0
  if not (v[1] or v[2] or v[3] or v[4] or v[5]) then
    if stored or redis.call('EXISTS', key) == 1 then
      return nil, log_bad
    end
    return 0
  end
  local n, h, t, a, z = whole(v[1]), whole(v[2]), whole(v[3]), whole(v[4]), whole(v[5])
  if not (n and h and t and a and z and n >= 1 and h >= 1 and h <= t and t - h < n and a <= z) then
    return nil, log_bad
  end
  c.n0, c.h0, c.a0, c.t, c.z = n, h, a, t, z
  while a + w <= now do
    -- The oldest entry has left: drop it, and read the next one's time.
    local e = redis.call('HMGET', key, h, h + 1)
    local at, units = log_entry(e[1])
    if not at or at ~= a or units > n then
      return nil, log_bad
    end
    n = n - units
    if h == t then
      if n ~= 0 or at ~= z then
        return nil, log_bad
      end
      c.dead = t - c.h0 + 1
      return 0
    end
    local next = log_entry(e[2])
    if not next or next < at or next > z or n < 1 then
      return nil, log_bad
    end
    h, a = h + 1, next
  end
  c.h, c.a, c.dead = h, a, h - c.h0
  return n
end

-- log_read returns the values of the entries numbered first to last
-- (first <= last) of check c's key, read in one HMGET.
local function log_read(c, first, last)
  local fields = {}
  for s = first, last do
    fields[#fields + 1] = s
  end
  return redis.call('HMGET', c.key, unpack(fields))
end

-- log_counted tells whether check c's key, whose header log_state read,
-- holds exactly its header's fields and entries.
local function log_counted(c)
  return redis.call('HLEN', c.key) == 6 + c.t - c.h0
end

-- log_wait returns the µs until the oldest entries in the window of check
-- c that hold need units (1 <= need <= c.sum) have left, reading them from
-- the oldest on, in chunks that double; or nil and the reason the key is
-- refused.
local function log_wait(c, need, w)
  if not log_counted(c) then
    return nil, log_bad
  end
  local seq, t, prev, chunk = c.h, c.t, c.a, 8
  while seq <= t do
    local last = min(t, seq + chunk - 1)
    local vals = log_read(c, seq, last)
    for i = 1, #vals do
      local at, units = log_entry(vals[i])
      if not at or at < prev or at > c.z or seq == c.h and i == 1 and at ~= c.a then
        return nil, log_bad
      end
      need = need - units
      if need <= 0 then
        return at + w - now
      end
      prev = at
    end
    seq, chunk = last + 1, min(2 * chunk, 4000)
  end
  return nil, log_bad -- fewer units than n says
end

-- log_next returns the µs until one unit more than check c's key, as
-- log_state read it, holding sum units (>= 1) in the window, has left can
-- be taken: until its oldest entry leaves, or, in debt, until the oldest
-- entries that hold the units beyond the limit and one more have left
-- (read as log_wait reads them); or nil and the reason the key is
-- refused.
local function log_next(c, sum, w)
  local need = max(sum - c.limit, 0) + 1
  if need == 1 then
    return c.a + w - now
  end
  return log_wait(c, need, w)
end

-- log decides an 'l' check; it sets c.add to the units to append, nil
-- when none, and c.sum, the units in the window before them; with tell,
-- c.next to its next_unit when the key holds units after the call.
local function log(c, n, stored, tell)
  local sum, reason = log_state(c, stored)
  if not sum then
    return nil, reason
  end
  local limit, w = c.limit, c.param * 1000
  c.add, c.sum = nil, sum
  local reset = 0
  if sum > 0 then
    reset = c.z + w - now
    if tell then
      -- The log as it is: a peek's, a denial's, and an allowed call's,
      -- whose entry is the newest.
      local next, bad = log_next(c, sum, w)
      if not next then
        return nil, bad
      end
      c.next = next
    end
  end
  if n == 0 then
    return true, max(0, limit - sum), 0, reset
  end
  if sum + n <= limit then
    c.add = n
    if sum > 0 then
      return true, limit - sum - n, 0, max(now, c.z) + w - now
    end
    if tell then
      c.next = w -- its own entry, taken now
    end
    return true, limit - n, 0, w
  end
  -- Denied: n fits once the oldest entries holding sum + n - limit units
  -- have left.
  local retry, bad = log_wait(c, sum + n - limit, w)
  if not retry then
    return nil, bad
  end
  return false, max(0, limit - sum), retry, reset
end

-- log_drop deletes the entries of check c's key that have left (c.h0 to
-- c.h - 1).
local function log_drop(c)
  if c.dead > 0 then
    local dead = {}
    for i = 1, c.dead do
      dead[i] = c.h0 + i - 1
    end
    hdel(c.key, dead)
  end
end

-- write_log appends the entry of c.add units that deciding check c set,
-- if any, dropping the entries that have left.
local function write_log(c)
  local add = c.add
  if not add then
    return
  end
  local key, w = c.key, c.param * 1000
  if c.sum == 0 then
    if c.n0 > 0 then
      redis.call('DEL', key) -- every entry has left
    end
    redis.call('HSET', key, 'n', add, 'h', 1, 't', 1, 'a', now, 'z', now, 1, log_value(now, add))
    redis.call('PEXPIRE', key, ms(w))
    return
  end
  local at, t = max(now, c.z), c.t + 1
  if c.dead > 0 then
    log_drop(c)
    redis.call('HSET', key, 'n', c.sum + add, 'h', c.h, 't', t, 'a', c.a, 'z', at, t, log_value(at, add))
  else
    redis.call('HSET', key, 'n', c.sum + add, 't', t, 'z', at, t, log_value(at, add))
  end
  redis.call('PEXPIRE', key, ms(at + w - now))
end

-- log_open opens an absent 'l' key with the compact form's cost c.cost;
-- it sets c.next, the entry's time in the window.
local function log_open(c, write)
  c.sum, c.n0, c.add = 0, 0, c.cost
  write(c)
  c.next = c.param * 1000
  return c.next
end

-- log_cold defines, in impl, what a Settle of 'l' needs beyond its
-- decide: the frame's cold calls it on the first request of a call that
-- takes it, so that a call of none makes none of these functions.
local function log_cold(impl)
  -- log_check reads, for a Settle of check c (decided with n 0, so c.sum is
  -- set), what settling it reads beyond the header, and checks it: for d > 0
  -- on a log of limit entries, the newest entry, whose units c.merge gets;
  -- for d < 0, the entries from the newest back to those that give -d units
  -- back (taken at or before now - age; any, with age -1), into c.kept, the
  -- values of the newer ones, newest first, c.touched, the number, time and
  -- units left of each that gives some back, newest first, and c.given. It
  -- returns nil and the reason when the key is refused, and true otherwise.
  local function log_check(c, age)
    c.merge, c.kept, c.touched, c.given = nil, nil, nil, 0
    local d = c.d
    if c.sum == 0 or d == 0 then
      return true
    end
    if d > 0 then
      if c.t - c.h + 1 < c.limit or c.sum >= min(c.limit + c.m, maxdebt) then
        return true
      end
      local at, units = log_entry(redis.call('HGET', c.key, c.t))
      if not at or at ~= c.z then
        return nil, log_bad
      end
      c.merge = units
      return true
    end
    if age >= 0 and now - age < c.a then
      return true -- every entry was taken later
    end
    if not log_counted(c) then
      return nil, log_bad
    end
    local kept, touched = {}, {}
    local back, seq, chunk, newer = -d, c.t, 8, c.z
    while seq >= c.h and back > 0 do
      local lo = max(c.h, seq - chunk + 1)
      local vals = log_read(c, lo, seq)
      for s = seq, lo, -1 do
        local v = vals[s - lo + 1]
        local at, units = log_entry(v)
        if not at or at > newer or at < c.a or s == c.t and at ~= c.z or s == c.h and at ~= c.a then
          return nil, log_bad
        end
        newer = at
        if age >= 0 and at > now - age then
          kept[#kept + 1] = v
        else
          local take = min(units, back)
          back = back - take
          touched[#touched + 1] = { s, at, units - take }
          if back == 0 then
            break
          end
        end
      end
      seq, chunk = lo - 1, min(2 * chunk, 4000)
    end
    c.kept, c.touched, c.given = kept, touched, -d - back
    return true
  end

  -- log_give gives back the units log_check planned on check c's key: the
  -- entries it emptied go, the newer ones move down in their place, and the
  -- header follows. It returns the key's remaining and reset_after.
  local function log_give(c)
    local key, limit, w = c.key, c.limit, c.param * 1000
    local kept, touched = c.kept, c.touched
    local n = c.sum - c.given
    if n == 0 then
      redis.call('DEL', key)
      return limit, 0
    end
    local h, t, a, z = c.h, c.t, c.a, c.z
    log_drop(c)
    local oldest = touched[#touched]
    local first = oldest[1] -- the first entry emptied
    if oldest[3] > 0 then
      redis.call('HSET', key, oldest[1], log_value(oldest[2], oldest[3]))
      first = first + 1
    end
    local gap = touched[1][1] - first + 1 -- entries emptied
    if gap > 0 then
      local nk, args = #kept, {}
      for i = 1, nk do
        args[#args + 1] = t - i + 1 - gap
        args[#args + 1] = kept[i]
        if #args >= 4000 or i == nk then
          redis.call('HSET', key, unpack(args))
          args = {}
        end
      end
      local gone = {}
      for s = t - gap + 1, t do
        gone[#gone + 1] = s
      end
      hdel(key, gone)
      t = t - gap
      if first == h then
        a = log_entry(kept[nk]) -- the oldest kept is the oldest now
      end
      if nk == 0 then
        if oldest[3] > 0 then
          z = oldest[2]
        else
          z = log_entry(redis.call('HGET', key, t))
          if not z then
            error('ratelimit batch script: a sliding log changed while it was settled')
          end
        end
      end
    end
    redis.call('HSET', key, 'n', n, 'h', h, 't', t, 'a', a, 'z', z)
    redis.call('PEXPIRE', key, ms(z + w - now))
    return max(0, limit - n), z + w - now
  end

  -- log_settle settles an 'l' check, decided with n 0 and checked by
  -- log_check: d > 0 appends an entry (within the debt bound), or adds to
  -- the newest entry, whose time moves to now, on a log of limit entries;
  -- d < 0 gives back what log_check planned.
  local function log_settle(c)
    local d, limit, w, sum = c.d, c.limit, c.param * 1000, c.sum
    if d > 0 and sum < min(limit + c.m, maxdebt) then
      local add = min(d, min(limit + c.m, maxdebt) - sum)
      local at = max(now, c.z)
      if not c.merge then
        c.add = add
        write_log(c)
      else
        log_drop(c)
        local a = c.a
        if c.h == c.t then
          a = at
        end
        redis.call('HSET', c.key, 'n', sum + add, 'h', c.h, 'a', a, 'z', at, c.t, log_value(at, c.merge + add))
        redis.call('PEXPIRE', c.key, ms(at + w - now))
      end
      return max(0, limit - sum - add), at + w - now
    end
    if d < 0 and c.given > 0 then
      return log_give(c)
    end
    if sum == 0 then
      return limit, 0
    end
    return max(0, limit - sum), c.z + w - now
  end
  impl.check, impl.settle = log_check, log_settle
end

-- read_log is the compact form's read of an 'l' key: its HMGET of n, h,
-- t, a and z, or nil when it is absent.
local function read_log(key)
  local v = redis.pcall('HMGET', key, 'n', 'h', 't', 'a', 'z')
  if v.err or v[1] or v[2] or v[3] or v[4] or v[5] or redis.call('EXISTS', key) == 1 then
    return v
  end
end

kinds.l = { decide = log, write = write_log, cold = log_cold, read = read_log, open = log_open }
