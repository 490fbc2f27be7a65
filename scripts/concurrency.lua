-- Units in flight: kind 'c', each unit held by a lease until it is
-- released or expires. It passes redis.call the numbers it writes as text,
-- formatted once ('%d', exact below 2^53), rather than as Lua numbers,
-- which Redis formats one by one.
-- Its state, which every write keeps; anything else under a key is refused
-- (another type, other fields, other values, no TTL where the kind reads
-- it):
--   'c'  the leases of a key, each named by its lease (no ':' in a name)
--        with a value: its expiry (the server time in integer µs at which
--        it ends) for a lease of one unit, "units:expiry" for more (units
--        >= 2). A lease whose expiry is at or before now holds nothing,
--        swept or not. A key first holds its one lease as a STRING
--        "lease:value", with PX until its expiry, which SET NX GET writes
--        in one call (or reads, when the key is a STRING already); a second lease makes it a HASH of u, e and x and a
--        field per lease holding its value, which it stays until it is
--        deleted or a Release leaves it one lease field, a lease that
--        holds (then it is the STRING of that lease again, PX until its
--        expiry): u, the sum of the leases' units, >= 1; e, at or before
--        every lease's expiry: a sweep is due at it; x, the latest lease's
--        expiry, exactly; PEXPIRE until x. A call whose now reaches e
--        sweeps the leases that expired, and a key that holds no lease is
--        deleted (or, a STRING, expires). A call reads u, e and x (and the
--        lease it names), or the STRING, and checks what it reads (a
--        Release reads a HASH of at most two leases whole in its first
--        call); the
--        whole HASH (HGETALL), which it reads to sweep, to deny (its wait
--        orders the leases by expiry) and to find the next latest lease
--        when the latest is released or extended earlier, is checked
--        whenever it is read: its fields agree with u, e and x. Its TTL is
--        not read: every write that moves x sets it, and the fields and
--        values tell the key as this state's.

local held_bad = 'not a HASH of u, e, x and leases "expiry" or "units:expiry" that agree, whole numbers below 2^53'
local held_bad_one = 'not a STRING "lease:expiry" or "lease:units:expiry", whole numbers below 2^53'

-- lease_of reads a lease's value, "expiry" or "units:expiry", and returns
-- its units and expiry; nil for anything else.
local function lease_of(v)
  local a, b = one_or_two(v)
  if a and not b then
    return 1, a
  end
  if b and a >= 2 then
    return a, b
  end
  return nil
end

-- lease_value returns the value of a lease of units whose expiry's
-- digits are xs.
local function lease_value(units, xs)
  if units == 1 then
    return xs
  end
  return units .. ':' .. xs
end

-- one_of reads the value of a key of one lease, "lease:value", and
-- returns the lease's name, units and expiry, and its value; nil for
-- anything else.
local function one_of(v)
  local name, value = string.match(v, '^([^:]+):(.+)$')
  if not name or name == 'u' or name == 'e' or name == 'x' then
    return nil
  end
  local units, expiry = lease_of(value)
  if not units then
    return nil
  end
  return name, units, expiry, value
end

-- check_name fails the call on a lease name the state cannot hold.
local function check_name(lease)
  if not lease or lease == '' or lease == 'u' or lease == 'e' or lease == 'x' or string.find(lease, ':', 1, true) then
    error('ratelimit batch script: a lease named ' .. tostring(lease))
  end
end

-- held_ttl returns the TTL, in ms as text, of a key whose latest lease
-- was just taken or renewed by check c: its limit's TTL, whole ms rounded
-- up, formatted once per call.
local function held_ttl(c)
  local spec = c.spec
  local ttl = spec.ttl
  if not ttl then
    ttl = string.format('%d', ms(spec.param))
    spec.ttl = ttl
  end
  return ttl
end

-- held_head reads a 'c' key as of now: its u, e and x (0, 0 and 0 when it
-- is absent), and, for a STRING, its lease's name, units and value (its
-- expiry is e and x, and u is 0 once it has expired); or nil and the
-- reason the key is refused. exists tells that the key exists (a SET NX
-- found it), sparing the call that asks; when it is a string, it is the
-- value of the STRING the key is (SET NX GET read it), sparing the reads.
-- Given a lease, a HASH's is read too, and a 7th value tells whether it
-- holds (has not expired).
local function held_head(key, exists, lease)
  if not exists and redis.call('EXISTS', key) == 0 then
    return 0, 0, 0
  end
  local v
  if type(exists) == 'string' then
    v = exists
  elseif lease then
    v = redis.pcall('HMGET', key, 'u', 'e', 'x', lease)
  else
    v = redis.pcall('HMGET', key, 'u', 'e', 'x')
  end
  if type(v) == 'string' or wrongtype(v) then
    if type(v) ~= 'string' then
      v = redis.pcall('GET', key)
    end
    if wrongtype(v) then
      return nil, 'neither a HASH nor a STRING'
    end
    local name, units, expiry, value = one_of(v)
    if not name then
      return nil, held_bad_one
    end
    if expiry <= now then
      return 0, expiry, expiry, name, units, value
    end
    return units, expiry, expiry, name, units, value
  end
  local u, e, x = whole(v[1]), whole(v[2]), whole(v[3])
  if not (u and e and x and u >= 1 and e <= x) then
    return nil, held_bad
  end
  if lease and v[4] then
    local _, expiry = lease_of(v[4])
    if not expiry then
      return nil, held_bad
    end
    return u, e, x, nil, nil, nil, expiry > now
  end
  return u, e, x
end

-- held_scan reads every field of a 'c' HASH, checks that they agree, and
-- returns its leases as a table: ids, units and exps, arrays of those that
-- hold at now (but skip, a lease left out); dead, the fields of those that
-- have expired; and u, e and x of those that hold (0, 0 and 0 when none
-- does). It returns nil and the reason when the key is refused. state,
-- when not nil, is the HGETALL of the key, read already.
local function held_scan(key, skip, state)
  state = state or redis.call('HGETALL', key)
  local s = { ids = {}, units = {}, exps = {}, dead = {}, u = 0, e = 0, x = 0 }
  local ids, units, exps, dead = s.ids, s.units, s.exps, s.dead
  local n, sum, lo, hi = 0, 0, nil, 0
  local u, e, x = nil, nil, nil
  for i = 1, #state, 2 do
    local f, v = state[i], state[i + 1]
    if f == 'u' then
      u = whole(v)
    elseif f == 'e' then
      e = whole(v)
    elseif f == 'x' then
      x = whole(v)
    else
      local k, t = lease_of(v)
      if not k then
        return nil, held_bad
      end
      sum, hi = sum + k, max(hi, t)
      if not lo or t < lo then
        lo = t
      end
      if f ~= skip then
        if t > now then
          n = n + 1
          ids[n], units[n], exps[n] = f, k, t
          if n == 1 or t < s.e then
            s.e = t
          end
          s.u, s.x = s.u + k, max(s.x, t)
        else
          dead[#dead + 1] = f
        end
      end
    end
  end
  if not (u and e and x and lo and sum == u and hi == x and e <= lo) then
    return nil, held_bad
  end
  return s
end


-- held_wait returns the µs from now until enough of the leases of s have
-- expired for n units to fit within limit, were none released or
-- extended: the earliest expiry when one lease is enough. s holds a lease.
local function held_wait(s, limit, n)
  local units, exps = s.units, s.exps
  local free, first = limit - s.u, 1
  for i = 2, #exps do
    if exps[i] < exps[first] then
      first = i
    end
  end
  if free + units[first] >= n then
    return exps[first] - now
  end
  local order = {}
  for i = 1, #exps do
    order[i] = i
  end
  table.sort(order, function(a, b) return exps[a] < exps[b] end)
  for j = 1, #order do
    local i = order[j]
    free = free + units[i]
    if free >= n then
      return exps[i] - now
    end
  end
  return s.x - now
end

-- held decides a 'c' check, n more units in flight held by the lease
-- c.lease, and sets what write_held writes: c.swept, the leases a sweep
-- of a HASH read (their dead are deleted, or the key when none holds);
-- c.add when it takes n, with c.value, the lease's value, and c.xs, its
-- expiry's digits; c.fresh when the key is written anew (a STRING of the
-- lease), c.one, the name of the one lease of a STRING that still holds
-- (the key becomes a HASH of both), with c.onevalue, its value; c.u and
-- c.e, the key's u and e after it, and c.newe when e changes; c.ttl when x
-- moves to the new lease's expiry. exists as held_head's.
local function held(c, n, exists)
  local key, limit = c.key, c.limit
  c.swept, c.add, c.ttl, c.one = nil, nil, nil, nil
  local u, e, x, name, units, value, mine = held_head(key, exists, n > 0 and c.lease)
  if not u then
    return nil, e
  end
  if mine or name and u > 0 and name == c.lease then
    -- The lease this request names holds already: a retry of a call
    -- whose reply was lost (a client retries a read timeout). It took
    -- its units then, and takes nothing more.
    return true, max(0, limit - u), 0, x - now
  end
  local s, reason = nil, nil
  if name then
    if u > 0 then
      c.one, c.onevalue = name, value
    end
  elseif u > 0 and now >= e then
    s, reason = held_scan(key)
    if not s then
      return nil, reason
    end
    c.swept, u, e, x = s, s.u, s.e, s.x
  end
  if u == 0 then
    e, x = 0, 0
  end
  c.u, c.e = u, e
  if n > 0 and u + n <= limit then
    local lease = c.lease
    check_name(lease)
    local expiry = now + c.param
    local xs = string.format('%d', expiry)
    c.add, c.value, c.xs, c.u, c.fresh = true, lease_value(n, xs), xs, u + n, u == 0
    c.newe = s ~= nil or expiry < e
    if expiry < e or u == 0 then
      c.e = expiry
    end
    if expiry > x then
      x, c.ttl = expiry, held_ttl(c)
    end
    c.x = x
    return true, limit - c.u, 0, x - now
  end
  local reset = 0
  if u > 0 then
    reset = x - now
  end
  if n == 0 or u == 0 then
    return n == 0, max(0, limit - u), 0, reset -- u == 0: n above the limit
  end
  if name then
    return false, max(0, limit - u), x - now, reset -- one lease: its expiry
  end
  if not s then
    s, reason = held_scan(key)
    if not s then
      return nil, reason
    end
  end
  return false, max(0, limit - u), held_wait(s, limit, n), reset
end

-- write_held writes what deciding check c set.
local function write_held(c)
  local key, s = c.key, c.swept
  if c.add and c.fresh then
    redis.call('SET', key, c.lease .. ':' .. c.value, 'PX', c.ttl)
    return
  end
  if s then
    if s.u == 0 then
      redis.call('DEL', key)
    elseif #s.dead > 0 then
      hdel(key, s.dead)
    end
  end
  if not c.add then
    if s and s.u > 0 then
      redis.call('HSET', key, 'u', c.u, 'e', c.e)
    end
    return
  end
  local lease, v, xs = c.lease, c.value, c.xs
  if c.one then
    redis.call('DEL', key)
    redis.call('HSET', key, c.one, c.onevalue, lease, v, 'u', c.u, 'e', c.e, 'x', c.x)
    redis.call('PEXPIRE', key, c.ttl or ms(c.x - now))
    return
  end
  if c.ttl and c.newe then
    redis.call('HSET', key, lease, v, 'u', c.u, 'e', c.e, 'x', xs)
  elseif c.ttl then
    redis.call('HSET', key, lease, v, 'u', c.u, 'x', xs)
  elseif c.newe then
    redis.call('HSET', key, lease, v, 'u', c.u, 'e', c.e)
  else
    redis.call('HSET', key, lease, v, 'u', c.u)
  end
  if c.ttl then
    redis.call('PEXPIRE', key, c.ttl)
  end
end

-- held_settle settles a 'c' check: it changes nothing but a sweep.
local function held_settle(c)
  local _, remaining, _, reset = held(c, 0)
  write_held(c)
  return remaining, reset
end

-- held_drop drops the lease id, of units and expiry, from a HASH key whose
-- u and x have been read: the key with it when it was the last; and when
-- it was the latest, x moves back to the next latest, in a sweep of every
-- lease. It returns the reason the key is refused, having changed
-- nothing, or nil.
local function held_drop(key, id, units, expiry, u, x)
  if units == u then
    redis.call('DEL', key)
    return nil
  end
  if expiry < x then
    redis.call('HDEL', key, id)
    if units == 1 then
      redis.call('HINCRBY', key, 'u', '-1')
    else
      redis.call('HINCRBY', key, 'u', -units)
    end
    return nil
  end
  local s, reason = held_scan(key, id)
  if not s then
    return reason
  end
  if s.u == 0 then
    redis.call('DEL', key)
    return nil
  end
  s.dead[#s.dead + 1] = id
  hdel(key, s.dead)
  redis.call('HSET', key, 'u', s.u, 'e', s.e, 'x', s.x)
  redis.call('PEXPIRE', key, ms(s.x - now))
  return nil
end

-- held_lines holds the records a Release or Extend answers, made once per
-- call: held_lines[1] (1, 0, 0, 0) and held_lines[0] (0, 0, 0, 0).
local held_lines = {}

-- held_line returns the record (held, 0, 0, 0) of a Release or Extend.
local function held_line(held)
  local l = held_lines[held]
  if not l then
    l = line(held, 0, 0, 0)
    held_lines[held] = l
  end
  return l
end

-- held_allow_one decides an Allow of one 'c' check: on an absent key, a
-- STRING of the lease, set in one call (SET NX GET), and otherwise as
-- allow_one does, from the STRING that call read, if the key is one. got,
-- when not nil, is that call's reply, made already (by the fast path).
local function held_allow_one(c, got)
  local n, limit = c.cost, c.limit
  if n > 0 and n <= limit then
    local lease = c.lease
    check_name(lease)
    local old = got
    if old == nil then
      local xs = string.format('%d', now + c.param)
      old = redis.pcall('SET', c.key, lease .. ':' .. lease_value(n, xs), 'NX', 'PX', held_ttl(c), 'GET')
    end
    if not old then
      return line(1, limit - n, 0, c.param)
    end
    if wrongtype(old) then
      return allow_one(c, true)
    end
    return allow_one(c, old)
  end
  return allow_one(c)
end

-- held_lease reads the lease c.lease of c.key, a STRING of one lease or
-- a HASH, and returns its units and expiry, and, for a HASH, the key's u,
-- x and, with withe, e (0 without); nil and 0 when the key holds no such
-- lease; or false and the record of the key's refusal. A HASH's lease
-- field, or a STRING's name, is the proof that the key is this state: its
-- TTL is not read.
local function held_lease(c, withe)
  local key, lease = c.key, c.lease
  local v = redis.pcall('GET', key)
  if not wrongtype(v) then
    if not v then
      return nil, 0
    end
    local name, units, expiry = one_of(v)
    if not name then
      return false, refusal(1, held_bad_one)
    end
    if name ~= lease then
      return nil, 0
    end
    return units, expiry
  end
  if withe then
    v = redis.pcall('HMGET', key, 'u', 'x', lease, 'e')
  else
    v = redis.pcall('HMGET', key, 'u', 'x', lease)
  end
  if wrongtype(v) then
    return false, refusal(1, 'neither a HASH nor a STRING')
  end
  if not v[3] then
    return nil, 0
  end
  local u, x, e = whole(v[1]), whole(v[2]), 0
  local units, expiry = lease_of(v[3])
  if withe then
    e = whole(v[4])
  end
  if not (u and x and e and units and units <= u and e <= expiry and expiry <= x) then
    return false, refusal(1, held_bad)
  end
  return units, expiry, u, x, e
end

-- release decides a Release of lease c.lease on c.key. Its first call
-- reads a HASH whole if it has at most 5 fields, u, e, x and two leases
-- (HRANDFIELD of 6 fields, which returns them all then; on a larger one,
-- fields it does not use), so that a HASH left with one lease, which it
-- needs to know, costs no second read: such a key, if that lease holds,
-- is written back as the STRING of it (one SET, which replaces the HASH).
-- A STRING it reads on the error that call gets; a larger HASH, by HMGET.
-- It checks and writes as held_lease and held_drop would. got, when not
-- nil, is the reply of that first call, made already (by the fast path).
local function release(c, got)
  local key, lease = c.key, c.lease
  local state = got or redis.pcall('HRANDFIELD', key, 6, 'WITHVALUES')
  if wrongtype(state) then
    local v = redis.pcall('GET', key)
    if wrongtype(v) then
      return refusal(1, 'neither a HASH nor a STRING')
    end
    local name, _, expiry = one_of(v)
    if not name then
      return refusal(1, held_bad_one)
    end
    if name ~= lease then
      return held_line(0)
    end
    redis.call('DEL', key) -- a STRING of that one lease
    return held_line(expiry > now and 1 or 0)
  end
  local us, xs, v, other, otherv = nil, nil, nil, nil, nil
  local leases = 0
  if #state >= 12 then
    -- Six fields or more: more than one lease is left.
    state, leases = nil, 2
    local h = redis.call('HMGET', key, 'u', 'x', lease)
    us, xs, v = h[1], h[2], h[3]
  end
  for i = 1, state and #state or 0, 2 do
    local f = state[i]
    if f == lease then
      v = state[i + 1]
    end
    if f == 'u' then
      us = state[i + 1]
    elseif f == 'x' then
      xs = state[i + 1]
    elseif f ~= 'e' and f ~= lease then
      leases, other, otherv = leases + 1, f, state[i + 1]
    end
  end
  if not v then
    return held_line(0)
  end
  local u, x = whole(us), whole(xs)
  local units, expiry = lease_of(v)
  if not (u and x and units and units <= u and expiry <= x) then
    return refusal(1, held_bad)
  end
  local rec = held_line(expiry > now and 1 or 0)
  if units == u then
    redis.call('DEL', key)
    return rec
  end
  if expiry < x then
    if leases == 1 and not string.find(other, ':', 1, true) then
      local _, t = lease_of(otherv)
      if t and t > now then
        redis.call('SET', key, other .. ':' .. otherv, 'PX', string.format('%d', ms(t - now)))
        return rec
      end
    end
    redis.call('HDEL', key, lease)
    if units == 1 then
      redis.call('HINCRBY', key, 'u', '-1')
    else
      redis.call('HINCRBY', key, 'u', -units)
    end
    return rec
  end
  -- It was the latest: x moves back to the next latest, in a sweep of
  -- every lease.
  local s, reason = held_scan(key, lease, state)
  if not s then
    return refusal(1, reason)
  end
  if s.u == 0 then
    redis.call('DEL', key)
    return rec
  end
  local id = s.ids[1]
  if #s.ids == 1 and not string.find(id, ':', 1, true) then
    local t = s.exps[1]
    redis.call('SET', key, id .. ':' .. lease_value(s.units[1], string.format('%d', t)), 'PX', string.format('%d', ms(t - now)))
    return rec
  end
  s.dead[#s.dead + 1] = lease
  hdel(key, s.dead)
  redis.call('HSET', key, 'u', s.u, 'e', s.e, 'x', s.x)
  redis.call('PEXPIRE', key, ms(s.x - now))
  return rec
end

-- extend decides an Extend of lease c.lease on c.key, to now + c.param.
local function extend(c)
  local key, id = c.key, c.lease
  local units, expiry, u, x, e = held_lease(c, true)
  if not units then
    return units == nil and held_line(0) or expiry
  end
  if expiry <= now then
    -- It holds nothing: it goes, as a Release would take it.
    if not u then
      redis.call('DEL', key)
    else
      local reason = held_drop(key, id, units, expiry, u, x)
      if reason then
        return refusal(1, reason)
      end
    end
    return held_line(0)
  end
  local new = now + c.param
  local ns = string.format('%d', new)
  local value = lease_value(units, ns)
  if not u then
    redis.call('SET', key, id .. ':' .. value, 'PX', held_ttl(c))
    return held_line(1)
  end
  if new > x then
    redis.call('HSET', key, id, value, 'x', ns)
    redis.call('PEXPIRE', key, held_ttl(c))
    return held_line(1)
  end
  if new == x or expiry < x then
    if new < e then
      redis.call('HSET', key, id, value, 'e', ns)
    else
      redis.call('HSET', key, id, value)
    end
    return held_line(1)
  end
  -- It was the latest and ends earlier now (its key's TTL is shorter): x
  -- moves back to the next latest, in a sweep of every lease.
  local s, reason = held_scan(key, id)
  if not s then
    return refusal(1, reason)
  end
  if #s.dead > 0 then
    hdel(key, s.dead)
  end
  local ne, nx = new, max(s.x, new)
  if s.u > 0 then
    ne = min(s.e, new)
  end
  redis.call('HSET', key, id, value, 'u', s.u + units, 'e', ne, 'x', nx)
  redis.call('PEXPIRE', key, ms(nx - now))
  return held_line(1)
end

-- compact_held decides the compact form of a limit of kind 'c': nreq
-- requests on spec, two arguments each from ARGV[a] on, from the first
-- the fast path left (fast_next), with the read it made of that one's key
-- (fast_got).
local function compact_held(nreq, spec, a)
  local c = { spec = spec, kind = spec.kind, limit = spec.limit, param = spec.param, impl = spec.impl }
  local lines = {}
  local first = fast_next
  if first > 1 then
    lines[1] = fast_pack(fast_vals)
    for r = 2, first - 1 do
      lines[r] = ''
    end
    a = a + 2 * (first - 1)
  end
  for r = first, nreq do
    local head, got = ARGV[a], nil
    if r == first then
      got = fast_got
    end
    c.key, c.lease = KEYS[r], ARGV[a + 1]
    a = a + 2
    if head == 'R' then
      lines[r] = release(c, got)
    elseif head == 'E' then
      lines[r] = extend(c)
    else
      c.cost = tonumber(head)
      lines[r] = held_allow_one(c, got)
    end
  end
  return table.concat(lines)
end

kinds.c = {
  decide = held, write = write_held, settle = held_settle,
  allow_one = held_allow_one, release = release, extend = extend, compact = compact_held,
}
