-- The fast path of units in flight ('c'): its compact form, decided before
-- the frame and the kinds are defined (see the prelude's fast_done). It
-- decides an Allow whose key is absent (SET NX GET writes its lease's
-- STRING), the STRING of another lease that holds, or a HASH that it fits
-- in with no sweep due; and a Release whose key is absent, the STRING of
-- the lease it names, a HASH of it and at most one other lease, or a
-- larger HASH of which it is not the latest; as concurrency.lua's
-- held_allow_one and release would. The first request it does not take
-- (an Extend, a denial, a sweep, a refusal, a retried Allow, the latest
-- lease of a larger HASH, a cost of 0 or above the limit, a name the state
-- cannot hold), with every one after it, it leaves to compact_held,
-- handing it in fast_got the reply of the read it made of that request's
-- key, if it made one that compact_held would make again.
do
  local nreq, kind = fast_nreq, ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and kind == 'c' then
    local limit, param = tonumber(ARGV[4]), tonumber(ARGV[5])
    local call, pcall, format, match, find = redis.call, redis.pcall, string.format, string.match, string.find
    local px = format('%d', math.max(1, math.ceil(param / 1000)))
    local vals, k, r, a = {}, 0, 1, 6
    -- lease_at reads a lease's value as concurrency.lua's lease_of does.
    local function lease_at(v)
      if not v then
        return nil
      end
      local t = whole(v)
      if t then
        return 1, t
      end
      local units, at = match(v, '^(%d+):(%d+)$')
      units, t = whole(units), whole(at)
      if units and t and units >= 2 then
        return units, t
      end
      return nil
    end
    while r <= nreq do
      local key, head, lease = KEYS[r], ARGV[a], ARGV[a + 1]
      if head == 'R' then
        local state = pcall('HRANDFIELD', key, 6, 'WITHVALUES')
        if not state.err then
          local held = 0
          if #state > 0 then
            -- A HASH, whole when it has at most 5 fields: the lease goes
            -- with the key when it is its only one, and leaves the STRING
            -- of the other when there is one more, which holds, in a key
            -- whose fields agree (as a sweep checks them); release does
            -- the rest.
            local done = false
            if #state < 12 and lease ~= 'u' and lease ~= 'e' and lease ~= 'x' then
              local us, es, xs, v, other, otherv, more = nil, nil, nil, nil, nil, nil, 0
              for i = 1, #state, 2 do
                local f = state[i]
                if f == 'u' then
                  us = state[i + 1]
                elseif f == 'e' then
                  es = state[i + 1]
                elseif f == 'x' then
                  xs = state[i + 1]
                elseif f == lease then
                  v = state[i + 1]
                else
                  more, other, otherv = more + 1, f, state[i + 1]
                end
              end
              local u, e, x = whole(us), whole(es), whole(xs)
              local units, expiry = lease_at(v)
              if u and e and x and units and units <= u and expiry <= x then
                if units == u then
                  call('DEL', key)
                  done = true
                elseif more == 1 and not find(other, ':', 1, true) then
                  local ou, ot = lease_at(otherv)
                  if ou and ot > now and units + ou == u and math.max(expiry, ot) == x and e <= math.min(expiry, ot) then
                    call('SET', key, other .. ':' .. otherv, 'PX', format('%d', math.max(1, math.ceil((ot - now) / 1000))))
                    done = true
                  end
                end
                if expiry > now then
                  held = 1
                end
              end
            end
            if #state >= 12 then
              -- Six fields or more, more than one lease left: a lease that
              -- is not the latest goes (HDEL, HINCRBY), as release does;
              -- the latest, which moves x back, release takes.
              local h = call('HMGET', key, 'u', 'x', lease)
              local u, x = whole(h[1]), whole(h[2])
              local units, expiry = lease_at(h[3])
              if not h[3] then
                done = true
              elseif u and x and units and units <= u and expiry <= x and units < u and expiry < x then
                call('HDEL', key, lease)
                if units == 1 then
                  call('HINCRBY', key, 'u', '-1')
                else
                  call('HINCRBY', key, 'u', -units)
                end
                if expiry > now then
                  held = 1
                end
                done = true
              end
            end
            if not done then
              fast_got = state -- release goes on from this read
              break
            end
          end
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = held, 0, 0, 0
        else
          if string.sub(state.err, 1, 9) ~= 'WRONGTYPE' then
            break
          end
          local v = pcall('GET', key)
          if type(v) ~= 'string' then
            break
          end
          local name, value = match(v, '^([^:]+):(.+)$')
          local _, expiry = lease_at(value)
          if not expiry or name == 'u' or name == 'e' or name == 'x' then
            break
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
        elseif type(old) == 'string' then
          -- The STRING of one lease: if it holds, is not this one and
          -- leaves room, the key becomes a HASH of both, as held and
          -- write_held would make it; else held_allow_one goes on from it.
          local name, ov = match(old, '^([^:]+):(.+)$')
          local ou, ot = lease_at(ov)
          if not ou or name == 'u' or name == 'e' or name == 'x' or name == lease or ot <= now or ou + n > limit then
            fast_got = old
            break
          end
          local expiry = now + param
          local e, x = ot, ot
          if expiry < e then
            e = expiry
          end
          if expiry > x then
            x = expiry
          end
          call('DEL', key)
          call('HSET', key, name, ov, lease, value, 'u', format('%d', ou + n), 'e', format('%d', e), 'x', format('%d', x))
          call('PEXPIRE', key, format('%d', math.max(1, math.ceil((x - now) / 1000))))
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit - ou - n, 0, x - now
        elseif not old.err or string.sub(old.err, 1, 9) ~= 'WRONGTYPE' then
          fast_got = old -- an error: held_allow_one fails on it
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
