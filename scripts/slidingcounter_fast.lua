-- The fast path of the sliding-window counter ('s'), and the arithmetic
-- it shares with slidingcounter.lua, which is assembled after the frame
-- and uses these functions: its compact form, decided before the frame and
-- the kinds are defined (see the prelude's fast_done). It decides each
-- request of a cost from 1 to the limit whose key is absent or holds a
-- valid count that allows it, as slidingcounter.lua's counter and the
-- frame's compact would, reads and writes included, and keeps its record's
-- five numbers (it tells next_unit: fast_vals.five); the first it does not
-- take (a denial, a peek, a refusal, a cost above the limit), with every
-- one after it, it leaves to compact, having written nothing for it.

local two53 = 9007199254740992 -- 2^53
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

do
  local nreq, kind = fast_nreq, ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and kind == 's' then
    local limit, w = tonumber(ARGV[4]), tonumber(ARGV[5]) * 1000
    local same = nil
    if nreq > 1 and #ARGV == 6 then
      same = tonumber(ARGV[6])
    end
    local call, pcall, format, match = redis.call, redis.pcall, string.format, string.match
    local vals, k = { five = true }, 0
    local r = 1
    while r <= nreq do
      local key, n = KEYS[r], same or tonumber(ARGV[5 + r])
      if not (n >= 1 and n <= limit) then
        break
      end
      local stored = pcall('GET', key)
      local s, x, prev, cur = 0, 0, 0, 0
      if stored then
        if type(stored) ~= 'string' then
          break
        end
        local a, b, p, q = match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
        s, x, prev, cur = whole(a), whole(b), whole(p), whole(q)
        if not (s and x and prev and cur and s < x and prev + cur >= 1) then
          break
        end
      end
      local t = max(now, s)
      s, x, prev, cur = counter_at(s, x, prev, cur, t, w)
      local left = counter_left(limit, w, s, prev, cur, t)
      if n > left then
        break
      end
      if prev + cur == 0 then
        s = t
      end
      cur, x = cur + n, s + 2 * w
      call('SET', key, counter_value(s, x, prev, cur), 'PX', format('%d', max(1, ceil((x - now) / 1000))))
      vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4], vals[k + 5] = 3, left - n, 0, x - now, counter_next(limit, w, s, prev, cur, left - n) - now
      k = k + 5
      r = r + 1
    end
    fast_vals, fast_next = vals, r
    fast_done = r > nreq
  end
end
