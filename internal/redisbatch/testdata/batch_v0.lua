-- Batch script of ratelimit's Redis limiters: one call decides many requests,
-- in order, on one reading of the server's TIME.
--
-- A limiter built WithCallerClock runs a variant of this script, made by
-- replacing the two lines below that read TIME (and nothing else), with a
-- SHA of its own: its ARGV[1] is now, whole µs of Unix time below 2^52
-- (anything else fails the call before it writes), taken off ARGV before
-- the arguments below are read, and it never calls TIME. Clients whose
-- clocks disagree share a key as a server clock that steps back does (see
-- the end of this header): a key keeps the latest time written to it, and
-- each TTL is computed from its writer's now.
--
-- ARGV[1]   R, the number of requests, >= 1; or -R for the compact form,
--           R Allows of one check each on limit 1 (S = 1), whose only
--           argument is their cost n (no c, no s): a plain limiter's batch;
--           when R > 1 and only one argument follows the limit, it is the
--           cost of every request; for a limit of kind 'c', R requests of
--           one check each on it, of two arguments each: an Allow's cost
--           and lease, or 'R' or 'E' and the lease of a Release or Extend
-- ARGV[2]   S, the number of limits the checks below refer to, >= 1
-- then, for each limit, three arguments:
--   kind    't' token bucket, 'g' GCRA, 'w' fixed window; 'T', 'G' a
--           token bucket or GCRA that keeps its interval (and capacity)
--           with each key's state, for a policy chosen per key: a key
--           written at another interval keeps the units it has used,
--           converted to this one and rounded up, and is written so by
--           its next call, whatever that decides; 'c' units in flight,
--           each held by a lease until it is released or expires; 'l'
--           a sliding log: at most limit units in any window; 's' a
--           sliding-window counter; 'k' a
--           count in windows of a calendar, whose bounds the client
--           computes
--   limit   capacity or limit: whole units, 1 <= limit <= 2^52 ('c': the
--           most units in flight, 1 <= limit <= 65536)
--   param   't', 'g', 'T', 'G': whole microseconds per unit; 'w', 'l':
--           the window in whole milliseconds; 's': the window W in whole
--           milliseconds, 2W at most 2^52 µs; 'c': a lease's TTL in whole
--           microseconds, >= 1000; 'k': the text "prev:start:end:next",
--           in µs of Unix time, prev < start < end < next: the windows the
--           client's clock is in (start to end) and on either side of it.
--           The window that holds the server's now is the one every
--           check of that limit counts in; a server time outside all three
--           (the clocks more than a window apart) fails the call with
--           an error before anything is written
-- then, for each request in order, one of five kinds:
--   an Allow:
--     c       its number of checks, >= 1; the request is allowed only if
--             every check allows it, and then every check takes its cost
--             (all or nothing)
--     then, for each check, two arguments and one key, the next of KEYS:
--       s       the number of its limit, 1 to S
--       n       cost, 0 <= n <= limit; 0 only reads
--     and, for a check of kind 'c', a third argument:
--       lease   the name of the lease that n > 0 takes, which its key
--               keeps it under: unique among every lease the key may
--               ever hold, without ':', never "u", "e" or "x" ("" when n
--               is 0)
--   a Settle, which replaces the units an allowed request took by its
--   true cost on every check, or on none:
--     'S', c, age, tokttl
--       age     µs since the units were taken, or -1 when not known
--       tokttl  ms, > 0 when one more key follows the checks' keys: a
--               token key, which the Settle creates with PX tokttl and
--               which, when it is there already, makes the Settle change
--               nothing; 0 without
--     then, for each check, three arguments and one key:
--       s       the number of its limit
--       d       cost minus taken, whole units, |d| <= 2^52: > 0 takes d
--               more (into debt if need be), < 0 gives -d back (never
--               above full; a window only when it had opened age µs ago or
--               earlier; a log to its newest entries taken age µs ago or
--               earlier, or to any with age -1)
--       m       the most debt d > 0 may leave, whole units, 0 <= m <= 2^52:
--               a key owes at most m units beyond empty ('t', 'g', 'T',
--               'G': its tat at most (limit + m) × interval µs ahead of
--               now) or counts at most limit + m ('w', 'l', 'k'; 's': in
--               the window open now), and one that owes more already stays
--               as it is
--   a Reset, which empties every check's key, or none:
--     'X', c, then for each check, one argument (s) and one key
--   a Release or an Extend of one lease, a request of one check of kind
--   'c' (of any limit of that kind; an Extend's gives the lease's TTL):
--     'R' or 'E', s, lease, and one key
--     a Release drops the lease; an Extend moves its expiry to now + TTL,
--     or, when it holds nothing any more (it expired, or is not there),
--     drops it and changes nothing else
--   the checks of one request are on different keys: each reads its key
--   before any of them writes
--
-- Returns one binary string: a record per request, in order, with nothing
-- between them, so that no number is formatted as text. An answered
-- request's record is, for each of its checks in order, 25 bytes, or 33
-- with next_unit: a first byte, allowed (1 or 0: the request's, the same
-- for all its checks) plus 2 when next_unit follows; then remaining (whole
-- units), retry_after and reset_after (µs) and, when the first byte says
-- so, next_unit (µs), each a big-endian signed 64-bit integer. A check
-- that allows on its own reports 0 for retry_after; when the request is
-- denied it reports what it holds, since nothing was taken from it.
-- next_unit, the time until one unit more than remaining can have been
-- taken whatever the calls made meanwhile, is told by an Allow's check of
-- kind 'l' or 's' on a key that holds units, and of kind 'k' on a window
-- that counts none (the time until the window open now ends); no other
-- record carries it (see each kind's state for its value). A request with a key that does not hold
-- the state its check writes gets a refusal instead: the byte 255, the
-- number of that check from 1 (one byte), the length of the reason (two
-- bytes, big-endian) and the reason's text; it changes nothing, and the
-- requests after it are decided as usual. A Settle's record is
-- (1, remaining, 0, reset_after) per check, as the keys are after it (after
-- the earlier Settle, when its token was there); a Reset's is
-- (1, limit, 0, 0) per check. A Settle changes nothing on a 'c' check:
-- units in flight come back by a Release. A Release's record is
-- (held, 0, 0, 0), held being 1 when the lease held units until then and
-- 0 when it had expired or was not there; an Extend's is (1, 0, 0, 0) when
-- it renewed the lease and (0, 0, 0, 0) when the lease held nothing.
-- A 'c' check's remaining is the units free, its retry_after the time
-- until enough leases expire for n to fit (the earliest expiry when one
-- lease is enough), and its reset_after the time until every lease has
-- expired (0 with none).
--
-- The state of each kind, which every write keeps, and anything else under
-- a key is refused (another type, other fields, other values, no TTL where
-- the kind reads it):
--   't'  a HASH of exactly tat: the token bucket kept as the GCRA whose
--        decisions are the same, tat being the server time in integer µs at
--        which the bucket is full again; at now it holds (capacity ×
--        interval − (tat − now)) / interval tokens, below 0 in debt after a
--        Settle or a clock step back (see below); PEXPIRE until tat.
--   'g'  a STRING: the theoretical arrival time in integer µs, the server time
--        at which the key is full again; PX until then.
--   'T'  a HASH of exactly tat and interval: as 't', with the interval (µs)
--        the tat was computed with.
--   'G'  as 'g', a STRING "tat:interval", the interval the tat was
--        computed with, in µs.
--   'w'  a STRING: the count of the window, >= 1 (above limit in debt after
--        a Settle), with PX the time left in the window; a key with PTTL 0
--        has ended.
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
--   'c'  the leases of a key, each named by its lease (no ':' in a name)
--        with a value: its expiry (the server time in integer µs at which
--        it ends) for a lease of one unit, "units:expiry" for more (units
--        >= 2). A lease whose expiry is at or before now holds nothing,
--        swept or not. A key first holds its one lease as a STRING
--        "lease:value", with PX until its expiry, which SET NX writes in
--        one call; a second lease makes it a HASH of u, e and x and a
--        field per lease holding its value, which it stays until it is
--        deleted: u, the sum of the leases' units, >= 1; e, at or before
--        every lease's expiry: a sweep is due at it; x, the latest lease's
--        expiry, exactly; PEXPIRE until x. A call whose now reaches e
--        sweeps the leases that expired, and a key that holds no lease is
--        deleted (or, a STRING, expires). A call reads u, e and x (and the
--        lease it names), or the STRING, and checks what it reads; the
--        whole HASH (HGETALL), which it reads to sweep, to deny (its wait
--        orders the leases by expiry) and to find the next latest lease
--        when the latest is released or extended earlier, is checked
--        whenever it is read: its fields agree with u, e and x. Its TTL is
--        not read: every write that moves x sets it, and the fields and
--        values tell the key as this state's.
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
-- Numbers are decimal digits without sign, point, exponent or leading zero, below 2^53 in size, which Lua's doubles hold
-- exactly, and are passed to redis.call as numbers, which Redis writes as
-- plain digits below 10^20 (tostring would keep only 14 significant
-- digits), or, by 'c', as text formatted once. A debt is bounded: a
-- Settle takes a key no more than 2^52 µs (or units) from full, nor beyond
-- its m.
-- An absent key is full (no window open, no lease), and every TTL is the
-- time until then, whole ms rounded up, so a key that expires is exactly a
-- full one.
-- A server clock that steps back never creates a unit: a token-bucket or
-- GCRA key's tat stays where it was, so what the key owes (tat - now) grows
-- by the step until the clock catches up, and its waits include the
-- catching up; a window's count stays, and the window lasts as long as its
-- key's TTL; a lease lasts until the clock passes its expiry again, and so
-- does a log's entry its time + window (a new entry is stamped no earlier
-- than the newest); an 's' key's time stands still at its start until the
-- clock catches up, and its waits include the catching up; a 'k' key that
-- counted in a window later than the one open now keeps its count until
-- the key expires.
--
-- A script holds the server while it runs: callers bound R.

-- The globals read for each request or check, as locals.
local tonumber, KEYS, ARGV, unpack = tonumber, KEYS, ARGV, unpack
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local maxdebt = 4503599627370496 -- 2^52

-- The compact form's fast path, for a plain limiter's batch of kind 't',
-- 'g' or 'w', which runs before anything below is defined, so that such a
-- batch makes none of the functions below: a loop with its values hoisted
-- decides each request whose key is absent or holds a valid state of its
-- own, exactly as compact below does, reads and writes included, and
-- keeps its record's numbers, which fast_pack packs at the end, eight
-- records a call of struct.pack. The first request it does not take (a
-- refusal, a cost above the limit, a window whose time is up) it leaves,
-- with every one after it, to compact, having written nothing for it:
-- compact reads that key again and decides from there on. The numbers it
-- writes it passes to redis.call as text formatted by '%d' (exact below
-- 2^53): the digits Redis writes for a number passed as such, which Redis
-- 7.0 formats by '%.17g' at a higher cost.
local fast_done, fast_vals, fast_next = false, nil, 1
do
  local nreq, kind = -tonumber(ARGV[1]), ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and (kind == 't' or kind == 'g' or kind == 'w') then
    local limit, param = tonumber(ARGV[4]), tonumber(ARGV[5])
    local same = nil
    if nreq > 1 and #ARGV == 6 then
      same = tonumber(ARGV[6])
    end
    local call, pcall, find, ceil, floor, format = redis.call, redis.pcall, string.find, math.ceil, math.floor, string.format
    -- valid reads a number as whole (below) does; nil for anything else.
    local function valid(s)
      if #s > 16 or not (s == '0' or find(s, '^[1-9]%d*$')) then
        return nil
      end
      local v = tonumber(s)
      if v >= 9007199254740992 then
        return nil
      end
      return v
    end
    local vals, k = {}, 0
    local r = 1
    if kind == 'w' then
      local open = param * 1000
      while r <= nreq do
        local key, n = KEYS[r], same or tonumber(ARGV[5 + r])
        local stored = pcall('GET', key)
        if not stored then
          if n > limit then
            break
          end
          if n == 0 then
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit, 0, 0
          else
            call('SET', key, format('%d', n), 'PX', format('%d', param))
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit - n, 0, open
          end
        else
          local count = type(stored) == 'string' and valid(stored)
          if not (count and count >= 1) then
            break
          end
          local left = call('PTTL', key)
          if left <= 0 then
            break
          end
          left = left * 1000
          if n > 0 and count + n > limit then
            local rem = limit - count
            if rem < 0 then
              rem = 0
            end
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 0, rem, left, left
          elseif n == 0 then
            local rem = limit - count
            if rem < 0 then
              rem = 0
            end
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, rem, 0, left
          else
            call('INCRBY', key, format('%d', n))
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit - count - n, 0, left
          end
        end
        k = k + 4
        r = r + 1
      end
    else
      local interval, bucket = param, kind == 't'
      local tau = limit * interval
      local read = bucket and 'HGETALL' or 'GET'
      while r <= nreq do
        local key, n = KEYS[r], same or tonumber(ARGV[5 + r])
        local stored = pcall(read, key)
        local tat = nil
        if bucket then
          if stored.err then
            break
          end
          if #stored == 2 and stored[1] == 'tat' then
            tat = valid(stored[2])
            if not tat then
              break
            end
          elseif #stored ~= 0 then
            break
          end
        elseif stored then
          if type(stored) ~= 'string' then
            break
          end
          tat = valid(stored)
          if not tat then
            break
          end
        end
        if not tat then
          -- Absent: full.
          if n > limit then
            break
          end
          if n == 0 then
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit, 0, 0
          else
            local owed = n * interval
            local ttl = ceil(owed / 1000)
            if ttl < 1 then
              ttl = 1
            end
            if bucket then
              call('HSET', key, 'tat', format('%d', now + owed))
              call('PEXPIRE', key, format('%d', ttl))
            else
              call('SET', key, format('%d', now + owed), 'PX', format('%d', ttl))
            end
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit - n, 0, owed
          end
        else
          if call('PTTL', key) < 0 then
            break
          end
          if tat <= now then
            tat = now
          end
          local new_tat = tat + n * interval
          if n > 0 and new_tat - now > tau then
            local rem = floor((tau - (tat - now)) / interval)
            if rem < 0 then
              rem = 0
            end
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 0, rem, new_tat - tau - now, tat - now
          else
            if n ~= 0 then
              tat = new_tat
              local ttl = ceil((tat - now) / 1000)
              if ttl < 1 then
                ttl = 1
              end
              if bucket then
                call('HSET', key, 'tat', format('%d', tat))
                call('PEXPIRE', key, format('%d', ttl))
              else
                call('SET', key, format('%d', tat), 'PX', format('%d', ttl))
              end
            end
            local rem = floor((tau - (tat - now)) / interval)
            if rem < 0 then
              rem = 0
            end
            vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, rem, 0, tat - now
          end
        end
        k = k + 4
        r = r + 1
      end
    end
    fast_vals, fast_next = vals, r
    fast_done = r > nreq
  end
end
-- fast_pack packs the fast path's records into one string: with Redis's
-- struct library, eight records a call of it, then one at a time (formats
-- written out here, since building one per call costs more than the
-- packing); without it (an embedded server for tests), as compact's line
-- would, record by record.
local function fast_pack(vals)
  local lib = rawget(_G, 'struct')
  local out, n = {}, #vals
  if lib then
    local pack = lib.pack
    local eight = '>Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8'
    local i = 1
    while i + 31 <= n do
      out[#out + 1] = pack(eight, unpack(vals, i, i + 31))
      i = i + 32
    end
    while i <= n do
      out[#out + 1] = pack('>Bi8i8i8', vals[i], vals[i + 1], vals[i + 2], vals[i + 3])
      i = i + 4
    end
  else
    local char = string.char
    local function be8(v)
      local b = {}
      for i = 8, 1, -1 do
        b[i] = v % 256
        v = (v - b[i]) / 256
      end
      return char(b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8])
    end
    for i = 1, n, 4 do
      out[#out + 1] = char(vals[i]) .. be8(vals[i + 1]) .. be8(vals[i + 2]) .. be8(vals[i + 3])
    end
  end
  return table.concat(out)
end
if fast_done then
  return fast_pack(fast_vals)
end

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

-- one_or_two reads a value of one number, "a", or of two, "a:b", each as
-- whole reads it, and returns a, and b for two; nil for anything else.
local function one_or_two(v)
  if type(v) ~= 'string' then
    return nil
  end
  local a = whole(v)
  if a then
    return a
  end
  local x, y = string.match(v, '^(%d+):(%d+)$')
  x, y = whole(x), whole(y)
  if x and y then
    return x, y
  end
  return nil
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

-- ms returns a TTL of us µs: whole ms, rounded up, at least 1.
local function ms(us)
  return max(1, ceil(us / 1000))
end

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

-- A check is a table: key, the key it decides on; kind, limit and param, of
-- its limit (spec, the limit's own table), and impl, its kind's functions
-- (see kinds); and cost (an Allow's n) or d (a Settle's). Deciding it sets
-- the fields its kind's writer writes, on every path, so that one table
-- serves check after check: the tables of a call are made once, and each
-- request fills them anew.

-- The state functions read a key as of now, or return nil and the reason
-- it is refused. stored, when not nil, is the key's reply to the read,
-- made already (by the compact form).

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

-- The writers write what deciding check c set, if anything.

-- write_bucket writes a 't' key: c.tat, with PEXPIRE c.ttl.
local function write_bucket(c)
  local key, tat = c.key, c.tat
  if tat then
    redis.call('HSET', key, 'tat', tat)
    redis.call('PEXPIRE', key, c.ttl)
  end
end

-- write_keyed_bucket writes a 'T' key: c.tat and the interval, with
-- PEXPIRE c.ttl.
local function write_keyed_bucket(c)
  local key, tat = c.key, c.tat
  if tat then
    redis.call('HSET', key, 'tat', tat, 'interval', c.param)
    redis.call('PEXPIRE', key, c.ttl)
  end
end

-- write_gcra writes a 'g' key: c.tat, with PX c.ttl.
local function write_gcra(c)
  local tat = c.tat
  if tat then
    redis.call('SET', c.key, tat, 'PX', c.ttl)
  end
end

-- write_keyed_gcra writes a 'G' key: "c.tat:interval", with PX c.ttl.
local function write_keyed_gcra(c)
  local tat = c.tat
  if tat then
    redis.call('SET', c.key, string.format('%.0f:%.0f', tat, c.param), 'PX', c.ttl)
  end
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

-- The decide functions decide a cost n on check c's key and return
-- allowed, remaining, retry and reset as they are once n is taken (or, when
-- it is not, as they are), and set what c's writer writes: what was taken,
-- or a conversion alone; or they return nil and the reason the key is
-- refused. They write nothing. A check that allows returns 0 for retry.

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

-- The open functions decide the compact form's cost c.cost, 1 to the
-- limit, on check c's absent key, a full one, as its decide function would
-- but without its steps: they write it, and return its reset_after.

-- gcra_open opens a 't' or 'g' key.
local function gcra_open(c, write)
  local owed = c.cost * c.param
  c.tat, c.ttl = now + owed, ms(owed)
  write(c)
  return owed
end

-- window_open opens a 'w' key's window.
local function window_open(c, write)
  c.add, c.opens = c.cost, c.param
  write(c)
  return c.param * 1000
end

-- The settle functions apply check c's d (units: more taken when > 0,
-- given back when < 0) to its key, whose state has been checked, and
-- return its remaining and reset_after. A key that is full again is
-- deleted.

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

-- The 'k' kind: a count in windows of a calendar (see its state above).
-- Its limit's param is a table {start, end} of the window open at the
-- server's now, which the limits' reading picks among those the client
-- sent.

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

-- The 'c' kind: units in flight, each held by a lease (see its state
-- above). It passes redis.call the numbers it writes as text, formatted
-- once ('%d', exact below 2^53), rather than as Lua numbers, which Redis
-- formats one by one.

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
-- found it), sparing the call that asks. Given a lease, a HASH's is read
-- too, and a 7th value tells whether it holds (has not expired).
local function held_head(key, exists, lease)
  if not exists and redis.call('EXISTS', key) == 0 then
    return 0, 0, 0
  end
  local v
  if lease then
    v = redis.pcall('HMGET', key, 'u', 'e', 'x', lease)
  else
    v = redis.pcall('HMGET', key, 'u', 'e', 'x')
  end
  if wrongtype(v) then
    v = redis.pcall('GET', key)
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
-- does). It returns nil and the reason when the key is refused.
local function held_scan(key, skip)
  local state = redis.call('HGETALL', key)
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

-- hdel deletes fields of key, a few thousand at a time (Lua's stack
-- bounds unpack).
local function hdel(key, fields)
  for i = 1, #fields, 4000 do
    redis.call('HDEL', key, unpack(fields, i, min(i + 3999, #fields)))
  end
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

-- The 'l' kind: a sliding log (see its state above).

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

-- read_log is the compact form's read of an 'l' key: its HMGET of n, h,
-- t, a and z, or nil when it is absent.
local function read_log(key)
  local v = redis.pcall('HMGET', key, 'n', 'h', 't', 'a', 'z')
  if v.err or v[1] or v[2] or v[3] or v[4] or v[5] or redis.call('EXISTS', key) == 1 then
    return v
  end
end

-- The 's' kind: a sliding-window counter (see its state above). W is the
-- window in µs.

local two53 = 9007199254740992 -- 2^53
local counter_bad = 'not "start:expiry:prev:cur", whole numbers below 2^53, start before expiry, prev or cur above 0'

-- muldiv returns ⌊a × b / d⌋ and whether a remainder is left, exactly, for
-- whole a, b and d below 2^53 with 1 <= d and b <= d, so that the quotient
-- is at most a. A product below 2^53 is exact in a double, and so is fmod;
-- above, a long division takes a's bits from the top, doubling and adding
-- b, with q × d + r the product so far and 0 <= r < d: every value stays
-- below 2^53, as r is compared with d − r or d − b rather than summed.
local function muldiv(a, b, d)
  local prod = a * b
  if prod < two53 then
    local r = math.fmod(prod, d)
    return (prod - r) / d, r > 0
  end
  local bit = 1
  while bit * 2 <= a do
    bit = bit * 2
  end
  local q, r = 0, 0
  while bit >= 1 do
    q = q * 2
    if r >= d - r then
      q, r = q + 1, r - (d - r)
    else
      r = r + r
    end
    if a >= bit then
      a = a - bit
      if r >= d - b then
        q, r = q + 1, r - (d - b)
      else
        r = r + b
      end
    end
    bit = bit / 2
  end
  return q, r > 0
end

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

-- counter_at returns an 's' key's start, expiry, prev and cur as they
-- stand at t (at least its start): the window open at t starts at start,
-- cur having become prev if the window has moved on; 0, 0, 0 and 0 when
-- it holds nothing.
local function counter_at(s, x, prev, cur, t, w)
  if prev + cur == 0 or t >= x then
    return 0, 0, 0, 0
  end
  local e = t - s
  if e < w then
    return s, x, prev, cur
  end
  if e < 2 * w and cur > 0 then
    return s + w, x, cur, 0
  end
  return 0, 0, 0, 0
end

-- counter_left returns max(0, limit − estimate) at t of a key as counter_at
-- returns it.
local function counter_left(limit, w, s, prev, cur, t)
  local rest = limit - cur
  if rest <= 0 then
    return 0
  end
  if prev > 0 then
    local q, more = muldiv(prev, w - (t - s), w)
    if more then
      q = q + 1
    end
    rest = rest - q
  end
  return max(rest, 0)
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

-- counter_next returns the earliest time at which left + 1 can have been
-- taken on a key as counter_at returns it (holding units), left (below the
-- limit) being its units left: in the window open now when ⌈prev × (W −
-- e) / W⌉ <= rest = limit − cur − left − 1; else in the next, whose prev
-- is held = cur + left (the units left, taken before the roll), at its
-- start when held < limit, else at e = W − ⌊(limit − 1) × W / held⌋.
local function counter_next(limit, w, s, prev, cur, left)
  local rest = limit - cur - left - 1
  if rest >= 0 and rest < prev then
    local f = muldiv(w, rest, prev)
    if f >= 1 then
      return s + w - f
    end
  end
  local held = cur + left
  if held < limit then
    return s + w
  end
  return s + 2 * w - muldiv(w, limit - 1, held)
end

-- counter_value returns an 's' key's value.
local function counter_value(s, x, prev, cur)
  return string.format('%.0f:%.0f:%.0f:%.0f', s, x, prev, cur)
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

-- The compact form's reads return a key's reply to the read of its check,
-- or nil when the key is absent.

local function read_hash(key)
  local state = redis.pcall('HGETALL', key)
  if #state > 0 or state.err then
    return state
  end
end

local function read_string(key)
  return redis.pcall('GET', key) or nil
end

-- kinds holds each kind's functions: decide, write, settle, and, for the
-- kinds of the compact form, read and open; for a kind that reads more of
-- its key to settle than its decide reads, check (with the Settle's age),
-- which a Settle calls on every check before it settles any.
local kinds = {
  t = { decide = gcra, write = write_bucket, settle = gcra_settle, read = read_hash, open = gcra_open },
  g = { decide = gcra, write = write_gcra, settle = gcra_settle, read = read_string, open = gcra_open },
  w = { decide = window, write = write_window, settle = window_settle, read = read_string, open = window_open },
  T = { decide = gcra, write = write_keyed_bucket, settle = gcra_settle },
  G = { decide = gcra, write = write_keyed_gcra, settle = gcra_settle },
  c = { decide = held, write = write_held, settle = held_settle },
  l = { decide = log, write = write_log, settle = log_settle, check = log_check, read = read_log, open = log_open },
  k = { decide = calendar, write = write_calendar, settle = calendar_settle, read = read_string, open = calendar_open },
  s = { decide = counter, write = write_counter, settle = counter_settle, read = read_string, open = counter_open },
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

-- allow decides an Allow of several checks: all of them allow, and then
-- all write, or none takes anything; a denied request still writes each
-- key's conversion (to a new interval, 'T' or 'G'), as allow_one does, so
-- that the new policy holds from this call on. It keeps each check's
-- answer in it: allowed, remaining, retry and reset.
local function allow(checks, count)
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
local function settle(checks, count, age, tokkey, tokttl)
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
local function reset(checks, count)
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
-- STRING of the lease, set in one call (SET NX), and otherwise as
-- allow_one does.
local function held_allow_one(c)
  local n, limit = c.cost, c.limit
  if n > 0 and n <= limit then
    local lease = c.lease
    check_name(lease)
    local xs = string.format('%d', now + c.param)
    if redis.call('SET', c.key, lease .. ':' .. lease_value(n, xs), 'NX', 'PX', held_ttl(c)) then
      return line(1, limit - n, 0, c.param)
    end
    return allow_one(c, true)
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

-- held_one_back writes a HASH key left with one lease field, whose value
-- is a lease that holds and whose name has no ':', back as the STRING of
-- that lease, with PX until its expiry.
local function held_one_back(key)
  if redis.call('TYPE', key).ok ~= 'hash' then
    return
  end
  local all = redis.call('HGETALL', key)
  local id, v, n = nil, nil, 0
  for i = 1, #all, 2 do
    local f = all[i]
    if f ~= 'u' and f ~= 'e' and f ~= 'x' then
      n, id, v = n + 1, f, all[i + 1]
    end
  end
  if n ~= 1 or string.find(id, ':', 1, true) then
    return
  end
  local _, t = lease_of(v)
  if t and t > now then
    redis.call('SET', key, id .. ':' .. v, 'PX', string.format('%d', ms(t - now)))
  end
end

-- release decides a Release of lease c.lease on c.key. A HASH it leaves
-- with one lease that holds becomes the STRING of that lease.
local function release(c)
  local units, expiry, u, x = held_lease(c, false)
  if not units then
    return units == nil and held_line(0) or expiry
  end
  if not u then
    redis.call('DEL', c.key) -- a STRING of that one lease
  else
    local reason = held_drop(c.key, c.lease, units, expiry, u, x)
    if reason then
      return refusal(1, reason)
    end
    held_one_back(c.key)
  end
  return held_line(expiry > now and 1 or 0)
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

-- The call formats: each decides a call's requests, in order, and returns
-- the reply.

-- compact decides the compact form: nreq Allows of one check each on limit
-- spec (a table of kind, limit and param), whose costs start at ARGV[a],
-- one per request, or one for all of them.
local function compact(nreq, spec, a)
  local impl = spec.impl
  local read, open, write = impl.read, impl.open, impl.write
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
      if c.kind == 'k' then
        c.next = c.param[2] - now -- an empty window: until it ends
      end
      lines[r] = line(1, limit, 0, 0, c.next) -- full
    else
      local reset = open(c, write)
      lines[r] = line(1, limit - n, 0, reset, c.next)
    end
  end
  return table.concat(lines)
end

-- compact_held decides the compact form of a limit of kind 'c': nreq
-- requests on spec, two arguments each from ARGV[a] on.
local function compact_held(nreq, spec, a)
  local c = { spec = spec, kind = spec.kind, limit = spec.limit, param = spec.param, impl = spec.impl }
  local lines = {}
  for r = 1, nreq do
    local head = ARGV[a]
    c.key, c.lease = KEYS[r], ARGV[a + 1]
    a = a + 2
    if head == 'R' then
      lines[r] = release(c)
    elseif head == 'E' then
      lines[r] = extend(c)
    else
      c.cost = tonumber(head)
      lines[r] = held_allow_one(c)
    end
  end
  return table.concat(lines)
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
  -- checks.
  local function take(count, field, field2)
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
        if field == 'cost' and c.kind == 'c' then
          c.lease, ai = ARGV[ai], ai + 1 -- an Allow's 'c' check names its lease
        end
      else
        ai = ai + 1
      end
      ki = ki + 1
    end
    a, k = ai, ki
    return checks
  end
  local one = {} -- the check of a request of one check
  local lines = {}
  for r = 1, nreq do
    local head = ARGV[a]
    local count = tonumber(head)
    if count then
      if count == 1 then
        -- The common request, a limiter's own Allow, read without take.
        local spec = limits[tonumber(ARGV[a + 1])]
        if one.spec ~= spec then
          one.spec, one.kind, one.limit, one.param, one.impl = spec, spec.kind, spec.limit, spec.param, spec.impl
        end
        one.key, one.cost = KEYS[k], tonumber(ARGV[a + 2])
        a, k = a + 3, k + 1
        if one.kind == 'c' then
          one.lease, a = ARGV[a], a + 1
          lines[r] = held_allow_one(one)
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
      if spec.kind ~= 'c' then
        error('ratelimit batch script: a lease of kind ' .. spec.kind)
      end
      if one.spec ~= spec then
        one.spec, one.kind, one.limit, one.param, one.impl = spec, spec.kind, spec.limit, spec.param, spec.impl
      end
      one.key, one.lease = KEYS[k], ARGV[a + 2]
      a, k = a + 3, k + 1
      if head == 'R' then
        lines[r] = release(one)
      else
        lines[r] = extend(one)
      end
    else
      error('ratelimit batch script: unknown request ' .. tostring(head))
    end
  end
  return table.concat(lines)
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

local limits, a = {}, 3
for s = 1, tonumber(ARGV[2]) do
  local kind = ARGV[a]
  local impl = kinds[kind]
  if not impl then
    error('ratelimit batch script: unknown kind ' .. tostring(kind))
  end
  local param = ARGV[a + 2]
  if kind == 'k' then
    param = calendar_window(param)
  else
    param = tonumber(param)
  end
  limits[s] = { kind = kind, limit = tonumber(ARGV[a + 1]), param = param, impl = impl }
  a = a + 3
end
local nreq = tonumber(ARGV[1])
if nreq < 0 then
  if limits[1].kind == 'c' then
    return compact_held(-nreq, limits[1], a)
  end
  return compact(-nreq, limits[1], a)
end
return general(nreq, limits, a)
