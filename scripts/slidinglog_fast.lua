-- The fast path of the sliding log ('l'): its compact form, decided before
-- the frame and the kinds are defined (see the prelude's fast_done). It
-- decides each request of a cost from 1 to the limit that is allowed on a
-- key that is absent or holds a valid log not in debt, dropping the
-- entries that have left as log_state does, as slidinglog.lua's log and
-- write_log and the frame's compact would, reads and writes included, and
-- keeps its record's five numbers (it tells next_unit: fast_vals.five);
-- the first it does not take (a denial, a peek, a debt, a refusal), with
-- every one after it, it leaves to compact, having written nothing for it.
do
  local nreq, kind = fast_nreq, ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and kind == 'l' then
    local limit, w = tonumber(ARGV[4]), tonumber(ARGV[5]) * 1000
    local same = nil
    if nreq > 1 and #ARGV == 6 then
      same = tonumber(ARGV[6])
    end
    local call, pcall, format = redis.call, redis.pcall, string.format
    local vals, k = { five = true }, 0
    -- lease_at reads an entry's value as slidinglog.lua's log_entry does:
    -- its time and units.
    local function lease_at(v)
      local at = whole(v)
      if at then
        return at, 1
      end
      if type(v) ~= 'string' then
        return nil
      end
      local x, y = string.match(v, '^(%d+):(%d+)$')
      x, y = whole(x), whole(y)
      if x and y and y >= 2 then
        return x, y
      end
      return nil
    end
    local r = 1
    -- A cost above the limit (which the library answers without a call)
    -- leaves the whole call to the frame: its denial on an absent key
    -- reads the header of the key its check read last.
    for i = 1, nreq do
      if (same or tonumber(ARGV[5 + i])) > limit then
        r = nreq + 1
        break
      end
    end
    if r > nreq then
      r = 1
      nreq = 0
    end
    while r <= nreq do
      local key, n = KEYS[r], same or tonumber(ARGV[5 + r])
      if not (n >= 1 and n <= limit) then
        break
      end
      local v = pcall('HMGET', key, 'n', 'h', 't', 'a', 'z')
      if v.err then
        break
      end
      local value = format('%d', now)
      if n > 1 then
        value = format('%d:%d', now, n)
      end
      if not (v[1] or v[2] or v[3] or v[4] or v[5]) then
        if call('EXISTS', key) == 1 then
          break
        end
        call('HSET', key, 'n', format('%d', n), 'h', '1', 't', '1', 'a', format('%d', now), 'z', format('%d', now), '1', value)
        call('PEXPIRE', key, format('%d', max(1, ceil(w / 1000))))
        vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4], vals[k + 5] = 3, limit - n, 0, w, w
      else
        local sum, h, t, a, z = whole(v[1]), whole(v[2]), whole(v[3]), whole(v[4]), whole(v[5])
        if not (sum and h and t and a and z and sum >= 1 and h >= 1 and h <= t and t - h < sum and a <= z) then
          break
        end
        -- The entries that have left, dropped as log_state drops them:
        -- from h0 to h - 1; all of them when sum reaches 0.
        local h0, bad = h, false
        while a + w <= now do
          local e = call('HMGET', key, h, h + 1)
          local at, units = lease_at(e[1])
          if not at or at ~= a or units > sum then
            bad = true
            break
          end
          sum = sum - units
          if h == t then
            if sum ~= 0 or at ~= z then
              bad = true
            end
            h = t + 1
            break
          end
          local nx = lease_at(e[2])
          if not nx or nx < at or nx > z or sum < 1 then
            bad = true
            break
          end
          h, a = h + 1, nx
        end
        if bad or sum + n > limit then
          break
        end
        if sum == 0 then
          call('DEL', key) -- every entry has left
          call('HSET', key, 'n', format('%d', n), 'h', '1', 't', '1', 'a', format('%d', now), 'z', format('%d', now), '1', value)
          call('PEXPIRE', key, format('%d', max(1, ceil(w / 1000))))
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4], vals[k + 5] = 3, limit - n, 0, w, w
        else
          local at = max(now, z)
          if at ~= now then
            value = format('%d', at)
            if n > 1 then
              value = format('%d:%d', at, n)
            end
          end
          t = t + 1
          if h > h0 then
            local dead = {}
            for i = h0, h - 1 do
              dead[#dead + 1] = i
            end
            for i = 1, #dead, 4000 do
              call('HDEL', key, unpack(dead, i, min(i + 3999, #dead)))
            end
            call('HSET', key, 'n', format('%d', sum + n), 'h', format('%d', h), 't', format('%d', t), 'a', format('%d', a), 'z', format('%d', at), format('%d', t), value)
          else
            call('HSET', key, 'n', format('%d', sum + n), 't', format('%d', t), 'z', format('%d', at), format('%d', t), value)
          end
          call('PEXPIRE', key, format('%d', max(1, ceil((at + w - now) / 1000))))
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4], vals[k + 5] = 3, limit - sum - n, 0, at + w - now, a + w - now
        end
      end
      k = k + 5
      r = r + 1
    end
    fast_vals, fast_next = vals, r
    fast_done = nreq > 0 and r > nreq
  end
end
