-- The fast path of the token bucket ('t') and GCRA ('g'): their compact
-- form, decided before the frame and the kinds are defined (see the
-- prelude's fast_done). It decides each request whose key is absent or
-- holds a valid tat of its own, as tat.lua's gcra and the frame's compact
-- would, and leaves the first it does not take (a refusal, a cost above the
-- limit), with every one after it, to compact.
do
  local nreq, kind = fast_nreq, ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and (kind == 't' or kind == 'g') then
    local limit, param = tonumber(ARGV[4]), tonumber(ARGV[5])
    local same = nil
    if nreq > 1 and #ARGV == 6 then
      same = tonumber(ARGV[6])
    end
    local call, pcall, ceil, floor, format = redis.call, redis.pcall, math.ceil, math.floor, string.format
    local vals, k = {}, 0
    local r = 1
    do
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
            tat = whole(stored[2])
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
          tat = whole(stored)
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
