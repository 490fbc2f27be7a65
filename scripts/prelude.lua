-- Batch script of ratelimit's Redis limiters: one call decides many
-- requests, in order, on one reading of now.
--
-- The script is assembled, never edited, from the files of scripts/ (see
-- internal/redisbatch/assemble.go), in this order: a time file, which sets
-- now (time_server.lua, the server's TIME; time_caller.lua, the caller's
-- clock); this prelude; the fast paths of the kinds that keep one
-- (tat_fast.lua, fixedwindow_fast.lua, calendarwindow_fast.lua,
-- slidingcounter_fast.lua, slidinglog_fast.lua, concurrency_fast.lua); the
-- frame, batch.lua, which reads the call, decides its requests through
-- each kind's functions and packs the reply; the files of each kind, which
-- describe its state and register its functions in kinds; and the line
-- "return run()".
--
-- The call's arguments and its reply are described once, in
-- internal/redisbatch/callformat.go; the state each kind keeps, in its own
-- file.
--
-- Numbers are decimal digits without sign, point, exponent or leading
-- zero, below 2^53 in size, which Lua's doubles hold exactly, and are
-- passed to redis.call as numbers, which Redis writes as plain digits
-- below 10^20 (tostring would keep only 14 significant digits), or, by
-- 'c', as text formatted once. A debt is bounded: a
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

local maxdebt = 4503599627370496 -- 2^52

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

-- The compact form's fast paths, for a plain limiter's batch of a kind that
-- keeps one (its own file, *_fast.lua, assembled right after this prelude),
-- which run before the frame and the kinds are defined, so that such a
-- batch makes none of the frame's or the kinds' functions: a loop with its values hoisted
-- decides each request whose key is absent or holds a valid state of its
-- own, exactly as the frame's compact does, reads and writes included, and
-- keeps its record's numbers, which fast_pack packs at the end, eight
-- records a call of struct.pack. The first request it does not take (a
-- refusal, a cost above the limit, a window whose time is up) it leaves,
-- with every one after it, to compact, having written nothing for it:
-- compact reads that key again and decides from there on. The numbers it
-- writes it passes to redis.call as text formatted by '%d' (exact below
-- 2^53): the digits Redis writes for a number passed as such, which Redis
-- 7.0 formats by '%.17g' at a higher cost.
-- fast_got is the reply of the read a fast path made of the key of the
-- first request it left, when it keeps it for the kind's compact form,
-- which goes on from it instead of reading the key again.
local fast_done, fast_vals, fast_next, fast_got = false, nil, 1, nil
-- fast_pack packs fast_vals (fast_pack.lua, assembled after the fast
-- paths, and only with them).
local fast_pack
-- fast_nreq is the number of requests of a call in the compact form (-R),
-- which the fast paths read; not above 0 in the general form.
local fast_nreq = -tonumber(ARGV[1])
