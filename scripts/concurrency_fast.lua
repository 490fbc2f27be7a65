-- The fast path of units in flight ('c'): its compact form, decided before
-- the frame and the kinds are defined (see the prelude's fast_done). It
-- decides an Allow whose key is absent (SET NX GET writes its lease's
-- STRING) or a HASH that it fits in with no sweep due, and a Release whose
-- key is absent or the STRING of the lease it names, as concurrency.lua's
-- held_allow_one and release would; the first request it does not take (an
-- Extend, a STRING to make a HASH of, a denial, a sweep, a refusal, a
-- retried Allow, a HASH to release from, a cost of 0 or above the limit, a
-- name the state cannot hold),
-- with every one after it, it leaves to compact_held, handing it in
-- fast_got the reply of the read it made of that request's key, if it
-- made one that compact_held would make again.
do
  local nreq, kind = fast_nreq, ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and kind == 'c' then
    local limit, param = tonumber(ARGV[4]), tonumber(ARGV[5])
    local call, pcall, format, match, find = redis.call, redis.pcall, string.format, string.match, string.find
    local px = format('%d', math.max(1, math.ceil(param / 1000)))
    local vals, k, r, a = {}, 0, 1, 6
    while r <= nreq do
      local key, head, lease = KEYS[r], ARGV[a], ARGV[a + 1]
      if head == 'R' then
        local state = pcall('HRANDFIELD', key, 6, 'WITHVALUES')
        if not state.err then
          if #state > 0 then
            fast_got = state -- a HASH: release goes on from this read
            break
          end
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 0, 0, 0, 0
        else
          if string.sub(state.err, 1, 9) ~= 'WRONGTYPE' then
            break
          end
          local v = pcall('GET', key)
          if type(v) ~= 'string' then
            break
          end
          local name, value = match(v, '^([^:]+):(.+)$')
          if not name or name == 'u' or name == 'e' or name == 'x' then
            break
          end
          local expiry = whole(value)
          if not expiry then
            local units, at = match(value, '^(%d+):(%d+)$')
            units, expiry = whole(units), whole(at)
            if not (units and expiry and units >= 2) then
              break
            end
          end
          local held = 0
          if name == lease then
            call('DEL', key)
            if expiry > now then
              held = 1
            end
          end
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = held, 0, 0, 0
        end
      else
        local n = head ~= 'E' and tonumber(head)
        if not (n and n > 0 and n <= limit and lease ~= '' and lease ~= 'u' and lease ~= 'e' and lease ~= 'x' and not find(lease, ':', 1, true)) then
          break
        end
        local value = format('%d', now + param)
        if n > 1 then
          value = n .. ':' .. value
        end
        local old = pcall('SET', key, lease .. ':' .. value, 'NX', 'PX', px, 'GET')
        if not old then
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit - n, 0, param
        elseif type(old) ~= 'table' or not old.err or string.sub(old.err, 1, 9) ~= 'WRONGTYPE' then
          fast_got = old -- a STRING (or an error): held_allow_one goes on from it
          break
        else
          -- A HASH (or another type): an Allow that fits, needs no sweep (now < e) and names
          -- a lease the key does not hold adds it, as held and write_held
          -- would; anything else goes to held_allow_one, which reads the
          -- key again.
          local h = pcall('HMGET', key, 'u', 'e', 'x', lease)
          local u, e, x
          if not h.err then
            u, e, x = whole(h[1]), whole(h[2]), whole(h[3])
          end
          if not u or h[4] or not (e and x and u >= 1 and e <= x and now < e and u + n <= limit) then
            fast_got = old
            break
          end
          local expiry = now + param
          u = u + n
          if expiry > x then
            local xs = format('%d', expiry)
            if expiry < e then
              call('HSET', key, lease, value, 'u', format('%d', u), 'e', xs, 'x', xs)
            else
              call('HSET', key, lease, value, 'u', format('%d', u), 'x', xs)
            end
            call('PEXPIRE', key, px)
            x = expiry
          elseif expiry < e then
            call('HSET', key, lease, value, 'u', format('%d', u), 'e', format('%d', expiry))
          else
            call('HSET', key, lease, value, 'u', format('%d', u))
          end
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit - u, 0, x - now
        end
      end
      k, r, a = k + 4, r + 1, a + 2
    end
    fast_vals, fast_next = vals, r
    fast_done = r > nreq
  end
end
