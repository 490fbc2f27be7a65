-- The fast path of the fixed window ('w'): its compact form, decided before
-- the frame and the kinds are defined (see the prelude's fast_done). It
-- decides each request whose key is absent or holds a window that is open,
-- as fixedwindow.lua's window and the frame's compact would, and leaves the
-- first it does not take (a refusal, a cost above the limit, a window
-- whose time is up), with every one after it, to compact.
do
  local nreq, kind = fast_nreq, ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and kind == 'w' then
    local limit, param = tonumber(ARGV[4]), tonumber(ARGV[5])
    local same = nil
    if nreq > 1 and #ARGV == 6 then
      same = tonumber(ARGV[6])
    end
    local call, pcall, format = redis.call, redis.pcall, string.format
    local vals, k = {}, 0
    local r = 1
    do
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
          local count = type(stored) == 'string' and whole(stored)
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
    end
    fast_vals, fast_next = vals, r
    fast_done = r > nreq
  end
end
