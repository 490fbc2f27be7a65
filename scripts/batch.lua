-- The frame of the batch script (see prelude.lua for the order of the
-- files): it reads the call (internal/redisbatch/callformat.go), decides
-- its requests in order through the functions each kind registered in
-- kinds, and packs the reply. run, its last function, reads the call and
-- returns the reply; the assembled script ends by returning it.

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

-- ms returns a TTL of us µs: whole ms, rounded up, at least 1.
local function ms(us)
  return max(1, ceil(us / 1000))
end

-- The compact form's reads return a key's reply to the read of its check,
-- or nil when the key is absent.

local function read_string(key)
  return redis.pcall('GET', key) or nil
end

-- A check is a table: key, the key it decides on; kind, limit and param, of
-- its limit (spec, the limit's own table), and impl, its kind's functions
-- (see kinds); and cost (an Allow's n) or d (a Settle's). Deciding it sets
-- the fields its kind's writer writes, on every path, so that one table
-- serves check after check: the tables of a call are made once, and each
-- request fills them anew.

-- The state functions read a key as of now, or return nil and the reason
-- it is refused. stored, when not nil, is the key's reply to the read,
-- made already (by the compact form).

-- The decide functions decide a cost n on check c's key and return
-- allowed, remaining, retry and reset as they are once n is taken (or, when
-- it is not, as they are), and set what c's writer writes: what was taken,
-- or a conversion alone; or they return nil and the reason the key is
-- refused. They write nothing. A check that allows returns 0 for retry.

-- The writers write what deciding check c set, if anything.


-- The open functions decide the compact form's cost c.cost, 1 to the
-- limit, on check c's absent key, a full one, as its decide function would
-- but without its steps: they write it, and return its reset_after.

-- The settle functions apply check c's d (units: more taken when > 0,
-- given back when < 0) to its key, whose state has been checked, and
-- return its remaining and reset_after. A key that is full again is
-- deleted.


-- kinds holds each kind's functions, which each kind's file registers under
-- its letter: decide, write, settle, and, for the kinds of the compact
-- form, read and open; for a kind that reads more of its key to settle than
-- its decide reads, check (with the Settle's age), which a Settle calls on
-- every check before it settles any. A kind may also give: param, which
-- reads its limit's param when it is not a number; empty, the next_unit of
-- a peek at its absent key in the compact form; and, for a kind of leases,
-- allow_one (its Allow of one check, which reads the lease after the cost),
-- release and extend (its Release and Extend requests) and compact (its
-- compact form). A kind may give cold instead of its settle and check:
-- a function that sets them in its table, which the frame's cold calls
-- before the first request of a call that may settle.
local kinds = {}

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
  pack = function(_, allowed, remaining, retry, reset, next)
    local out = string.char(allowed) .. be8(remaining) .. be8(retry) .. be8(reset)
    if next then
      out = out .. be8(next)
    end
    return out
  end
end

-- line returns an answered check's record, with next_unit when next is
-- not nil.
local function line(allowed, remaining, retry, reset, next)
  if next then
    return pack('>Bi8i8i8i8', allowed + 2, remaining, retry, reset, next)
  end
  return pack('>Bi8i8i8', allowed, remaining, retry, reset)
end

-- refusal is the record of a request whose check i's key holds no state of
-- its own.
local function refusal(i, reason)
  return string.char(255, i, floor(#reason / 256), #reason % 256) .. reason
end

-- The request functions decide one request, of count checks (the first
-- count of checks), and return its record.

-- allow_one decides an Allow of one check, which decides alone and writes
-- at once: what it took, or its key's conversion (to a new interval, 'T' or
-- 'G', so that the new policy holds from this call on), which a peek or a
-- denial writes too. stored as the decide functions'.
local function allow_one(c, stored)
  local impl = c.impl
  c.next = nil
  local allowed, remaining, retry, reset = impl.decide(c, c.cost, stored, true)
  if allowed == nil then
    return refusal(1, remaining)
  end
  impl.write(c)
  return line(allowed and 1 or 0, remaining, retry, reset, c.next)
end

-- allow, settle and reset, the functions of the rarer requests, are
-- made by cold, with each kind's own cold functions (see kinds), on the
-- first request of a call that needs them, so that a call of none makes
-- none of them.
local allow, settle, reset
local function cold()
  for _, impl in pairs(kinds) do
    local define = impl.cold
    if define then
      impl.cold = nil
      define(impl)
    end
  end
  -- first_refusal reads the key of each of a request's count checks, and
  -- returns the refusal of the first whose key holds no state of its own;
  -- nil when none does.
  local function first_refusal(checks, count)
    local refused = nil
    for i = 1, count do
      local c = checks[i]
      local ok, reason = c.impl.decide(c, 0)
      if ok == nil and not refused then
        refused = refusal(i, reason)
      end
    end
    return refused
  end

  -- allow decides an Allow of several checks: all of them allow, and then
  -- all write, or none takes anything; a denied request still writes each
  -- key's conversion (to a new interval, 'T' or 'G'), as allow_one does, so
  -- that the new policy holds from this call on. It keeps each check's
  -- answer in it: allowed, remaining, retry and reset.
  function allow(checks, count)
    local all, refused = true, nil
    for i = 1, count do
      local c = checks[i]
      c.next = nil
      local allowed, remaining, retry, reset = c.impl.decide(c, c.cost, nil, true)
      if allowed == nil then
        if not refused then
          refused = refusal(i, remaining)
        end
      elseif not allowed then
        all = false
      end
      c.allowed, c.remaining, c.retry, c.reset = allowed, remaining, retry, reset
    end
    if refused then
      return refused
    end
    local out = ''
    for i = 1, count do
      local c = checks[i]
      local text
      if all then
        c.impl.write(c)
        text = line(1, c.remaining, 0, c.reset, c.next)
      elseif c.allowed then
        -- It would allow, but the request is denied: report it untouched,
        -- but for its conversion, which a peek writes. (Its key reads as it
        -- did: a peek tells what the first decision read.)
        c.next = nil
        local _, remaining, _, reset = c.impl.decide(c, 0, nil, true)
        c.impl.write(c)
        text = line(0, remaining, 0, reset, c.next)
      else
        -- A denial sets nothing to write but a conversion.
        c.impl.write(c)
        text = line(0, c.remaining, c.retry, c.reset, c.next)
      end
      out = out .. text
    end
    return out
  end

  -- settle decides a Settle: every key is checked first, and then all are
  -- settled, or none is. With a token key (tokkey, created with PX tokttl)
  -- that is there already, that Settle has been applied: it answers the keys
  -- as they are.
  function settle(checks, count, age, tokkey, tokttl)
    local refused = first_refusal(checks, count)
    if refused then
      return refused
    end
    for i = 1, count do
      -- A kind that reads more of its key to settle (a log) checks it
      -- before any check is settled.
      local c = checks[i]
      local check = c.impl.check
      if check then
        local ok, reason = check(c, age)
        if not ok then
          return refusal(i, reason)
        end
      end
    end
    local seen = tokkey and not redis.call('SET', tokkey, '1', 'NX', 'PX', tokttl)
    local out = ''
    for i = 1, count do
      local c = checks[i]
      local impl = c.impl
      local remaining, reset
      if seen then
        local _
        _, remaining, _, reset = impl.decide(c, 0)
      else
        remaining, reset = impl.settle(c, age)
      end
      out = out .. line(1, remaining, 0, reset)
    end
    return out
  end

  -- reset decides a Reset: every key is checked first, and then all are
  -- emptied, or none is.
  function reset(checks, count)
    local refused = first_refusal(checks, count)
    if refused then
      return refused
    end
    local out = ''
    for i = 1, count do
      local c = checks[i]
      redis.call('DEL', c.key)
      out = out .. line(1, c.limit, 0, 0)
    end
    return out
  end
end

-- run reads the call's limits, then decides its requests in the compact
-- form (the kind's own, if it has one) or the general one, and returns the
-- reply: compact and general, defined in the branch
-- that calls them, are made only by the calls of their form.
local function run()
  local limits, a = {}, 3
  for s = 1, tonumber(ARGV[2]) do
    local kind = ARGV[a]
    local impl = kinds[kind]
    if not impl then
      error('ratelimit batch script: unknown kind ' .. tostring(kind))
    end
    local param = ARGV[a + 2]
    local read = impl.param
    if read then
      param = read(param)
    else
      param = tonumber(param)
    end
    limits[s] = { kind = kind, limit = tonumber(ARGV[a + 1]), param = param, impl = impl }
    a = a + 3
  end
  local nreq = tonumber(ARGV[1])
  if nreq < 0 then
    local own = limits[1].impl.compact
    if own then
      return own(-nreq, limits[1], a)
    end
    -- compact decides the compact form: nreq Allows of one check each on limit
    -- spec (a table of kind, limit and param), whose costs start at ARGV[a],
    -- one per request, or one for all of them.
    local function compact(nreq, spec, a)
      local impl = spec.impl
      local read, open, write, empty = impl.read, impl.open, impl.write, impl.empty
      if not read then
        error('ratelimit batch script: no compact form for kind ' .. spec.kind)
      end
      local same = nil -- the cost of every request, when only one is given
      if nreq > 1 and #ARGV == a then
        same = tonumber(ARGV[a])
      end
      local limit = spec.limit
      -- One check, used by every request in turn.
      local c = { kind = spec.kind, limit = limit, param = spec.param, impl = impl }
      -- The requests the fast path decided, in one string, then "" for each
      -- of the others of them, so that line r is request r's.
      local lines = {}
      if fast_next > 1 then
        lines[1] = fast_pack(fast_vals)
        for r = 2, fast_next - 1 do
          lines[r] = ''
        end
      end
      for r = fast_next, nreq do
        local key, n = KEYS[r], same or tonumber(ARGV[a + r - 1])
        c.key, c.cost, c.next = key, n, nil
        local stored = read(key)
        -- An absent key is full (no window open): a cost n from 1 to the limit
        -- opens it.
        if stored or n > limit then
          lines[r] = allow_one(c, stored)
        elseif n == 0 then
          if empty then
            c.next = empty(c) -- a peek at an absent key that tells its next unit
          end
          lines[r] = line(1, limit, 0, 0, c.next) -- full
        else
          local reset = open(c, write)
          lines[r] = line(1, limit - n, 0, reset, c.next)
        end
      end
      return table.concat(lines)
    end
    return compact(-nreq, limits[1], a)
  end
  -- general decides the general form: nreq requests on limits (tables of
  -- kind, limit and param), whose arguments start at ARGV[a].
  local function general(nreq, limits, a)
    local k = 1
    -- The checks of the request being decided: check i is the table
    -- checks[i], filled anew by each request.
    local checks = {}
    -- take fills the next count checks, each from its limit's number, then,
    -- with field, one more argument (stored as c[field]) and, with field2,
    -- another (c[field2]), from ARGV[a] on, and its key, KEYS[k]; it returns
    -- checks. The first request of several checks, a Settle or a Reset makes
    -- it, after cold.
    local take
    local one = {} -- the check of a request of one check
    local lines = {}
    for r = 1, nreq do
      local head = ARGV[a]
      local count = tonumber(head)
      if not take and count ~= 1 and head ~= 'R' and head ~= 'E' then
        cold()
        take = function(count, field, field2)
          local ai, ki = a, k
          for i = 1, count do
            local c = checks[i]
            if not c then
              c = {}
              checks[i] = c
            end
            local spec = limits[tonumber(ARGV[ai])]
            if c.spec ~= spec then
              c.spec, c.kind, c.limit, c.param, c.impl = spec, spec.kind, spec.limit, spec.param, spec.impl
            end
            c.key = KEYS[ki]
            if field2 then
              c[field], c[field2] = tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
              ai = ai + 3
            elseif field then
              c[field] = tonumber(ARGV[ai + 1])
              ai = ai + 2
              if field == 'cost' and c.impl.allow_one then
                c.lease, ai = ARGV[ai], ai + 1 -- an Allow's check of leases names its lease
              end
            else
              ai = ai + 1
            end
            ki = ki + 1
          end
          a, k = ai, ki
          return checks
        end
      end
      if count then
        if count == 1 then
          -- The common request, a limiter's own Allow, read without take.
          local spec = limits[tonumber(ARGV[a + 1])]
          if one.spec ~= spec then
            one.spec, one.kind, one.limit, one.param, one.impl = spec, spec.kind, spec.limit, spec.param, spec.impl
          end
          one.key, one.cost = KEYS[k], tonumber(ARGV[a + 2])
          a, k = a + 3, k + 1
          local own = one.impl.allow_one
          if own then
            one.lease, a = ARGV[a], a + 1
            lines[r] = own(one)
          else
            lines[r] = allow_one(one)
          end
        else
          a = a + 1
          lines[r] = allow(take(count, 'cost'), count)
        end
      elseif head == 'S' then
        local age, tokttl
        count, age, tokttl = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
        a = a + 4
        take(count, 'd', 'm')
        local tokkey = nil
        if tokttl > 0 then
          tokkey, k = KEYS[k], k + 1
        end
        lines[r] = settle(checks, count, age, tokkey, tokttl)
      elseif head == 'X' then
        count, a = tonumber(ARGV[a + 1]), a + 2
        lines[r] = reset(take(count), count)
      elseif head == 'R' or head == 'E' then
        local spec = limits[tonumber(ARGV[a + 1])]
        if not spec.impl.release then
          error('ratelimit batch script: a lease of kind ' .. spec.kind)
        end
        if one.spec ~= spec then
          one.spec, one.kind, one.limit, one.param, one.impl = spec, spec.kind, spec.limit, spec.param, spec.impl
        end
        one.key, one.lease = KEYS[k], ARGV[a + 2]
        a, k = a + 3, k + 1
        if head == 'R' then
          lines[r] = spec.impl.release(one)
        else
          lines[r] = spec.impl.extend(one)
        end
      else
        error('ratelimit batch script: unknown request ' .. tostring(head))
      end
    end
    return table.concat(lines)
  end
  return general(nreq, limits, a)
end
